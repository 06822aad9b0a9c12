"""Stored usage: how the agents' bucket reports become bounded series, and how the series become the
analyzers' `UsageData`. Pure (numpy; no SQL: `store/repository.py` reads and writes the rows).

Storage, per cluster (bounded whatever the pods' churn, like the Vertical Pod Autoscaler's
checkpoints, which keep one state per workload container rather than per pod):

- one **summary** row per workload container (namespace, owner workload, container): first and last
  sample time, samples and buckets seen, pods in the last bucket, the highest CPU rate and memory
  working set since the first sample;
- **series chunks** per workload container (and per node): `SLOTS` consecutive slots of
  `step` seconds (5 minutes by default, so 6 hours a chunk) in one row, each slot holding the
  number of samples, the mean CPU rate, the highest pod's mean CPU rate (nodes: the highest sampled
  rate) and the highest memory working set. Chunks older than the retention, counted back from the
  cluster's newest sample, are removed: at most retention / (step x SLOTS) + 1 chunks per workload
  container and per node.

A slot merges whatever lands in it: samples add up, the mean is weighted by samples, the highest
values take the larger. Each report is applied once (the push row says it was processed in the
same transaction), so nothing is counted twice; an agent bucket smaller than the step (it must
divide it) folds into its slot.

GPU activity (reports with `gpus` lines, from an agent given the cluster's Prometheus) is kept the
same way per **workload** (namespace, kind, name): chunks of `SLOTS` slots, each holding the samples,
the mean engine activity (weighted by samples, over every device of the workload's pods), the
highest pod's mean, the highest sample, the pods and devices seen, and how many of those pods were
idle (mean below `GPU_IDLE_BELOW`, the idle-GPU analyzer's threshold); a slot made of several agent
buckets keeps the fewest idle pods of any of them. The GPU model rides on the chunk's row.

For the analyzers, the rows of a window are laid out per pod container: every live pod of a
workload gets its workload's row (CPU: the busiest replica's mean per slot, so a right-sized request
fits every replica; memory: the highest working set of any replica). A window too large for the
analysis budget is coarsened (the highest value of k consecutive slots), never thinned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shipshape.analyzers.efficiency.cluster import Cluster
from shipshape.analyzers.efficiency.usage import ContainerKey, Series, UsageData, Window
from shipshape.contracts.usage import UsageReport
from shipshape.kube.clock import parse_time

SLOTS = 72
# Pod-container cells (rows x steps) an analysis lays out at most before coarsening the window.
MAX_CELLS = 16_000_000
_LAYOUT = (("samples", "<i4"), ("cpu_mean", "<f4"), ("cpu_high", "<f4"), ("memory_max", "<f4"))
CHUNK_BYTES = SLOTS * sum(np.dtype(kind).itemsize for _, kind in _LAYOUT)
F32 = NDArray[np.float32]


_GPU_LAYOUT = (
    ("samples", "<i4"),
    ("activity_mean", "<f4"),
    ("activity_high", "<f4"),
    ("activity_max", "<f4"),
    ("pods", "<i4"),
    ("devices", "<i4"),
    ("idle_pods", "<i4"),
)
GPU_CHUNK_BYTES = SLOTS * sum(np.dtype(kind).itemsize for _, kind in _GPU_LAYOUT)
GPU_IDLE_BELOW = 0.05  # a pod is idle in a bucket when its mean activity is below this (idle.py's)


class UsageStoreError(ValueError):
    """A report the backend cannot store with its step (a bucket that does not divide it)."""


Layout = tuple[tuple[str, str], ...]


def _unpack(data: bytes, layout: Layout, what: str) -> list[np.ndarray]:
    """A stored chunk's arrays (little-endian on disk, native in memory), in `layout`'s order."""
    expected = SLOTS * sum(np.dtype(kind).itemsize for _, kind in layout)
    if len(data) != expected:
        raise UsageStoreError(f"{what} is {expected} bytes, not {len(data)}")
    arrays = []
    offset = 0
    for _, kind in layout:
        dtype = np.dtype(kind)
        arrays.append(np.frombuffer(data, dtype, SLOTS, offset).astype(dtype.newbyteorder("=")))
        offset += SLOTS * dtype.itemsize
    return arrays


def _pack(chunk: object, layout: Layout) -> bytes:
    return b"".join(np.asarray(getattr(chunk, name), dtype=kind).tobytes() for name, kind in layout)


@dataclass(frozen=True, slots=True, order=True)
class SeriesKey:
    """A workload container: what usage is kept per."""

    namespace: str
    kind: str
    workload: str
    container: str

    def text(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.workload}/{self.container}"


@dataclass(slots=True)
class Chunk:
    """`SLOTS` slots of one series; empty slots have 0 samples and NaN values."""

    samples: NDArray[np.int32]
    cpu_mean: F32
    cpu_high: F32
    memory_max: F32

    @classmethod
    def empty(cls) -> Chunk:
        nan = np.full(SLOTS, np.nan, dtype=np.float32)
        return cls(np.zeros(SLOTS, dtype=np.int32), nan.copy(), nan.copy(), nan.copy())

    @classmethod
    def from_bytes(cls, data: bytes) -> Chunk:
        return cls(*_unpack(data, _LAYOUT, "a usage chunk"))

    def to_bytes(self) -> bytes:
        return _pack(self, _LAYOUT)

    def merge(self, slot: int, part: Part) -> None:
        """Add `part`'s samples to `slot`."""
        before = int(self.samples[slot])
        total = before + part.samples
        if before == 0:
            self.cpu_mean[slot] = part.cpu_sum / part.samples
            self.cpu_high[slot] = part.cpu_high
            self.memory_max[slot] = part.memory_max
        else:
            self.cpu_mean[slot] = (float(self.cpu_mean[slot]) * before + part.cpu_sum) / total
            self.cpu_high[slot] = max(float(self.cpu_high[slot]), part.cpu_high)
            self.memory_max[slot] = max(float(self.memory_max[slot]), part.memory_max)
        self.samples[slot] = total


