"""Running the analyzers over a cluster's stored state (in the workers), into recommendations.

Analyzers are pure; this module reads the stored objects (and the stored usage, through
`backend/usage.py`), supplies what they need from outside the cluster (instance prices from the
shipped catalog) and stores their findings.

Two analyses, each storing its own kinds of recommendation:

- **spot adoption** (`analyze_cluster`), after a push changed the state;
- **efficiency** (`read_efficiency` → `efficiency_findings` → `store_efficiency`), when usage is
  stored: the efficiency analyzers (`analyzers/efficiency/analysis.py`: right-sizing strategies,
  QoS colocation) over the window of stored usage, priced with each node's own price (the spot
  price on spot nodes). Right-sizing becomes one recommendation per workload, with every container
  that changes enough in one `SetContainerRequests` instruction (one rollout, one precondition);
  QoS colocation and interference are one advisory recommendation each per cluster;
- **idle GPUs** (`_idle_gpus`, in the same efficiency analysis), where the agent adds dcgm-exporter's
  activity from the cluster's Prometheus (`agent --prometheus`): per workload, the pods that held
  their GPUs idle (mean engine activity under 5 %) in at least 95 % of the observed slots are
  surplus. One recommendation per such workload: evidence (GPUs, model, activity over the window,
  hours observed), money wasted per month (surplus pods x GPUs per pod x the price per GPU-hour of
  the nodes its pods run on, the spot price on spot nodes, x 730 h), confidence from the hours
  observed against the window, and the `SetReplicas` instruction that scales it to the replicas
  left (0 when all are idle); a workload an HPA scales gets the advice without the instruction
  (the HPA's minReplicas is the thing to change), as do kinds the agent does not scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC as _UTC
from datetime import datetime
from typing import Any, Literal

from sqlalchemy.orm import Session

from shipshape.analyzers import spot_adoption
from shipshape.analyzers.efficiency import analysis as efficiency
from shipshape.analyzers.efficiency.cluster import Cluster, capacity_type, read_cluster
from shipshape.analyzers.gpu import advice as gpu_advice
from shipshape.analyzers.gpu import idle as gpu_idle
from shipshape.analyzers.gpu import objects as gpu_objects
from shipshape.analyzers.gpu.fleet import GpuNode, GpuPod
from shipshape.analyzers.gpu.fleet import Workload as GpuWorkload
from shipshape.backend import usage as usage_store
from shipshape.backend.store import repository as repo
from shipshape.backend.store.models import UsageWorkload
from shipshape.backend.store.objects import ObjectsCache
from shipshape.contracts.instructions import (
    ContainerResources,
    Precondition,
    Recommendation,
    SetContainerRequests,
    SetReplicas,
    WorkloadRef,
)
from shipshape.kube import capacity as kube_capacity
from shipshape.kube import wellknown
from shipshape.kube.quantity import QuantityError, cpu_millis, format_bytes, format_cpu, to_int
from shipshape.pricing.catalog import default_catalog

Obj = Mapping[str, Any]
KINDS = (spot_adoption.KIND,)
NEEDED = ("nodes", "pods", "deployments", "replicasets", "statefulsets")
DEFAULT_REGION = "us-east-1"
RIGHT_SIZING = "right-sizing"
GPU_IDLE = "gpu-idle"
QOS_COLOCATION = "qos-colocation"
QOS_INTERFERENCE = "qos-interference"
EFFICIENCY_KINDS = (RIGHT_SIZING, QOS_COLOCATION, QOS_INTERFERENCE, GPU_IDLE)
EFFICIENCY_NEEDED = ("nodes", "pods", "deployments", "statefulsets", "daemonsets", "horizontalpodautoscalers",
                     "priorityclasses")  # fmt: skip
MIB = 2**20
GIB = 2.0**30
Resource = Literal["cpu", "memory"]


def capacity_of(node: Obj) -> str:
    """`spot` or `on-demand` by the capacity-label conventions the node carries (`kube.capacity`)."""
    kind = kube_capacity.capacity_type_of(node.get("metadata", {}).get("labels") or {})
    return "spot" if kind is not None and str(kind) == "spot" else "on-demand"


def price_of(node: Obj) -> spot_adoption.NodePrice | None:
    labels = node.get("metadata", {}).get("labels") or {}
    instance_type = labels.get(wellknown.INSTANCE_TYPE_LABEL)
    if not instance_type:
        return None
    region = labels.get(wellknown.REGION_LABEL) or DEFAULT_REGION
    catalog = default_catalog()
    on_demand = catalog.on_demand_price(instance_type, region)
    spot = catalog.spot_price(instance_type, region)
    if on_demand is None or spot is None:
        return None
    return spot_adoption.NodePrice(on_demand=on_demand, spot=spot)


def node_prices(nodes: Sequence[Obj]) -> dict[str, float]:
    """Each priced node's hourly price as it runs: the spot price on spot nodes, else on-demand."""
    out: dict[str, float] = {}
    for node in nodes:
        price = price_of(node)
        if price is not None:
            out[str(node["metadata"]["name"])] = (
                price.spot if capacity_of(node) == "spot" else price.on_demand
            )
    return out


