"""Expectations of in-flight creations and deletions (upstream `UIDTrackingControllerExpectations`).

A controller records how many pods it asked to create and which pods it asked to delete, and
does not act on a key again until the store has shown it those changes (or the record expired),
so a burst of reconciles never over-creates or over-deletes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shipshape.kube.clock import Clock

# Upstream ExpectationsTimeout: a record older than this no longer blocks a sync.
EXPECTATIONS_TIMEOUT = 300.0


@dataclass(slots=True)
class _Record:
    adds: int = 0
    deletes: set[str] = field(default_factory=set)
    since: float = 0.0


class Expectations:
    def __init__(self, clock: Clock, timeout: float = EXPECTATIONS_TIMEOUT) -> None:
        self._clock = clock
        self._timeout = timeout
        self._records: dict[Any, _Record] = {}

    def satisfied(self, key: Any) -> bool:
        record = self._records.get(key)
        if record is None:
            return True
        if record.adds <= 0 and not record.deletes:
            return True
        return self._clock.now() - record.since > self._timeout

    def expect_creations(self, key: Any, count: int) -> None:
        """Expect `count` creations (deletions still expected stay expected)."""
        old = self._records.get(key)
        self._records[key] = _Record(
            adds=count, deletes=set(old.deletes) if old else set(), since=self._clock.now()
        )

    def expect_deletions(self, key: Any, pod_keys: set[str]) -> None:
        """Expect these pods' deletions (creations still expected stay expected)."""
        old = self._records.get(key)
        adds = max(0, old.adds) if old else 0
        self._records[key] = _Record(adds=adds, deletes=set(pod_keys), since=self._clock.now())

    def creation_observed(self, key: Any) -> None:
        record = self._records.get(key)
        if record is not None and record.adds > 0:
            record.adds -= 1

    def deletion_observed(self, key: Any, pod_key: str) -> None:
        record = self._records.get(key)
        if record is not None:
            record.deletes.discard(pod_key)

    def pending(self, key: Any) -> tuple[int, int]:
        """(creations, deletions) still expected for `key`."""
        record = self._records.get(key)
        return (0, 0) if record is None else (max(0, record.adds), len(record.deletes))

    def forget(self, key: Any) -> None:
        self._records.pop(key, None)
