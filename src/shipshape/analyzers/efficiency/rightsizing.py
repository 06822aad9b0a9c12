"""Right-sizing per container: strategies as typed plugins, registered explicitly in `STRATEGIES`.

- `simple` (as KRR's default strategy): CPU request = the p-th percentile of CPU usage (95 by
  default); memory request and limit = the highest working set x (1 + buffer), 15 % by default.
- `vpa` (as the Vertical Pod Autoscaler's recommender): decaying histograms (exponential buckets
  growing 5 %, sample weights halving every 24 h back from the window's end); CPU target = the
  weighted p90 of usage, memory target = the weighted p90 of per-interval (24 h) peaks; both plus a
  15 % safety margin.

Whatever the strategy, the guards are the same: memory is never below the highest working set
seen; a container OOM-killed in the window gets max(+20 %, +100 MiB) over the larger of its memory
limit and its peak (VPA's OOM bump); a resource that an HPA of the workload scales on is left as it
is (the HPA's utilisation target is a share of the request: changing the request changes the
scaling); floors of 10m CPU and 100 MiB memory. Values are rounded up to 1m and 1 MiB.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from shipshape.analyzers.efficiency.usage import Array, Window

F64 = NDArray[np.float64]
MIB = 2.0**20
CHUNK_ROWS = 512
OOM_BUMP_RATIO = 0.2
OOM_MIN_BUMP_BYTES = 100 * MIB
MIN_CPU_CORES = 0.01
MIN_MEMORY_BYTES = 100 * MIB


@dataclass(frozen=True, slots=True)
class SimpleSettings:
    cpu_percentile: float = 95.0
    memory_buffer_percent: float = 15.0

    def __post_init__(self) -> None:
        if not 0 < self.cpu_percentile <= 100:
            raise ValueError(f"cpu_percentile must be within (0, 100], not {self.cpu_percentile}")
        if self.memory_buffer_percent < 0:
            raise ValueError(f"memory_buffer_percent must be >= 0, not {self.memory_buffer_percent}")


@dataclass(frozen=True, slots=True)
class VpaSettings:
    cpu_percentile: float = 90.0
    memory_percentile: float = 90.0
    safety_margin_percent: float = 15.0
    half_life_hours: float = 24.0
    memory_interval_hours: float = 24.0
    bucket_growth: float = 0.05

    def __post_init__(self) -> None:
        for name in ("cpu_percentile", "memory_percentile"):
            value = getattr(self, name)
            if not 0 < value <= 100:
                raise ValueError(f"{name} must be within (0, 100], not {value}")
        if self.half_life_hours <= 0 or self.memory_interval_hours <= 0 or self.bucket_growth <= 0:
            raise ValueError("half_life_hours, memory_interval_hours and bucket_growth must be > 0")


S = TypeVar("S", contravariant=True)


class Strategy(Protocol[S]):
    name: str
    description: str

    def recommend(
        self, cpu: Array, memory: Array, window: Window, settings: S, memory_peak: F64 | None = None
    ) -> tuple[F64, F64]:
        """(CPU cores, memory bytes) per row, before the shared guards; NaN where no data.
        `memory_peak` is each row's highest memory sample when the caller has it already."""
        ...


def _sorted_percentile(rows: F64, q: float) -> F64:
    """Percentile per row ignoring NaN, linear interpolation (numpy's default method)."""
    count = (~np.isnan(rows)).sum(axis=1)
    ordered = np.sort(np.where(np.isnan(rows), np.inf, rows), axis=1)
    position = (np.maximum(count, 1) - 1) * (q / 100.0)
    low = np.floor(position).astype(np.int64)
    high = np.minimum(low + 1, np.maximum(count - 1, 0))
    frac = position - low
    a = np.take_along_axis(ordered, low[:, None], axis=1)[:, 0]
    b = np.take_along_axis(ordered, high[:, None], axis=1)[:, 0]
    with np.errstate(invalid="ignore"):  # rows with no sample at all: inf - inf
        out: F64 = a + (b - a) * frac
    out[count == 0] = np.nan
    return out


def row_percentile(rows: Array | F64, q: float) -> F64:
    """np.nanpercentile(rows, q, axis=1), fast: rows without gaps go through a partition."""
    out = np.full(rows.shape[0], np.nan)
    for start in range(0, rows.shape[0], CHUNK_ROWS):
        chunk = rows[start : start + CHUNK_ROWS]
        gaps = np.isnan(chunk).any(axis=1)
        part = out[start : start + chunk.shape[0]]
        if not gaps.any():
            part[:] = np.percentile(chunk, q, axis=1)
            continue
        if (~gaps).any():
            part[~gaps] = np.percentile(chunk[~gaps], q, axis=1)
        part[gaps] = _sorted_percentile(np.asarray(chunk[gaps], dtype=np.float64), q)
    return out


