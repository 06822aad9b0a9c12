"""How a push's body is compressed: on the wire (`Content-Encoding`) and at rest (the `pushes` table).

The agent sends zstd: compressing a 3,000-pod snapshot costs it about a seventh of gzip's CPU, and
inflating it costs the backend about a tenth. The backend also takes gzip (older agents, other
senders) and identity. A compressed push is stored as it was received, so a stored body is zstd or
gzip; `inflate` tells them apart by their magic bytes, the one place that readers of stored bodies go
through. `inflate_received` is the receiver's strict, bounded variant: one complete stream, nothing
after it, refused past a size limit before that much memory is taken.

Pure: no I/O.
"""

from __future__ import annotations

import zlib
from typing import Final

import zstandard

ZSTD: Final = "zstd"
GZIP: Final = "gzip"
IDENTITY: Final = "identity"
# What a receiver accepts, by the name `Content-Encoding` gives it.
ENCODINGS: Final = (ZSTD, GZIP, IDENTITY)
# The agent's level: 9 MiB of snapshot JSON in about 5 ms, 38 times smaller (gzip -5: 36 ms, 27 times).
AGENT_LEVEL: Final = 3
# The backend's, for a body it re-encodes (one it had to strip, or one sent uncompressed).
STORE_LEVEL: Final = 1

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"
# A zstd block regenerates at most this much (RFC 8878 3.1.1.2.4, and less with a smaller window).
_BLOCK_MAX = 128 * 1024


class BodyError(ValueError):
    """The body is not what its encoding says (a receiver answers 400)."""


class BodyTooLarge(ValueError):
    """The body inflates past the receiver's limit (a receiver answers 413)."""


def compress(body: bytes, level: int = STORE_LEVEL) -> bytes:
    """`body` as one zstd frame (its size recorded in the frame's header)."""
    return zstandard.ZstdCompressor(level=level).compress(body)


def compressor(level: int = AGENT_LEVEL) -> zstandard.ZstdCompressor:
    """A zstd compressor for a body written in pieces (`stream_writer`)."""
    return zstandard.ZstdCompressor(level=level)


def encoding_of(stored: bytes) -> str:
    """The encoding of a stored or spooled body, by its magic bytes."""
    if stored.startswith(_ZSTD_MAGIC):
        return ZSTD
    if stored.startswith(_GZIP_MAGIC):
        return GZIP
    return IDENTITY


def inflate(stored: bytes) -> bytes:
    """The JSON of a stored body (zstd or gzip, told apart by their magic bytes; anything else is
    taken as uncompressed). For bodies the receiver already checked: not bounded."""
    encoding = encoding_of(stored)
    if encoding == ZSTD:
        return zstandard.ZstdDecompressor().decompressobj().decompress(stored)
    if encoding == GZIP:
        return zlib.decompress(stored, wbits=31)
    return stored


def inflate_received(body: bytes, encoding: str, limit: int) -> bytes:
    """The JSON of a received body in `encoding` (one of `ENCODINGS`), at most `limit` bytes once
    inflated. BodyError when it is not one complete stream of that encoding with nothing after it (it
    is stored as received, and must read back as exactly what was checked), BodyTooLarge past `limit`.
    """
    if encoding == IDENTITY:
        if len(body) > limit:
            raise BodyTooLarge(f"larger than {limit} bytes")
        return body
    if encoding == GZIP:
        return _gunzip(body, limit)
    if encoding == ZSTD:
        return _unzstd(body, limit)
    raise BodyError(f"unsupported encoding {encoding!r}")


def _gunzip(body: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as error:
        raise BodyError(f"not valid gzip: {error}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise BodyTooLarge(f"larger than {limit} bytes once inflated")
    if not inflater.eof or inflater.unused_data:
        raise BodyError("not one complete gzip stream")  # cut short, or a second member after it
    return out


def _unzstd(body: bytes, limit: int) -> bytes:
    # The frame's block headers bound what it inflates to: within the limit (every body an encoder
    # wrote), it is inflated in one call; a frame whose headers allow more is read up to the limit.
    decompressor = zstandard.ZstdDecompressor()
    try:
        if zstd_bound(body, limit) > limit:
            with decompressor.stream_reader(body, read_across_frames=False) as reader:
                if len(reader.read(limit + 1)) > limit:
                    raise BodyTooLarge(f"larger than {limit} bytes once inflated")
            # Within the limit after all: inflated whole below, and checked to its end.
        inflater = decompressor.decompressobj()
        out = inflater.decompress(body)
    except zstandard.ZstdError as error:
        raise BodyError(f"not valid zstd: {error}") from None
    if not inflater.eof or inflater.unused_data:
        raise BodyError("not one complete zstd frame")  # cut short, or something after it
    return out


def zstd_bound(body: bytes, limit: int) -> int:
    """The most the one zstd frame that `body` must be can inflate to, from its header and block
    headers (RFC 8878), without inflating it: its declared size, else the sum of what each block may
    regenerate. BodyError when `body` is not exactly one complete zstd frame. Past `limit`, or past
    the blocks an encoder writes for that much, it answers a bound above `limit` at once."""
    size = len(body)
    if size < 6 or not body.startswith(_ZSTD_MAGIC):
        raise BodyError("not a zstd frame")
    descriptor = body[4]
    if descriptor & 0x08:
        raise BodyError("not a zstd frame: reserved header bit set")
    single_segment = bool(descriptor & 0x20)
    position = 5
    window = 0
    if not single_segment:
        exponent, mantissa = body[5] >> 3, body[5] & 0x07
        base = 1 << (10 + exponent)
        window = base + (base >> 3) * mantissa
        position = 6
    position += (0, 1, 2, 4)[descriptor & 0x03]  # dictionary id
    content_field = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    declared = None
    if content_field:
        if position + content_field > size:
            raise BodyError("not a complete zstd frame")
        declared = int.from_bytes(body[position : position + content_field], "little")
        declared += 256 if content_field == 2 else 0
        position += content_field
    if single_segment:
        window = declared or 0
    block_max = min(window, _BLOCK_MAX)
    bound = 0
    blocks = 0
    # An encoder writes blocks of up to 128 KiB of output; a frame of far more, smaller ones (a few
    # bytes each) would make this walk the slow part: bounded like a frame past the limit.
    most_blocks = 4 * (limit // _BLOCK_MAX) + 64
    while True:
        if position + 3 > size:
            raise BodyError("not a complete zstd frame")
        header = int.from_bytes(body[position : position + 3], "little")
        position += 3
        kind, block_size = (header >> 1) & 0x03, header >> 3
        if kind == 0:  # raw
            bound += block_size
            position += block_size
        elif kind == 1:  # RLE: one byte, repeated
            bound += block_size
            position += 1
        elif kind == 2:  # compressed
            bound += block_max
            position += block_size
        else:
            raise BodyError("not a zstd frame: reserved block type")
        blocks += 1
        if header & 0x01:  # the last block
            break
        if blocks > most_blocks or bound > limit:
            return max(bound, limit + 1)
    if descriptor & 0x04:
        position += 4  # content checksum
    if position != size:
        raise BodyError("not one complete zstd frame")  # cut short, or something after it
    return bound if declared is None else min(bound, declared)
