"""Percentiles per phase and end to end, grouped by workload, namespace, node, pool, instance type
and capacity type; the kubelet start-up SLI and the SIG Scalability pod start-up SLO check.

Percentiles are nearest-rank (the smallest value with at least q of the values at or below it), so
every reported figure is one some pod really had.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shipshape.analyzers.startup import model
from shipshape.analyzers.startup.model import NodeInfo, PodTimeline

QUANTILES = (0.5, 0.9, 0.99)
SLO_THRESHOLD_SECONDS = 5.0
SLO_QUANTILE = 0.99

WORKLOAD = "workload"
NAMESPACE = "namespace"
NODE = "node"
POOL = "pool"
INSTANCE_TYPE = "instance_type"
CAPACITY_TYPE = "capacity_type"
DIMENSIONS: tuple[str, ...] = (WORKLOAD, NAMESPACE, NODE, POOL, INSTANCE_TYPE, CAPACITY_TYPE)

END_TO_END = "end_to_end"
SLI = "sli"


def percentile(sorted_values: Sequence[float], quantile: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(quantile * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True, slots=True)
class Stats:
    count: int
    p50: float
    p90: float
    p99: float
    max: float
    mean: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Stats | None:
        ordered = sorted(values)
        if not ordered:
            return None
        return cls(
            count=len(ordered),
            p50=percentile(ordered, 0.5),
            p90=percentile(ordered, 0.9),
            p99=percentile(ordered, 0.99),
            max=ordered[-1],
            mean=sum(ordered) / len(ordered),
        )

    def to_json(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "max": self.max,
            "mean": self.mean,
        }


@dataclass(slots=True)
class GroupStats:
    dimension: str
    key: str
    pods: int
    ready: int
    outcomes: dict[str, int]
    phases: dict[str, Stats | None]
    end_to_end: Stats | None
    sli: Stats | None

    @property
    def dominant_phase(self) -> str | None:
        """The phase with the largest median (share of the typical pod's start-up)."""
        known = [
            (stats.p50, name)
            for name, stats in self.phases.items()
            if stats is not None and name != model.ADMISSION
        ]
        best = max(known) if known else None
        return best[1] if best and best[0] > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "dimension": self.dimension,
            "key": self.key,
            "pods": self.pods,
            "ready": self.ready,
            "outcomes": dict(self.outcomes),
            "dominantPhase": self.dominant_phase,
            "phases": {name: stats.to_json() if stats else None for name, stats in self.phases.items()},
            "endToEnd": self.end_to_end.to_json() if self.end_to_end else None,
            "sli": self.sli.to_json() if self.sli else None,
        }


def group_stats(dimension: str, key: str, timelines: Sequence[PodTimeline]) -> GroupStats:
    outcomes: dict[str, int] = {}
    for timeline in timelines:
        outcomes[timeline.outcome] = outcomes.get(timeline.outcome, 0) + 1
    phases = {
        phase: Stats.of(v for t in timelines if (v := t.phases.get(phase)) is not None)
        for phase in model.ALL_POD_PHASES
    }
    return GroupStats(
        dimension=dimension,
        key=key,
        pods=len(timelines),
        ready=outcomes.get(model.READY, 0),
        outcomes=outcomes,
        phases=phases,
        end_to_end=Stats.of(v for t in timelines if (v := t.end_to_end) is not None),
        sli=Stats.of(t.sli for t in timelines if t.sli is not None),
    )


def key_function(dimension: str, nodes: Mapping[str, NodeInfo]) -> Callable[[PodTimeline], str]:
    """How a pod is filed under a dimension. Pods on unknown nodes (or unscheduled) get ""."""
    empty = NodeInfo("")

    def node_of(timeline: PodTimeline) -> NodeInfo:
        return nodes.get(timeline.node, empty)

    functions: dict[str, Callable[[PodTimeline], str]] = {
        WORKLOAD: lambda t: f"{t.namespace}/{t.workload}",
        NAMESPACE: lambda t: t.namespace,
        NODE: lambda t: t.node,
        POOL: lambda t: node_of(t).pool_key,
        INSTANCE_TYPE: lambda t: node_of(t).instance_type,
        CAPACITY_TYPE: lambda t: node_of(t).capacity_type,
    }
    if dimension not in functions:
        raise ValueError(f"unknown dimension {dimension!r}: use one of {', '.join(DIMENSIONS)}")
    return functions[dimension]


def aggregate(
    timelines: Iterable[PodTimeline], dimension: str, nodes: Mapping[str, NodeInfo] | None = None
) -> list[GroupStats]:
    """Stats per group of the dimension, slowest p90 end to end first."""
    key_of = key_function(dimension, nodes or {})
    groups: dict[str, list[PodTimeline]] = {}
    for timeline in timelines:
        key = key_of(timeline)
        if key:
            groups.setdefault(key, []).append(timeline)
    stats = [group_stats(dimension, key, members) for key, members in groups.items()]
    stats.sort(key=lambda g: (-(g.end_to_end.p90 if g.end_to_end else -1.0), g.key))
    return stats


@dataclass(slots=True)
class SloCheck:
    """SIG Scalability: p99 of start-up latency (the SLI) <= 5 s for schedulable stateless pods
    whose images were already present on the node."""

    threshold: float
    quantile: float
    eligible: int
    value: float | None
    met: bool | None
    excluded: dict[str, int] = field(default_factory=dict)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "quantile": self.quantile,
            "eligible": self.eligible,
            "value": self.value,
            "met": self.met,
            "excluded": dict(self.excluded),
            "reason": self.reason,
        }


def slo_check(
    timelines: Iterable[PodTimeline], threshold: float = SLO_THRESHOLD_SECONDS, quantile: float = SLO_QUANTILE
) -> SloCheck:
    values: list[float] = []
    excluded: dict[str, int] = {}

    def exclude(reason: str) -> None:
        excluded[reason] = excluded.get(reason, 0) + 1

    for timeline in timelines:
        if timeline.outcome == model.UNSCHEDULED:
            exclude("not scheduled")
        elif not timeline.stateless:
            exclude("stateful (persistent volumes)")
        elif timeline.images_prepulled is False:
            exclude("images pulled")
        elif timeline.images_prepulled is None:
            exclude("image pull unknown")
        elif timeline.sli is None:
            exclude("not started")
        else:
            values.append(timeline.sli)
    if not values:
        return SloCheck(threshold, quantile, 0, None, None, excluded, "no eligible pod")
    value = percentile(sorted(values), quantile)
    return SloCheck(threshold, quantile, len(values), value, value <= threshold, excluded)
