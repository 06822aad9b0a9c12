"""Spot pool risk: the spot advisor's interruption band plus interruptions observed in the cluster.

Pure: the advisor data is passed in (load it at the entry point with `load_spot_advisor`), time is
passed in, and notices are recorded explicitly. Duplicate notices for the same node are ignored.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipshape.controller.placement import Pool

# Band used for an instance type the advisor does not list (the middle band: "10-15%").
UNKNOWN_BAND = 2


@dataclass(frozen=True, slots=True)
class SpotAdvisor:
    """Interruption bands (0: <5 %, 1: 5-10 %, 2: 10-15 %, 3: 15-20 %, 4: >20 %) by region and type."""

    bands: Mapping[tuple[str, str], int]
    labels: Mapping[int, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], os_name: str = "Linux") -> SpotAdvisor:
        bands: dict[tuple[str, str], int] = {}
        for region, by_os in (data.get("spot_advisor") or {}).items():
            for instance_type, record in (by_os.get(os_name) or {}).items():
                band = record.get("r")
                if isinstance(band, int):
                    bands[(region, instance_type)] = band
        labels = {
            int(item["index"]): str(item["label"])
            for item in data.get("ranges") or []
            if isinstance(item, Mapping) and "index" in item and "label" in item
        }
        return cls(bands=bands, labels=labels)

    def band(self, instance_type: str, region: str | None) -> int | None:
        if region is None:
            return None
        return self.bands.get((region, instance_type))


def load_spot_advisor(path: Path, os_name: str = "Linux") -> SpotAdvisor:
    """Read the spot advisor feed (spot-advisor-data.json) from a file."""
    return SpotAdvisor.from_json(json.loads(path.read_text(encoding="utf-8")), os_name)


@dataclass(slots=True)
class RiskModel:
    """Per-pool risk score and the "at risk" cool-down after an interruption notice."""

    advisor: SpotAdvisor | None = None
    cooldown_seconds: float = 1800.0
    window_seconds: float = 7 * 86400.0
    # Score added per distinct interrupted node within the window (one band per interruption).
    observed_weight: float = 1.0
    _notices: dict[str, tuple[Pool, float]] = field(default_factory=dict)
    # The notices' times in order, and their pools in the same order: the notices within a window
    # are one slice (the webhook asks on every admission, with hundreds of notices in a week).
    _times: list[float] = field(default_factory=list)
    _pools: list[Pool] = field(default_factory=list)
    # The last answers, for the slice and pools they were worked out for.
    _scores_memo: tuple[Hashable, dict[Pool, float]] | None = None
    _at_risk_memo: tuple[Hashable, frozenset[Pool]] | None = None
    # The notice loop records, every replica's webhook reads (another thread in a controller process).
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def record_notice(self, node: str, pool: Pool, at: float) -> bool:
        """Record a termination notice for a spot node; False for a duplicate (same node)."""
        with self._lock:
            if node in self._notices:
                return False
            self._notices[node] = (pool, at)
            index = bisect.bisect_right(self._times, at)
            self._times.insert(index, at)
            self._pools.insert(index, pool)
            self._scores_memo = self._at_risk_memo = None
            # Bounded memory in a controller that runs for months: a notice older than the longest
            # window before the newest one can never be read again (time only moves forward).
            horizon = self._times[-1] - max(self.window_seconds, self.cooldown_seconds)
            if self._times[0] < horizon:
                self.forget_before(horizon)
            return True

    def forget_before(self, when: float) -> None:
        """Drop notices older than `when` (bounded memory)."""
        with self._lock:
            self._notices = {node: seen for node, seen in self._notices.items() if seen[1] >= when}
            start = bisect.bisect_left(self._times, when)
            del self._times[:start], self._pools[:start]
            self._scores_memo = self._at_risk_memo = None

    def notices(self) -> tuple[tuple[str, Pool, float], ...]:
        """Every notice held: (node, pool, time), in time order (what another process's copy of the
        model is rebuilt from)."""
        with self._lock:
            return tuple(sorted(((node, pool, at) for node, (pool, at) in self._notices.items()), key=_at))

    def _window(self, since: float, now: float) -> tuple[int, int]:
        """The slice of `_times`/`_pools` with since <= time <= now."""
        return bisect.bisect_left(self._times, since), bisect.bisect_right(self._times, now)

    def observed(self, pool: Pool, now: float) -> int:
        with self._lock:
            start, stop = self._window(now - self.window_seconds, now)
            return self._pools[start:stop].count(pool)

    def _band(self, pool: Pool, region: str | None) -> float:
        """The advisor's interruption band of the pool, or the middle band when unknown."""
        band = self.advisor.band(pool.instance_type, region) if self.advisor is not None else None
        return float(UNKNOWN_BAND if band is None else band)

    def score(self, pool: Pool, region: str | None, now: float) -> float:
        """Advisor band (or the middle band when unknown) plus the weight of observed interruptions."""
        return self._band(pool, region) + self.observed_weight * self.observed(pool, now)

    def scores(self, pools: Mapping[Pool, str | None], now: float) -> dict[Pool, float]:
        """`score` of each pool (given with its region), the observed interruptions counted in one
        pass over the window's notices, and only when the window or the pools changed."""
        with self._lock:
            window = self._window(now - self.window_seconds, now)
            key = (window, tuple(pools.items()))
            if self._scores_memo is not None and self._scores_memo[0] == key:
                return dict(self._scores_memo[1])
            observed: dict[Pool, int] = {}
            for seen_pool in self._pools[window[0] : window[1]]:
                observed[seen_pool] = observed.get(seen_pool, 0) + 1
            out: dict[Pool, float] = {}
            for pool, region in pools.items():
                out[pool] = self._band(pool, region) + self.observed_weight * observed.get(pool, 0)
            self._scores_memo = (key, out)
            return dict(out)

    def at_risk(self, now: float) -> frozenset[Pool]:
        """Pools with a notice within the cool-down: no new placements there."""
        with self._lock:
            window = self._window(now - self.cooldown_seconds, now)
            if self._at_risk_memo is None or self._at_risk_memo[0] != window:
                self._at_risk_memo = (window, frozenset(self._pools[window[0] : window[1]]))
            return self._at_risk_memo[1]


def _at(notice: tuple[str, Pool, float]) -> float:
    return notice[2]
