"""Bin packing by preference: which nodes a new pod should fill first.

kube-scheduler's default scoring (NodeResourcesFit with LeastAllocated) sends each pod to the emptiest
nodes, which leaves many nodes partly used, and cluster-autoscaler removes a node only once its
requests fall below its utilization threshold (50 % by default). Half-used nodes are therefore paid
for all the time. Without reconfiguring the scheduler, the webhook can get the effect of the
MostAllocated strategy for the pods it places: it adds preferred node affinity terms for the fullest
nodes the pod may run on that still have room for it (`fullest_fitting`), with decreasing weights
(`PACKING_WEIGHTS`), so the scheduler fills those first and the emptier nodes drain and go away.

The terms are preferences: when none of those nodes has room any more (a burst of creations), the
scheduler's own scoring decides, as it would without them. Pure: the rooms are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shipshape.contracts.annotations import HEADROOM_LABEL
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType
from shipshape.kube import capacity as kube_capacity
from shipshape.kube import scheduling
from shipshape.kube.objects import node_ready
from shipshape.kube.wellknown import HOSTNAME_LABEL

# Weights of the preferred terms for the fullest node, the next one, ...: the scheduler normalises
# NodeAffinity scores to the best feasible node, so when the first node is full the second one
# takes the whole preference, and so on.
PACKING_WEIGHTS: tuple[int, ...] = (100, 50, 25)


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """Effective cpu (millicores) and memory (bytes) requests, as the scheduler counts them
    (`kube.scheduling.pod_requests`: containers, sidecars, init containers, overhead)."""
    requests = scheduling.pod_requests(pod)
    return requests.get("cpu", 0), requests.get("memory", 0)


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A node's allocatable resources and what its pods (and the pending ones packed onto it) request:
    cpu millicores, memory bytes, pod slots. `host` is the node's `kubernetes.io/hostname` label, what
    a preference names."""

    name: str
    host: str
    cpu_allocatable: int
    memory_allocatable: int
    pods_allocatable: int
    cpu_requested: int = 0
    memory_requested: int = 0
    pods: int = 0

    def fill_with(self, cpu: int, memory: int) -> float | None:
        """The node's mean cpu and memory fill once the pod is on it; None when it does not fit."""
        cpu_after, memory_after = self.cpu_requested + cpu, self.memory_requested + memory
        if (
            cpu_after > self.cpu_allocatable
            or memory_after > self.memory_allocatable
            or self.pods + 1 > self.pods_allocatable
            or self.cpu_allocatable <= 0
            or self.memory_allocatable <= 0
        ):
            return None
        return (cpu_after / self.cpu_allocatable + memory_after / self.memory_allocatable) / 2


def fullest_fitting(
    requests: tuple[int, int], rooms: Iterable[NodeRoom], limit: int = len(PACKING_WEIGHTS)
) -> tuple[NodeRoom, ...]:
    """The `limit` nodes that are fullest once the pod is on them, among those it fits, fullest first
    (ties by name, so every replica of the controller answers alike)."""
    cpu, memory = requests
    ranked: list[tuple[float, str, NodeRoom]] = []
    for room in rooms:
        fill = room.fill_with(cpu, memory)
        if fill is not None:
            ranked.append((-fill, room.name, room))
    ranked.sort(key=lambda item: item[:2])
    return tuple(room for _, _, room in ranked[:limit])


@dataclass(frozen=True, slots=True)
class Room:
    """Free requests on one node: cpu millicores, memory bytes, pod slots; `pool` is the node's spot
    pool (None on on-demand)."""

    pool: Pool | None
    cpu_millis: int
    memory_bytes: int
    pods: int


def takes_replacements(node: Mapping[str, Any], capacity: CapacityType | str | None = "") -> bool:
    """A Ready, schedulable on-demand or spot node without NoSchedule/NoExecute taints (not a GPU node,
    not cordoned, not under a notice, not being removed): where replacements after a notice can go.
    `capacity`: the node's capacity type where the caller knows it (else read by `kube.capacity`'s
    default conventions)."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    if capacity == "":
        capacity = kube_capacity.capacity_type_of(metadata.get("labels") or {})
    if capacity not in (CapacityType.ON_DEMAND.value, CapacityType.SPOT.value):
        return False
    if spec.get("unschedulable") or metadata.get("deletionTimestamp") or not node_ready(node):
        return False
    return not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or [])


def is_placeholder(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(HEADROOM_LABEL) == "true"


def packing_preferences(hosts: Iterable[str]) -> list[dict[str, Any]]:
    """Preferred node affinity terms for `hosts` (fullest first), weighted by `PACKING_WEIGHTS`."""
    return [
        {
            "weight": weight,
            "preference": {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [host]}]},
        }
        for weight, host in zip(PACKING_WEIGHTS, hosts, strict=False)
    ]