@dataclass(frozen=True, slots=True, order=True)
class WorkloadKey:
    """A workload: what GPU activity is kept per."""

    namespace: str
    kind: str
    workload: str


@dataclass(slots=True)
class GpuPart:
    """What one report adds to one slot of one workload's GPU activity."""

    samples: int = 0
    activity_sum: float = 0.0  # mean activity x samples, summed over the pods' devices
    weight: int = 0  # samples x devices, summed
    activity_high: float = 0.0  # the highest pod mean
    activity_max: float = 0.0  # the highest sample
    pods: int = 0
    devices: int = 0
    idle_pods: int = 0
    model: str = ""


@dataclass(slots=True)
class GpuChunk:
    """`SLOTS` slots of one workload's GPU activity; empty slots have 0 samples and NaN values."""

    samples: NDArray[np.int32]
    activity_mean: F32
    activity_high: F32
    activity_max: F32
    pods: NDArray[np.int32]
    devices: NDArray[np.int32]
    idle_pods: NDArray[np.int32]

    @classmethod
    def empty(cls) -> GpuChunk:
        nan = np.full(SLOTS, np.nan, dtype=np.float32)
        zero = np.zeros(SLOTS, dtype=np.int32)
        return cls(zero.copy(), nan.copy(), nan.copy(), nan.copy(), zero.copy(), zero.copy(), zero.copy())

    @classmethod
    def from_bytes(cls, data: bytes) -> GpuChunk:
        return cls(*_unpack(data, _GPU_LAYOUT, "a GPU usage chunk"))

    def to_bytes(self) -> bytes:
        return _pack(self, _GPU_LAYOUT)

    def merge(self, slot: int, part: GpuPart) -> None:
        """Add `part` to `slot` (several agent buckets in one slot: samples add, the mean is weighted
        by samples, the highest values take the larger, idle pods the fewer)."""
        before = int(self.samples[slot])
        mean = part.activity_sum / part.weight if part.weight else 0.0
        if before == 0:
            self.activity_mean[slot] = mean
            self.activity_high[slot] = part.activity_high
            self.activity_max[slot] = part.activity_max
            self.pods[slot], self.devices[slot], self.idle_pods[slot] = (
                part.pods,
                part.devices,
                part.idle_pods,
            )
        else:
            total = before + part.samples
            self.activity_mean[slot] = (
                float(self.activity_mean[slot]) * before + mean * part.samples
            ) / total
            self.activity_high[slot] = max(float(self.activity_high[slot]), part.activity_high)
            self.activity_max[slot] = max(float(self.activity_max[slot]), part.activity_max)
            self.pods[slot] = max(int(self.pods[slot]), part.pods)
            self.devices[slot] = max(int(self.devices[slot]), part.devices)
            self.idle_pods[slot] = min(int(self.idle_pods[slot]), part.idle_pods)
        self.samples[slot] = before + part.samples


