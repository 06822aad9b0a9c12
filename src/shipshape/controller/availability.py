"""How many ready replicas a workload must keep: PodDisruptionBudgets and rolling-update settings.

Pure: Kubernetes' own arithmetic (IntOrString percentages, the disruption controller's desired
healthy count), shared by the webhook (a StatefulSet's disruption allowance caps its spot replicas per
zone) and the loops (no move or eviction takes a workload below its floor).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shipshape.controller.policy import WorkloadKind

if TYPE_CHECKING:
    from shipshape.controller.state.records import WorkloadRef


def scaled(value: int | str | None, total: int, *, round_up: bool, default: int) -> int:
    """An IntOrString (`3` or `"25%"`) against `total`, rounded as Kubernetes rounds it."""
    if value is None:
        return default
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        share = int(text[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(text)


def deployment_max_unavailable(deployment: Mapping[str, Any]) -> int:
    """maxUnavailable of a Deployment's rolling update (default 25 %, rounded down; 1 when surge is 0 too)."""
    spec = deployment.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return replicas
    rolling = strategy.get("rollingUpdate") or {}
    unavailable = scaled(rolling.get("maxUnavailable", "25%"), replicas, round_up=False, default=0)
    surge = scaled(rolling.get("maxSurge", "25%"), replicas, round_up=True, default=0)
    if unavailable == 0 and surge == 0:
        return 1
    return unavailable


def statefulset_max_unavailable(statefulset: Mapping[str, Any]) -> int:
    """maxUnavailable of a StatefulSet's rolling update (default 1; a percentage rounds down, at least 1)."""
    spec = statefulset.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    rolling = (spec.get("updateStrategy") or {}).get("rollingUpdate") or {}
    return max(1, scaled(rolling.get("maxUnavailable"), replicas, round_up=False, default=1))


def pdb_floor(pdb: Mapping[str, Any], expected: int) -> int:
    """Desired healthy pods of a PodDisruptionBudget, as the disruption controller computes it."""
    spec = pdb.get("spec") or {}
    if spec.get("minAvailable") is not None:
        return scaled(spec["minAvailable"], expected, round_up=True, default=0)
    if spec.get("maxUnavailable") is not None:
        return max(0, expected - scaled(spec["maxUnavailable"], expected, round_up=True, default=0))
    return 0


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
