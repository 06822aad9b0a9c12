"""What the dashboard shows of one cluster, from its stored objects: nodes by pool, cost per hour
beside on-demand, spot share per workload, requested and used CPU and memory over allocatable, pod
and node start-up (the start-up analyzers). The per-cluster time series (`series.py`) are points of
these same figures."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from shipshape.analyzers.startup.analysis import (
    analyze_node_startup,
    analyze_pod_startup,
    pod_end_to_end,
)
from shipshape.backend.analysis import capacity_of, price_of
from shipshape.backend.usage import NodeUsed
from shipshape.kube import objects as kube_objects
from shipshape.kube import wellknown
from shipshape.kube.scheduling import node_allocatable, pod_requests

Obj = Mapping[str, Any]
KINDS = ("nodes", "pods", "replicasets", "events")


def _owner(pod: Obj, rs_owner: Mapping[tuple[str, str], kube_objects.WorkloadRef]) -> str | None:
    """`Kind/name` of the pod's workload (a ReplicaSet's by the ReplicaSet's controller); None for a
    DaemonSet's pod or one without a controller."""
    owner = kube_objects.workload_of(pod, lambda namespace, name: rs_owner.get((namespace, name)))
    return None if owner is None or owner.kind == "DaemonSet" else str(owner)


def utilisation(
    nodes: Sequence[Obj], pods: Sequence[Obj], used: Mapping[str, NodeUsed] | None = None
) -> dict[str, float | None]:
    """Requests of the pods bound to the cluster's nodes (not finished) over the nodes' allocatable,
    for CPU and memory; None where the nodes report no allocatable of that resource.

    With `used` (per node name), also the nodes' usage over the allocatable of the nodes that have
    usage (a node without a sample neither adds usage nor allocatable, so a gap does not read as
    idle). Node usage is what the node really runs, system daemons and the kubelet included, so it can
    pass the pods' share and, on a busy node, its allocatable. None without usage."""
    allocatable = {"cpu": 0, "memory": 0}
    sampled = {"cpu": 0, "memory": 0}
    in_use = {"cpu": 0.0, "memory": 0.0}
    names = set()
    for node in nodes:
        name = node.get("metadata", {}).get("name")
        names.add(name)
        amounts = node_allocatable(node)
        for resource in allocatable:
            allocatable[resource] += amounts.get(resource, 0)
        found = (used or {}).get(str(name))
        if found is not None:
            sampled["cpu"] += amounts.get("cpu", 0)
            sampled["memory"] += amounts.get("memory", 0)
            in_use["cpu"] += found.cpu_cores * 1000  # allocatable CPU is in millicores
            in_use["memory"] += found.memory_bytes
    requested = {"cpu": 0, "memory": 0}
    for pod in pods:
        if pod.get("spec", {}).get("nodeName") not in names:
            continue
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        amounts = pod_requests(pod)
        for resource in requested:
            requested[resource] += amounts.get(resource, 0)
    out: dict[str, float | None] = {
        f"{resource}_requested_ratio": (
            round(requested[resource] / allocatable[resource], 4) if allocatable[resource] else None
        )
        for resource in ("cpu", "memory")
    }
    for resource in ("cpu", "memory"):
        out[f"{resource}_used_ratio"] = (
            round(in_use[resource] / sampled[resource], 4) if sampled[resource] else None
        )
    return out


# Bucket edges (seconds) of the dashboard's start-up histogram.
BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


def histogram(values: Sequence[float]) -> list[dict[str, Any]]:
    """Counts per bucket: `<= 1 s`, `1-2 s`, ..., `> 300 s`."""
    counts = [0] * (len(BUCKETS) + 1)
    for value in values:
        index = next((i for i, edge in enumerate(BUCKETS) if value <= edge), len(BUCKETS))
        counts[index] += 1
    labels = [f"<= {BUCKETS[0]:g} s"]
    labels += [f"{lo:g}-{hi:g} s" for lo, hi in itertools.pairwise(BUCKETS)]
    labels.append(f"> {BUCKETS[-1]:g} s")
    return [{"bucket": label, "pods": count} for label, count in zip(labels, counts, strict=True)]


