"""The whole efficiency analysis in one call: right-sizing per container and workload, QoS
colocation per node, findings with evidence, savings, confidence and the instruction that applies
them. Pure: cluster objects, a `UsageData`, node prices and settings in; a report out.

Prices: a node's hourly price (the spot price on spot nodes) is split between its CPU and memory
in the ratio of Kubecost's default list prices (0.031611 USD per vCPU-hour, 0.004237 USD per
GiB-hour), which gives each node a price per core-hour and per GiB-hour; a month is 730 hours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from shipshape.analyzers.efficiency import qos as qos_model
from shipshape.analyzers.efficiency import rightsizing
from shipshape.analyzers.efficiency.cluster import Cluster, read_cluster
from shipshape.analyzers.efficiency.qos import ColocationReport, ColocationSettings
from shipshape.analyzers.efficiency.rightsizing import SimpleSettings, VpaSettings
from shipshape.analyzers.efficiency.usage import UsageData, Window
from shipshape.contracts.annotations import BATCH_CPU, BATCH_MEMORY
from shipshape.kube.quantity import format_bytes, format_cpu

F64 = NDArray[np.float64]
HOURS_PER_MONTH = 730.0
CPU_HOUR_LIST_PRICE = 0.031611
GIB_HOUR_LIST_PRICE = 0.004237
GIB = 2.0**30
HpaPolicy = Literal["skip-resource", "skip", "ignore"]


@dataclass(frozen=True, slots=True)
class AnalysisSettings:
    strategy: str = "simple"
    strategy_settings: SimpleSettings | VpaSettings | None = None
    colocation: ColocationSettings = field(default_factory=ColocationSettings)
    # an HPA on the same resource: leave that resource (skip-resource), the whole container (skip),
    # or size it anyway (ignore)
    hpa_policy: HpaPolicy = "skip-resource"
    wanted_history_hours: float = 7 * 24.0  # full confidence from this much data
    min_change_percent: float = 10.0  # smaller changes are not worth a finding

    def __post_init__(self) -> None:
        if self.strategy not in rightsizing.STRATEGIES:
            raise ValueError(
                f"unknown strategy {self.strategy!r}; known: {', '.join(rightsizing.STRATEGIES)}"
            )
        if self.hpa_policy not in ("skip-resource", "skip", "ignore"):
            raise ValueError(f"hpa_policy must be skip-resource, skip or ignore, not {self.hpa_policy}")


def confidence_level(value: float) -> str:
    return "high" if value >= 0.75 else "medium" if value >= 0.35 else "low"


def unit_prices(cluster: Cluster, node_prices: Mapping[str, float]) -> tuple[F64, F64]:
    """USD per core-hour and per GiB-hour of each node (NaN where its price is unknown)."""
    nodes = cluster.nodes
    price = np.array([node_prices.get(name, math.nan) for name in nodes.names], dtype=np.float64)
    cores, gib = nodes.cpu_capacity, nodes.memory_capacity / GIB
    weight_cpu, weight_memory = cores * CPU_HOUR_LIST_PRICE, gib * GIB_HOUR_LIST_PRICE
    total = weight_cpu + weight_memory
    with np.errstate(invalid="ignore", divide="ignore"):
        per_core = price * (weight_cpu / total) / cores
        per_gib = price * (weight_memory / total) / gib
    return per_core, per_gib


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One workload container (all its pods together)."""

    namespace: str
    kind: str
    workload: str
    container: str
    pods: int
    current_cpu_request: float | None  # cores
    current_memory_request: float | None  # bytes
    current_memory_limit: float | None
    cpu_request: float | None  # recommended; None: left as it is (see `skipped`) or no data
    memory_request: float | None
    memory_limit: float | None
    cpu_strategy_value: float | None  # the strategy's CPU figure before guards and rounding
    memory_peak: float | None
    oom_kills: int
    restarts: int
    monthly_savings: float | None  # USD, all pods; negative: it costs more (under-provisioned)
    confidence: float
    skipped: tuple[str, ...]
    lacking: tuple[str, ...]

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.workload}/{self.container}"

    def instruction(self) -> dict[str, Any] | None:
        """A strategic-merge patch of the workload's pod template that applies the recommendation."""
        if self.kind not in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
            return None
        resources: dict[str, dict[str, str]] = {}
        if self.cpu_request is not None:
            resources.setdefault("requests", {})["cpu"] = format_cpu(round(self.cpu_request * 1000))
        if self.memory_request is not None:
            resources.setdefault("requests", {})["memory"] = format_bytes(int(self.memory_request))
        if self.memory_limit is not None:
            resources.setdefault("limits", {})["memory"] = format_bytes(int(self.memory_limit))
        if not resources:
            return None
        return {
            "action": "patch",
            "apiVersion": "apps/v1",
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.workload,
            "patchType": "strategic",
            "patch": {
                "spec": {
                    "template": {"spec": {"containers": [{"name": self.container, "resources": resources}]}}
                }
            },
        }


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # rightsizing | colocation | interference
    target: str
    title: str
    evidence: tuple[str, ...]
    monthly_savings: float | None
    confidence: float
    lacking: tuple[str, ...]
    instruction: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "title": self.title,
            "evidence": list(self.evidence),
            "monthlySavings": None if self.monthly_savings is None else round(self.monthly_savings, 2),
            "confidence": round(self.confidence, 3),
            "confidenceLevel": confidence_level(self.confidence),
            "lacking": list(self.lacking),
            "instruction": self.instruction,
        }