def analyze_cluster(
    session: Session, org_id: str, cluster_id: str, now: datetime, kept: ObjectsCache | None = None
) -> int:
    """Run the analyzers on the stored state (read through `kept` when given) and store their
    findings; returns how many."""
    objects = read_objects(session, org_id, cluster_id, NEEDED, kept)
    findings = spot_adoption.recommend(objects, capacity_of, price_of)
    repo.upsert_recommendations(session, cluster_id, KINDS, findings, now)
    return len(findings)


# ---- efficiency ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EfficiencySettings:
    step_seconds: int = 300
    window_hours: float = 168.0  # the usage analysed, back from the newest sample; full confidence
    min_history_hours: float = 24.0  # a container needs this much usage before it is right-sized
    strategy: Literal["simple", "vpa"] = "simple"


@dataclass(frozen=True, slots=True)
class EfficiencyInputs:
    """What one efficiency analysis reads from the store (in a transaction of its own)."""

    objects: dict[str, list[dict[str, Any]]]
    window: usage_store.SlotWindow
    workloads: usage_store.Rows
    nodes: usage_store.Rows
    summaries: dict[usage_store.SeriesKey, UsageWorkload]
    gpus: usage_store.GpuRows | None = None  # workloads' GPU activity (agents given --prometheus)


def read_objects(
    session: Session, org_id: str, cluster_id: str, kinds: Sequence[str], kept: ObjectsCache | None
) -> dict[str, list[dict[str, Any]]]:
    """The cluster's stored objects of `kinds`: through the worker's copy `kept` when there is one
    (the cluster checked against the caller's organisation either way)."""
    if kept is None:
        return {kind: repo.cluster_objects(session, org_id, cluster_id, kind) for kind in kinds}
    repo.get_cluster(session, org_id, cluster_id)
    return kept.read(session, cluster_id, kinds)


def read_efficiency(
    session: Session,
    org_id: str,
    cluster_id: str,
    settings: EfficiencySettings,
    kept: ObjectsCache | None = None,
) -> EfficiencyInputs | None:
    """The stored objects (through `kept` when given) and the usage window of a cluster; None while it
    has no usage."""
    span = repo.usage_span(session, org_id, cluster_id)
    if span is None:
        return None
    first, last = span
    window = usage_store.slot_window(
        first.timestamp(), last.timestamp(), settings.step_seconds, settings.window_hours
    )
    step = settings.step_seconds
    workloads = usage_store.lay_out(
        repo.usage_chunks(session, org_id, cluster_id, window.first, step), window
    )
    nodes = usage_store.lay_out(
        repo.node_usage_chunks(session, org_id, cluster_id, window.first, step), window, "cpu_mean"
    )
    summaries = {
        usage_store.SeriesKey(r.namespace, r.workload_kind, r.workload_name, r.container): r
        for r in repo.usage_summaries(session, org_id, cluster_id)
    }
    objects = read_objects(session, org_id, cluster_id, EFFICIENCY_NEEDED, kept)
    gpus = usage_store.lay_out_gpus(
        repo.gpu_usage_chunks(session, org_id, cluster_id, window.first, step), window
    )
    return EfficiencyInputs(objects, window, workloads, nodes, summaries, gpus)


