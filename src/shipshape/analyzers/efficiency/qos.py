"""QoS colocation after Koordinator's model: which pods are latency-sensitive and which are batch,
how much batch capacity each node could offer over a window, and where colocation would interfere.

Priority band of a pod (first rule that applies):
1. label `koordinator.sh/priority-class` (`koord-prod`, `koord-mid` -> latency-sensitive;
   `koord-batch`, `koord-free` -> batch) or `shipshape.dev/priority-band`
   (`latency-sensitive` | `batch`);
2. the pod's priority (from `spec.priority` or its PriorityClass) in Koordinator's ranges:
   9000-9999 prod and 7000-7999 mid are latency-sensitive, 5000-5999 batch and 3000-3999 free are
   batch; any negative priority is batch (the usual "low priority" classes);
3. owner kind: pods of Jobs (and so CronJobs) are batch;
4. Kubernetes QoS: BestEffort pods are batch, Guaranteed and Burstable ones latency-sensitive.

Reclaimable batch capacity of a node at each step (Koordinator's `slo-controller` batch resource
formulas, per resource, floored at 0):

    safety margin  = capacity x (100 - reclaimThresholdPercent) / 100
    reserved       = capacity - allocatable                      (kubelet reservations)
    system used    = max(node used - sum(all pods' used), reserved)
    usage          = capacity - safety margin - system used - sum(LS pods' used)
    request        = capacity - safety margin - reserved - sum(LS pods' requests)      (memory only)
    maxUsageRequest= capacity - safety margin - system used - sum(max(LS used, LS request))

An LS pod without a sample at a step counts with its request. A step whose node metric is older
than `degrade_minutes` offers nothing (Koordinator withdraws batch resources on stale metrics).
Defaults are Koordinator's: CPU threshold 60 %, memory 65 %, policy `usage` for both, 15 minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from shipshape.analyzers.efficiency.cluster import BEST_EFFORT, Cluster
from shipshape.analyzers.efficiency.usage import Array, UsageData
from shipshape.contracts.annotations import PRIORITY_BAND_LABEL

F64 = NDArray[np.float64]

LATENCY_SENSITIVE = "latency-sensitive"
BATCH = "batch"
KOORD_PRIORITY_LABEL = "koordinator.sh/priority-class"
BAND_LABEL = PRIORITY_BAND_LABEL
_KOORD_CLASSES = {"koord-prod": LATENCY_SENSITIVE, "koord-mid": LATENCY_SENSITIVE, "koord-batch": BATCH,
                  "koord-free": BATCH}  # fmt: skip
_PRIORITY_RANGES = ((9000, 9999, LATENCY_SENSITIVE), (7000, 7999, LATENCY_SENSITIVE), (5000, 5999, BATCH),
                    (3000, 3999, BATCH))  # fmt: skip
BATCH_KINDS = frozenset({"Job", "CronJob"})

CpuPolicy = Literal["usage", "maxUsageRequest"]
MemoryPolicy = Literal["usage", "request", "maxUsageRequest"]
CHUNK_ROWS = 512
NODE_BLOCK = 500


@dataclass(frozen=True, slots=True)
class ColocationSettings:
    """Koordinator's ColocationStrategy fields that the advisory uses, with its defaults."""

    cpu_reclaim_threshold_percent: float = 60.0
    memory_reclaim_threshold_percent: float = 65.0
    cpu_calculate_policy: CpuPolicy = "usage"
    memory_calculate_policy: MemoryPolicy = "usage"
    degrade_minutes: float = 15.0
    # the batch capacity a node offers at least (100 - p) % of the window is its p-th percentile
    reclaim_percentile: float = 10.0

    def __post_init__(self) -> None:
        for name in ("cpu_reclaim_threshold_percent", "memory_reclaim_threshold_percent"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                raise ValueError(f"{name} must be within 0..100, not {value}")
        if self.cpu_calculate_policy not in ("usage", "maxUsageRequest"):
            raise ValueError(
                f"cpu_calculate_policy must be usage or maxUsageRequest, not {self.cpu_calculate_policy}"
            )
        if self.memory_calculate_policy not in ("usage", "request", "maxUsageRequest"):
            raise ValueError(
                "memory_calculate_policy must be usage, request or maxUsageRequest, "
                f"not {self.memory_calculate_policy}"
            )
        if not 0 <= self.reclaim_percentile <= 100:
            raise ValueError(f"reclaim_percentile must be within 0..100, not {self.reclaim_percentile}")


def priority_band(
    labels: Mapping[str, str], priority: int | None, owner_kind: str, qos: str
) -> tuple[str, str]:
    """(band, why) for one pod, by the rules in the module's docstring."""
    koord = labels.get(KOORD_PRIORITY_LABEL)
    if koord in _KOORD_CLASSES:
        return _KOORD_CLASSES[koord], f"label {KOORD_PRIORITY_LABEL}={koord}"
    band = labels.get(BAND_LABEL)
    if band in (LATENCY_SENSITIVE, BATCH):
        return band, f"label {BAND_LABEL}={band}"
    if priority is not None:
        for low, high, value in _PRIORITY_RANGES:
            if low <= priority <= high:
                return value, f"priority {priority} in {low}-{high}"
        if priority < 0:
            return BATCH, f"negative priority {priority}"
    if owner_kind in BATCH_KINDS:
        return BATCH, f"owned by a {owner_kind}"
    if qos == BEST_EFFORT:
        return BATCH, "BestEffort QoS"
    return LATENCY_SENSITIVE, f"{qos} QoS"


def pod_bands(cluster: Cluster) -> tuple[tuple[str, str], ...]:
    pods = cluster.pods
    return tuple(
        priority_band(pods.labels[i], pods.priority[i], pods.owner[i][0], pods.qos[i])
        for i in range(len(pods.keys))
    )


@dataclass(frozen=True, slots=True)
class Stats:
    minimum: float
    percentile: float
    mean: float
    maximum: float


@dataclass(frozen=True, slots=True)
class ResourceColocation:
    """One resource of one node over the window (cores or bytes)."""

    capacity: float
    allocatable: float
    batch: Stats  # reclaimable batch capacity, by the configured policy
    ls_request: float
    ls_peak: float  # highest sum of latency-sensitive usage
    batch_peak: float  # highest sum of batch usage
    system_peak: float
    coincident_overflow_steps: int  # steps where system + LS + batch usage passed capacity
    peaks_exceed_capacity: bool  # LS peak + batch peak + system peak > capacity


@dataclass(frozen=True, slots=True)
class NodeColocation:
    node: str
    cpu: ResourceColocation
    memory: ResourceColocation
    ls_pods: int
    batch_pods: int
    stale_steps: int  # steps without a fresh node metric (no batch capacity offered)
    formula_cpu: str
    formula_memory: str

    @property
    def interference_risk(self) -> bool:
        return (
            self.cpu.peaks_exceed_capacity
            or self.memory.peaks_exceed_capacity
            or self.cpu.coincident_overflow_steps > 0
            or self.memory.coincident_overflow_steps > 0
        )


@dataclass(frozen=True, slots=True)
class ColocationReport:
    settings: ColocationSettings
    nodes: tuple[NodeColocation, ...]
    bands: tuple[tuple[str, str], ...]  # per pod of the cluster: (band, why)
    batch_cpu_total: float  # sum over nodes of the percentile figure
    batch_memory_total: float
    lacking: tuple[str, ...]  # what data it lacked


def _node_sums(
    rows: Array,
    request: F64,
    node_of_row: NDArray[np.int64],
    ls_row: NDArray[np.bool_],
    order: NDArray[np.int64],
    first_node: int,
    n_nodes: int,
    with_max: bool,
) -> tuple[F64, F64, F64, F64 | None]:
    """Per node of [first_node, first_node + n_nodes) and step: LS usage, batch usage, LS usage with
    the request where no sample, and (with_max) LS max(usage, request). `order` lists the block's
    rows in (node, band) order; they go a chunk at a time, each run of one node's band summed by
    one `reduceat` (float64 sums of float32 rows)."""
    steps = rows.shape[1]
    ls_used, batch_used, ls_filled = (np.zeros((n_nodes, steps)) for _ in range(3))
    ls_max = np.zeros((n_nodes, steps)) if with_max else None
    req = np.nan_to_num(request, nan=0.0)
    for start in range(0, order.size, CHUNK_ROWS):
        chunk = order[start : start + CHUNK_ROWS]
        contiguous = chunk.size > 0 and bool(np.all(np.diff(chunk) == 1))  # a slice, no copy
        sub = rows[chunk[0] : chunk[-1] + 1] if contiguous else rows[chunk]
        keys = node_of_row[chunk] * 2 + (~ls_row[chunk]).astype(np.int64)
        cuts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        nodes, is_ls = keys[cuts] // 2 - first_node, keys[cuts] % 2 == 0
        missing = np.isnan(sub)
        has_gaps = bool(missing.any())
        filled = np.where(missing, np.float32(0), sub) if has_gaps else sub
        sums = np.add.reduceat(filled, cuts, axis=0, dtype=np.float64)
        ls_used[nodes[is_ls]] += sums[is_ls]
        batch_used[nodes[~is_ls]] += sums[~is_ls]
        ls_rows = ls_row[chunk]
        if has_gaps:
            stand_in = np.where(missing & ls_rows[:, None], req[chunk][:, None], 0.0)
            ls_filled[nodes[is_ls]] += np.add.reduceat(stand_in, cuts, axis=0)[is_ls]
        if ls_max is not None:
            with_request = np.where(missing, req[chunk][:, None], sub)
            top = np.maximum(with_request, req[chunk][:, None])
            ls_max[nodes[is_ls]] += np.add.reduceat(top, cuts, axis=0)[is_ls]
    ls_filled += ls_used
    return ls_used, batch_used, ls_filled, ls_max


def _fresh_node_usage(node_rows: F64, step: float, degrade_seconds: float) -> tuple[F64, NDArray[np.bool_]]:
    """The latest node sample no older than the degrade time at each step, and the stale steps."""
    steps = node_rows.shape[1]
    valid = ~np.isnan(node_rows)
    position = np.where(valid, np.arange(steps)[None, :], -1)
    last = np.maximum.accumulate(position, axis=1)
    stale = (last < 0) | ((np.arange(steps)[None, :] - last) * step > degrade_seconds)
    filled = np.take_along_axis(node_rows, np.maximum(last, 0), axis=1)
    return np.where(stale, np.nan, filled), stale


def aligned_rows(usage: UsageData, cluster: Cluster) -> tuple[Array, Array]:
    """Usage rows in the cluster's container order (NaN rows for containers without usage); the
    source's own arrays, uncopied, when they are already in that order."""
    keys = cluster.containers.keys
    if usage.containers.keys == keys:
        return usage.containers.cpu, usage.containers.memory
    steps = usage.window.steps
    index = np.array(
        [usage.containers.index(k) if usage.containers.index(k) is not None else -1 for k in keys]
    )
    cpu = np.full((len(keys), steps), np.nan, dtype=np.float32)
    memory = np.full((len(keys), steps), np.nan, dtype=np.float32)
    have = index >= 0
    cpu[have] = usage.containers.cpu[index[have]]
    memory[have] = usage.containers.memory[index[have]]
    return cpu, memory


def _node_rows(usage: UsageData, cluster: Cluster) -> tuple[F64, F64]:
    n, steps = len(cluster.nodes.names), usage.window.steps
    cpu = np.full((n, steps), np.nan)
    memory = np.full((n, steps), np.nan)
    for i, name in enumerate(cluster.nodes.names):
        row = usage.nodes.row(name)
        if row is not None:
            cpu[i], memory[i] = row
    return cpu, memory


def colocation(
    cluster: Cluster,
    usage: UsageData,
    settings: ColocationSettings | None = None,
    rows: tuple[Array, Array] | None = None,
) -> ColocationReport:
    """Reclaimable batch capacity and interference risk per node over the usage window."""
    settings = settings or ColocationSettings()
    bands = pod_bands(cluster)
    containers = cluster.containers
    ls_pod = np.array([band == LATENCY_SENSITIVE for band, _ in bands], dtype=bool)
    ls_row = ls_pod[containers.pod] if containers.pod.size else np.zeros(0, dtype=bool)
    node_of_row = cluster.pods.node[containers.pod] if containers.pod.size else np.zeros(0, dtype=np.int64)
    cpu_rows, memory_rows = rows if rows is not None else aligned_rows(usage, cluster)
    n_nodes = len(cluster.nodes.names)
    node_cpu, node_memory = _node_rows(usage, cluster)
    degrade = settings.degrade_minutes * 60.0
    step = usage.window.step
    lacking: list[str] = []
    if len(usage.nodes) == 0:
        lacking.append("node usage (system usage taken as the kubelet reservation)")
    placed = np.flatnonzero(node_of_row >= 0)
    order = placed[np.argsort(node_of_row[placed] * 2 + (~ls_row[placed]).astype(np.int64), kind="stable")]
    node_sorted = node_of_row[order]
    names = ("minimum", "percentile", "mean", "maximum", "ls_request", "ls_peak", "batch_peak", "system_peak",
             "overflow", "stale")  # fmt: skip
    figures = {r: {name: np.zeros(n_nodes) for name in names} for r in ("cpu", "memory")}
    resources = (
        ("cpu", cpu_rows, node_cpu, containers.cpu_request, cluster.nodes.cpu_capacity,
         cluster.nodes.cpu_allocatable, settings.cpu_reclaim_threshold_percent,
         settings.cpu_calculate_policy),
        ("memory", memory_rows, node_memory, containers.memory_request, cluster.nodes.memory_capacity,
         cluster.nodes.memory_allocatable, settings.memory_reclaim_threshold_percent,
         settings.memory_calculate_policy),
    )  # fmt: skip
    # a block of nodes at a time: the node x step arrays stay small whatever the cluster's size
    for first in range(0, n_nodes, NODE_BLOCK):
        last = min(n_nodes, first + NODE_BLOCK)
        block = order[np.searchsorted(node_sorted, first) : np.searchsorted(node_sorted, last)]
        for resource, rows_, node_rows, request, capacity, allocatable, threshold, policy in resources:
            ls_actual, batch_used, ls_used, ls_max = _node_sums(
                rows_, request, node_of_row, ls_row, block, first, last - first, policy == "maxUsageRequest"
            )
            all_used = ls_actual + batch_used
            ls_request = np.zeros(last - first)
            ls_block = block[ls_row[block]]
            np.add.at(ls_request, node_of_row[ls_block] - first, np.nan_to_num(request[ls_block]))
            cap = capacity[first:last, None]
            safety = cap * (100.0 - threshold) / 100.0
            reserved = (capacity - allocatable)[first:last, None]
            if len(usage.nodes):
                fresh, stale = _fresh_node_usage(node_rows[first:last], step, degrade)
            else:
                fresh, stale = np.full_like(all_used, np.nan), np.zeros(all_used.shape, dtype=bool)
            system = np.maximum(np.where(np.isnan(fresh), reserved, fresh - all_used), reserved)
            if policy == "request":
                batch = cap - safety - reserved - ls_request[:, None] + np.zeros_like(all_used)
            elif ls_max is not None:
                batch = cap - safety - system - ls_max
            else:
                batch = cap - safety - system - ls_used
            batch = np.maximum(batch, 0.0)
            if len(usage.nodes):
                batch[stale] = 0.0
            out = figures[resource]
            out["minimum"][first:last] = batch.min(axis=1)
            out["percentile"][first:last] = np.percentile(batch, settings.reclaim_percentile, axis=1)
            out["mean"][first:last] = batch.mean(axis=1)
            out["maximum"][first:last] = batch.max(axis=1)
            out["ls_request"][first:last] = ls_request
            out["ls_peak"][first:last] = ls_actual.max(axis=1)
            out["batch_peak"][first:last] = batch_used.max(axis=1)
            out["system_peak"][first:last] = system.max(axis=1)
            out["overflow"][first:last] = ((system + ls_actual + batch_used) > cap).sum(axis=1)
            out["stale"][first:last] = stale.sum(axis=1)
    per_resource: dict[str, list[ResourceColocation]] = {"cpu": [], "memory": []}
    for resource, capacity, allocatable in (
        ("cpu", cluster.nodes.cpu_capacity, cluster.nodes.cpu_allocatable),
        ("memory", cluster.nodes.memory_capacity, cluster.nodes.memory_allocatable),
    ):
        f = figures[resource]
        for i in range(n_nodes):
            peaks = f["ls_peak"][i] + f["batch_peak"][i] + f["system_peak"][i]
            per_resource[resource].append(
                ResourceColocation(
                    float(capacity[i]),
                    float(allocatable[i]),
                    Stats(
                        float(f["minimum"][i]),
                        float(f["percentile"][i]),
                        float(f["mean"][i]),
                        float(f["maximum"][i]),
                    ),
                    float(f["ls_request"][i]),
                    float(f["ls_peak"][i]),
                    float(f["batch_peak"][i]),
                    float(f["system_peak"][i]),
                    int(f["overflow"][i]),
                    bool(peaks > capacity[i]),
                )
            )
    nodes_out: list[NodeColocation] = []
    pods_per_node_ls = np.bincount(cluster.pods.node[(cluster.pods.node >= 0) & ls_pod], minlength=n_nodes)
    pods_per_node_batch = np.bincount(
        cluster.pods.node[(cluster.pods.node >= 0) & ~ls_pod], minlength=n_nodes
    )
    formula = {
        "usage": "capacity - safety margin - system used - LS used",
        "request": "capacity - safety margin - reserved - LS requests",
        "maxUsageRequest": "capacity - safety margin - system used - sum(max(LS used, LS request))",
    }
    stale_cpu = figures["cpu"]["stale"]
    for i, name in enumerate(cluster.nodes.names):
        nodes_out.append(
            NodeColocation(
                name,
                per_resource["cpu"][i],
                per_resource["memory"][i],
                int(pods_per_node_ls[i]),
                int(pods_per_node_batch[i]),
                int(stale_cpu[i]),
                formula[settings.cpu_calculate_policy],
                formula[settings.memory_calculate_policy],
            )
        )
    return ColocationReport(
        settings,
        tuple(nodes_out),
        bands,
        float(sum(n.cpu.batch.percentile for n in nodes_out)),
        float(sum(n.memory.batch.percentile for n in nodes_out)),
        tuple(lacking),
    )
