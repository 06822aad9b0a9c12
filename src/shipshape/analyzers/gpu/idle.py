"""Idle allocated GPUs from dcgm-exporter-style utilisation series, and the money they waste.

Input: `UtilizationSeries`, one per GPU device and pod as dcgm-exporter labels them (`Hostname`,
`gpu`/`UUID`, `namespace`/`pod`), with samples of either `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (ratio
0..1) or `DCGM_FI_DEV_GPU_UTIL` (percent 0..100). A pod is idle over the window when at least
`idle_share` of its samples show activity below `idle_below`. A pod whose samples cover less than
`min_coverage` of the window, or that has none, gets no verdict and says which data it lacked.

Waste per day of an idle pod: its GPUs (a share counts by its size) x the node's price per GPU
hour (the spot price on spot nodes) x 24 x the share of the window it was idle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shipshape.analyzers.gpu.fleet import GpuNode, GpuPod

FloatArray = npt.NDArray[np.float64]
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
METRICS = (ENGINE_ACTIVE, GPU_UTIL)


class IdleError(ValueError):
    """Settings or series that cannot be analysed."""


@dataclass(frozen=True)
class UtilizationSeries:
    node: str
    gpu: str  # device index or UUID
    pod: str | None  # "namespace/name" the exporter attributes the device to
    timestamps: FloatArray  # seconds
    values: FloatArray
    metric: str = ENGINE_ACTIVE

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise IdleError(f"series {self.node}/{self.gpu}: metric must be one of {', '.join(METRICS)}")
        if len(self.timestamps) != len(self.values):
            raise IdleError(
                f"series {self.node}/{self.gpu}: {len(self.timestamps)} timestamps, {len(self.values)} values"
            )

    def activity(self) -> FloatArray:
        """Samples as a ratio 0..1."""
        values = np.asarray(self.values, dtype=np.float64)
        return values / 100.0 if self.metric == GPU_UTIL else values


@dataclass(frozen=True)
class IdleSettings:
    window_start: float
    window_end: float
    step_seconds: float = 60.0
    idle_below: float = 0.05
    idle_share: float = 0.95
    min_coverage: float = 0.5

    def __post_init__(self) -> None:
        if self.window_end <= self.window_start:
            raise IdleError("the window must end after it starts")
        if self.step_seconds <= 0:
            raise IdleError("the step must be positive")
        for name in ("idle_below", "idle_share", "min_coverage"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise IdleError(f"{name} must be within 0..1")

    @property
    def expected_samples(self) -> int:
        return max(round((self.window_end - self.window_start) / self.step_seconds), 1)

    @property
    def hours(self) -> float:
        return (self.window_end - self.window_start) / 3600.0


@dataclass(frozen=True)
class PodUsage:
    pod: GpuPod
    node: GpuNode | None
    samples: int
    coverage: float  # covered share of the window (per device, averaged over the pod's devices)
    mean: float | None
    p95: float | None
    idle_fraction: float | None  # share of samples under the idle threshold
    idle: bool | None  # None: not enough data for a verdict
    wasted_gpu_hours_per_day: float
    wasted_per_day: float | None  # money, when the node's price is known
    lacking: str | None  # what data was missing, when there is no verdict


def pod_usage(
    pods: Iterable[GpuPod],
    nodes: Mapping[str, GpuNode],
    series: Iterable[UtilizationSeries],
    settings: IdleSettings,
) -> list[PodUsage]:
    """One verdict per running GPU pod, in the order given."""
    by_pod: dict[str, list[UtilizationSeries]] = defaultdict(list)
    for one in series:
        if one.pod is not None:
            by_pod[one.pod].append(one)
    result = []
    for pod in pods:
        if pod.node is None:
            continue
        result.append(_usage(pod, nodes.get(pod.node), by_pod.get(pod.key, []), settings))
    return result


def _usage(
    pod: GpuPod, node: GpuNode | None, series: Sequence[UtilizationSeries], settings: IdleSettings
) -> PodUsage:
    chunks = []
    for one in series:
        times = np.asarray(one.timestamps, dtype=np.float64)
        values = one.activity()
        keep = (times >= settings.window_start) & (times < settings.window_end) & ~np.isnan(values)
        chunks.append(values[keep])
    samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float64)
    devices = max(len(series), 1)
    coverage = min(len(samples) / (settings.expected_samples * devices), 1.0)
    if not series or len(samples) == 0:
        lacking = "no utilisation samples for the pod in the window"
    elif coverage < settings.min_coverage:
        lacking = f"samples cover {coverage:.0%} of the window, need {settings.min_coverage:.0%}"
    else:
        lacking = None
    if lacking is not None:
        return PodUsage(pod, node, len(samples), coverage, None, None, None, None, 0.0, None, lacking)
    idle_fraction = float((samples < settings.idle_below).mean())
    idle = idle_fraction >= settings.idle_share
    wasted_hours = pod.gpus * 24.0 * idle_fraction if idle else 0.0
    price = node.price_per_gpu_hour if node is not None else None
    return PodUsage(
        pod=pod,
        node=node,
        samples=len(samples),
        coverage=coverage,
        mean=float(samples.mean()),
        p95=float(np.percentile(samples, 95)),
        idle_fraction=idle_fraction,
        idle=idle,
        wasted_gpu_hours_per_day=wasted_hours,
        wasted_per_day=None if price is None else wasted_hours * price,
        lacking=None,
    )


def wasted_per_day(usages: Iterable[PodUsage]) -> float:
    """Money the idle pods waste per day (pods on nodes without a price count nothing)."""
    return sum(u.wasted_per_day or 0.0 for u in usages if u.idle)


# ---- a workload's GPU activity over stored slots (the backend's view) ----------------------------


@dataclass(frozen=True)
class WorkloadActivity:
    """A workload's GPU activity over the observed slots of a window (slots with samples)."""

    slots: int
    hours: float  # observed: slots x step
    mean: float  # the mean activity over the observed slots (ratio 0..1)
    p95_high: float  # the 95th percentile of the busiest pod's mean
    pods: int  # pods in the newest observed slot
    devices: int  # GPUs those pods hold
    idle_slots_share: float  # share of observed slots in which every pod was idle
    surplus: int  # pods idle in at least `idle_share` of the observed slots (a number, not names)


