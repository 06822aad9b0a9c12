"""Kubernetes' availability arithmetic for workloads: rolling-update fenceposts and PDB desired healthy.

One implementation of each rule, as the upstream controllers compute it, for every reader (the
emulator's Deployment and disruption controllers, the controller's availability floors, the
simulator's observer, the demo):

- a Deployment's rolling update (`deployment/util.ResolveFenceposts`): maxSurge rounds up,
  maxUnavailable rounds down, and both zero means maxUnavailable 1; a `Recreate` Deployment may
  have every replica down at once;
- a StatefulSet's rolling update (`getStatefulSetMaxUnavailable`): maxUnavailable (default 1)
  rounds down and is at least 1;
- a PodDisruptionBudget's desired healthy pods (`disruption.getExpectedPodCount`): maxUnavailable
  first (expected minus it, rounded up, never below 0), else minAvailable (an int as is, a
  percentage of the expected pods rounded up).

An invalid IntOrString raises `intstr.IntOrStringError`; what a reader does then (the disruption
controller's fail-safe, a controller keeping every replica) is its own decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shipshape.kube.intstr import scaled_value, value_or_default

Body = Mapping[str, Any]

# What the API server's defaulting puts in a Deployment's rolling update when the field is unset.
DEPLOYMENT_DEFAULT_MAX_SURGE = "25%"
DEPLOYMENT_DEFAULT_MAX_UNAVAILABLE = "25%"


def replicas(workload: Body) -> int:
    """`spec.replicas` (1 when unset, as defaulting makes it)."""
    value = (workload.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def resolve_fenceposts(deployment: Body) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) of a Deployment's rolling update (`ResolveFenceposts`)."""
    desired = replicas(deployment)
    rolling = ((deployment.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    surge = scaled_value(
        value_or_default(rolling.get("maxSurge"), DEPLOYMENT_DEFAULT_MAX_SURGE), desired, round_up=True
    )
    unavailable = scaled_value(
        value_or_default(rolling.get("maxUnavailable"), DEPLOYMENT_DEFAULT_MAX_UNAVAILABLE),
        desired,
        round_up=False,
    )
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def is_recreate(deployment: Body) -> bool:
    return ((deployment.get("spec") or {}).get("strategy") or {}).get("type") == "Recreate"


def deployment_max_unavailable(deployment: Body) -> int:
    """Replicas a Deployment's rollout may take down at once: every one for `Recreate`, else the
    rolling update's maxUnavailable (`resolve_fenceposts`)."""
    if is_recreate(deployment):
        return replicas(deployment)
    return resolve_fenceposts(deployment)[1]


def statefulset_max_unavailable(statefulset: Body) -> int:
    """maxUnavailable of a StatefulSet's rolling update: default 1, a percentage rounds down, at least 1."""
    desired = replicas(statefulset)
    rolling = ((statefulset.get("spec") or {}).get("updateStrategy") or {}).get("rollingUpdate") or {}
    return max(1, scaled_value(value_or_default(rolling.get("maxUnavailable"), 1), desired, round_up=False))


def pdb_desired_healthy(pdb_spec: Body, expected: int) -> int:
    """A PodDisruptionBudget's desired healthy pods out of `expected` (the pods its selector's
    controllers want), as the disruption controller computes it; 0 when it sets neither field."""
    max_unavailable = pdb_spec.get("maxUnavailable")
    if max_unavailable is not None:
        return max(0, expected - scaled_value(max_unavailable, expected, round_up=True))
    min_available = pdb_spec.get("minAvailable")
    if min_available is not None:
        return scaled_value(min_available, expected, round_up=True)
    return 0
