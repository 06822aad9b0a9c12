"""The typed records the state hands out: what groups pods, what a workload is, and what the loops see
of a workload and its pods. Frozen: a view's readers may keep them across rounds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shipshape.controller.availability import disruption_allowance
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType, WorkloadKind, WorkloadPolicy

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True, order=True)
class GroupKey:
    """Pods decided together: those of one ReplicaSet (a Deployment revision) or one StatefulSet."""

    namespace: str
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    kind: WorkloadKind
    namespace: str
    name: str
    obj: Obj
    group: GroupKey

    @property
    def replicas(self) -> int:
        value = (self.obj.get("spec") or {}).get("replicas")
        return 1 if value is None else int(value)

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.obj.get("metadata", {}).get("annotations") or {}


@dataclass(frozen=True, slots=True)
class Assumption:
    """A placement the webhook decided for a pod not seen yet: it counts for its group until the pod
    appears (carrying the decision id) or `expires`."""

    group: GroupKey
    capacity: CapacityType
    pool: Pool | None
    expires: float


@dataclass(frozen=True, slots=True)
class PodState:
    name: str
    capacity: CapacityType | None
    pool: Pool | None
    node: str | None
    ready: bool
    ordinal: int | None = None
    cpu_millis: int = 0
    memory_bytes: int = 0
    deletion_cost: str | None = None


@dataclass(frozen=True, slots=True)
class WorkloadState:
    kind: WorkloadKind
    namespace: str
    name: str
    replicas: int
    policy: WorkloadPolicy
    pods: tuple[PodState, ...]
    # Fewest ready replicas allowed: the PDB's, else spec.replicas - maxUnavailable.
    floor: int
    # A rollout or a deletion is under way: the loops leave the workload alone until it settles.
    settling: bool = False

    @property
    def ready(self) -> int:
        return sum(1 for pod in self.pods if pod.ready)

    @property
    def allowance(self) -> int:
        """Replicas that may be unavailable at once (spec.replicas minus the floor)."""
        return disruption_allowance(self.replicas, self.floor)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind.value}/{self.name}"


@dataclass(frozen=True, slots=True)
class Managed:
    """A managed workload with a valid policy, as the loops see it."""

    ref: WorkloadRef
    state: WorkloadState
