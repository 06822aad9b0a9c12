"""How many ready replicas a workload must keep: PodDisruptionBudgets and rolling-update settings.

Pure: Kubernetes' own arithmetic (`kube.workloads`: IntOrString percentages, rolling-update
fenceposts, the disruption controller's desired healthy count) with the controller's answer to
invalid values, shared by the webhook (a StatefulSet's disruption allowance caps its spot replicas
per zone) and the loops (no move or eviction takes a workload below its floor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shipshape.controller.policy import WorkloadKind
from shipshape.kube import workloads
from shipshape.kube.intstr import IntOrStringError

if TYPE_CHECKING:
    from shipshape.controller.state.records import WorkloadRef


def deployment_max_unavailable(deployment: Mapping[str, Any]) -> int:
    """Replicas a Deployment's rollout may take down at once (`kube.workloads`); 0 for a rolling update
    whose values are invalid (the API server refuses them; nothing is assumed disposable)."""
    try:
        return workloads.deployment_max_unavailable(deployment)
    except IntOrStringError:
        return 0


def statefulset_max_unavailable(statefulset: Mapping[str, Any]) -> int:
    """maxUnavailable of a StatefulSet's rolling update (`kube.workloads`); 1 for invalid values."""
    try:
        return workloads.statefulset_max_unavailable(statefulset)
    except IntOrStringError:
        return 1


def pdb_floor(pdb: Mapping[str, Any], expected: int) -> int:
    """Desired healthy pods of a PodDisruptionBudget, as the disruption controller computes it.

    A budget whose values are invalid keeps every expected pod: the disruption controller's fail-safe
    allows no disruption for it.
    """
    try:
        return workloads.pdb_desired_healthy(pdb.get("spec") or {}, expected)
    except IntOrStringError:
        return expected


def availability_floor(workload: WorkloadRef, pdbs: Sequence[Mapping[str, Any]]) -> int:
    """Fewest ready replicas allowed: the strictest selecting PDB's, else spec.replicas - maxUnavailable."""
    replicas = workload.replicas
    floors = [pdb_floor(pdb, replicas) for pdb in pdbs]
    if not floors:
        if workload.kind is WorkloadKind.DEPLOYMENT:
            floors.append(replicas - deployment_max_unavailable(workload.obj))
        else:
            floors.append(replicas - statefulset_max_unavailable(workload.obj))
    return max(0, min(replicas, max(floors)))


def disruption_allowance(replicas: int, floor: int) -> int:
    """Replicas that may be unavailable at once: spec.replicas minus the floor."""
    return max(0, replicas - floor)