def store_efficiency(
    session: Session, cluster_id: str, findings: list[Recommendation], now: datetime
) -> None:
    repo.upsert_recommendations(session, cluster_id, EFFICIENCY_KINDS, findings, now)


def efficiency_findings(inputs: EfficiencyInputs, settings: EfficiencySettings) -> list[Recommendation]:
    """Right-sizing, QoS colocation and interference recommendations from the stored usage. Pure."""
    objects = inputs.objects
    pods, nodes = objects.get("pods", []), objects.get("nodes", [])
    cluster = read_cluster(
        pods, nodes, objects.get("horizontalpodautoscalers", []), objects.get("priorityclasses", [])
    )
    usage, factor = usage_store.usage_data(cluster, pods, inputs.workloads, inputs.nodes, inputs.window)
    analysis_settings = efficiency.AnalysisSettings(
        strategy=settings.strategy, wanted_history_hours=settings.window_hours
    )
    report = efficiency.analyze(
        pods,
        nodes,
        usage,
        hpas=objects.get("horizontalpodautoscalers", []),
        priority_classes=objects.get("priorityclasses", []),
        node_prices=node_prices(nodes),
        settings=analysis_settings,
        cluster=cluster,
    )
    context = _Context(inputs, settings, report, factor)
    out = _right_sizing(context, objects)
    out += _colocation(context, cluster)
    out += _idle_gpus(inputs, settings)
    return out


@dataclass(frozen=True, slots=True)
class _Context:
    inputs: EfficiencyInputs
    settings: EfficiencySettings
    report: efficiency.EfficiencyReport
    factor: int  # the window's coarsening (1: none)

    def basis(self) -> dict[str, Any]:
        window = self.inputs.window
        return {
            "strategy": self.report.strategy,
            "source": "metrics.k8s.io (agent)",
            "window_hours": round(window.hours, 2),
            "window_start": datetime.fromtimestamp(window.first, tz=_UTC).isoformat(),
            "step_seconds": window.step * self.factor,
        }


def _templates(objects: Mapping[str, Sequence[Obj]]) -> dict[tuple[str, str, str], Obj]:
    out: dict[tuple[str, str, str], Obj] = {}
    for plural, kind in (
        ("deployments", "Deployment"),
        ("statefulsets", "StatefulSet"),
        ("daemonsets", "DaemonSet"),
    ):
        for obj in objects.get(plural, ()):
            md = obj.get("metadata") or {}
            out[(kind, str(md.get("namespace", "")), str(md.get("name", "")))] = obj
    return out