@dataclass(slots=True)
class Part:
    """What one report adds to one slot of one series."""

    samples: int = 0
    cpu_sum: float = 0.0  # cores x samples
    cpu_high: float = 0.0  # workloads: the highest pod mean; nodes: the highest sampled rate
    cpu_max: float = 0.0  # the highest sampled rate
    memory_max: float = 0.0
    pods: int = 0


@dataclass(frozen=True, slots=True)
class Folded:
    """A report laid onto the backend's slots: one slot of one chunk."""

    chunk_start: int  # unix seconds
    slot: int
    slot_start: int
    bucket_end: int  # the end of the report's bucket (the newest sample time it may hold)
    workloads: dict[SeriesKey, Part]
    nodes: dict[str, Part]
    gpus: dict[WorkloadKey, GpuPart] = field(default_factory=dict)


def chunk_seconds(step: int) -> int:
    return step * SLOTS


def fold(report: UsageReport, step: int) -> Folded:
    """The report's samples per workload container and per node, on the slot that holds its bucket."""
    if step % report.bucket_seconds:
        raise UsageStoreError(
            f"a bucket of {report.bucket_seconds} s does not divide the backend's usage step of {step} s "
            "(agent --usage-bucket and backend usage_step_seconds)"
        )
    start = report.start
    slot_start = start // step * step
    chunk_start = start // chunk_seconds(step) * chunk_seconds(step)
    workloads: dict[SeriesKey, Part] = {}
    for pod in report.pods:
        for container in pod.containers:
            key = SeriesKey(pod.namespace, pod.workload.kind, pod.workload.name, container.name)
            part = workloads.get(key)
            if part is None:
                part = workloads[key] = Part()
            part.samples += container.samples
            part.cpu_sum += container.cpu_mean * container.samples
            part.cpu_high = max(part.cpu_high, container.cpu_mean)
            part.cpu_max = max(part.cpu_max, container.cpu_max)
            part.memory_max = max(part.memory_max, container.memory_max)
            part.pods += 1
    nodes = {
        node.name: Part(
            node.samples, node.cpu_mean * node.samples, node.cpu_max, node.cpu_max, node.memory_max, 0
        )
        for node in report.nodes
    }
    gpus: dict[WorkloadKey, GpuPart] = {}
    for line in report.gpus:
        gpu_key = WorkloadKey(line.namespace, line.workload.kind, line.workload.name)
        gpu = gpus.get(gpu_key)
        if gpu is None:
            gpu = gpus[gpu_key] = GpuPart()
        gpu.samples = max(gpu.samples, line.samples)
        gpu.activity_sum += line.activity_mean * line.samples * line.devices
        gpu.weight += line.samples * line.devices
        gpu.activity_high = max(gpu.activity_high, line.activity_mean)
        gpu.activity_max = max(gpu.activity_max, line.activity_max)
        gpu.pods += 1
        gpu.devices += line.devices
        gpu.idle_pods += line.activity_mean < GPU_IDLE_BELOW
        gpu.model = gpu.model or line.model
    return Folded(
        chunk_start,
        (slot_start - chunk_start) // step,
        slot_start,
        start + report.bucket_seconds,
        workloads,
        nodes,
        gpus,
    )


# ---- the newest slot of the nodes' usage (the used ratios of the cluster page and the series) -----


@dataclass(frozen=True, slots=True)
class NodeUsed:
    """What one node used in one slot (metrics.k8s.io NodeMetrics): the mean CPU rate over the slot's
    samples and the highest memory working set."""

    cpu_cores: float
    memory_bytes: float


def newest_node_slot(chunks: Iterable[tuple[str, int, int, bytes]]) -> tuple[int, dict[str, NodeUsed]]:
    """(start, usage per node) of the newest slot that holds a sample of any node, from (node, chunk
    start, step, body) rows; the nodes without a sample in that slot are absent. (0, {}) without any."""
    newest = 0
    found: dict[str, NodeUsed] = {}
    for node, chunk_start, step, body in chunks:
        chunk = Chunk.from_bytes(body)
        sampled = np.flatnonzero(chunk.samples > 0)
        if not sampled.size:
            continue
        slot = int(sampled[-1])
        start = chunk_start + slot * step
        if start < newest:
            continue
        if start > newest:
            newest, found = start, {}
        found[node] = NodeUsed(float(chunk.cpu_mean[slot]), float(chunk.memory_max[slot]))
    return newest, found