# What the cost figures and the pods' end-to-end start-up need (the time series' kinds); the start-up
# analyses also read events (the largest kind by far).
COST_KINDS = ("nodes", "pods", "replicasets")


def summarize(
    objects: Mapping[str, Sequence[Obj]],
    slowest: int = 20,
    *,
    startup: bool | Literal["end-to-end"] = True,
    used: Mapping[str, NodeUsed] | None = None,
) -> dict[str, Any]:
    """The cluster's figures; `startup=False` leaves out the start-up analyses (the clusters overview
    shows cost and spot share only), `startup="end-to-end"` keeps only the pods' end-to-end start-up
    stats (`pod_startup.endToEnd`, the full analysis' `pod_startup.overall.endToEnd`: what the time
    series takes, from the pods alone); `used`: the nodes' usage in the newest usage slot, when fresh
    (`series.node_usage_now`), for the used ratios."""
    nodes = list(objects.get("nodes", ()))
    pods = list(objects.get("pods", ()))
    events = list(objects.get("events", ()))
    pools: dict[tuple[str, str, str], dict[str, Any]] = {}
    capacity: dict[str, str] = {}
    now_rate = on_demand_rate = 0.0
    for node in nodes:
        labels = node.get("metadata", {}).get("labels") or {}
        kind = capacity_of(node)
        capacity[node["metadata"]["name"]] = kind
        key = (
            labels.get(wellknown.INSTANCE_TYPE_LABEL, "?"),
            labels.get(wellknown.ZONE_LABEL, "?"),
            kind,
        )
        row = pools.setdefault(
            key, {"instance_type": key[0], "zone": key[1], "capacity_type": kind, "nodes": 0, "ready": 0}
        )
        row["nodes"] += 1
        row["ready"] += kube_objects.node_ready(node)
        price = price_of(node)
        if price is not None:
            now_rate += price.spot if kind == "spot" else price.on_demand
            on_demand_rate += price.on_demand
    rs_owner = {}
    for rs in objects.get("replicasets", ()):
        controller = kube_objects.controller_workload(rs)
        if controller is not None:
            rs_owner[kube_objects.key(rs)] = controller
    per_workload: dict[str, Counter[str]] = {}
    for pod in pods:
        owner = _owner(pod, rs_owner)
        node = pod.get("spec", {}).get("nodeName")
        if owner is None or not node or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        namespace = pod["metadata"].get("namespace", "")
        per_workload.setdefault(f"{namespace}/{owner}", Counter())[capacity.get(node, "unknown")] += 1
    on_spot = sum(c["spot"] for c in per_workload.values())
    placed = sum(sum(c.values()) for c in per_workload.values())
    figures: dict[str, Any] = {
        "nodes": len(nodes),
        "pods": len(pods),
        "pools": sorted(pools.values(), key=lambda p: (p["capacity_type"], p["instance_type"], p["zone"])),
        "cost": {
            "usd_per_hour": round(now_rate, 4),
            "on_demand_usd_per_hour": round(on_demand_rate, 4),
            "savings_pct": round(100 * (1 - now_rate / on_demand_rate), 1) if on_demand_rate else None,
        },
        "spot_share_pct": round(100 * on_spot / placed, 1) if placed else None,
        "utilisation": utilisation(nodes, pods, used),
        "workloads": [
            {"workload": name, "spot": c["spot"], "on_demand": c["on-demand"], "other": c["unknown"]}
            for name, c in sorted(per_workload.items())
        ],
    }
    if startup == "end-to-end":
        stats = pod_end_to_end(pods)
        figures["pod_startup"] = {"endToEnd": None if stats is None else stats.to_json()}
    elif startup:
        report = analyze_pod_startup(pods, events, nodes)
        node_report = analyze_node_startup(nodes, pods, events).to_json()
        latencies = [t.end_to_end for t in report.timelines if t.end_to_end is not None]
        figures["pod_startup"] = {**report.to_json(slowest=slowest), "histogram": histogram(latencies)}
        figures["node_startup"] = {**node_report, "nodes": node_report["nodes"][:50]}
    return figures