def _container_spec(workload: Obj, container: str) -> Mapping[str, Any]:
    for c in ((workload.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
        if c.get("name") == container:
            return c.get("resources") or {}
    return {}


def _millis(value: Any) -> int | None:
    try:
        return None if value is None else cpu_millis(value)
    except (QuantityError, ValueError, TypeError):
        return None


def _bytes(value: Any) -> int | None:
    try:
        return None if value is None else to_int(value)
    except (QuantityError, ValueError, TypeError):
        return None


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def _right_sizing(context: _Context, objects: Mapping[str, Sequence[Obj]]) -> list[Recommendation]:
    report, settings = context.report, context.settings
    changed = {f.target for f in report.findings if f.kind == "rightsizing"}
    templates = _templates(objects)
    groups: dict[tuple[str, str, str], list[efficiency.Recommendation]] = {}
    for rec in report.recommendations:
        if rec.target not in changed or rec.kind not in ("Deployment", "StatefulSet", "DaemonSet"):
            continue  # too small a change, or a Job or bare pod (short-lived: sized where it is made)
        if rec.confidence * settings.window_hours < settings.min_history_hours - 1e-9:
            continue  # not enough usage yet
        groups.setdefault((rec.kind, rec.namespace, rec.workload), []).append(rec)
    out = []
    for (kind, namespace, name), recs in sorted(groups.items()):
        workload = templates.get((kind, namespace, name))
        if workload is None:
            continue
        finding = _workload_finding(context, kind, namespace, name, workload, recs)
        if finding is not None:
            out.append(finding)
    return out


def _workload_finding(
    context: _Context,
    kind: str,
    namespace: str,
    name: str,
    workload: Obj,
    recs: list[efficiency.Recommendation],
) -> Recommendation | None:
    containers: dict[str, ContainerResources] = {}
    evidence: dict[str, Any] = {}
    summary: list[str] = []
    changes: list[str] = []
    lacking: set[str] = set()
    savings: list[float] = []
    for rec in sorted(recs, key=lambda r: r.container):
        spec = _container_spec(workload, rec.container)
        current_requests, current_limits = spec.get("requests") or {}, spec.get("limits") or {}
        requests: dict[Resource, str] = {}
        limits: dict[Resource, str] = {}
        parts: list[str] = []
        if rec.cpu_request is not None:
            millis = round(rec.cpu_request * 1000)
            requests["cpu"] = format_cpu(millis)
            parts.append(f"cpu {current_requests.get('cpu', 'unset')} → {requests['cpu']}")
            limit = _millis(current_limits.get("cpu"))
            if limit is not None and limit < millis:
                limits["cpu"] = requests["cpu"]  # a request may not pass its limit
        if rec.memory_request is not None:
            requests["memory"] = format_bytes(math.ceil(rec.memory_request / MIB) * MIB)
            parts.append(f"memory {current_requests.get('memory', 'unset')} → {requests['memory']}")
            if rec.memory_limit is not None:
                limits["memory"] = format_bytes(math.ceil(rec.memory_limit / MIB) * MIB)
        if not requests:
            continue
        containers[rec.container] = ContainerResources(requests=requests, limits=limits)
        key = usage_store.SeriesKey(namespace, kind, name, rec.container)
        stored = context.inputs.summaries.get(key)
        samples = (
            int(context.inputs.workloads.samples[context.inputs.workloads.index[key]])
            if key in context.inputs.workloads.index
            else 0
        )
        hours = rec.confidence * context.settings.window_hours
        evidence[rec.container] = {
            "current": {"requests": dict(current_requests), "limits": dict(current_limits)},
            "recommended": {"requests": requests, "limits": limits},
            "cpu_strategy_cores": _round(rec.cpu_strategy_value),
            "memory_peak_bytes": _round(rec.memory_peak, 0),
            "samples": samples,
            "history_hours": round(hours, 2),
            "pods": rec.pods,
            "oom_kills": rec.oom_kills,
            "restarts": rec.restarts,
            "monthly_savings_usd": _round(rec.monthly_savings, 2),
            "confidence": round(rec.confidence, 3),
            "skipped": list(rec.skipped),
            "lacking": list(rec.lacking),
            "observed_since": None if stored is None else repo.as_utc(stored.first_sample_at).isoformat(),
            "highest_memory_since_then_bytes": None if stored is None else stored.memory_max,
        }
        lacking.update(rec.lacking)
        if rec.monthly_savings is not None:
            savings.append(rec.monthly_savings)
        changes.append(f"{rec.container}: {', '.join(parts)}")
        strategy_cpu = (
            ""
            if rec.cpu_strategy_value is None
            else f"cpu {context.report.strategy} {rec.cpu_strategy_value:.3f} cores, "
        )
        peak = "" if rec.memory_peak is None else f"memory peak {rec.memory_peak / MIB:.1f} MiB, "
        summary.append(
            f"{rec.container}: {', '.join(parts)} ({strategy_cpu}{peak}{samples} samples over {hours:.1f} h, "
            f"{rec.pods} pod(s))"
        )
        summary.extend(f"{rec.container}: {note}" for note in rec.skipped)
    if not containers:
        return None
    md = workload.get("metadata") or {}
    generation = md.get("generation")
    instruction = None
    target = None
    if kind in ("Deployment", "StatefulSet"):
        target = WorkloadRef(kind=kind, namespace=namespace, name=name)  # type: ignore[arg-type]
        precondition = (
            Precondition(generation=int(generation))
            if isinstance(generation, int) and generation >= 1
            else Precondition(resource_version=str(md.get("resourceVersion") or ""))
        )
        instruction = SetContainerRequests(target=target, precondition=precondition, containers=containers)
    else:
        summary.append(f"{kind}s are not changed by the agent: apply it to the {kind}'s manifest")
    monthly = round(sum(savings), 2) if savings else None
    if monthly is not None:
        summary.append(
            f"{'saves' if monthly >= 0 else 'costs'} about ${abs(monthly):.2f} a month at these nodes' prices"
        )
    title = f"Right-size {kind} {namespace}/{name}: " + "; ".join(changes)
    return Recommendation(
        kind=RIGHT_SIZING,
        fingerprint=f"{RIGHT_SIZING}:{kind}/{namespace}/{name}@{generation or md.get('resourceVersion', '')}"[
            :200
        ],
        title=title[:300],
        target=target,
        evidence={
            **context.basis(),
            "workload": f"{kind}/{namespace}/{name}",
            "containers": evidence,
            "lacking": sorted(lacking),
            "summary": summary,
        },
        monthly_savings_usd=monthly,
        confidence=min(float(r.confidence) for r in recs if r.container in containers),
        instruction=instruction,
    )


def _colocation(context: _Context, cluster: Cluster) -> list[Recommendation]:
    report = context.report.colocation
    nodes = [n for n in report.nodes if n.cpu.batch.percentile > 0 or n.memory.batch.percentile > 0]
    confidence = min(1.0, context.inputs.window.hours / context.settings.window_hours)
    if not context.inputs.nodes.keys:
        return []  # no node usage: the system's share is unknown (the analyzer says so; nothing to offer)
    out: list[Recommendation] = []
    pct = report.settings.reclaim_percentile
    if nodes:
        cpu = sum(n.cpu.batch.percentile for n in nodes)
        memory = sum(n.memory.batch.percentile for n in nodes)
        top = sorted(nodes, key=lambda n: -n.cpu.batch.percentile)[:10]
        out.append(
            Recommendation(
                kind=QOS_COLOCATION,
                fingerprint=QOS_COLOCATION,
                title=(
                    f"{cpu:.2f} cores and {memory / GIB:.2f} GiB reclaimable for batch work on {len(nodes)} "
                    f"node(s) {100 - pct:.0f} % of the time"
                ),
                evidence={
                    **context.basis(),
                    "scope": "cluster",
                    "formula_cpu": nodes[0].formula_cpu,
                    "formula_memory": nodes[0].formula_memory,
                    "cpu_reclaim_threshold_percent": report.settings.cpu_reclaim_threshold_percent,
                    "memory_reclaim_threshold_percent": report.settings.memory_reclaim_threshold_percent,
                    "nodes": {
                        n.node: {
                            "batch_cpu_cores": round(n.cpu.batch.percentile, 3),
                            "batch_memory_bytes": round(n.memory.batch.percentile),
                            "latency_sensitive_pods": n.ls_pods,
                            "batch_pods": n.batch_pods,
                        }
                        for n in top
                    },
                    "lacking": list(report.lacking),
                    "summary": [
                        f"{n.node}: {n.cpu.batch.percentile:.2f} cores, "
                        f"{n.memory.batch.percentile / GIB:.2f} GiB ({n.ls_pods} latency-sensitive pods)"
                        for n in top
                    ]
                    + [
                        "the controller's batch-resources loop publishes it as shipshape.dev/batch-cpu and "
                        "shipshape.dev/batch-memory (opt-in)"
                    ],
                },
                confidence=confidence,
            )
        )
    risky = [n for n in report.nodes if n.interference_risk]
    if risky:
        out.append(
            Recommendation(
                kind=QOS_INTERFERENCE,
                fingerprint=QOS_INTERFERENCE,
                title=f"Batch and latency-sensitive peaks together exceed capacity on {len(risky)} node(s)",
                evidence={
                    **context.basis(),
                    "scope": "cluster",
                    "nodes": sorted(n.node for n in risky)[:50],
                    "summary": [
                        f"{n.node}: cpu peaks {n.cpu.ls_peak:.2f} LS + {n.cpu.batch_peak:.2f} batch + "
                        f"{n.cpu.system_peak:.2f} system of {n.cpu.capacity:.2f} cores"
                        for n in risky[:10]
                    ],
                },
                confidence=confidence,
            )
        )
    return out


# ---- idle GPUs -----------------------------------------------------------------------------------


def _idle_gpus(inputs: EfficiencyInputs, settings: EfficiencySettings) -> list[Recommendation]:
    """One recommendation per workload whose pods held GPUs idle (see the module's docstring)."""
    rows = inputs.gpus
    if rows is None or not rows.keys:
        return []
    objects = inputs.objects
    nodes = objects.get("nodes", [])
    _, gpu_pods = gpu_objects.fleet_from_objects(
        nodes, objects.get("pods", []), capacity_type, node_prices(nodes)
    )
    gpu_nodes = {
        n.name: n
        for body in nodes
        if (
            n := gpu_objects.node_from_object(
                body, capacity_type, node_prices([body]).get(body["metadata"]["name"])
            )
        )
        is not None
    }
    workloads = gpu_objects.workloads_from_objects(
        objects.get("deployments", []),
        objects.get("statefulsets", []),
        objects.get("horizontalpodautoscalers", []),
    )
    out = []
    for i, key in enumerate(rows.keys):
        activity = gpu_idle.workload_activity(
            rows.samples[i],
            rows.activity_mean[i],
            rows.activity_high[i],
            rows.pods[i],
            rows.devices[i],
            rows.idle_pods[i],
            inputs.window.step,
        )
        if activity is None or activity.surplus == 0:
            continue
        if activity.hours < settings.min_history_hours - 1e-9:
            continue  # not enough activity observed yet
        live = [
            p
            for p in gpu_pods
            if p.namespace == key.namespace
            and p.node is not None
            and p.owner is not None
            and (p.owner.kind, p.owner.name) == (key.kind, key.workload)
        ]
        if not live:
            continue  # no GPU pod of it runs now (scaled down already, or gone): nothing to scale
        found = _idle_gpu_finding(inputs, settings, key, activity, live, gpu_nodes, workloads, rows.models)
        if found is not None:
            out.append(found)
    return out


def _idle_gpu_finding(
    inputs: EfficiencyInputs,
    settings: EfficiencySettings,
    key: usage_store.WorkloadKey,
    activity: gpu_idle.WorkloadActivity,
    live: Sequence[GpuPod],
    gpu_nodes: Mapping[str, GpuNode],
    workloads: Mapping[tuple[str, str, str], GpuWorkload],
    models: Mapping[usage_store.WorkloadKey, str],
) -> Recommendation | None:
    kind, namespace, name = key.kind, key.namespace, key.workload
    known = workloads.get((kind, namespace, name))
    replicas = known.replicas if known is not None else len(live)
    # the surplus never passes what runs now nor the replicas asked for (a workload scaled down since)
    surplus = min(activity.surplus, len(live), replicas)
    if surplus <= 0:
        return None
    keep = replicas - surplus
    per_pod = sum(p.gpus for p in live) / len(live)
    held = [gpu_nodes[p.node] for p in live if p.node is not None and p.node in gpu_nodes]
    prices = [n.price_per_gpu_hour for n in held if n.price_per_gpu_hour is not None]
    price = sum(prices) / len(prices) if prices else None
    idle_gpus = surplus * per_pod
    monthly = None if price is None else round(idle_gpus * price * efficiency.HOURS_PER_MONTH, 2)
    model = next((n.gpu_model for n in held if n.gpu_model), "") or models.get(key, "")
    instruction: SetReplicas | None = None
    summary = [
        f"{surplus} of {len(live)} pod(s) held {idle_gpus:g} {model or 'GPU'} GPU(s) idle "
        f"(engine activity under {usage_store.GPU_IDLE_BELOW:.0%}) in at least 95 % of "
        f"{activity.hours:.1f} h observed; mean activity {activity.mean:.1%}, busiest pod's p95 "
        f"{activity.p95_high:.1%}",
    ]
    if price is not None and monthly is not None:
        summary.append(
            f"wastes about ${monthly:.2f} a month: {idle_gpus:g} GPU(s) x ${price:.4f} per GPU-hour "
            f"({', '.join(sorted({n.capacity_type for n in held}))}) x {efficiency.HOURS_PER_MONTH:g} h"
        )
    if known is not None and known.autoscaled_by is not None:
        summary.append(
            f"HorizontalPodAutoscaler {known.autoscaled_by} scales it: lower its minReplicas to {keep} "
            "(the agent does not change replicas an HPA owns)"
        )
    elif known is not None and kind in ("Deployment", "StatefulSet"):
        instruction = gpu_advice.set_replicas(known, keep)
    else:
        summary.append(f"{kind}s are not scaled by the agent: stop or shrink it where it is made")
    confidence = min(1.0, activity.hours / settings.window_hours)
    target = (
        WorkloadRef(kind=kind, namespace=namespace, name=name)  # type: ignore[arg-type]
        if kind in ("Deployment", "StatefulSet")
        else None
    )
    generation = known.generation if known is not None else None
    window = inputs.window
    return Recommendation(
        kind=GPU_IDLE,
        fingerprint=f"{GPU_IDLE}:{kind}/{namespace}/{name}@{generation or ''}/{keep}"[:200],
        title=(
            f"Scale {kind} {namespace}/{name} from {replicas} to {keep} replica(s): {idle_gpus:g} "
            f"{model + ' ' if model else ''}GPU(s) idle over {activity.hours:.1f} h"
        )[:300],
        target=target,
        evidence={
            "source": "dcgm-exporter via Prometheus (agent)",
            "window_hours": round(window.hours, 2),
            "window_start": datetime.fromtimestamp(window.first, tz=_UTC).isoformat(),
            "step_seconds": window.step,
            "workload": f"{kind}/{namespace}/{name}",
            "gpu_model": model,
            "gpus_per_pod": per_pod,
            "idle_gpus": idle_gpus,
            "pods": len(live),
            "idle_pods": surplus,
            "replicas": replicas,
            "recommended_replicas": keep,
            "activity_mean": round(activity.mean, 4),
            "activity_p95_busiest_pod": round(activity.p95_high, 4),
            "idle_slots_share": round(activity.idle_slots_share, 4),
            "hours_observed": round(activity.hours, 2),
            "slots_observed": activity.slots,
            "price_per_gpu_hour_usd": None if price is None else round(price, 6),
            "capacity_types": sorted({n.capacity_type for n in held}),
            "autoscaled_by": None if known is None else known.autoscaled_by,
            "monthly_waste_usd": monthly,
            "summary": summary,
        },
        monthly_savings_usd=monthly,
        confidence=confidence,
        instruction=instruction,
    )
