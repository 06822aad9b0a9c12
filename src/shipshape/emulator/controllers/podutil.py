"""Pod and owner-reference helpers shared by the workload controllers (upstream `controller_utils`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from typing import Any

from shipshape.emulator.store import Obj, clone
from shipshape.kube import objects, wellknown
from shipshape.kube.clock import parse_time

POD_DELETION_COST = wellknown.POD_DELETION_COST
TERMINAL_PHASES = objects.TERMINAL_PHASES
_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}


# Readings of pods, conditions and owners: Kubernetes' rules, defined once in `kube.objects`; the
# controllers here call them by these names.
meta = objects.metadata
is_terminating = objects.is_deleting
phase = objects.pod_phase
is_active = objects.is_active
condition = objects.condition
condition_status = objects.condition_status
is_ready = objects.pod_ready
controller_ref = objects.controller_ref


def key_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return (md.get("namespace", ""), md["name"])


def ready_since(pod: Mapping[str, Any]) -> float | None:
    """When the pod last became Ready (the Ready condition's lastTransitionTime), if it is Ready."""
    cond = condition(pod, "Ready")
    if cond is None or cond.get("status") != "True" or not cond.get("lastTransitionTime"):
        return None
    return parse_time(str(cond["lastTransitionTime"]))


def is_available(pod: Mapping[str, Any], min_ready_seconds: int, now: float) -> bool:
    """Ready for at least minReadySeconds (upstream `IsPodAvailable`: strictly before now)."""
    if not is_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = ready_since(pod)
    return since is not None and since + min_ready_seconds < now


def available_in(pods: Iterable[Mapping[str, Any]], min_ready_seconds: int, now: float) -> float | None:
    """Seconds until the next Ready-but-not-yet-available pod becomes available (None if none)."""
    soonest: float | None = None
    for pod in pods:
        since = ready_since(pod)
        if since is None or is_available(pod, min_ready_seconds, now):
            continue
        # Timestamps have second resolution and availability is strict: look just past the boundary.
        wait = max(0.0, since + min_ready_seconds - now) + 1.0
        soonest = wait if soonest is None else min(soonest, wait)
    return soonest


def is_running_and_ready(pod: Mapping[str, Any]) -> bool:
    return phase(pod) == "Running" and is_ready(pod)


def creation_time(obj: Mapping[str, Any]) -> float:
    stamp = meta(obj).get("creationTimestamp")
    return parse_time(str(stamp)) if stamp else 0.0


def deletion_cost(pod: Mapping[str, Any]) -> int:
    """The pod-deletion-cost annotation (0 when absent or not an int32, as upstream)."""
    raw = (meta(pod).get("annotations") or {}).get(POD_DELETION_COST)
    if raw is None:
        return 0
    try:
        value = int(str(raw).strip())
    except ValueError:
        return 0
    return value if -(2**31) <= value < 2**31 else 0


def max_restarts(pod: Mapping[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return max((int(s.get("restartCount") or 0) for s in statuses), default=0)


# ---- owner references ---------------------------------------------------------------------
def is_controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    ref = controller_ref(obj)
    return ref is not None and ref.get("uid") == meta(owner).get("uid")


def new_controller_ref(owner: Mapping[str, Any]) -> Obj:
    """An ownerReference marking `owner` as the controller (upstream `NewControllerRef`)."""
    md = meta(owner)
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": md["name"],
        "uid": md["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_from_template(template: Mapping[str, Any], owner: Mapping[str, Any], generate_name: str) -> Obj:
    """A pod for a controller: labels, annotations and finalizers from the template, controller ref set."""
    template_md = template.get("metadata") or {}
    metadata: Obj = {
        "generateName": generate_name,
        "namespace": meta(owner).get("namespace", ""),
        "labels": dict(template_md.get("labels") or {}),
        "annotations": dict(template_md.get("annotations") or {}),
        "ownerReferences": [new_controller_ref(owner)],
    }
    if template_md.get("finalizers"):
        metadata["finalizers"] = list(template_md["finalizers"])
    if not metadata["annotations"]:
        del metadata["annotations"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": clone(template.get("spec") or {}),
    }


# ---- deletion ranking ---------------------------------------------------------------------
def _log_rank(when: float, now: float) -> int:
    elapsed_ns = (now - when) * 1e9
    return int(math.log2(elapsed_ns)) if elapsed_ns > 0 else -1


class _Ranked:
    """What ranking a pod for deletion reads of it, read once per ranking: a sort compares each pod
    about 2·log2(n) times, and the comparison reads every field of both pods."""

    __slots__ = (
        "assigned",
        "colocated",
        "cost",
        "created",
        "node",
        "phase_ordinal",
        "pod",
        "ready",
        "ready_since",
        "restarts",
        "uid",
    )

    def __init__(self, pod: Obj, colocated: int) -> None:
        self.pod = pod
        self.node = str((pod.get("spec") or {}).get("nodeName") or "")
        self.phase_ordinal = _PHASE_ORDINAL.get(phase(pod), 0)
        self.ready = is_ready(pod)
        self.cost = deletion_cost(pod)
        self.colocated = colocated
        self.uid = str(meta(pod).get("uid", ""))
        self.ready_since = ready_since(pod) if self.ready else None
        self.restarts = max_restarts(pod)
        self.created = creation_time(pod)


def _ranked_less(a: _Ranked, b: _Ranked, now: float) -> bool:
    """Whether `a` should be deleted before `b`: upstream's `ActivePodsWithRanks.Less` (v1.32)."""
    node_a, node_b = a.node, b.node
    # 1. Unassigned < assigned.
    if node_a != node_b and (not node_a or not node_b):
        return not node_a
    # 2. Pending < Unknown < Running.
    if a.phase_ordinal != b.phase_ordinal:
        return a.phase_ordinal < b.phase_ordinal
    # 3. Not ready < ready.
    if a.ready != b.ready:
        return not a.ready
    # 4. Lower pod-deletion-cost < higher.
    if a.cost != b.cost:
        return a.cost < b.cost
    # 5. Doubled up (more related active pods on the same node) < not doubled up.
    if a.colocated != b.colocated:
        return a.colocated > b.colocated
    # 6. Both ready: recently ready < ready for longer, compared in logarithmic buckets.
    if a.ready and b.ready:
        since_a, since_b = a.ready_since, b.ready_since
        if since_a != since_b:
            if since_a is None or since_b is None:
                return since_a is None
            diff = _log_rank(since_a, now) - _log_rank(since_b, now)
            return a.uid < b.uid if diff == 0 else diff < 0
    # 7. More container restarts < fewer.
    if a.restarts != b.restarts:
        return a.restarts > b.restarts
    # 8. Newer < older, compared in logarithmic buckets.
    created_a, created_b = a.created, b.created
    if created_a != created_b:
        if not created_a or not created_b:
            return not created_a
        diff = _log_rank(created_a, now) - _log_rank(created_b, now)
        return a.uid < b.uid if diff == 0 else diff < 0
    return False


def rank_for_deletion(pods: list[Obj], related: Iterable[Mapping[str, Any]], now: float) -> list[Obj]:
    """`pods` in the order a controller deletes them; `related` counts the active pods per node."""
    per_node: dict[str, int] = {}
    for pod in related:
        if is_active(pod):
            node = (pod.get("spec") or {}).get("nodeName") or ""
            per_node[node] = per_node.get(node, 0) + 1
    ranked = [_Ranked(p, per_node.get((p.get("spec") or {}).get("nodeName") or "", 0)) for p in pods]

    def compare(a: _Ranked, b: _Ranked) -> int:
        if _ranked_less(a, b, now):
            return -1
        return 1 if _ranked_less(b, a, now) else 0

    return [r.pod for r in sorted(ranked, key=functools.cmp_to_key(compare))]


def omit_zero(status: Obj, *fields: str) -> Obj:
    """Drop int fields that are zero and `omitempty` in the Go types, as the API server renders them."""
    for name in fields:
        if not status.get(name):
            status.pop(name, None)
    return status