@dataclass(frozen=True, slots=True)
class EfficiencyReport:
    window: Window
    source: str
    strategy: str
    recommendations: tuple[Recommendation, ...]
    colocation: ColocationReport
    findings: tuple[Finding, ...]
    oom_replay_kills: int  # samples above a recommended memory limit in the window (must be 0)

    @property
    def monthly_savings(self) -> float:
        return float(sum(f.monthly_savings or 0.0 for f in self.findings if f.kind == "rightsizing"))

    def to_json(self) -> dict[str, Any]:
        settings = self.colocation.settings
        return {
            "window": {"start": self.window.start, "step": self.window.step, "steps": self.window.steps},
            "source": self.source,
            "strategy": self.strategy,
            "monthlySavings": round(self.monthly_savings, 2),
            "oomReplayKills": self.oom_replay_kills,
            "colocation": {
                "settings": {
                    "cpuReclaimThresholdPercent": settings.cpu_reclaim_threshold_percent,
                    "memoryReclaimThresholdPercent": settings.memory_reclaim_threshold_percent,
                    "cpuCalculatePolicy": settings.cpu_calculate_policy,
                    "memoryCalculatePolicy": settings.memory_calculate_policy,
                    "reclaimPercentile": settings.reclaim_percentile,
                },
                "batchCpuCores": round(self.colocation.batch_cpu_total, 3),
                "batchMemoryBytes": round(self.colocation.batch_memory_total),
                "lacking": list(self.colocation.lacking),
            },
            "findings": [f.to_json() for f in self.findings],
        }


def _pct(old: float | None, new: float | None) -> float:
    if old is None or new is None or old <= 0:
        return math.inf
    return abs(new - old) / old * 100.0


