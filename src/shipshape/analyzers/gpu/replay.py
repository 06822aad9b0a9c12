"""Trace replay of GPU placement policies, the way the FGD paper evaluates them.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent" (USENIX ATC'23) and its simulator replay the Alibaba GPU trace like this, and so
does `replay` here:

- the pod list is inflated by cloning pods drawn at random until the pods ask for `inflation`
  (130 %) of the cluster's GPU capacity (the clone that would pass the target is not added; a
  list that asks for more is thinned at random instead), then shuffled; both with `seed`, so every
  policy sees the same pods in the same order;
- pods arrive one at a time and never leave; a pod goes to one node or, when no node passes the
  filters, fails and is skipped;
- filters: free CPU and memory, the GPU model constraint, and the GPUs themselves: a fractional
  pod (one GPU, `gpu_milli` < 1000) needs one GPU with that share free, a pod of n whole GPUs
  needs n GPUs that are entirely free;
- among the nodes that pass, the policy's score picks one (kube-scheduler's integer scores,
  equal best scores broken at random, for the paper's policies), then the GPU(s) on it.

Policies (`POLICIES`):

- `random`: any node that fits, any GPU that fits.
- `dotprod`: Tetris-style alignment of the node's free (CPU, GPU) and the pod's ask, both
  normalised by the largest node (128 cores, 8 GPUs): the smallest dot product wins; best-fit GPU.
- `gpu-clustering`: pods of one kind (shared GPU, 1, 2, 4, 8 whole GPUs) together: nodes that
  host only that kind first, then nodes that host it among others, then empty nodes, then the
  rest; inside each band the fuller node.
- `gpu-packing`: a partly used GPU first (the one with the least free), then a free GPU on a node
  already in use (fewest free GPUs used), then an empty node (the one with fewest GPUs).
- `best-fit`: the least free CPU and GPU left after placing (each weighted 1/2, normalised by the
  largest node).
- `fgd`: fragmentation gradient descent: the node and GPU whose expected fragmentation
  (`frag.FragModel`) grows least, score sigmoid(decrease / 1000) x 100.
- `first-fit`: the first node in the node list that fits; best-fit GPU.
- `spread`: the node with the most free GPU (then CPU) after placing; the GPU with the most free.
- `fgd-cpu` (ours): fgd's measure plus the GPU capacity that lack of CPU strands: a node should
  keep the workload's average CPU per GPU (for the GPU pods of the trace, CPU milli per GPU milli)
  for its free GPUs, and free GPU beyond what its free CPU feeds at that ratio counts as
  fragmentation too; exact scores, equals to the first node in the list.

Equal best scores: `ties="first"` (default) takes the first of them in node-list order, which is
what reproduces the paper's published curves; `ties="random"` draws one with the seed, as an
unmodified kube-scheduler does. `random` always draws.

Reported per checkpoint of arrived workload (GPU milli asked by the pods so far, placed or not,
as a share of capacity): the GPU milli allocated and the cluster's expected fragmentation, both as
shares of capacity.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from shipshape.analyzers.gpu import frag, policies
from shipshape.analyzers.gpu.trace import MILLI, Nodes, Pods

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MAX_SPEC_CPU = 128_000  # milli CPU of the largest node, the paper's normaliser
MAX_SPEC_GPU = 8 * MILLI
MAX_SCORE = 100
CHECKPOINTS = (
    10.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    70.0,
    80.0,
    85.0,
    90.0,
    95.0,
    100.0,
    105.0,
    110.0,
    115.0,
    120.0,
    125.0,
    130.0,
)
POLICIES = policies.POLICIES
PAPER_POLICIES = policies.PAPER_POLICIES
TIES = policies.TIES

Progress = Callable[[str, int, int], None]


class ReplayError(ValueError):
    """Settings or inputs that cannot be replayed."""


@dataclass(frozen=True)
class ReplaySettings:
    seed: int = 42
    inflation: float = 1.3
    popularity: float = 0.95
    checkpoints: tuple[float, ...] = CHECKPOINTS
    progress_every: int = 1000
    ties: str = "first"

    def __post_init__(self) -> None:
        if self.ties not in TIES:
            raise ReplayError(f"ties must be one of {', '.join(TIES)}, got {self.ties!r}")
        if not 0.0 < self.inflation <= 10.0:
            raise ReplayError(f"inflation must be in (0, 10], got {self.inflation}")
        if not 0.0 < self.popularity <= 1.0:
            raise ReplayError(f"popularity must be in (0, 1], got {self.popularity}")
        if not self.checkpoints or any(c <= 0 for c in self.checkpoints):
            raise ReplayError("checkpoints must be positive percentages")


@dataclass(frozen=True)
class Point:
    arrived_pct: float
    gpu_alloc_pct: float
    frag_gpu_pct: float


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    points: tuple[Point, ...]
    placed_pods: int
    failed_pods: int
    failed_gpu_milli: int
    curve: tuple[tuple[float, float], ...]  # (arrived %, allocated %) at each whole percent
    wall_seconds: float
    nodes_chosen: tuple[int, ...] = ()  # per arriving pod, the node's index (-1: failed)


@dataclass(frozen=True)
class Workload:
    """The pods in arrival order (inflated, shuffled) and the fragmentation model."""

    pods: Pods
    typical: frag.TypicalPods
    model: frag.FragModel
    capacity_milli: int
    cloned: int
    cpu_per_gpu: float  # CPU milli per GPU milli asked by the trace's GPU pods


def prepare(nodes: Nodes, pods: Pods, settings: ReplaySettings) -> Workload:
    """Inflate (or thin) and shuffle the pods with the seed; compile the typical shapes."""
    capacity = nodes.total_gpus * MILLI
    if capacity <= 0:
        raise ReplayError("the cluster has no GPUs")
    rng = np.random.default_rng(settings.seed)
    asks = pods.total_gpu_milli
    target = settings.inflation * capacity
    total = int(asks.sum())
    indices: list[int] = list(range(len(pods)))
    cloned = 0
    if total < target:
        if not (asks > 0).any():
            raise ReplayError("no pod asks for a GPU: nothing to inflate the workload with")
        while True:
            pick = int(rng.integers(len(pods)))
            ask = int(asks[pick])
            if total + ask > target:
                break
            total += ask
            indices.append(pick)
            cloned += 1
    elif total > target:
        while total > target and indices:
            drop = int(rng.integers(len(indices)))
            total -= int(asks[indices[drop]])
            indices.pop(drop)
    order = np.array(indices, dtype=np.int64)[rng.permutation(len(indices))]
    return _workload(nodes, pods, pods.take(order), settings, cloned)


def in_order(nodes: Nodes, pods: Pods, settings: ReplaySettings) -> Workload:
    """The pods as they are, in their order: no inflation, no shuffle."""
    if nodes.total_gpus <= 0:
        raise ReplayError("the cluster has no GPUs")
    return _workload(nodes, pods, pods, settings, 0)


def _workload(
    nodes: Nodes, trace_pods: Pods, arriving: Pods, settings: ReplaySettings, cloned: int
) -> Workload:
    typical = frag.typical_pods(trace_pods, popularity=settings.popularity)
    gpu_pods = trace_pods.num_gpu > 0
    asked = int(trace_pods.total_gpu_milli[gpu_pods].sum())
    return Workload(
        pods=arriving,
        typical=typical,
        model=frag.compile_model(typical, trace_pods, nodes),
        capacity_milli=nodes.total_gpus * MILLI,
        cloned=cloned,
        cpu_per_gpu=float(trace_pods.cpu_milli[gpu_pods].sum() / max(asked, 1)),
    )


# Kinds of GPU request for gpu-clustering: no GPU, shared GPU, then whole-GPU counts.
def _kind(num_gpu: int, gpu_milli: int) -> str:
    if num_gpu == 0:
        return "none"
    if gpu_milli < MILLI:
        return "share"
    return f"{num_gpu}-gpu"


@dataclass
class _Cluster:
    """Mutable replay state, one row per node."""

    free: IntArray  # (N, J) GPU milli free per GPU (0 for GPUs a node does not have)
    cpu: IntArray
    memory: IntArray
    gpus: IntArray
    model: IntArray
    total: IntArray  # free GPU milli per node
    full: IntArray  # entirely free GPUs per node
    largest: IntArray  # largest free share on one GPU
    kinds: IntArray  # (N, K) pods of each GPU kind on the node
    kind_count: IntArray  # distinct GPU kinds on the node
    fitting: IntArray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    usable: IntArray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    fragmentation: FloatArray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))

    @classmethod
    def empty(cls, nodes: Nodes, kinds: int) -> _Cluster:
        width = max(nodes.max_gpus, 1)
        free = np.where(np.arange(width)[None, :] < nodes.gpus[:, None], MILLI, 0).astype(np.int64)
        return cls(
            free=free,
            cpu=nodes.cpu_milli.copy(),
            memory=nodes.memory_mib.copy(),
            gpus=nodes.gpus.copy(),
            model=nodes.model.copy(),
            total=free.sum(axis=1),
            full=nodes.gpus.copy(),
            largest=free.max(axis=1),
            kinds=np.zeros((len(nodes), kinds), dtype=np.int64),
            kind_count=np.zeros(len(nodes), dtype=np.int64),
        )

    def track_frag(self, model: frag.FragModel) -> None:
        self.fitting, self.usable = model.group_stats(self.free)
        self.fragmentation = model.frag(self.total, self.fitting, self.usable, self.cpu, self.model)

    def place(self, node: int, gpus: Sequence[int], pod: _Pod, model: frag.FragModel | None) -> None:
        self.cpu[node] -= pod.cpu
        self.memory[node] -= pod.memory
        if gpus:
            row = self.free[node]
            for j in gpus:
                row[j] -= pod.share
            self.total[node] = int(row.sum())
            self.full[node] = int((row == MILLI).sum())
            self.largest[node] = int(row.max())
            if self.kinds[node, pod.kind] == 0:
                self.kind_count[node] += 1
            self.kinds[node, pod.kind] += 1
        if model is not None:
            fitting, usable = model.group_stats(self.free[node : node + 1])
            self.fitting[node] = fitting[0]
            self.usable[node] = usable[0]
            self.fragmentation[node] = model.frag(
                self.total[node : node + 1],
                fitting,
                usable,
                self.cpu[node : node + 1],
                self.model[node : node + 1],
            )[0]


@dataclass(frozen=True)
class _Pod:
    cpu: int
    memory: int
    count: int  # GPUs
    share: int  # milli per GPU
    spec: int
    kind: int

    @property
    def ask(self) -> int:
        return self.count * self.share


def _candidates(cluster: _Cluster, pod: _Pod, accepted: BoolArray) -> IntArray:
    mask = (cluster.cpu >= pod.cpu) & (cluster.memory >= pod.memory)
    if pod.count:
        mask &= accepted
        if pod.share < MILLI:
            mask &= cluster.largest >= pod.share
        else:
            mask &= cluster.full >= pod.count
    return np.flatnonzero(mask)


def _best_gpu(row: IntArray, share: int, how: str, rng: np.random.Generator) -> int:
    fits = np.flatnonzero(row >= share)
    if how == "random":
        return int(fits[rng.integers(len(fits))])
    values = row[fits]
    return int(fits[np.argmax(values) if how == "worst" else np.argmin(values)])


def _whole_gpus(row: IntArray, count: int) -> list[int]:
    return [int(j) for j in np.flatnonzero(row == MILLI)[:count]]


def _pick_max(scores: npt.NDArray[np.generic], rng: np.random.Generator) -> int:
    best = np.flatnonzero(scores == scores.max())
    return int(best[rng.integers(len(best))]) if len(best) > 1 else int(best[0])


class _Policy:
    """Scores the candidate nodes of a pod and picks a node and GPUs."""

    name = ""
    gpu_choice = "best"
    tracks_frag = False
    ties = "first"

    def tie(self, scores: npt.NDArray[np.generic], rng: np.random.Generator) -> int:
        if self.ties == "random":
            return _pick_max(scores, rng)
        return int(np.argmax(scores))

    def choose(
        self, cluster: _Cluster, pod: _Pod, cands: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        node = int(cands[self.pick(cluster, pod, cands, rng)])
        return node, self.gpus(cluster, node, pod, rng)

    def pick(self, cluster: _Cluster, pod: _Pod, cands: IntArray, rng: np.random.Generator) -> int:
        return self.tie(self.scores(cluster, pod, cands), rng)

    def scores(self, cluster: _Cluster, pod: _Pod, cands: IntArray) -> npt.NDArray[np.generic]:
        return np.zeros(len(cands), dtype=np.int64)

    def gpus(self, cluster: _Cluster, node: int, pod: _Pod, rng: np.random.Generator) -> list[int]:
        if pod.count == 0:
            return []
        row = cluster.free[node]
        if pod.share == MILLI:
            return _whole_gpus(row, pod.count)
        return [_best_gpu(row, pod.share, self.gpu_choice, rng)]


class _Random(_Policy):
    name = "random"
    gpu_choice = "random"

    def pick(self, cluster: _Cluster, pod: _Pod, cands: IntArray, rng: np.random.Generator) -> int:
        return int(rng.integers(len(cands)))


class _DotProduct(_Policy):
    name = "dotprod"

    def scores(self, cluster: _Cluster, pod: _Pod, cands: IntArray) -> npt.NDArray[np.generic]:
        dot = (cluster.cpu[cands] / MAX_SPEC_CPU) * (pod.cpu / MAX_SPEC_CPU) + (
            cluster.total[cands] / MAX_SPEC_GPU
        ) * (pod.ask / MAX_SPEC_GPU)
        return ((1.0 - dot / 2.0) * MAX_SCORE).astype(np.int64)


class _GpuClustering(_Policy):
    name = "gpu-clustering"

    def scores(self, cluster: _Cluster, pod: _Pod, cands: IntArray) -> npt.NDArray[np.generic]:
        if pod.count == 0:
            return np.zeros(len(cands), dtype=np.int64)
        quarter = MAX_SCORE // 4
        fullness = quarter * (MAX_SPEC_GPU - cluster.total[cands]) // MAX_SPEC_GPU
        hosts = cluster.kinds[cands, pod.kind] > 0
        kinds = cluster.kind_count[cands]
        band = np.where(hosts, np.where(kinds == 1, 3, 2), np.where(kinds == 0, 1, 0))
        return np.asarray(band * quarter + fullness, dtype=np.int64)


class _GpuPacking(_Policy):
    name = "gpu-packing"

    def scores(self, cluster: _Cluster, pod: _Pod, cands: IntArray) -> npt.NDArray[np.generic]:
        if pod.count == 0:
            return np.zeros(len(cands), dtype=np.int64)
        full = cluster.full[cands]
        empty = full == cluster.gpus[cands]
        score = np.maximum(MAX_SCORE // 3 - full, full)
        if pod.share == MILLI:
            used = np.maximum(MAX_SCORE // 2 - pod.count, MAX_SCORE // 3)
            return np.asarray(np.where(empty, score, used), dtype=np.int64)
        rows = cluster.free[cands]
        tight = np.where(rows >= pod.share, rows, MILLI + 1).min(axis=1)
        shared = np.maximum(MAX_SCORE - (tight * 100 // MILLI) // 10, MAX_SCORE // 2)
        on_free = MAX_SCORE // 2 - 1
        return np.asarray(np.where(empty, score, np.where(tight == MILLI, on_free, shared)), dtype=np.int64)


class _BestFit(_Policy):
    name = "best-fit"

    def scores(self, cluster: _Cluster, pod: _Pod, cands: IntArray) -> npt.NDArray[np.generic]:
        left = (
            0.5 * (cluster.cpu[cands] - pod.cpu) / MAX_SPEC_CPU
            + 0.5 * (cluster.total[cands] - pod.ask) / MAX_SPEC_GPU
        )
        return ((1.0 - left) * MAX_SCORE).astype(np.int64)


class _FirstFit(_Policy):
    name = "first-fit"

    def pick(self, cluster: _Cluster, pod: _Pod, cands: IntArray, rng: np.random.Generator) -> int:
        return 0


class _Spread(_Policy):
    name = "spread"
    gpu_choice = "worst"

    def pick(self, cluster: _Cluster, pod: _Pod, cands: IntArray, rng: np.random.Generator) -> int:
        # Most free GPU, then most free CPU, then the first node.
        return int(np.lexsort((-cluster.cpu[cands], -cluster.total[cands]))[0])


class _Fgd(_Policy):
    """Fragmentation gradient descent: the placement whose expected fragmentation grows least."""

    name = "fgd"
    tracks_frag = True

    def __init__(self, model: frag.FragModel) -> None:
        self.model = model

    def after(self, cluster: _Cluster, pod: _Pod, cands: IntArray) -> tuple[FloatArray, IntArray]:
        """Fragmentation of each candidate node after the best placement on it, and the free
        share of the GPU that placement uses (-1 for pods without GPUs or with whole GPUs)."""
        model = self.model
        cpu = cluster.cpu[cands] - pod.cpu
        node_model = cluster.model[cands]
        fitting = cluster.fitting[cands]
        usable = cluster.usable[cands]
        total = cluster.total[cands]
        none = np.full(len(cands), -1, dtype=np.int64)
        if pod.count == 0:
            return model.frag(total, fitting, usable, cpu, node_model), none
        if pod.share == MILLI:
            whole = pod.count * MILLI
            return model.frag(total - whole, fitting - pod.count, usable - whole, cpu, node_model), none
        # One fractional GPU: GPUs of a node with the same free share give the same result, so
        # each distinct share that fits is tried once.
        rows = np.sort(cluster.free[cands], axis=1)
        tried = rows >= pod.share
        tried[:, 1:] &= rows[:, 1:] != rows[:, :-1]
        k, j = np.nonzero(tried)
        was = rows[k, j][:, None]
        now = was - pod.share
        share = model.share[None, :]
        fitting_after = fitting[k] - (was >= share) + (now >= share)
        usable_after = usable[k] - was * (was >= share) + now * (now >= share)
        ok = model.access[node_model[k]] & (fitting_after >= model.count)
        weights = model.cpu_weights(cpu)[k]
        after = (total[k] - pod.share) - (ok * weights * usable_after).sum(axis=1)
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        best = np.minimum.reduceat(after, starts)
        # The share of the first GPU (by free share, then index) reaching each node's best.
        hit = np.flatnonzero(after <= np.repeat(best, np.diff(np.r_[starts, len(k)])) + 1e-9)
        first = hit[np.r_[True, k[hit][1:] != k[hit][:-1]]]
        return best, was[first, 0]

    def growth(self, cluster: _Cluster, pod: _Pod, cands: IntArray, after: FloatArray) -> FloatArray:
        return after - cluster.fragmentation[cands]

    def choose(
        self, cluster: _Cluster, pod: _Pod, cands: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        after, share = self.after(cluster, pod, cands)
        k = self.pick_by_growth(self.growth(cluster, pod, cands, after), rng)
        node = int(cands[k])
        if share[k] >= 0:
            # The lowest-numbered GPU with that free share.
            return node, [int(np.flatnonzero(cluster.free[node] == share[k])[0])]
        return node, self.gpus(cluster, node, pod, rng)

    def pick_by_growth(self, growth: FloatArray, rng: np.random.Generator) -> int:
        # kube-scheduler's integer score: sigmoid of the decrease in GPUs, times 100.
        scores = (MAX_SCORE / (1.0 + np.exp(np.clip(growth / MILLI, -50.0, 50.0)))).astype(np.int64)
        return self.tie(scores, rng)


class _FgdCpu(_Fgd):
    """fgd's measure plus the GPU that lack of CPU strands: a node keeps `cpu_per_gpu` CPU milli
    per free GPU milli (the workload's average), and free GPU beyond what its free CPU can feed
    at that ratio counts as fragmentation too. Exact scores; equals go to the first node."""

    name = "fgd-cpu"

    def __init__(self, model: frag.FragModel, cpu_per_gpu: float) -> None:
        super().__init__(model)
        self.cpu_per_gpu = cpu_per_gpu

    def stranded(self, total: IntArray, cpu: IntArray) -> FloatArray:
        return np.maximum(0.0, total - cpu / self.cpu_per_gpu)

    def growth(self, cluster: _Cluster, pod: _Pod, cands: IntArray, after: FloatArray) -> FloatArray:
        total = cluster.total[cands]
        cpu = cluster.cpu[cands]
        extra = self.stranded(total - pod.ask, cpu - pod.cpu) - self.stranded(total, cpu)
        return np.round(after - cluster.fragmentation[cands] + extra, 6)

    def pick_by_growth(self, growth: FloatArray, rng: np.random.Generator) -> int:
        return int(np.argmin(growth))


def _policy(name: str, workload: Workload, ties: str) -> _Policy:
    simple: dict[str, type[_Policy]] = {
        "random": _Random,
        "dotprod": _DotProduct,
        "gpu-clustering": _GpuClustering,
        "gpu-packing": _GpuPacking,
        "best-fit": _BestFit,
        "first-fit": _FirstFit,
        "spread": _Spread,
    }
    chosen: _Policy
    if name in simple:
        chosen = simple[name]()
    elif name == "fgd":
        chosen = _Fgd(workload.model)
    elif name == "fgd-cpu":
        chosen = _FgdCpu(workload.model, workload.cpu_per_gpu)
    else:
        raise ReplayError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}")
    chosen.ties = ties
    return chosen


def policy_names(choice: str) -> list[str]:
    """`all`, one name, or names separated by commas."""
    if choice == "all":
        return list(POLICIES)
    names = [n.strip() for n in choice.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise ReplayError(
            f"unknown policy {', '.join(unknown) or choice!r}: choose all or one of {', '.join(POLICIES)}"
        )
    return names


def replay(
    nodes: Nodes,
    workload: Workload,
    policy: str,
    settings: ReplaySettings,
    progress: Progress | None = None,
) -> PolicyResult:
    """Replay the workload's pods on an empty cluster under one policy."""
    started = time.perf_counter()
    model = workload.model
    chooser = _policy(policy, workload, settings.ties)
    pods = workload.pods
    kinds: dict[str, int] = {}
    kind_of = [
        kinds.setdefault(_kind(n, m), len(kinds))
        for n, m in zip(pods.num_gpu.tolist(), pods.gpu_milli.tolist(), strict=True)
    ]
    cluster = _Cluster.empty(nodes, max(len(kinds), 1))
    if chooser.tracks_frag:
        cluster.track_frag(model)
    allowed = pods.allowed(nodes)
    accepted = [allowed[s][cluster.model] for s in range(len(pods.specs))]
    rng = np.random.default_rng([settings.seed, 1])
    capacity = workload.capacity_milli
    checkpoints = sorted(c for c in settings.checkpoints if c <= settings.inflation * 100 + 1e-9)
    points: list[Point] = []
    curve: list[tuple[float, float]] = [(0.0, 0.0)]
    arrived = allocated = failed_milli = placed = failed = 0
    chosen: list[int] = []
    next_point = 0
    next_percent = 1
    count = len(pods)
    rows = zip(
        pods.cpu_milli.tolist(),
        pods.memory_mib.tolist(),
        pods.num_gpu.tolist(),
        pods.gpu_milli.tolist(),
        pods.spec.tolist(),
        kind_of,
        strict=True,
    )

    def point(at: float) -> Point:
        fragmentation = float(model.node_frag(cluster.free, cluster.cpu, cluster.model).sum())
        return Point(
            arrived_pct=at,
            gpu_alloc_pct=round(100.0 * allocated / capacity, 2),
            frag_gpu_pct=round(100.0 * fragmentation / capacity, 2),
        )

    for index, (cpu, memory, num_gpu, share, spec, kind) in enumerate(rows):
        pod = _Pod(cpu=cpu, memory=memory, count=num_gpu, share=share, spec=spec, kind=kind)
        arrived += pod.ask
        cands = _candidates(cluster, pod, accepted[spec])
        if len(cands):
            node, gpus = chooser.choose(cluster, pod, cands, rng)
            cluster.place(node, gpus, pod, model if chooser.tracks_frag else None)
            allocated += pod.ask
            placed += 1
            chosen.append(node)
        else:
            failed += 1
            failed_milli += pod.ask
            chosen.append(-1)
        while 100.0 * arrived >= next_percent * capacity:
            curve.append((float(next_percent), 100.0 * allocated / capacity))
            next_percent += 1
        while next_point < len(checkpoints) and 100.0 * arrived >= checkpoints[next_point] * capacity:
            points.append(point(checkpoints[next_point]))
            next_point += 1
        if progress is not None and (index + 1) % settings.progress_every == 0:
            progress(policy, index + 1, count)
    # The last pods stop just short of the inflation target: what is left is the end state.
    while next_point < len(checkpoints):
        points.append(point(checkpoints[next_point]))
        next_point += 1
    if progress is not None:
        progress(policy, count, count)
    return PolicyResult(
        policy=policy,
        points=tuple(points),
        placed_pods=placed,
        failed_pods=failed,
        failed_gpu_milli=failed_milli,
        curve=tuple(curve),
        wall_seconds=time.perf_counter() - started,
        nodes_chosen=tuple(chosen),
    )


def replay_all(
    nodes: Nodes,
    pods: Pods,
    policies: Sequence[str],
    settings: ReplaySettings,
    progress: Progress | None = None,
) -> tuple[Workload, list[PolicyResult]]:
    workload = prepare(nodes, pods, settings)
    return workload, [replay(nodes, workload, name, settings, progress) for name in policies]


def report_json(nodes: Nodes, results: Sequence[PolicyResult]) -> dict[str, object]:
    """The `--json` document."""
    return {
        "cluster": {"nodes": len(nodes), "gpus": nodes.total_gpus},
        "policies": [
            {
                "policy": r.policy,
                "points": [
                    {
                        "arrived_pct": p.arrived_pct,
                        "gpu_alloc_pct": p.gpu_alloc_pct,
                        "frag_gpu_pct": p.frag_gpu_pct,
                    }
                    for p in r.points
                ],
            }
            for r in results
        ],
    }
