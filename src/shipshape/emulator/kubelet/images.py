"""Container images on a node: reference normalisation, digests, and the node's image puller.

The puller models one node's download link: pulls share the node's bandwidth equally while they
run (processor sharing). With `serializeImagePulls: true` one pull runs at a time in FIFO order
(the kubelet's serial puller); otherwise up to `maxParallelImagePulls` run together (unbounded
when unset). A request for an image already being pulled joins that pull, as containerd
de-duplicates content fetches.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from shipshape.emulator.engine import Engine, Timer

DEFAULT_DOMAIN = "docker.io"
# A pull is done when what is left would take less than this long (float time has ~0.2 µs steps).
_DONE_SECONDS = 1e-6

PullDone = Callable[[float, float], None]
"""Called with (pull started, pull finished) in emulated seconds."""


def normalize(image: str) -> str:
    """The fully qualified reference containerd reports: "nginx" -> "docker.io/library/nginx:latest"."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        domain, path = first, rest
    else:
        domain, path = DEFAULT_DOMAIN, name
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = f"library/{path}"
    if digest:
        return f"{domain}/{path}@{digest}"
    return f"{domain}/{path}:{tag or 'latest'}"


def repository(image: str) -> str:
    """The normalised reference without tag or digest."""
    ref = normalize(image)
    if "@" in ref:
        return ref.split("@", 1)[0]
    return ref.rsplit(":", 1)[0]


def image_id(image: str) -> str:
    """A stable fake repo digest ("docker.io/library/nginx@sha256:...") derived from the reference."""
    ref = normalize(image)
    if "@" in ref:
        return ref
    digest = hashlib.sha256(ref.encode()).hexdigest()
    return f"{repository(image)}@sha256:{digest}"


def default_pull_policy(image: str) -> str:
    """What the API server defaults `imagePullPolicy` to: Always for `:latest` or untagged images."""
    ref = normalize(image)
    if "@" in ref:
        return "IfNotPresent"
    return "Always" if ref.endswith(":latest") else "IfNotPresent"


def go_duration(seconds: float) -> str:
    """A duration truncated to milliseconds, written as Go's time.Duration prints it ("1.234s")."""
    millis = int(max(0.0, seconds) * 1000 + 1e-6)
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, frac = divmod(rest, 1000)
    text = str(secs) + (f".{frac:03d}".rstrip("0") if frac else "")
    if hours:
        return f"{hours}h{minutes}m{text}s"
    if minutes:
        return f"{minutes}m{text}s"
    return f"{text}s"


@dataclass(slots=True)
class _Transfer:
    image: str
    remaining: float  # bytes
    requested: float
    started: float | None = None
    waiters: list[tuple[float, PullDone]] = field(default_factory=list)


class ImagePuller:
    """One node's image downloads, timed on the engine."""

    def __init__(self, engine: Engine, bytes_per_second: float, max_parallel: int | None) -> None:
        if bytes_per_second <= 0:
            raise ValueError("bandwidth must be positive")
        if max_parallel is not None and max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        self.engine = engine
        self.bytes_per_second = bytes_per_second
        self.max_parallel = max_parallel
        self._queue: deque[_Transfer] = deque()
        self._active: list[_Transfer] = []
        self._last = engine.now()
        self._timer: Timer | None = None

    @property
    def active(self) -> int:
        return len(self._active)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def pull(self, image: str, size_bytes: int, on_done: PullDone) -> None:
        """Download `image` (`size_bytes` of layers); `on_done(started, finished)` when it is on disk."""
        now = self.engine.now()
        for transfer in (*self._active, *self._queue):
            if transfer.image == image:
                transfer.waiters.append((now, on_done))
                return
        self._advance(now)
        self._queue.append(_Transfer(image, float(max(0, size_bytes)), now, waiters=[(now, on_done)]))
        self._admit(now)
        self._finish_and_reschedule(now)

    def cancel_all(self) -> None:
        """Forget every pull (the node went away); no callback runs."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()
        self._active.clear()

    # ---- processor sharing ---------------------------------------------------------------
    def _rate(self) -> float:
        return self.bytes_per_second / max(1, len(self._active))

    def _advance(self, now: float) -> None:
        if self._active and now > self._last:
            moved = self._rate() * (now - self._last)
            for transfer in self._active:
                transfer.remaining = max(0.0, transfer.remaining - moved)
        self._last = now

    def _admit(self, now: float) -> None:
        while self._queue and (self.max_parallel is None or len(self._active) < self.max_parallel):
            transfer = self._queue.popleft()
            transfer.started = now
            self._active.append(transfer)

    def _finish_and_reschedule(self, now: float) -> None:
        done: list[_Transfer] = []
        while True:
            rate = self._rate()
            finished = [t for t in self._active if t.remaining / rate <= _DONE_SECONDS]
            if not finished:
                break
            for transfer in finished:
                self._active.remove(transfer)
            done.extend(finished)
            self._admit(now)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._active:
            soonest = min(t.remaining for t in self._active) / self._rate()
            self._timer = self.engine.call_later(soonest, self._on_timer)
        for transfer in done:
            for joined, callback in transfer.waiters:
                started = transfer.started if transfer.started is not None else now
                callback(max(started, joined), now)

    def _on_timer(self) -> None:
        self._timer = None
        now = self.engine.now()
        self._advance(now)
        self._finish_and_reschedule(now)
