"""A small pod-fits-node check for the autoscaler when no scheduler model is registered.

Resources (requests), pod count, nodeSelector, required node affinity and NoSchedule/NoExecute
taints, with the scheduler's reason strings. The scheduler model's `fits` is preferred: it is the
real filter chain; this one exists so the cloud model can be used (and tested) on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shipshape.kube.quantity import resource_amount
from shipshape.kube.scheduling import pod_requests

Obj = dict[str, Any]


def _requirement_matches(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = req.get("key", ""), req.get("operator", "")
    values = list(req.get("values") or [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_affinity_matches(pod: Obj, node_labels: Mapping[str, str]) -> bool:
    spec = pod.get("spec", {})
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node_labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(
        all(_requirement_matches(req, node_labels) for req in term.get("matchExpressions") or [])
        and bool(term.get("matchExpressions") or term.get("matchFields"))
        for term in terms
    )


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for tol in tolerations:
        effect = tol.get("effect", "")
        if effect and effect != taint.get("effect"):
            continue
        op = tol.get("operator", "Equal")
        key = tol.get("key", "")
        if op == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def fits(pod: Obj, node: Obj, pods_on_node: Iterable[Obj]) -> list[str]:
    """Why `pod` cannot run on `node` next to `pods_on_node` (empty list: it fits)."""
    reasons: list[str] = []
    labels = node.get("metadata", {}).get("labels") or {}
    tolerations = pod.get("spec", {}).get("tolerations") or []
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            value = taint.get("value")
            shown = f"{taint['key']}: {value}" if value else taint["key"]
            reasons.append(f"node(s) had untolerated taint {{{shown}}}")
            break
    if node.get("spec", {}).get("unschedulable"):
        reasons.append("node(s) were unschedulable")
    if not node_affinity_matches(pod, labels):
        reasons.append("node(s) didn't match Pod's node affinity/selector")
    allocatable = {
        name: resource_amount(name, value)
        for name, value in (node.get("status", {}).get("allocatable") or {}).items()
    }
    used: dict[str, int] = {}
    count = 0
    for other in pods_on_node:
        if other.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        count += 1
        for name, amount in pod_requests(other).items():
            used[name] = used.get(name, 0) + amount
    if count + 1 > allocatable.get("pods", 110):
        reasons.append("Too many pods")
    for name, amount in sorted(pod_requests(pod).items()):
        if amount and used.get(name, 0) + amount > allocatable.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons
