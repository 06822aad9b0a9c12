"""Spot adoption: workloads that run wholly on on-demand nodes and could put most replicas on spot
under the placement controller's rules, with the money that would save. Pure.

Only in a cluster that has spot nodes. For a Deployment (2 replicas or more) or StatefulSet (3 or
more) that has not opted in, the recommended policy is the controller's default (`on-demand-base`
1, 100 % of the rest on spot), so `replicas - 1` pods would move. What one pod costs is its share
of its node (the larger of its CPU and memory requests over the node's allocatable) times the
node's hourly price; on spot it would cost the same share of the spot price of the same instance
type. Savings are monthly (730 h). Confidence is lower when prices are unknown for some nodes or
requests are missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shipshape.contracts.annotations import ENABLED, ON_DEMAND_BASE
from shipshape.contracts.instructions import Precondition, Recommendation, SetSpotPolicy, WorkloadRef
from shipshape.kube import objects as kube_objects
from shipshape.kube import scheduling, wellknown
from shipshape.kube.quantity import QuantityError, resource_amount

Obj = Mapping[str, Any]
HOURS_PER_MONTH = 730.0
KIND = "spot-adoption"


@dataclass(frozen=True, slots=True)
class NodePrice:
    on_demand: float  # USD/h of this node's instance type on demand
    spot: float  # USD/h of the same type on spot


@dataclass(frozen=True, slots=True)
class SpotAdoptionSettings:
    min_deployment_replicas: int = 2
    min_statefulset_replicas: int = 3
    on_demand_base: int = 1
    # Below this monthly saving a finding is not worth anyone's time.
    min_monthly_savings_usd: float = 1.0


def recommend(
    objects: Mapping[str, Sequence[Obj]],
    capacity_of: Callable[[Obj], str | None],
    price_of: Callable[[Obj], NodePrice | None],
    settings: SpotAdoptionSettings = SpotAdoptionSettings(),
) -> list[Recommendation]:
    """Findings over a cluster's objects by API plural (`nodes`, `pods`, `deployments`,
    `replicasets`, `statefulsets`); `capacity_of(node)` is `spot`, `on-demand` or None."""
    nodes = {n["metadata"]["name"]: n for n in objects.get("nodes", ())}
    if not any(capacity_of(n) == "spot" for n in nodes.values()):
        return []  # no spot capacity in this cluster to move to (a node group to add is another finding)
    owner_of_rs = {
        (rs["metadata"].get("namespace", ""), rs["metadata"]["name"]): _controller(rs)
        for rs in objects.get("replicasets", ())
    }
    pods_by_workload: dict[tuple[str, str, str], list[Obj]] = {}
    for pod in objects.get("pods", ()):
        owner = _controller(pod)
        if owner is None or pod.get("status", {}).get("phase") not in ("Running", "Pending"):
            continue
        namespace = pod["metadata"].get("namespace", "")
        kind, name = owner
        if kind == "ReplicaSet":
            parent = owner_of_rs.get((namespace, name))
            if parent is None or parent[0] != "Deployment":
                continue
            kind, name = parent
        pods_by_workload.setdefault((kind, namespace, name), []).append(pod)

    findings = []
    for kind, plural, minimum in (
        ("Deployment", "deployments", settings.min_deployment_replicas),
        ("StatefulSet", "statefulsets", settings.min_statefulset_replicas),
    ):
        for workload in objects.get(plural, ()):
            finding = _finding(
                kind, workload, minimum, pods_by_workload, nodes, capacity_of, price_of, settings
            )
            if finding is not None:
                findings.append(finding)
    return sorted(findings, key=lambda f: -(f.monthly_savings_usd or 0.0))


def _finding(
    kind: str,
    workload: Obj,
    minimum: int,
    pods_by_workload: Mapping[tuple[str, str, str], list[Obj]],
    nodes: Mapping[str, Obj],
    capacity_of: Callable[[Obj], str | None],
    price_of: Callable[[Obj], NodePrice | None],
    settings: SpotAdoptionSettings,
) -> Recommendation | None:
    meta = workload["metadata"]
    annotations = meta.get("annotations") or {}
    if annotations.get(ENABLED) in ("true", "false"):
        return None  # opted in already, or deliberately out
    replicas = int((workload.get("spec") or {}).get("replicas", 1))
    if replicas < minimum:
        return None
    namespace, name = meta.get("namespace", ""), meta["name"]
    pods = pods_by_workload.get((kind, namespace, name), [])
    bound = [(p, nodes.get(p.get("spec", {}).get("nodeName") or "")) for p in pods]
    placed = [(p, n) for p, n in bound if n is not None]
    if not placed or any(capacity_of(n) == "spot" for _, n in placed):
        return None  # nothing running yet, or it already uses spot
    per_pod_saving: list[float] = []
    unpriced = unrequested = 0
    hourly_now = 0.0
    for pod, node in placed:
        share = _share(pod, node)
        price = price_of(node)
        if share is None:
            unrequested += 1
            continue
        if price is None:
            unpriced += 1
            continue
        hourly_now += share * price.on_demand
        per_pod_saving.append(share * max(0.0, price.on_demand - price.spot))
    moving = max(0, replicas - settings.on_demand_base)
    if not per_pod_saving or moving == 0:
        return None
    mean_saving = sum(per_pod_saving) / len(per_pod_saving)
    monthly = round(mean_saving * moving * HOURS_PER_MONTH, 2)
    if monthly < settings.min_monthly_savings_usd:
        return None
    confidence = 0.8 * (len(per_pod_saving) / len(placed))
    generation = int(meta.get("generation") or 1)
    target = WorkloadRef(kind=kind, namespace=namespace, name=name)  # type: ignore[arg-type]
    return Recommendation(
        kind=KIND,
        fingerprint=f"{KIND}:{target.text()}",
        title=f"Run {moving} of {name}'s {replicas} replicas on spot",
        target=target,
        evidence={
            "replicas": replicas,
            "pods_on_on_demand": len(placed),
            "instance_types": sorted(
                {
                    str((n.get("metadata", {}).get("labels") or {}).get(wellknown.INSTANCE_TYPE_LABEL, "?"))
                    for _, n in placed
                }
            ),
            "hourly_cost_now_usd": round(hourly_now / max(1, len(per_pod_saving)) * len(placed), 4),
            "pods_without_requests": unrequested,
            "pods_on_unpriced_nodes": unpriced,
            "policy": {"on-demand-base": settings.on_demand_base, "spot-percentage": 100},
        },
        monthly_savings_usd=monthly,
        confidence=round(confidence, 2),
        instruction=SetSpotPolicy(
            target=target,
            precondition=Precondition(generation=generation),
            annotations={ENABLED: "true", ON_DEMAND_BASE: str(settings.on_demand_base)},
        ),
    )


def _controller(obj: Obj) -> tuple[str, str] | None:
    owner = kube_objects.controller_workload(obj)
    return None if owner is None else (owner.kind, owner.name)


def _share(pod: Obj, node: Obj) -> float | None:
    """The larger of the pod's CPU and memory requests over the node's allocatable (None without requests).
    Requests as the scheduler counts them (`kube.scheduling.pod_requests`)."""
    requests = scheduling.pod_requests(pod)
    cpu, memory = requests.get("cpu", 0), requests.get("memory", 0)
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    try:
        node_cpu = resource_amount("cpu", allocatable.get("cpu", 0))
        node_memory = resource_amount("memory", allocatable.get("memory", 0))
    except QuantityError:
        return None
    if (cpu == 0 and memory == 0) or node_cpu == 0 or node_memory == 0:
        return None
    return min(1.0, max(cpu / node_cpu, memory / node_memory))