def workload_activity(
    samples: npt.ArrayLike,
    mean: npt.ArrayLike,
    high: npt.ArrayLike,
    pods: npt.ArrayLike,
    devices: npt.ArrayLike,
    idle_pods: npt.ArrayLike,
    step_seconds: float,
    idle_share: float = 0.95,
) -> WorkloadActivity | None:
    """Per-slot rows of one workload (samples, mean activity, busiest pod's mean, pods, devices,
    idle pods) summed up; None without an observed slot.

    Replicas are interchangeable, so the surplus is a count: the largest k such that at least
    `idle_share` of the observed slots had k or more idle pods; it never passes the pods now."""
    have = np.asarray(samples) > 0
    slots = int(have.sum())
    if slots == 0:
        return None
    means = np.asarray(mean, dtype=np.float64)[have]
    highs = np.asarray(high, dtype=np.float64)[have]
    pod_counts = np.asarray(pods)[have]
    idle_rows = np.asarray(idle_pods)[have]
    idle = np.sort(idle_rows)
    surplus = int(idle[min(int(np.floor((1.0 - idle_share) * slots)), slots - 1)])
    newest = int(np.flatnonzero(have)[-1])
    return WorkloadActivity(
        slots=slots,
        hours=slots * step_seconds / 3600.0,
        mean=float(np.nanmean(means)) if np.isfinite(means).any() else 0.0,
        p95_high=float(np.nanpercentile(highs, 95)) if np.isfinite(highs).any() else 0.0,
        pods=int(pod_counts[-1]),
        devices=int(np.asarray(devices)[newest]),
        idle_slots_share=float((idle_rows >= pod_counts).mean()),
        surplus=min(surplus, int(pod_counts[-1])),
    )