def row_max(rows: Array | F64) -> F64:
    """Highest value per row ignoring NaN (NaN for a row without samples)."""
    return row_max_count(rows)[0]


def row_max_count(rows: Array | F64) -> tuple[F64, NDArray[np.int64]]:
    """(highest value, number of samples) per row, in one pass over cache-sized chunks."""
    peak = np.full(rows.shape[0], np.nan)
    count = np.zeros(rows.shape[0], dtype=np.int64)
    if rows.shape[1] == 0:
        return peak, count
    for start in range(0, rows.shape[0], CHUNK_ROWS):
        chunk = rows[start : start + CHUNK_ROWS]
        stop = start + chunk.shape[0]
        peak[start:stop] = np.fmax.reduce(chunk, axis=1)
        count[start:stop] = chunk.shape[1] - np.count_nonzero(np.isnan(chunk), axis=1)
    return peak, count


class Simple:
    name = "simple"
    description = "CPU: a percentile of usage; memory: the peak plus a buffer (as KRR's simple strategy)"
    settings_type = SimpleSettings

    def recommend(
        self,
        cpu: Array,
        memory: Array,
        window: Window,
        settings: SimpleSettings,
        memory_peak: F64 | None = None,
    ) -> tuple[F64, F64]:
        peak = row_max(memory) if memory_peak is None else memory_peak
        return row_percentile(cpu, settings.cpu_percentile), peak * (
            1.0 + settings.memory_buffer_percent / 100.0
        )


