"""Bodies for on-demand headroom: a PriorityClass below every workload and placeholder Deployments.

Placeholders are pause containers with the requests of the pods one spot pool could lose that would
not already fit in the free on-demand capacity (`uncovered_plan`); replacements preempt them and start at
once instead of waiting for a node, and the preempted placeholders wait for (or trigger) new on-demand
capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shipshape.controller.decisions import HeadroomPlan, PodState, headroom_plan, pod_requests
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CAPACITY_LABEL, CapacityType
from shipshape.kube.quantity import format_bytes, format_cpu
from shipshape.kube.scheduling import node_allocatable

Obj = dict[str, Any]
PRIORITY_CLASS = "shipshape-headroom"
# Below the default priority (0) of every workload without a PriorityClass.
PRIORITY_VALUE = -1000
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
HEADROOM_LABEL = "spot.shipshape.dev/headroom"


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _takes_placeholders(node: Mapping[str, Any]) -> bool:
    """A Ready, schedulable on-demand node without NoSchedule/NoExecute taints (the placeholders
    tolerate none), e.g. not a GPU node, not cordoned, not being removed."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    if (metadata.get("labels") or {}).get(CAPACITY_LABEL) != CapacityType.ON_DEMAND.value:
        return False
    if spec.get("unschedulable") or metadata.get("deletionTimestamp") or not _ready(node):
        return False
    return not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or [])


def _is_placeholder(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(HEADROOM_LABEL) == "true"


def _is_daemon(pod: Mapping[str, Any]) -> bool:
    return any(
        ref.get("kind") == "DaemonSet" for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
    )


def on_demand_spare(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[list[int]]:
    """Free [cpu millicores, memory bytes, pod slots] on each on-demand node that runs workload pods
    and could take placeholders.

    The room placeholders hold counts as free (replacements preempt them), which keeps the answer
    independent of where the placeholders landed. Nodes without a workload pod (only DaemonSet pods
    and placeholders) count for nothing: the autoscaler may remove them, unless the placeholders this
    plan asks for keep them.
    """
    free: dict[str, list[int]] = {}
    for node in nodes:
        if _takes_placeholders(node):
            allocatable = node_allocatable(node)
            name = str((node.get("metadata") or {}).get("name"))
            free[name] = [
                allocatable.get("cpu", 0),
                allocatable.get("memory", 0),
                allocatable.get("pods", 110),
            ]
    held: set[str] = set()
    for pod in pods:
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        slot = free.get(node_name)
        if slot is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if _is_placeholder(pod):
            continue
        if not _is_daemon(pod):
            held.add(node_name)
        cpu, memory = pod_requests(pod)
        slot[0] -= cpu
        slot[1] -= memory
        slot[2] -= 1
    return [
        slot for name, slot in free.items() if name in held and slot[0] > 0 and slot[1] > 0 and slot[2] > 0
    ]


def _not_fitting(lost: Sequence[PodState], spare: Sequence[Sequence[int]]) -> list[PodState]:
    """The lost pods that first-fit decreasing (by cpu, then memory) cannot place in the spare room."""
    room = [list(slot) for slot in spare]
    left: list[PodState] = []
    for pod in sorted(lost, key=lambda p: (p.cpu_millis, p.memory_bytes, p.name), reverse=True):
        for slot in room:
            if slot[0] >= pod.cpu_millis and slot[1] >= pod.memory_bytes and slot[2] >= 1:
                slot[0] -= pod.cpu_millis
                slot[1] -= pod.memory_bytes
                slot[2] -= 1
                break
        else:
            left.append(pod)
    return left


def uncovered_plan(
    pods_by_pool: Mapping[Pool, Sequence[PodState]], spare: Sequence[Sequence[int]]
) -> HeadroomPlan:
    """Placeholders for the largest set of pods one spot pool could lose that would not already fit
    in the spare on-demand room (`on_demand_spare`).

    Sizing them for every pod of the pool keeps on-demand nodes that hold nothing but placeholders
    while the on-demand pools (at their minimum size, or half empty) already have room for the
    replacements.
    """
    uncovered = {pool: _not_fitting(pods, spare) for pool, pods in pods_by_pool.items()}
    return headroom_plan({pool: pods for pool, pods in uncovered.items() if pods})


def priority_class(name: str = PRIORITY_CLASS, value: int = PRIORITY_VALUE) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "Shipshape headroom placeholders: preempted first by any workload.",
    }


def _packed_together() -> Obj:
    """Placeholders prefer nodes that already hold placeholders.

    Spread by the scheduler's default scoring (LeastAllocated), a few placeholders on every
    otherwise-empty on-demand node keep each of those nodes from being scaled down; packed, the
    headroom holds as few nodes as its size needs.
    """
    return {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {HEADROOM_LABEL: "true"}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }


def placeholder_deployments(
    plan: HeadroomPlan, namespace: str, priority_class_name: str = PRIORITY_CLASS
) -> list[Obj]:
    """One Deployment per placeholder shape, pinned to on-demand nodes."""
    bodies: list[Obj] = []
    for shape in plan.placeholders:
        if shape.cpu_millis <= 0 and shape.memory_bytes <= 0:
            continue
        name = f"shipshape-headroom-{shape.cpu_millis}m-{shape.memory_bytes // 2**20}mi"
        labels = {HEADROOM_LABEL: "true", "app.kubernetes.io/name": name}
        requests: Obj = {}
        if shape.cpu_millis > 0:
            requests["cpu"] = format_cpu(shape.cpu_millis)
        if shape.memory_bytes > 0:
            requests["memory"] = format_bytes(shape.memory_bytes)
        bodies.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {
                    "replicas": shape.count,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "priorityClassName": priority_class_name,
                            "terminationGracePeriodSeconds": 0,
                            "automountServiceAccountToken": False,
                            "nodeSelector": {CAPACITY_LABEL: CapacityType.ON_DEMAND.value},
                            "affinity": _packed_together(),
                            "containers": [
                                {
                                    "name": "pause",
                                    "image": PAUSE_IMAGE,
                                    "resources": {"requests": requests, "limits": requests},
                                }
                            ],
                        },
                    },
                },
            }
        )
    return bodies
