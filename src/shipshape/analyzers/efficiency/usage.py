"""One usage interface for every efficiency analyzer, whatever the source.

A `UsageData` holds, over one `Window` (start, step, number of steps), a row per container and a
row per node: CPU in cores and memory (working set) in bytes, as float32 numpy arrays of shape
(rows, steps). A missing sample is NaN, never 0: a gap is a gap. Step k covers the interval
(start + (k - 1) * step, start + k * step]; CPU at step k is the mean rate over the counter range
ending there, memory the highest working set seen in the step.

Sources (the edges, outside this package) fill it: Prometheus over PromQL
(`shipshape.sources.prometheus`), metrics.k8s.io samples (`shipshape.sources.metricsapi`) and the
emulator's usage model or a simulation (`shipshape.emulator.usage_history`). The pure helpers here
turn raw samples into rows: `counter_rate` (CPU seconds counters, resets handled as Prometheus's
`rate()` does), `bin_max` and `bin_mean` (gauges and instantaneous rates).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float32]
F64 = NDArray[np.float64]
DTYPE = np.float32

K = TypeVar("K")


class UsageError(ValueError):
    """Usage data that does not fit its window (wrong shapes, unsorted samples, bad step)."""


@dataclass(frozen=True, slots=True)
class Window:
    """Evaluation times start, start + step, ..., start + (steps - 1) * step (unix seconds)."""

    start: float
    step: float
    steps: int

    def __post_init__(self) -> None:
        if not (self.step > 0 and math.isfinite(self.step)):
            raise UsageError(f"window step must be a positive number of seconds, not {self.step}")
        if self.steps < 1:
            raise UsageError(f"a window has at least one step, not {self.steps}")

    @classmethod
    def covering(cls, start: float, end: float, step: float) -> Window:
        """Steps from `start` to `end` inclusive (end rounded down to the step grid)."""
        if end < start:
            raise UsageError(f"window end {end} is before its start {start}")
        return cls(start, step, math.floor((end - start) / step + 1e-9) + 1)

    @property
    def end(self) -> float:
        return self.start + (self.steps - 1) * self.step

    @property
    def duration(self) -> float:
        """Seconds the window's samples cover (steps x step)."""
        return self.steps * self.step

    def times(self) -> F64:
        return self.start + self.step * np.arange(self.steps, dtype=np.float64)


@dataclass(frozen=True, slots=True, order=True)
class ContainerKey:
    namespace: str
    pod: str
    container: str
    cluster: str = ""

    def __str__(self) -> str:
        prefix = f"{self.cluster}/" if self.cluster else ""
        return f"{prefix}{self.namespace}/{self.pod}/{self.container}"


@dataclass(frozen=True, slots=True)
class Series(Generic[K]):
    """CPU (cores) and memory (bytes) rows for `keys`, NaN where no sample exists."""

    keys: tuple[K, ...]
    cpu: Array
    memory: Array
    _index: dict[K, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.keys)
        for name, values in (("cpu", self.cpu), ("memory", self.memory)):
            if values.ndim != 2 or values.shape[0] != n:
                raise UsageError(f"{name} rows: shape {values.shape} for {n} keys")
        if self.cpu.shape != self.memory.shape:
            raise UsageError(f"cpu {self.cpu.shape} and memory {self.memory.shape} differ in shape")
        object.__setattr__(self, "_index", {key: i for i, key in enumerate(self.keys)})
        if len(self._index) != n:
            raise UsageError("a key appears twice in one series")

    @classmethod
    def empty(cls, steps: int) -> Series[K]:
        return cls((), np.empty((0, steps), DTYPE), np.empty((0, steps), DTYPE))

    def __len__(self) -> int:
        return len(self.keys)

    def index(self, key: K) -> int | None:
        return self._index.get(key)

    def row(self, key: K) -> tuple[Array, Array] | None:
        i = self._index.get(key)
        return None if i is None else (self.cpu[i], self.memory[i])


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """Requests and limits as a source reported them (kube-state-metrics), with the pod's node.

    The analysis prefers the pod specs of a snapshot; these fill in for a source-only run."""

    cpu_request: float | None = None  # cores
    memory_request: float | None = None  # bytes
    cpu_limit: float | None = None
    memory_limit: float | None = None
    node: str | None = None


