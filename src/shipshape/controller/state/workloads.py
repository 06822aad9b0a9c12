"""What the loops see of a workload, derived from the state's objects: pure functions.

`ClusterState` calls these and keeps their answers (`ClusterState.workload_state`, `.policy_of`,
`.managed`) until an input changes; `tests/unit/controller/test_state_differential.py` checks the kept
answers against these functions run on a state rebuilt from scratch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shipshape.controller.availability import availability_floor
from shipshape.controller.packing import pod_requests
from shipshape.controller.placement import Pool, statefulset_ordinal
from shipshape.controller.policy import (
    CapacityType,
    ControllerConfig,
    PolicyResult,
    WorkloadKind,
    WorkloadPolicy,
    resolve_policy,
)
from shipshape.controller.state.records import GroupKey, PodState, WorkloadRef, WorkloadState
from shipshape.kube.objects import controller_ref, is_active, pod_ready
from shipshape.kube.wellknown import POD_DELETION_COST

if TYPE_CHECKING:
    from shipshape.controller.state.cluster import ClusterState

Obj = dict[str, Any]
Placement = tuple[CapacityType | None, Pool | None]


def workload_ref(kind: WorkloadKind, obj: Obj) -> WorkloadRef:
    metadata = obj.get("metadata") or {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name"))
    return WorkloadRef(kind, namespace, name, obj, GroupKey(namespace, kind.value, name))


def pod_state(pod: Mapping[str, Any], placement: Placement, kind: WorkloadKind) -> PodState:
    capacity, pool = placement
    cpu, memory = pod_requests(pod)
    metadata = pod.get("metadata") or {}
    return PodState(
        name=str(metadata.get("name")),
        capacity=capacity,
        pool=pool,
        node=(pod.get("spec") or {}).get("nodeName"),
        ready=pod_ready(pod),
        ordinal=statefulset_ordinal(pod) if kind is WorkloadKind.STATEFULSET else None,
        cpu_millis=cpu,
        memory_bytes=memory,
        deletion_cost=(metadata.get("annotations") or {}).get(POD_DELETION_COST),
    )


def build_workload_state(
    workload: WorkloadRef,
    policy: WorkloadPolicy,
    active: Sequence[Mapping[str, Any]],
    total: int,
    pod_states: Sequence[PodState],
    pdbs: Sequence[Mapping[str, Any]],
) -> WorkloadState:
    """The workload as the loops see it from its active pods (`active`, of `total` pods in all), their
    states (`pod_states`, in any order) and the PDBs matching it."""
    groups = {_controller_name(pod) for pod in active}
    replicas, floor = workload_head(workload, pdbs)
    return WorkloadState(
        kind=workload.kind,
        namespace=workload.namespace,
        name=workload.name,
        replicas=replicas,
        policy=policy,
        pods=tuple(sorted(pod_states, key=lambda p: p.name)),
        floor=floor,
        settling=len(groups) > 1 or len(active) != total,
    )


def workload_head(workload: WorkloadRef, pdbs: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """What a workload's state reads of its spec and PDBs: its replicas and its availability floor."""
    return workload.replicas, availability_floor(workload, pdbs)


def _controller_name(pod: Mapping[str, Any]) -> str:
    """The name of the pod's controller ("None" without one)."""
    ref = controller_ref(pod)
    return "None" if ref is None else str(ref.get("name"))


def resolve(
    kind: WorkloadKind, obj: Obj, labels: Mapping[str, str], config: ControllerConfig
) -> PolicyResult:
    """A workload's policy: none in the controller's own and excluded namespaces."""
    metadata = obj.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    if namespace == config.namespace or namespace in config.excluded_namespaces:
        return PolicyResult(managed=False)
    return resolve_policy(kind, metadata.get("annotations") or {}, labels, config)


def managed_kinds() -> tuple[WorkloadKind, ...]:
    return (WorkloadKind.DEPLOYMENT, WorkloadKind.STATEFULSET)


def recompute_managed(
    state: ClusterState, config: ControllerConfig
) -> list[tuple[WorkloadRef, WorkloadState]]:
    """Every managed workload with a valid policy and its state, worked out from the objects alone
    (nothing kept): what the kept answers of `ClusterState.managed` must equal."""
    found: list[tuple[WorkloadRef, WorkloadState]] = []
    for kind in managed_kinds():
        for obj in state.objects(kind.value):
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            namespace = str((obj.get("metadata") or {}).get("namespace") or "")
            result = resolve(kind, obj, state.namespace_labels(namespace), config)
            if not result.valid or result.policy is None:
                continue
            ref = workload_ref(kind, obj)
            pods = [pod for _, pod in state.keyed_pods_of_workload(ref)]
            active = [pod for pod in pods if is_active(pod)]
            states = [pod_state(pod, state.placement_of(pod), kind) for pod in active]
            labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            found.append(
                (
                    ref,
                    build_workload_state(
                        ref, result.policy, active, len(pods), states, state.pdbs_matching(namespace, labels)
                    ),
                )
            )
    return found
