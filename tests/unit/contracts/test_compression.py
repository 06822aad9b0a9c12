"""Push bodies on the wire and at rest: zstd, gzip and identity received strictly and within a limit;
stored bodies read back whatever they were compressed with."""

from __future__ import annotations

import gzip
import io
import random

import pytest
import zstandard

from shipshape.contracts import compression

LIMIT = 1 << 20


def _document(size: int, seed: int = 7) -> bytes:
    """JSON-looking bytes that compress about as a snapshot does (repeated keys, varying values)."""
    rng = random.Random(seed)
    parts: list[bytes] = []
    total = 0
    while total < size:
        part = b'{"metadata":{"name":"pod-%d","namespace":"shop"},"restarts":%d},' % (
            rng.randrange(10**6),
            rng.randrange(9),
        )
        parts.append(part)
        total += len(part)
    return b"[" + b"".join(parts)[: size - 2] + b"]"


def _streamed(body: bytes, level: int = compression.AGENT_LEVEL, piece: int = 4096) -> bytes:
    """zstd as the agent's spool writes it: in pieces, so the frame does not record its size."""
    out = io.BytesIO()
    with compression.compressor(level).stream_writer(out, closefd=False) as writer:
        for start in range(0, len(body), piece):
            writer.write(body[start : start + piece])
    return out.getvalue()


def _frames(body: bytes) -> dict[str, bytes]:
    return {
        "zstd one-shot": compression.compress(body),
        "zstd streamed": _streamed(body),
        "zstd level 12": compression.compress(body, 12),
        "zstd with checksum": zstandard.ZstdCompressor(write_checksum=True).compress(body),
    }


@pytest.mark.parametrize("size", [0, 1, 5_000, 300_000, LIMIT])
def test_a_body_reads_back_as_sent_in_every_encoding_and_the_bound_holds(size: int) -> None:
    body = _document(size) if size > 2 else b"{}"[:size]
    for name, frame in _frames(body).items():
        assert compression.encoding_of(frame) == compression.ZSTD
        assert compression.inflate_received(frame, compression.ZSTD, LIMIT) == body, name
        assert compression.inflate(frame) == body, name
        assert compression.zstd_bound(frame, LIMIT) >= len(body), name
    zipped = gzip.compress(body)
    assert compression.inflate_received(zipped, compression.GZIP, LIMIT) == body
    assert compression.inflate(zipped) == body and compression.encoding_of(zipped) == compression.GZIP
    assert compression.inflate_received(body, compression.IDENTITY, LIMIT) == body


def test_a_received_body_must_be_one_whole_stream_of_its_encoding() -> None:
    """Stored as received, a body must read back as exactly what was checked."""
    body = _document(50_000)
    for name, frame in [*_frames(body).items(), ("gzip", gzip.compress(body))]:
        encoding = compression.GZIP if name == "gzip" else compression.ZSTD
        for broken in (frame[:-1], frame[: len(frame) // 2], frame + b"x", frame + frame, b"", b"garbage"):
            with pytest.raises(compression.BodyError):
                compression.inflate_received(broken, encoding, LIMIT)
        # A changed byte is refused, or (zstd without a checksum) read as other JSON: then a reader of
        # the stored body reads exactly that, which is what the receiver checked.
        corrupt = bytearray(frame)
        corrupt[len(corrupt) // 2] ^= 0xFF
        try:
            checked = compression.inflate_received(bytes(corrupt), encoding, LIMIT)
        except compression.BodyError:
            continue
        assert compression.inflate(bytes(corrupt)) == checked, name
    with pytest.raises(compression.BodyError):
        compression.inflate_received(gzip.compress(body), compression.ZSTD, LIMIT)
    with pytest.raises(compression.BodyError):
        compression.inflate_received(compression.compress(body), compression.GZIP, LIMIT)
    with pytest.raises(compression.BodyError, match="unsupported"):
        compression.inflate_received(body, "br", LIMIT)


@pytest.mark.parametrize("size", [LIMIT + 1, 16 * LIMIT])
def test_past_the_limit_a_body_is_refused_whatever_its_frame_declares(size: int) -> None:
    bomb = b"[" + b" " * (size - 2) + b"]"
    frames = {
        **_frames(bomb),
        # A frame that declares a size within the limit but holds more, and one that declares none.
        "zstd rle streamed": _streamed(bomb, 1, piece=1 << 20),
    }
    for name, frame in frames.items():
        assert len(frame) < 64 * 1024, name  # a small body that inflates past the limit
        with pytest.raises(compression.BodyTooLarge):
            compression.inflate_received(frame, compression.ZSTD, LIMIT)
    with pytest.raises(compression.BodyTooLarge):
        compression.inflate_received(gzip.compress(bomb), compression.GZIP, LIMIT)
    with pytest.raises(compression.BodyTooLarge):
        compression.inflate_received(bomb, compression.IDENTITY, LIMIT)
    # Exactly at the limit is accepted.
    exact = bomb[: LIMIT - 1] + b"]"
    assert compression.inflate_received(_streamed(exact), compression.ZSTD, LIMIT) == exact


def test_a_frame_of_many_small_blocks_is_inflated_within_the_limit_all_the_same() -> None:
    """A frame whose headers allow more than the limit (tiny blocks: the bound counts each as a full
    one) is read up to the limit instead of being refused for what it might hold."""
    body = _document(200_000)
    chunker = zstandard.ZstdCompressor(level=1).chunker(chunk_size=1 << 16)
    pieces: list[bytes] = []
    for start in range(0, len(body), 64):
        pieces.extend(chunker.compress(body[start : start + 64]))
        pieces.extend(chunker.flush())  # ends a block
    pieces.extend(chunker.finish())
    frame = b"".join(pieces)
    limit = len(body) + 10
    assert compression.zstd_bound(frame, limit) > limit
    assert compression.inflate_received(frame, compression.ZSTD, limit) == body
    with pytest.raises(compression.BodyTooLarge):
        compression.inflate_received(frame, compression.ZSTD, len(body) - 1)


def test_stored_bodies_read_back_by_their_magic_bytes() -> None:
    body = b'{"schema":"shipshape.dev/delta/v1"}'
    assert compression.inflate(compression.compress(body)) == body
    assert compression.inflate(gzip.compress(body)) == body
    assert compression.inflate(body) == body and compression.encoding_of(body) == compression.IDENTITY