def _opt(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _rightsizing(
    cluster: Cluster,
    usage: UsageData,
    cpu_rows: Any,
    memory_rows: Any,
    prices: tuple[F64, F64],
    settings: AnalysisSettings,
) -> tuple[tuple[Recommendation, ...], int]:
    containers = cluster.containers
    n = len(containers.keys)
    window = usage.window
    oom = np.array([usage.oom_kills.get(k, 0) for k in containers.keys], dtype=np.int64)
    restarts = np.array([usage.restarts.get(k, 0) for k in containers.keys], dtype=np.int64)
    # requests and limits: the pod spec, else what the source reported (kube-state-metrics)
    cpu_req, mem_req, mem_lim = (
        containers.cpu_request.copy(),
        containers.memory_request.copy(),
        containers.memory_limit.copy(),
    )
    for i, key in enumerate(containers.keys):
        spec = usage.specs.get(key)
        if spec is None:
            continue
        if math.isnan(cpu_req[i]) and spec.cpu_request is not None:
            cpu_req[i] = spec.cpu_request
        if math.isnan(mem_req[i]) and spec.memory_request is not None:
            mem_req[i] = spec.memory_request
        if math.isnan(mem_lim[i]) and spec.memory_limit is not None:
            mem_lim[i] = spec.memory_limit
    peak, memory_points = rightsizing.row_max_count(memory_rows)
    guards = rightsizing.Guards(peak, mem_lim, oom > 0)
    raw_cpu, raw_mem = rightsizing.raw(
        settings.strategy, cpu_rows, memory_rows, window, settings.strategy_settings, memory_peak=peak
    )
    rec_cpu, rec_mem = rightsizing.guarded(raw_cpu, raw_mem, guards)
    replay = int(rightsizing.oom_replay(memory_rows, rec_mem, peak).sum()) if n else 0
    cpu_pct = raw_cpu
    points = np.minimum(rightsizing.row_count(cpu_rows), memory_points)
    history_hours = points * window.step / 3600.0
    confidence = np.minimum(1.0, history_hours / settings.wanted_history_hours)
    per_core, per_gib = prices
    node = cluster.pods.node[containers.pod] if n else np.zeros(0, dtype=np.int64)
    core_price = np.where(node >= 0, per_core[np.maximum(node, 0)] if per_core.size else np.nan, np.nan)
    gib_price = np.where(node >= 0, per_gib[np.maximum(node, 0)] if per_gib.size else np.nan, np.nan)

    # one group per workload container; per-group figures by reduceat over rows in group order
    group_index: dict[tuple[str, str, str, str], int] = {}
    gid = np.empty(n, dtype=np.int64)
    for i, key in enumerate(containers.keys):
        kind, name = cluster.pods.owner[containers.pod[i]]
        gid[i] = group_index.setdefault((key.namespace, kind, name, key.container), len(group_index))
    order = np.argsort(gid, kind="stable")
    cuts = np.flatnonzero(np.r_[True, gid[order][1:] != gid[order][:-1]]) if n else np.zeros(0, np.int64)
    count = np.diff(np.r_[cuts, n])

    def gmax(values: F64) -> F64:
        return np.fmax.reduceat(values[order], cuts) if n else np.zeros(0)

    def gsum(values: F64) -> F64:
        return np.add.reduceat(values[order], cuts) if n else np.zeros(0)

    hpa_skip = np.zeros((len(group_index), 2), dtype=bool)
    hpa_notes: dict[int, list[str]] = {}
    for (namespace, kind, workload, _), g in group_index.items():
        hpa = cluster.hpas.get((namespace, kind, workload))
        if hpa is None or settings.hpa_policy == "ignore":
            continue
        scaled = sorted(hpa.resources & {"cpu", "memory"})
        if not scaled:
            continue
        if settings.hpa_policy == "skip":
            hpa_skip[g] = True
            hpa_notes[g] = [
                f"HPA {hpa.name} scales this workload on {', '.join(scaled)} utilisation: left as it is"
            ]
        else:
            hpa_skip[g] = ("cpu" in scaled, "memory" in scaled)
            hpa_notes[g] = [
                f"HPA {hpa.name} scales on {resource} utilisation (a share of the request): "
                f"{resource} request left as it is"
                for resource in scaled
            ]
    g_points = gmax(points.astype(np.float64))
    g_hours = gmax(history_hours)
    g_gaps = 1.0 - gsum(points.astype(np.float64)) / np.maximum(count * window.steps, 1)
    g_cpu, g_mem, g_lim = gmax(cpu_req), gmax(mem_req), gmax(mem_lim)
    has_data = g_points > 0
    g_new_cpu = np.where(has_data & ~hpa_skip[:, 0], gmax(rec_cpu), np.nan)
    g_new_mem = np.where(has_data & ~hpa_skip[:, 1], gmax(rec_mem), np.nan)
    g_ooms, g_restarts = gsum(oom.astype(np.float64)), gsum(restarts.astype(np.float64))
    g_cpu_value, g_peak = gmax(cpu_pct), gmax(peak)
    g_confidence = gsum(confidence) / np.maximum(count, 1)
    # savings: (current - recommended) x the node's unit price x 730 h, summed over the pods
    row_new_cpu, row_new_mem = (g_new_cpu[gid], g_new_mem[gid]) if n else (np.zeros(0), np.zeros(0))
    cpu_delta = np.where(np.isnan(row_new_cpu), 0.0, (np.nan_to_num(cpu_req) - row_new_cpu) * core_price)
    mem_delta = np.where(np.isnan(row_new_mem), 0.0, (np.nan_to_num(mem_req) - row_new_mem) / GIB * gib_price)
    unpriced = gmax(
        (
            (np.isnan(core_price) & ~np.isnan(row_new_cpu)) | (np.isnan(gib_price) & ~np.isnan(row_new_mem))
        ).astype(np.float64)
    )
    g_savings = gsum(np.nan_to_num(cpu_delta) + np.nan_to_num(mem_delta)) * HOURS_PER_MONTH
    out: list[Recommendation] = []
    for (namespace, kind, workload, container), g in group_index.items():
        skipped = list(hpa_notes.get(g, ()))
        lacking: list[str] = []
        if not has_data[g]:
            lacking.append("usage: no samples in the window")
        else:
            if g_hours[g] < settings.wanted_history_hours:
                lacking.append(
                    f"history: {g_hours[g]:.1f} h of the {settings.wanted_history_hours:.0f} h wanted"
                )
            if g_gaps[g] > 0.05:
                lacking.append(f"gaps: {g_gaps[g]:.0%} of the window has no samples")
        if math.isnan(g_cpu[g]):
            lacking.append("requests: no CPU request set")
        if math.isnan(g_mem[g]):
            lacking.append("requests: no memory request set")
        ooms = int(g_ooms[g])
        if ooms:
            skipped.append(f"OOM-killed {ooms} time(s) in the window: memory bumped past the limit")
        priced = not unpriced[g]
        if not priced:
            lacking.append("price: a node of this workload has no known price")
        out.append(
            Recommendation(
                namespace,
                kind,
                workload,
                container,
                int(count[g]),
                _opt(g_cpu[g]),
                _opt(g_mem[g]),
                _opt(g_lim[g]),
                _opt(g_new_cpu[g]),
                _opt(g_new_mem[g]),
                _opt(g_new_mem[g]),
                _opt(g_cpu_value[g]),
                _opt(g_peak[g]),
                ooms,
                int(g_restarts[g]),
                float(g_savings[g]) if priced else None,
                float(g_confidence[g]),
                tuple(skipped),
                tuple(lacking),
            )
        )
    return tuple(out), replay


def _rightsizing_finding(rec: Recommendation, settings: AnalysisSettings) -> Finding | None:
    changes = []
    old_cpu = format_cpu(round(rec.current_cpu_request * 1000)) if rec.current_cpu_request else "unset"
    old_memory = format_bytes(int(rec.current_memory_request)) if rec.current_memory_request else "unset"
    if (
        rec.cpu_request is not None
        and _pct(rec.current_cpu_request, rec.cpu_request) >= settings.min_change_percent
    ):
        changes.append(f"cpu request {old_cpu} -> {format_cpu(round(rec.cpu_request * 1000))}")
    if rec.memory_request is not None and (
        _pct(rec.current_memory_request, rec.memory_request) >= settings.min_change_percent
        or _pct(rec.current_memory_limit, rec.memory_limit) >= settings.min_change_percent
        or rec.oom_kills
    ):
        changes.append(f"memory {old_memory} -> {format_bytes(int(rec.memory_request))} (request and limit)")
    if not changes:
        return None
    evidence = [
        f"{rec.pods} pod(s) observed",
        *(
            [f"cpu by the {settings.strategy} strategy {rec.cpu_strategy_value:.3f} cores"]
            if rec.cpu_strategy_value is not None else []
        ),
        *([f"memory peak {rec.memory_peak / 2**20:.1f} MiB"] if rec.memory_peak is not None else []),
        *rec.skipped,
    ]  # fmt: skip
    return Finding(
        "rightsizing",
        rec.target,
        "; ".join(changes),
        tuple(evidence),
        rec.monthly_savings,
        rec.confidence,
        rec.lacking,
        rec.instruction(),
    )


def _colocation_findings(
    report: ColocationReport, per_core: F64, per_gib: F64, confidence: float
) -> list[Finding]:
    out: list[Finding] = []
    pct = report.settings.reclaim_percentile
    for i, node in enumerate(report.nodes):
        cpu, memory = node.cpu, node.memory
        if cpu.batch.percentile > 0 or memory.batch.percentile > 0:
            value = None
            if i < per_core.size and not math.isnan(per_core[i]):
                value = (
                    cpu.batch.percentile * per_core[i] + memory.batch.percentile / GIB * per_gib[i]
                ) * HOURS_PER_MONTH
            out.append(
                Finding(
                    "colocation",
                    node.node,
                    f"{cpu.batch.percentile:.2f} cores and {memory.batch.percentile / GIB:.2f} GiB "
                    "reclaimable for "
                    f"batch work {100 - pct:.0f} % of the time",
                    (
                        f"cpu batch = {node.formula_cpu}: min {cpu.batch.minimum:.2f}, "
                        f"mean {cpu.batch.mean:.2f}, "
                        f"max {cpu.batch.maximum:.2f} cores",
                        f"memory batch = {node.formula_memory}: min {memory.batch.minimum / GIB:.2f}, "
                        f"mean {memory.batch.mean / GIB:.2f} GiB",
                        f"{node.ls_pods} latency-sensitive and {node.batch_pods} batch pods",
                    ),
                    value,
                    confidence,
                    (f"node metrics stale for {node.stale_steps} steps",) if node.stale_steps else (),
                    {
                        "action": "publish-extended-resources",
                        "kind": "Node",
                        "name": node.node,
                        "resources": {
                            BATCH_CPU: int(cpu.batch.percentile * 1000),
                            BATCH_MEMORY: int(memory.batch.percentile),
                        },
                    },
                )
            )
        if node.interference_risk:
            evidence = []
            for name, r, unit, scale in (("cpu", cpu, "cores", 1.0), ("memory", memory, "GiB", 1 / GIB)):
                evidence.append(
                    f"{name}: LS peak {r.ls_peak * scale:.2f} + batch peak {r.batch_peak * scale:.2f} "
                    "+ system "
                    f"{r.system_peak * scale:.2f} {unit} vs capacity {r.capacity * scale:.2f}; "
                    f"{r.coincident_overflow_steps} steps over capacity together"
                )
            out.append(
                Finding(
                    "interference",
                    node.node,
                    "batch and latency-sensitive peaks together exceed the node's capacity",
                    tuple(evidence),
                    None,
                    confidence,
                    (),
                    None,
                )
            )
    return out


def analyze(
    pods: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    usage: UsageData,
    *,
    hpas: Sequence[Mapping[str, Any]] = (),
    priority_classes: Sequence[Mapping[str, Any]] = (),
    node_prices: Mapping[str, float] | None = None,
    settings: AnalysisSettings | None = None,
    cluster: Cluster | None = None,
    cluster_name: str = "",
) -> EfficiencyReport:
    """`cluster_name` is the cluster of the usage keys (a central Prometheus's cluster label)."""
    settings = settings or AnalysisSettings()
    cluster = cluster or read_cluster(pods, nodes, hpas, priority_classes, cluster_name)
    cpu_rows, memory_rows = qos_model.aligned_rows(usage, cluster)
    prices = unit_prices(cluster, node_prices or {})
    recommendations, replay = _rightsizing(cluster, usage, cpu_rows, memory_rows, prices, settings)
    colocation = qos_model.colocation(cluster, usage, settings.colocation, rows=(cpu_rows, memory_rows))
    history = usage.window.duration / 3600.0
    node_confidence = min(1.0, history / settings.wanted_history_hours)
    findings: list[Finding] = []
    for rec in recommendations:
        finding = _rightsizing_finding(rec, settings)
        if finding is not None:
            findings.append(finding)
    findings += _colocation_findings(colocation, *prices, node_confidence)
    findings.sort(key=lambda f: -(f.monthly_savings or 0.0))
    return EfficiencyReport(
        usage.window, usage.source, settings.strategy, recommendations, colocation, tuple(findings), replay
    )
