"""Instance prices and spot interruption bands, and the band -> hazard-rate conversion.

The data is the slim catalog shipped in `data/catalog.json` (see data/PROVENANCE.md): estimated
on-demand prices from an April 2021 snapshot, and the 2025 Spot Instance Advisor's savings and
interruption-frequency band per region x instance type.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

HOURS_PER_MONTH = 730.0  # AWS bills a month as 730 hours

# The advisor's bands are "% of instances interrupted over the trailing month". We take each
# band's midpoint; the open-ended last band (>20 %) is taken as 25 %.
BAND_MIDPOINTS: tuple[float, ...] = (0.025, 0.075, 0.125, 0.175, 0.25)
BAND_LABELS: tuple[str, ...] = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
# The advisor's global rate is "<10%": types it does not list get the 5-10 % band.
DEFAULT_BAND = 1
FALLBACK_PRICE_REGION = "us-east-1"


def hazard_per_hour(monthly_fraction: float) -> float:
    """Per-node interruption rate λ (per hour) such that P(interrupted within a month) = p.

    With a constant hazard λ, P(survive 730 h) = exp(-730 λ) = 1 - p, so λ = -ln(1 - p) / 730.
    """
    if not 0 <= monthly_fraction < 1:
        raise ValueError(f"a monthly interruption fraction must be in [0, 1), got {monthly_fraction}")
    return -math.log1p(-monthly_fraction) / HOURS_PER_MONTH


def band_hazard_per_hour(band: int) -> float:
    """λ (per node-hour) for an advisor band index 0..4, from the band's midpoint."""
    if not 0 <= band < len(BAND_MIDPOINTS):
        raise ValueError(f"interruption band must be 0..{len(BAND_MIDPOINTS) - 1}, got {band}")
    return hazard_per_hour(BAND_MIDPOINTS[band])


@dataclass(frozen=True, slots=True)
class SpotAdvice:
    savings_percent: int
    band: int

    @property
    def label(self) -> str:
        return BAND_LABELS[self.band]


class Catalog:
    """Read-only lookups over the catalog document."""

    def __init__(self, document: dict[str, Any]) -> None:
        self._doc = document
        self.on_demand_as_of: str = document.get("onDemandPricesAsOf", "")
        self.spot_advice_as_of: str = document.get("spotAdvisorAsOf", "")

    def instance_type(self, name: str) -> dict[str, Any] | None:
        info: dict[str, Any] | None = self._doc["instanceTypes"].get(name)
        return info

    def on_demand_price(self, instance_type: str, region: str) -> float | None:
        """Estimated on-demand USD/h; regions without 2021 prices fall back to us-east-1's."""
        for where in (region, FALLBACK_PRICE_REGION):
            price = self._doc["onDemand"].get(where, {}).get(instance_type)
            if price is not None:
                return float(price)
        return None

    def spot_advice(self, instance_type: str, region: str) -> SpotAdvice | None:
        entry = self._doc["spot"].get(region, {}).get(instance_type)
        if entry is None:
            return None
        return SpotAdvice(savings_percent=int(entry[0]), band=int(entry[1]))

    def spot_price(self, instance_type: str, region: str) -> float | None:
        """on-demand x (1 - advisor savings %)."""
        on_demand = self.on_demand_price(instance_type, region)
        advice = self.spot_advice(instance_type, region)
        if on_demand is None or advice is None:
            return None
        return round(on_demand * (1 - advice.savings_percent / 100), 5)

    def interruption_band(self, instance_type: str, region: str) -> int:
        advice = self.spot_advice(instance_type, region)
        return DEFAULT_BAND if advice is None else advice.band


@cache
def default_catalog() -> Catalog:
    """The catalog shipped with the package (parsed once per process; it is read-only)."""
    text = resources.files("shipshape.pricing").joinpath("data/catalog.json").read_text()
    return Catalog(json.loads(text))
