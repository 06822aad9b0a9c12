"""The headroom keeper's decisions (`loops/headroom.py`) and bodies for on-demand headroom: a
PriorityClass below every workload and placeholder Deployments.

Placeholders are pause containers with the requests of the pods one spot pool could lose that would
not already fit in the room left on other nodes (`uncovered_plan`); replacements preempt them and start at
once instead of waiting for a node, and the preempted placeholders wait for (or trigger) new on-demand
capacity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shipshape.contracts.annotations import HEADROOM_LABEL
from shipshape.controller.packing import Room
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType
from shipshape.controller.state import PodState, WorkloadState
from shipshape.kube import capacity as kube_capacity
from shipshape.kube.quantity import format_bytes, format_cpu

Obj = dict[str, Any]
PRIORITY_CLASS = "shipshape-headroom"
# Below the default priority (0) of every workload without a PriorityClass, and above
# cluster-autoscaler's expendable cutoff (`--expendable-pods-priority-cutoff`, default -10): pods
# below the cutoff neither trigger a scale-up nor keep a node from being scaled down, so placeholders
# there would hold no capacity at all (the overprovisioning pattern of cluster-autoscaler's FAQ uses -1).
PRIORITY_VALUE = -1
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True, slots=True, order=True)
class PlaceholderShape:
    cpu_millis: int
    memory_bytes: int
    count: int


@dataclass(frozen=True, slots=True)
class HeadroomPlan:
    pool: Pool | None
    cpu_millis: int
    memory_bytes: int
    placeholders: tuple[PlaceholderShape, ...]


def headroom_plan(pods_by_pool: Mapping[Pool, Sequence[PodState]], cpu_per_gib: float = 0.25) -> HeadroomPlan:
    """Placeholders sized from the largest set of pods one spot pool could lose.

    "Largest" is by requests, cpu and memory weighed together (`cpu_per_gib` cores per GiB). One
    placeholder per lost pod, grouped by shape, so that each replacement preempts one placeholder of
    its own size and starts at once.
    """

    def weight(pods: Sequence[PodState]) -> tuple[float, int]:
        cpu = sum(p.cpu_millis for p in pods) / 1000
        memory = sum(p.memory_bytes for p in pods) / 2**30 * cpu_per_gib
        return cpu + memory, len(pods)

    if not pods_by_pool:
        return HeadroomPlan(None, 0, 0, ())
    pool = max(sorted(pods_by_pool), key=lambda p: weight(pods_by_pool[p]))
    lost = pods_by_pool[pool]
    shapes = Counter((pod.cpu_millis, pod.memory_bytes) for pod in lost)
    placeholders = tuple(
        sorted(
            (PlaceholderShape(cpu, memory, count) for (cpu, memory), count in shapes.items()), reverse=True
        )
    )
    return HeadroomPlan(
        pool=pool,
        cpu_millis=sum(p.cpu_millis for p in lost),
        memory_bytes=sum(p.memory_bytes for p in lost),
        placeholders=placeholders,
    )


def spot_pods_by_pool(states: Iterable[WorkloadState]) -> dict[Pool, list[PodState]]:
    grouped: dict[Pool, list[PodState]] = {}
    for state in states:
        for pod in state.pods:
            if pod.capacity is CapacityType.SPOT and pod.pool is not None:
                grouped.setdefault(pod.pool, []).append(pod)
    return grouped


def _not_fitting(lost: Sequence[PodState], rooms: Iterable[Room]) -> list[PodState]:
    """The lost pods that first-fit decreasing (by cpu, then memory) cannot place in the rooms.

    Pods of one shape are placed together: a room takes as many of them as fit before the next room
    is tried, which is what placing them one by one gives, in shapes x rooms steps instead of
    pods x rooms (a pool holds hundreds of pods of a handful of shapes).
    """
    left_in = [[room.cpu_millis, room.memory_bytes, room.pods] for room in rooms]
    by_shape: dict[tuple[int, int], list[PodState]] = {}
    for pod in sorted(lost, key=lambda p: (p.cpu_millis, p.memory_bytes, p.name), reverse=True):
        by_shape.setdefault((pod.cpu_millis, pod.memory_bytes), []).append(pod)
    left: list[PodState] = []
    for (cpu, memory), pods in by_shape.items():
        placed = 0
        for slot in left_in:
            if placed == len(pods):
                break
            fits = min(
                len(pods) - placed,
                slot[2],
                slot[0] // cpu if cpu > 0 else len(pods),
                slot[1] // memory if memory > 0 else len(pods),
            )
            if fits <= 0:
                continue
            slot[0] -= fits * cpu
            slot[1] -= fits * memory
            slot[2] -= fits
            placed += fits
        left.extend(pods[placed:])
    return left


def pods_to_cover(states: Iterable[WorkloadState], covers: str = "floor") -> dict[Pool, list[PodState]]:
    """Per spot pool, the pods whose replacements headroom should hold room for if that pool is lost.

    "pool": every spot pod. "floor": only the pods a workload cannot lose without going below its
    floor — for each pool, its ready pods there beyond the workload's slack (ready replicas above the
    floor now); the others' replacements may wait for a new node, the workload stays at its floor.
    A workload mid-rollout has less slack, so it asks for more.
    """
    if covers == "pool":
        return spot_pods_by_pool(states)
    grouped: dict[Pool, list[PodState]] = {}
    for state in states:
        by_pool: dict[Pool, list[PodState]] = {}
        for pod in state.pods:
            if pod.capacity is CapacityType.SPOT and pod.pool is not None and pod.ready:
                by_pool.setdefault(pod.pool, []).append(pod)
        slack = max(0, state.ready - state.floor)
        for pool, pods in by_pool.items():
            short = len(pods) - slack
            if short > 0:
                grouped.setdefault(pool, []).extend(pods[:short])
    return grouped


def uncovered_plan(pods_by_pool: Mapping[Pool, Sequence[PodState]], rooms: Sequence[Room]) -> HeadroomPlan:
    """Placeholders for the largest set of pods one spot pool could lose that would not already fit
    in the room left on the nodes outside that pool (`ClusterState.spare_rooms`): on-demand nodes and
    the other spot pools' nodes, where the replacements, steered off the doomed pool, go.

    Sizing them for every pod of the pool keeps on-demand nodes that hold nothing but placeholders
    while the cluster already has room for the replacements.
    """
    uncovered = {
        pool: _not_fitting(pods, (room for room in rooms if room.pool != pool))
        for pool, pods in pods_by_pool.items()
    }
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


def _on_demand_affinity(terms: Sequence[Sequence[Obj]] | None) -> Obj:
    """Placeholders prefer nodes that hold placeholders and require on-demand nodes, selected by the
    capacity labels the nodes carry (`terms`, `ClusterState.capacity_terms`; by default the original
    convention's label)."""
    if terms is None:
        key, value = kube_capacity.CAPACITY_LABEL, CapacityType.ON_DEMAND.value
        terms = [[{"key": key, "operator": "In", "values": [value]}]]
    affinity = _packed_together()
    if any(terms):
        selector = [{"matchExpressions": list(term)} for term in terms]
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": selector}
        }
    return affinity


def placeholder_deployments(
    plan: HeadroomPlan,
    namespace: str,
    priority_class_name: str = PRIORITY_CLASS,
    on_demand_terms: Sequence[Sequence[Obj]] | None = None,
) -> list[Obj]:
    """One Deployment per placeholder shape, pinned to on-demand nodes (`on_demand_terms`)."""
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
                            "affinity": _on_demand_affinity(on_demand_terms),
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