def _weighted_histogram_percentile(
    values: F64, weights: F64, q: float, first_bucket: float, growth: float
) -> F64:
    """Per row: the start of the exponential bucket where the weighted cumulative share reaches q
    (as VPA's histogram.Percentile; buckets [first * (1+g)^i, first * (1+g)^(i+1)))."""
    n = values.shape[0]
    log_growth = math.log1p(growth)
    valid = ~np.isnan(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.floor(np.log(np.maximum(values, first_bucket) / first_bucket) / log_growth)
    bucket = np.where(valid, raw, 0).astype(np.int64)
    buckets = int(bucket.max()) + 1 if bucket.size else 1
    w = np.where(valid, np.broadcast_to(weights, values.shape), 0.0)
    flat = (np.arange(n)[:, None] * buckets + bucket).ravel()
    hist = np.bincount(flat, weights=w.ravel(), minlength=n * buckets).reshape(n, buckets)
    total = hist.sum(axis=1)
    cumulative = np.cumsum(hist, axis=1)
    reached = cumulative >= (q / 100.0) * total[:, None] - 1e-12
    index = np.argmax(reached, axis=1)
    # VPA reports a bucket's start; the next bucket's start keeps the value above every sample in it
    out: F64 = first_bucket * np.power(1.0 + growth, index + 1)
    out[total <= 0] = np.nan
    return out


class Vpa:
    name = "vpa"
    description = "decaying histograms (as the Vertical Pod Autoscaler's recommender)"
    settings_type = VpaSettings

    def recommend(
        self, cpu: Array, memory: Array, window: Window, settings: VpaSettings, memory_peak: F64 | None = None
    ) -> tuple[F64, F64]:
        times = window.times()
        weights = np.power(2.0, (times - window.end) / (settings.half_life_hours * 3600.0))
        interval = settings.memory_interval_hours * 3600.0
        group = np.floor((times - window.start) / interval).astype(np.int64)
        cuts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        peak_weights = weights[np.r_[cuts[1:] - 1, times.size - 1]]
        margin = 1.0 + settings.safety_margin_percent / 100.0
        cpu_out = np.full(cpu.shape[0], np.nan)
        memory_out = np.full(cpu.shape[0], np.nan)
        for start in range(0, cpu.shape[0], CHUNK_ROWS):
            c = np.asarray(cpu[start : start + CHUNK_ROWS], dtype=np.float64)
            m = np.asarray(memory[start : start + CHUNK_ROWS], dtype=np.float64)
            stop = start + c.shape[0]
            cpu_out[start:stop] = _weighted_histogram_percentile(
                c, weights, settings.cpu_percentile, MIN_CPU_CORES, settings.bucket_growth
            )
            filled = np.where(np.isnan(m), -np.inf, m)
            peaks = np.maximum.reduceat(filled, cuts, axis=1)
            peaks[np.isneginf(peaks)] = np.nan
            memory_out[start:stop] = _weighted_histogram_percentile(
                peaks, peak_weights, settings.memory_percentile, MIN_MEMORY_BYTES / 10, settings.bucket_growth
            )
        return cpu_out * margin, memory_out * margin


STRATEGIES: Mapping[str, Simple | Vpa] = {"simple": Simple(), "vpa": Vpa()}
SETTINGS: Mapping[str, type[SimpleSettings] | type[VpaSettings]] = {
    "simple": SimpleSettings,
    "vpa": VpaSettings,
}


@dataclass(frozen=True, slots=True)
class Guards:
    """Per-row inputs of the shared guards."""

    memory_peak: F64
    memory_limit: F64  # current limit (NaN when none)
    oom_killed: NDArray[np.bool_]


def guarded(cpu: F64, memory: F64, guards: Guards) -> tuple[F64, F64]:
    """Apply the floors, the peak rule and the OOM bump; round up to 1m and 1 MiB."""
    cpu = np.maximum(np.where(np.isnan(cpu), np.nan, cpu), MIN_CPU_CORES)
    memory = np.fmax(memory, guards.memory_peak)
    base = np.fmax(guards.memory_limit, guards.memory_peak)
    bumped = base + np.maximum(base * OOM_BUMP_RATIO, OOM_MIN_BUMP_BYTES)
    memory = np.where(guards.oom_killed, np.fmax(memory, bumped), memory)
    memory = np.maximum(memory, MIN_MEMORY_BYTES)
    # Usage rows are float32: 0.2 cores is stored as 0.2000000030, which must not round up to 201m.
    # Millicores are rounded to a microcore first (float32 holds ~7 significant digits).
    return np.ceil(np.round(cpu * 1000.0, 3) - 1e-9) / 1000.0, np.ceil(memory / MIB - 1e-9) * MIB


def raw(
    strategy: str,
    cpu: Array,
    memory: Array,
    window: Window,
    settings: SimpleSettings | VpaSettings | None = None,
    memory_peak: F64 | None = None,
) -> tuple[F64, F64]:
    """The strategy's own (CPU cores, memory bytes) per row, before the guards."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown right-sizing strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    plugin = STRATEGIES[strategy]
    chosen = settings if settings is not None else SETTINGS[strategy]()
    if not isinstance(chosen, SETTINGS[strategy]):
        raise ValueError(
            f"strategy {strategy} takes {SETTINGS[strategy].__name__}, not {type(chosen).__name__}"
        )
    return plugin.recommend(cpu, memory, window, chosen, memory_peak)  # type: ignore[arg-type]


def recommend(
    strategy: str,
    cpu: Array,
    memory: Array,
    window: Window,
    guards: Guards,
    settings: SimpleSettings | VpaSettings | None = None,
) -> tuple[F64, F64]:
    """(CPU request cores, memory request = limit bytes) per row, guards applied; NaN without data."""
    return guarded(*raw(strategy, cpu, memory, window, settings), guards)


def row_count(rows: Array | F64) -> NDArray[np.int64]:
    """Samples (non-NaN values) per row."""
    out = np.zeros(rows.shape[0], dtype=np.int64)
    for start in range(0, rows.shape[0], CHUNK_ROWS):
        chunk = rows[start : start + CHUNK_ROWS]
        out[start : start + chunk.shape[0]] = chunk.shape[1] - np.isnan(chunk).sum(axis=1)
    return out


def oom_replay(memory: Array, limit: F64, memory_peak: F64 | None = None) -> NDArray[np.int64]:
    """Per row, how many observed samples would have passed `limit` (each an OOM kill). Only rows
    whose peak passes the limit are scanned sample by sample."""
    peak = row_max(memory) if memory_peak is None else memory_peak
    out = np.zeros(memory.shape[0], dtype=np.int64)
    over = np.flatnonzero(np.nan_to_num(peak, nan=-np.inf) > np.nan_to_num(limit, nan=np.inf))
    for start in range(0, over.size, CHUNK_ROWS):
        rows = over[start : start + CHUNK_ROWS]
        out[rows] = np.sum(np.nan_to_num(memory[rows], nan=-np.inf) > limit[rows, None], axis=1)
    return out
