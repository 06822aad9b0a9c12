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

import numpy as np

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


METRICS: tuple[str, ...] = (*model.ALL_POD_PHASES, END_TO_END, SLI)


def metric_matrix(timelines: Sequence[PodTimeline]) -> np.ndarray:
    """One row per pod, one column per METRICS entry; NaN where the value is unknown."""
    nan = math.nan
    phases = model.ALL_POD_PHASES
    flat: list[float] = []
    extend = flat.extend
    for t in timelines:
        values = t.phases
        extend([nan if (v := values.get(p)) is None else v for p in phases])
        extend((nan if (e := t.end_to_end) is None else e, nan if t.sli is None else t.sli))
    return np.array(flat, dtype=float).reshape(len(timelines), len(METRICS))


class MetricTable:
    """The metric matrix and, per metric, the rows with a value in ascending order of value (ties
    in row order). Sorting each metric once serves every grouping: a stable sort of those rows by
    group then gives each group's values in order."""

    __slots__ = ("_orders", "matrix")

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = matrix
        self._orders: list[np.ndarray] | None = None

    @classmethod
    def of(cls, timelines: Sequence[PodTimeline]) -> MetricTable:
        return cls(metric_matrix(timelines))

    @property
    def orders(self) -> list[np.ndarray]:
        if self._orders is None:
            orders = []
            for position in range(self.matrix.shape[1]):
                column = self.matrix[:, position]
                valid = int(np.count_nonzero(~np.isnan(column)))
                orders.append(np.argsort(column, kind="stable")[:valid])  # NaN sorts last
            self._orders = orders
        return self._orders


def _group_order(group_ids: np.ndarray, groups: int) -> np.ndarray:
    """A stable sort of group ids (radix sort when the ids fit 16 bits)."""
    if groups <= 1 << 16:
        return np.argsort(group_ids.astype(np.uint16), kind="stable")
    return np.argsort(group_ids, kind="stable")


def _grouped_stats(ids: np.ndarray, groups: int, column: np.ndarray, order: np.ndarray) -> list[Stats | None]:
    """Nearest-rank stats of one metric for every group at once; `order` lists the rows with a value
    by ascending value."""
    group_ids = ids[order]
    by_group = _group_order(group_ids, groups)
    group_ids, values = group_ids[by_group], column[order][by_group]
    counts = np.bincount(group_ids, minlength=groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    sums = np.bincount(group_ids, weights=values, minlength=groups)
    last = max(len(values) - 1, 0)

    def at_quantile(quantile: float) -> np.ndarray:
        ranks = np.maximum(1, np.ceil(quantile * counts)).astype(np.int64)
        return values[np.clip(starts + ranks - 1, 0, last)] if len(values) else np.zeros(groups)

    maxima = values[np.clip(starts + counts - 1, 0, last)] if len(values) else np.zeros(groups)
    means = np.divide(sums, counts, out=np.zeros(groups), where=counts > 0)
    columns = zip(
        counts.tolist(),
        at_quantile(0.5).tolist(),
        at_quantile(0.9).tolist(),
        at_quantile(0.99).tolist(),
        maxima.tolist(),
        means.tolist(),
        strict=True,
    )
    return [Stats(*row) if row[0] else None for row in columns]


def _stats_by_group(
    dimension: str,
    keys: Sequence[str],
    timelines: Sequence[PodTimeline],
    table: MetricTable,
    *,
    skip_empty: bool = False,
) -> list[GroupStats]:
    """Stats of each distinct key; with `skip_empty`, pods whose key is "" are left out."""
    index: dict[str, int] = {}
    ids = np.fromiter((index.setdefault(key, len(index)) for key in keys), dtype=np.int64, count=len(keys))
    groups = len(index)
    matrix, orders = table.matrix, table.orders
    columns = {
        name: _grouped_stats(ids, groups, matrix[:, position], orders[position])
        for position, name in enumerate(METRICS)
    }
    outcomes: list[dict[str, int]] = [{} for _ in range(groups)]
    for group, timeline in zip(ids.tolist(), timelines, strict=True):
        counter = outcomes[group]
        counter[timeline.outcome] = counter.get(timeline.outcome, 0) + 1
    pods = np.bincount(ids, minlength=groups)
    return [
        GroupStats(
            dimension=dimension,
            key=key,
            pods=int(pods[group]),
            ready=outcomes[group].get(model.READY, 0),
            outcomes=outcomes[group],
            phases={phase: columns[phase][group] for phase in model.ALL_POD_PHASES},
            end_to_end=columns[END_TO_END][group],
            sli=columns[SLI][group],
        )
        for key, group in index.items()
        if key or not skip_empty
    ]


def group_stats(dimension: str, key: str, timelines: Sequence[PodTimeline]) -> GroupStats:
    """Stats of one group of pods."""
    if not timelines:
        empty: dict[str, Stats | None] = dict.fromkeys(model.ALL_POD_PHASES)
        return GroupStats(dimension, key, 0, 0, {}, empty, None, None)
    (stats,) = _stats_by_group(dimension, [key] * len(timelines), timelines, MetricTable.of(timelines))
    return stats


def key_function(dimension: str, nodes: Mapping[str, NodeInfo]) -> Callable[[PodTimeline], str]:
    """How a pod is filed under a dimension. Pods on unknown nodes (or unscheduled) get ""."""
    empty = NodeInfo("")

    def by_node(attribute: Callable[[NodeInfo], str]) -> Callable[[PodTimeline], str]:
        table = {name: attribute(info) for name, info in nodes.items()}
        default = attribute(empty)
        return lambda t: table.get(t.node, default)

    functions: dict[str, Callable[[], Callable[[PodTimeline], str]]] = {
        WORKLOAD: lambda: lambda t: f"{t.namespace}/{t.workload}",
        NAMESPACE: lambda: lambda t: t.namespace,
        NODE: lambda: lambda t: t.node,
        POOL: lambda: by_node(lambda info: info.pool_key),
        INSTANCE_TYPE: lambda: by_node(lambda info: info.instance_type),
        CAPACITY_TYPE: lambda: by_node(lambda info: info.capacity_type),
    }
    if dimension not in functions:
        raise ValueError(f"unknown dimension {dimension!r}: use one of {', '.join(DIMENSIONS)}")
    return functions[dimension]()


def aggregate(
    timelines: Sequence[PodTimeline],
    dimension: str,
    nodes: Mapping[str, NodeInfo] | None = None,
    *,
    table: MetricTable | None = None,
) -> list[GroupStats]:
    """Stats per group of the dimension, slowest p90 end to end first. Pass `table` (from
    `MetricTable.of`) to share it between dimensions."""
    key_of = key_function(dimension, nodes or {})
    keys = [key_of(t) for t in timelines]
    stats = _stats_by_group(dimension, keys, timelines, table or MetricTable.of(timelines), skip_empty=True)
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


def overall_stats(timelines: Sequence[PodTimeline], table: MetricTable | None = None) -> GroupStats:
    """Stats over every pod."""
    if not timelines:
        return group_stats("cluster", "all", [])
    (stats,) = _stats_by_group(
        "cluster", ["all"] * len(timelines), timelines, table or MetricTable.of(timelines)
    )
    return stats
