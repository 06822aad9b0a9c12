"""Injected clocks: the same code runs on real time, on accelerated time and in virtual time.

Every component that needs "now" takes a `Clock`. Timestamps are POSIX seconds (float).
"""

from __future__ import annotations

import email.utils
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Current (possibly emulated) POSIX time in seconds."""
        ...

    def real_seconds(self, emulated: float) -> float:
        """How many real seconds pass while `emulated` seconds pass on this clock."""
        ...


class RealClock:
    """Wall-clock time."""

    def now(self) -> float:
        return time.time()

    def real_seconds(self, emulated: float) -> float:
        return emulated


class ScaledClock:
    """Emulated time running `speed` times faster than wall-clock time from `start`."""

    def __init__(self, speed: float = 1.0, start: float | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = speed
        self._real_origin = time.monotonic()
        self._emulated_origin = time.time() if start is None else start

    def now(self) -> float:
        return self._emulated_origin + (time.monotonic() - self._real_origin) * self.speed

    def real_seconds(self, emulated: float) -> float:
        return emulated / self.speed


class VirtualClock:
    """Time that moves only when told to (discrete-event simulation and tests)."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = start

    def now(self) -> float:
        return self._now

    def real_seconds(self, emulated: float) -> float:
        return 0.0

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError("a virtual clock cannot go back in time")
        self._now = when

    def advance(self, seconds: float) -> None:
        self.set(self._now + seconds)


def rfc3339(ts: float) -> str:
    """Kubernetes' metav1.Time format: second resolution, UTC, `Z` suffix."""
    text = _RFC3339.get(ts)
    if text is None:
        if len(_RFC3339) >= 4096:
            _RFC3339.clear()
        text = _RFC3339[ts] = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return text


# Recent answers by the exact instant: an emulated instant stamps many objects with one time.
_RFC3339: dict[float, str] = {}


def rfc3339_micro(ts: float) -> str:
    """Kubernetes' metav1.MicroTime format (events.k8s.io eventTime, lease renewTime)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> float:
    """Parse an RFC 3339 timestamp as written by Kubernetes into POSIX seconds."""
    cleaned = text.strip()
    if cleaned.endswith("Z"):
        cleaned = cleaned[:-1] + "+00:00"
    return datetime.fromisoformat(cleaned).timestamp()


def rfc1123(ts: float) -> str:
    """HTTP-date / RFC 1123 (`Wed, 25 Nov 2026 10:15:33 GMT`), as Azure's Scheduled Events write times."""
    return email.utils.format_datetime(datetime.fromtimestamp(ts, UTC), usegmt=True)
