"""When to publish, refresh or withdraw a node's batch extended resources (`shipshape.dev/batch-cpu`
in millicores, `shipshape.dev/batch-memory` in bytes), after Koordinator's slo-controller:

- publish what the colocation model computes from the node's latest metrics;
- refresh only when a value moved by more than `diff_threshold` of the published one (hysteresis,
  Koordinator's resourceDiffThreshold 0.1), or when the last update is older than
  `max_update_seconds` (its updateTimeThresholdSeconds, 300) and the value differs at all;
- withdraw both when the node's metrics are older than `stale_seconds` (degradeTimeMinutes, 15),
  so that no batch pod is placed on figures nobody measures any more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from shipshape.contracts import annotations as names

BATCH_CPU = names.BATCH_CPU
BATCH_MEMORY = names.BATCH_MEMORY
UPDATED_ANNOTATION = names.BATCH_UPDATED


@dataclass(frozen=True, slots=True)
class PublishSettings:
    diff_threshold: float = 0.1
    max_update_seconds: float = 300.0
    stale_seconds: float = 15 * 60.0

    def __post_init__(self) -> None:
        if not 0 < self.diff_threshold <= 1:
            raise ValueError(f"diff_threshold must be within (0, 1], not {self.diff_threshold}")
        if self.max_update_seconds <= 0 or self.stale_seconds <= 0:
            raise ValueError("max_update_seconds and stale_seconds must be > 0")


@dataclass(frozen=True, slots=True)
class Decision:
    action: Literal["publish", "withdraw", "keep"]
    values: Mapping[str, int]  # what to publish (empty for withdraw and keep)
    reason: str


def _moved(old: int, new: int, threshold: float) -> bool:
    if old == new:
        return False
    if old == 0:
        return True
    return abs(new - old) > threshold * old


def decide(
    published: Mapping[str, int] | None,
    computed: Mapping[str, int],
    last_update: float | None,
    metrics_at: float | None,
    now: float,
    settings: PublishSettings | None = None,
) -> Decision:
    """What to do with one node. `published`: the node's current batch resources (None: none);
    `computed`: the model's figures now; `metrics_at`: the newest metric sample of the node."""
    settings = settings or PublishSettings()
    if metrics_at is None or now - metrics_at > settings.stale_seconds:
        age = "no metrics" if metrics_at is None else f"metrics {now - metrics_at:.0f} s old"
        if published:
            return Decision(
                "withdraw", {}, f"{age} (> {settings.stale_seconds:.0f} s): batch resources withdrawn"
            )
        return Decision("keep", {}, f"{age}: nothing published")
    values = {BATCH_CPU: int(computed[BATCH_CPU]), BATCH_MEMORY: int(computed[BATCH_MEMORY])}
    if not published:
        return Decision("publish", values, "first publication")
    moved = [
        name
        for name, value in values.items()
        if _moved(int(published.get(name, 0)), value, settings.diff_threshold)
    ]
    if moved:
        return Decision(
            "publish", values, f"{', '.join(moved)} moved by more than {settings.diff_threshold:.0%}"
        )
    changed = any(int(published.get(name, 0)) != value for name, value in values.items())
    if changed and (last_update is None or now - last_update >= settings.max_update_seconds):
        return Decision("publish", values, f"last update over {settings.max_update_seconds:.0f} s ago")
    return Decision("keep", {}, "within the hysteresis band")
