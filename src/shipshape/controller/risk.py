"""Spot pool risk: the spot advisor's interruption band plus interruptions observed in the cluster.

Pure: the advisor data is passed in (load it at the entry point with `load_spot_advisor`), time is
passed in, and notices are recorded explicitly. Duplicate notices for the same node are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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

    def record_notice(self, node: str, pool: Pool, at: float) -> bool:
        """Record a termination notice for a spot node; False for a duplicate (same node)."""
        if node in self._notices:
            return False
        self._notices[node] = (pool, at)
        return True

    def forget_before(self, when: float) -> None:
        """Drop notices older than `when` (bounded memory)."""
        self._notices = {node: seen for node, seen in self._notices.items() if seen[1] >= when}

    def observed(self, pool: Pool, now: float) -> int:
        since = now - self.window_seconds
        return sum(1 for seen_pool, at in self._notices.values() if seen_pool == pool and since <= at <= now)

    def score(self, pool: Pool, region: str | None, now: float) -> float:
        """Advisor band (or the middle band when unknown) plus the weight of observed interruptions."""
        band = self.advisor.band(pool.instance_type, region) if self.advisor is not None else None
        base = float(UNKNOWN_BAND if band is None else band)
        return base + self.observed_weight * self.observed(pool, now)

    def scores(self, pools: Mapping[Pool, str | None], now: float) -> dict[Pool, float]:
        """`score` of each pool (given with its region), the observed interruptions counted in one
        pass over the notices instead of one pass per pool."""
        since = now - self.window_seconds
        observed: dict[Pool, int] = {}
        for seen_pool, at in self._notices.values():
            if since <= at <= now:
                observed[seen_pool] = observed.get(seen_pool, 0) + 1
        out: dict[Pool, float] = {}
        for pool, region in pools.items():
            band = self.advisor.band(pool.instance_type, region) if self.advisor is not None else None
            base = float(UNKNOWN_BAND if band is None else band)
            out[pool] = base + self.observed_weight * observed.get(pool, 0)
        return out

    def at_risk(self, now: float) -> frozenset[Pool]:
        """Pools with a notice within the cool-down: no new placements there."""
        since = now - self.cooldown_seconds
        return frozenset(pool for pool, at in self._notices.values() if since <= at <= now)