# ---- from stored chunks to the analyzers' UsageData ----------------------------------------------


@dataclass(frozen=True, slots=True)
class SlotWindow:
    """Slots first, first + step, ..., last (slot starts, unix seconds)."""

    first: int
    last: int
    step: int

    @property
    def steps(self) -> int:
        return (self.last - self.first) // self.step + 1

    @property
    def hours(self) -> float:
        return self.steps * self.step / 3600.0

    def usage_window(self) -> Window:
        # A step of `UsageData` is named by its interval's end: slot s covers (s, s + step].
        return Window(float(self.first + self.step), float(self.step), self.steps)


def slot_window(earliest: float, latest: float, step: int, window_hours: float) -> SlotWindow:
    """The slots from `earliest` (or `window_hours` back from the newest) to the one holding `latest`."""
    last = math.floor((latest - 1e-6) / step) * step
    span = max(1, int(window_hours * 3600 // step))
    first = max(math.floor(earliest / step) * step, last - (span - 1) * step)
    return SlotWindow(min(first, last), last, step)


@dataclass
class Rows:
    """Series laid on a window: CPU and memory rows (NaN where no sample), samples per row."""

    keys: list[Any]
    cpu: F32
    memory: F32
    samples: NDArray[np.int64]
    index: dict[Any, int] = field(default_factory=dict)


def lay_out(
    chunks: Iterable[tuple[Any, int, bytes]], window: SlotWindow, cpu_field: str = "cpu_high"
) -> Rows:
    """Rows over `window` from (key, chunk start, body) rows (chunks of any key, in any order); CPU from
    `cpu_field` (`cpu_high` for workloads, `cpu_mean` for nodes)."""
    index: dict[Any, int] = {}
    placed: list[tuple[int, int, Chunk]] = []
    for key, chunk_start, body in chunks:
        row = index.setdefault(key, len(index))
        placed.append((row, chunk_start, Chunk.from_bytes(body)))
    steps = window.steps
    cpu = np.full((len(index), steps), np.nan, dtype=np.float32)
    memory = np.full((len(index), steps), np.nan, dtype=np.float32)
    samples = np.zeros(len(index), dtype=np.int64)
    for row, chunk_start, chunk in placed:
        # slot i of the chunk is step (chunk_start + i * step - first) / step of the window
        offset = (chunk_start - window.first) // window.step
        lo, hi = max(0, -offset), min(SLOTS, steps - offset)
        if lo >= hi:
            continue
        have = chunk.samples[lo:hi] > 0
        values = getattr(chunk, cpu_field)[lo:hi]
        cpu[row, offset + lo : offset + hi] = np.where(have, values, np.nan)
        memory[row, offset + lo : offset + hi] = np.where(have, chunk.memory_max[lo:hi], np.nan)
        samples[row] += int(chunk.samples[lo:hi].sum())
    return Rows(list(index), cpu, memory, samples, index)


@dataclass
class GpuRows:
    """Workloads' GPU activity laid on a window: one row per workload (NaN / 0 where no sample)."""

    keys: list[WorkloadKey]
    samples: NDArray[np.int32]
    activity_mean: F32
    activity_high: F32
    pods: NDArray[np.int32]
    devices: NDArray[np.int32]
    idle_pods: NDArray[np.int32]
    models: dict[WorkloadKey, str] = field(default_factory=dict)


def lay_out_gpus(chunks: Iterable[tuple[WorkloadKey, int, str, bytes]], window: SlotWindow) -> GpuRows:
    """Rows over `window` from (workload, chunk start, model, body) rows."""
    index: dict[WorkloadKey, int] = {}
    models: dict[WorkloadKey, str] = {}
    placed: list[tuple[int, int, GpuChunk]] = []
    for key, chunk_start, model, body in chunks:
        placed.append((index.setdefault(key, len(index)), chunk_start, GpuChunk.from_bytes(body)))
        if model:
            models[key] = model
    shape = (len(index), window.steps)
    rows = GpuRows(
        list(index),
        np.zeros(shape, dtype=np.int32),
        np.full(shape, np.nan, dtype=np.float32),
        np.full(shape, np.nan, dtype=np.float32),
        np.zeros(shape, dtype=np.int32),
        np.zeros(shape, dtype=np.int32),
        np.zeros(shape, dtype=np.int32),
        models,
    )
    for row, chunk_start, chunk in placed:
        offset = (chunk_start - window.first) // window.step
        lo, hi = max(0, -offset), min(SLOTS, window.steps - offset)
        if lo >= hi:
            continue
        for name in ("samples", "activity_mean", "activity_high", "pods", "devices", "idle_pods"):
            getattr(rows, name)[row, offset + lo : offset + hi] = getattr(chunk, name)[lo:hi]
    return rows


def coarsen(rows: F32, factor: int) -> F32:
    """The highest value of each `factor` consecutive steps (NaN only where all are NaN)."""
    if factor <= 1:
        return rows
    n, steps = rows.shape
    padded = np.full((n, -(-steps // factor) * factor), np.nan, dtype=np.float32)
    padded[:, :steps] = rows
    blocks = padded.reshape(n, -1, factor)
    if blocks.size == 0:
        return np.empty((n, blocks.shape[1]), dtype=np.float32)
    return np.asarray(np.fmax.reduce(blocks, axis=2), dtype=np.float32)


def coarsening(cells_per_step: int, steps: int, budget: int = MAX_CELLS) -> int:
    """The factor that keeps cells_per_step x steps within `budget`."""
    return max(1, math.ceil(cells_per_step * steps / budget)) if cells_per_step else 1


def pod_restarts(
    pods: Sequence[Mapping[str, Any]], since: float
) -> tuple[dict[ContainerKey, int], dict[ContainerKey, int]]:
    """(OOM kills, restarts) per pod container from the pods' statuses: the restart count, and an
    OOM kill when the last termination was one and ended after `since` (the status keeps only the
    last, so this is a lower bound)."""
    oom: dict[ContainerKey, int] = {}
    restarts: dict[ContainerKey, int] = {}
    for pod in pods:
        md = pod.get("metadata") or {}
        namespace, name = str(md.get("namespace", "default")), str(md.get("name", ""))
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            key = ContainerKey(namespace, name, str(status.get("name", "")))
            count = int(status.get("restartCount") or 0)
            if count:
                restarts[key] = count
            terminated = (status.get("lastState") or {}).get("terminated") or {}
            if terminated.get("reason") == "OOMKilled":
                finished = terminated.get("finishedAt")
                try:
                    recent = finished is None or parse_time(str(finished)) >= since
                except ValueError:
                    recent = True
                if recent:
                    oom[key] = 1
    return oom, restarts


def usage_data(
    cluster: Cluster,
    pods: Sequence[Mapping[str, Any]],
    workloads: Rows,
    nodes: Rows,
    window: SlotWindow,
    budget: int = MAX_CELLS,
) -> tuple[UsageData, int]:
    """The analyzers' usage over `window` in `cluster`'s container order (each live pod container
    gets its workload container's row), and the coarsening factor applied (1: none)."""
    keys = cluster.containers.keys
    index = np.full(len(keys), -1, dtype=np.int64)
    for i, key in enumerate(keys):
        kind, name = cluster.pods.owner[cluster.containers.pod[i]]
        found = workloads.index.get(SeriesKey(key.namespace, kind, name, key.container))
        if found is not None:
            index[i] = found
    factor = coarsening(len(keys) + len(nodes.keys), window.steps, budget)
    w_cpu, w_memory = coarsen(workloads.cpu, factor), coarsen(workloads.memory, factor)
    n_cpu, n_memory = coarsen(nodes.cpu, factor), coarsen(nodes.memory, factor)
    steps = w_cpu.shape[1] if factor > 1 else window.steps
    cpu = np.full((len(keys), steps), np.nan, dtype=np.float32)
    memory = np.full((len(keys), steps), np.nan, dtype=np.float32)
    have = index >= 0
    cpu[have] = w_cpu[index[have]]
    memory[have] = w_memory[index[have]]
    step = window.step * factor
    usage_window = Window(float(window.first + step), float(step), steps)
    oom, restarts = pod_restarts(pods, float(window.first))
    return (
        UsageData(
            usage_window,
            Series(tuple(keys), cpu, memory),
            Series(tuple(str(k) for k in nodes.keys), n_cpu, n_memory),
            "metrics.k8s.io (agent)",
            oom_kills=oom,
            restarts=restarts,
        ),
        factor,
    )
