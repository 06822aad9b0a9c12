"""The agent's durable spool: every push is written here before it is sent, and removed once the
backend accepted it, so nothing the agent took from the cluster is lost across a backend outage or
an agent restart.

One zstd file per push (`<sequence>.<kind>.json.zst`, sent as it is: `Content-Encoding: zstd`),
named by its sequence, written atomically (temporary file, fsync, rename). Files an older agent
spooled (`.json.gz`, gzip) are read and sent as they are too.
Bounded: when a new push would pass `max_bytes`, everything spooled is dropped and a fresh full
snapshot takes its place (it contains all those changes), so an outage of any length costs at most
one snapshot's worth of disk.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from shipshape.contracts import compression

_NAME = re.compile(r"^(\d{20})\.(snapshot|delta|usage)\.json\.(zst|gz)$")
_ENCODINGS = {"zst": compression.ZSTD, "gz": compression.GZIP}


@dataclass(frozen=True, slots=True)
class Spooled:
    sequence: int
    kind: str  # snapshot | delta (the state spool) | usage (the usage spool, `agent/usage.py`)
    path: Path
    # How the file is compressed, as `Content-Encoding` names it: zstd, or gzip (an older agent's).
    encoding: str = compression.ZSTD

    def body(self) -> bytes:
        """The push as JSON (the file holds it compressed)."""
        return compression.inflate(self.path.read_bytes())

    def compressed(self) -> bytes:
        return self.path.read_bytes()

    def pieces(self, size: int = 256 * 1024) -> Iterator[bytes]:
        """The file in pieces, for a sender that streams it (a large cluster's snapshot is tens of MiB)."""
        with open(self.path, "rb") as handle:
            while piece := handle.read(size):
                yield piece


class Spool:
    def __init__(self, directory: Path, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        for leftover in directory.glob("*.tmp"):
            leftover.unlink(missing_ok=True)  # a write cut short by a crash: never acknowledged
        # Files and their sizes, read once: this process is the spool's only writer, so the loop asks
        # "anything to send?" and "does it fit?" without listing the folder each time.
        self._sizes: dict[Path, int] = {item.path: item.path.stat().st_size for item in self._scan()}

    def items(self) -> list[Spooled]:
        """What waits to be sent, oldest first."""
        return [item for item in self._scan() if item.path in self._sizes]

    def __bool__(self) -> bool:
        return bool(self._sizes)

    def _scan(self) -> list[Spooled]:
        out = []
        for path in self.directory.iterdir():
            match = _NAME.match(path.name)
            if match:
                out.append(Spooled(int(match.group(1)), match.group(2), path, _ENCODINGS[match.group(3)]))
        return sorted(out, key=lambda s: s.sequence)

    def last_sequence(self) -> int:
        items = self.items()
        return items[-1].sequence if items else 0

    def size(self) -> int:
        return sum(self._sizes.values())

    def fits(self, compressed: int) -> bool:
        return self.size() + compressed <= self.max_bytes

    def add(self, sequence: int, kind: str, body: bytes) -> Spooled:
        """Write a push durably; returns it. Raise ValueError when it does not fit (see `fold`)."""
        return self.add_chunks(sequence, kind, [body])

    def add_chunks(self, sequence: int, kind: str, chunks: Iterable[bytes]) -> Spooled:
        """`add` of a push given in pieces, compressed as they come (a snapshot of a large cluster is
        never held whole, nor its compressed copy)."""
        with self._lock:
            path = self.directory / f"{sequence:020d}.{kind}.json.zst"
            temporary = path.with_suffix(".tmp")
            with open(temporary, "wb") as handle:
                with compression.compressor().stream_writer(handle, closefd=False) as zipped:
                    for chunk in chunks:
                        zipped.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            size = temporary.stat().st_size
            if not self.fits(size):
                temporary.unlink(missing_ok=True)
                raise ValueError(f"spool full ({self.max_bytes} bytes)")
            os.replace(temporary, path)
            _sync_directory(self.directory)
            self._sizes[path] = size
            return Spooled(sequence, kind, path)

    def fold(self, sequence: int, snapshot: bytes) -> Spooled:
        """Drop everything spooled and keep one fresh snapshot instead (it holds all their changes)."""
        with self._lock:
            for item in self.items():
                self.remove(item)
        return self.add(sequence, "snapshot", snapshot)

    def remove(self, item: Spooled) -> None:
        item.path.unlink(missing_ok=True)
        self._sizes.pop(item.path, None)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
