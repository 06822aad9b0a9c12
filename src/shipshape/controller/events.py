"""core/v1 Event bodies the controller records on workloads (built here, posted by the loops)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shipshape.controller.policy import PolicyProblem
from shipshape.kube.clock import rfc3339

Obj = dict[str, Any]
COMPONENT = "shipshape-controller"
INVALID_POLICY = "InvalidSpotPolicy"
INTERRUPTION_RESPONSE = "SpotInterruptionResponse"
REBALANCED = "SpotRebalanced"
FALLBACK = "SpotFallback"

_API_VERSIONS = {
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "Pod": "v1",
    "Node": "v1",
}


def event_for(
    obj: Mapping[str, Any],
    kind: str,
    reason: str,
    message: str,
    *,
    now: float,
    warning: bool = False,
    instance: str = "",
) -> Obj:
    """An Event about `obj`, named as client-go's recorder names them (`<object>.<hex nanoseconds>`)."""
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name") or "")
    namespace = str(metadata.get("namespace") or "default")
    stamp = rfc3339(now)
    involved: Obj = {
        "apiVersion": _API_VERSIONS.get(kind, "v1"),
        "kind": kind,
        "name": name,
        "namespace": namespace,
    }
    for field in ("uid", "resourceVersion"):
        if metadata.get(field):
            involved[field] = metadata[field]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{int(now * 1e9):x}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def invalid_policy_event(
    workload: Mapping[str, Any],
    kind: str,
    problems: Sequence[PolicyProblem],
    *,
    now: float,
    instance: str = "",
) -> Obj:
    message = "; ".join(str(problem) for problem in problems) + "; placement left unchanged"
    return event_for(workload, kind, INVALID_POLICY, message, now=now, warning=True, instance=instance)