@dataclass(frozen=True, slots=True)
class UsageData:
    window: Window
    containers: Series[ContainerKey]
    nodes: Series[str]
    source: str
    # OOM kills and restarts seen within the window (a lower bound where the source only keeps
    # the last termination reason)
    oom_kills: Mapping[ContainerKey, int] = field(default_factory=dict)
    restarts: Mapping[ContainerKey, int] = field(default_factory=dict)
    specs: Mapping[ContainerKey, ContainerSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, series in (("containers", self.containers), ("nodes", self.nodes)):
            if series.cpu.shape[1] != self.window.steps:
                raise UsageError(
                    f"{name}: {series.cpu.shape[1]} steps of data for a window of {self.window.steps}"
                )

    @classmethod
    def empty(cls, window: Window, source: str) -> UsageData:
        return cls(window, Series.empty(window.steps), Series.empty(window.steps), source)


def step_index(window: Window, times: F64) -> NDArray[np.int64]:
    """The step whose interval (t - step, t] holds each time; -1 outside the window."""
    index = np.ceil((times - window.start) / window.step - 1e-9).astype(np.int64)
    index[(index < 0) | (index >= window.steps)] = -1
    return index


def _check(times: F64, values: F64) -> None:
    if times.shape != values.shape or times.ndim != 1:
        raise UsageError(f"times {times.shape} and values {values.shape} must be 1-d of one length")
    if times.size > 1 and np.any(np.diff(times) <= 0):
        raise UsageError("sample times must be strictly increasing")


def bin_max(window: Window, times: Sequence[float] | F64, values: Sequence[float] | F64) -> F64:
    """The highest sample in each step's interval; NaN where a step has none."""
    t = np.asarray(times, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    _check(t, v)
    out = np.full(window.steps, -np.inf)
    index = step_index(window, t)
    keep = (index >= 0) & ~np.isnan(v)
    np.maximum.at(out, index[keep], v[keep])
    out[np.isneginf(out)] = np.nan
    return out


def bin_mean(window: Window, times: Sequence[float] | F64, values: Sequence[float] | F64) -> F64:
    """The mean sample in each step's interval (for rates already measured, as metrics.k8s.io's)."""
    t = np.asarray(times, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    _check(t, v)
    index = step_index(window, t)
    keep = (index >= 0) & ~np.isnan(v)
    total = np.bincount(index[keep], weights=v[keep], minlength=window.steps)
    count = np.bincount(index[keep], minlength=window.steps)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def reset_corrected(values: F64) -> F64:
    """A counter with its resets undone: after a drop the counter restarted from zero, so every
    value from there on gets the last value before the drop added (Prometheus's rule)."""
    if values.size == 0:
        return values
    drops = np.zeros_like(values)
    fell = np.flatnonzero(values[1:] < values[:-1]) + 1
    drops[fell] = values[fell - 1]
    return values + np.cumsum(drops)


def counter_rate(
    window: Window, times: Sequence[float] | F64, counter: Sequence[float] | F64, range_seconds: float
) -> F64:
    """Per-second increase of a counter at each step over [t - range, t], resets handled.

    Uses the first and last samples inside the range, without extrapolation: on samples that fall
    on the range's bounds this is what Prometheus's `rate(counter[range])` returns. NaN where the
    range holds fewer than two samples (a gap, or the start of a series)."""
    t = np.asarray(times, dtype=np.float64)
    v = np.asarray(counter, dtype=np.float64)
    _check(t, v)
    corrected = reset_corrected(v)
    ends = window.times()
    last = np.searchsorted(t, ends + 1e-6, side="right") - 1
    first = np.searchsorted(t, ends - range_seconds - 1e-6, side="left")
    ok = (last >= 0) & (first < t.size) & (last > first)
    out = np.full(window.steps, np.nan)
    lo, hi = first[ok], last[ok]
    out[ok] = (corrected[hi] - corrected[lo]) / (t[hi] - t[lo])
    return out


def series_from_rows(
    keys: Iterable[K], rows: Iterable[tuple[F64 | Array, F64 | Array]], steps: int
) -> Series[K]:
    """A `Series` from per-key (cpu, memory) rows (any float arrays of `steps` values)."""
    key_list = list(keys)
    cpu = np.full((len(key_list), steps), np.nan, dtype=DTYPE)
    memory = np.full((len(key_list), steps), np.nan, dtype=DTYPE)
    for i, (c, m) in enumerate(rows):
        cpu[i] = c
        memory[i] = m
    return Series(tuple(key_list), cpu, memory)


def coverage(rows: Array) -> F64:
    """Fraction of steps with a sample, per row."""
    if rows.shape[1] == 0:
        return np.zeros(rows.shape[0])
    return np.asarray(1.0 - np.isnan(rows).sum(axis=1) / rows.shape[1], dtype=np.float64)


def by_pod(containers: Series[ContainerKey]) -> Series[tuple[str, str, str]]:
    """Pod rows, keyed (cluster, namespace, pod): the sum of the pod's containers at each step
    (NaN only where none of its containers has a sample)."""
    index: dict[tuple[str, str, str], int] = {}
    group = np.array(
        [index.setdefault((k.cluster, k.namespace, k.pod), len(index)) for k in containers.keys],
        dtype=np.int64,
    )
    steps = containers.cpu.shape[1]
    out: list[Array] = []
    for rows in (containers.cpu, containers.memory):
        total = np.zeros((len(index), steps), dtype=np.float64)
        seen = np.zeros((len(index), steps), dtype=bool)
        np.add.at(total, group, np.nan_to_num(rows))
        np.logical_or.at(seen, group, ~np.isnan(rows))
        out.append(np.where(seen, total, np.nan).astype(DTYPE))
    return Series(tuple(index), out[0], out[1])
