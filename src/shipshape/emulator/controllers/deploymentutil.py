"""Pure Deployment arithmetic (upstream `deployment/util`): hashes, surge/unavailable, revisions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from shipshape.emulator.controllers import podutil
from shipshape.emulator.store import Obj, clone
from shipshape.kube.workloads import resolve_fenceposts

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
ROLLBACK_TO = "deprecated.deployment.rollback.to"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
HASH_LABEL = "pod-template-hash"
# Annotations of a Deployment that are not copied onto its ReplicaSets.
SKIP_COPY = frozenset({LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS, ROLLBACK_TO})
MAX_REVISION_HISTORY_CHARS = 2000
NO_PROGRESS_DEADLINE = 2**31 - 1

# Condition reasons (upstream deploymentutil).
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
RS_UPDATED = "ReplicaSetUpdated"
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
FAILED_RS_CREATE = "ReplicaSetCreateError"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"
MIN_AVAILABLE = "MinimumReplicasAvailable"
MIN_UNAVAILABLE = "MinimumReplicasUnavailable"

_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


# ---- hashing --------------------------------------------------------------------------------
def _fnv1a32(data: bytes, h: int = 0x811C9DC5) -> int:
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(text: str) -> str:
    """Upstream `rand.SafeEncodeString`: map each character onto consonants and digits."""
    return "".join(_SAFE_ALPHABET[ord(ch) % len(_SAFE_ALPHABET)] for ch in text)


def canonical(value: Any) -> Any:
    """A template as Go would see it: null fields, empty lists and empty label/annotation maps dropped.

    Clients send the same template in different shapes (`kubectl rollout undo` sends
    `metadata.creationTimestamp: null`); upstream compares and hashes Go structs, where those
    shapes are one and the same value.
    """
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            item = canonical(item)
            if item is None or (isinstance(item, list) and not item):
                continue
            if key in ("labels", "annotations", "nodeSelector") and isinstance(item, dict) and not item:
                continue
            out[key] = item
        if "metadata" in out and out["metadata"] == {}:
            del out["metadata"]
        return out
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def compute_hash(template: Mapping[str, Any], collision_count: int | None = None) -> str:
    """A stable hash of a pod template, as `controller.ComputeHash` (FNV-32a; JSON instead of Go's dump)."""
    h = _fnv1a32(orjson.dumps(canonical(dict(template)), option=orjson.OPT_SORT_KEYS))
    if collision_count is not None:
        h = _fnv1a32((collision_count & 0xFFFFFFFF).to_bytes(8, "little"), h)
    return safe_encode(str(h))


def without_hash(template: Mapping[str, Any]) -> Obj:
    copy = clone(dict(template))
    labels = (copy.get("metadata") or {}).get("labels")
    if labels is not None:
        labels.pop(HASH_LABEL, None)
        if not labels:
            copy["metadata"].pop("labels")
    return copy


def template_key(template: Mapping[str, Any]) -> Any:
    """What `equal_ignore_hash` compares of a template: its canonical form without the hash label."""
    return canonical(without_hash(template))


def equal_ignore_hash(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return bool(template_key(a) == template_key(b))


# ---- sizes ----------------------------------------------------------------------------------
def replicas(obj: Mapping[str, Any]) -> int:
    return int((obj.get("spec") or {}).get("replicas", 1))


def status_count(obj: Mapping[str, Any], field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


def sum_replicas(rss: Iterable[Mapping[str, Any] | None]) -> int:
    return sum(replicas(rs) for rs in rss if rs is not None)


def sum_status(rss: Iterable[Mapping[str, Any] | None], field: str) -> int:
    return sum(status_count(rs, field) for rs in rss if rs is not None)


def active(rss: Iterable[Obj | None]) -> list[Obj]:
    return [rs for rs in rss if rs is not None and replicas(rs) > 0]


def is_rolling(d: Mapping[str, Any]) -> bool:
    strategy = str(((d.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate"))
    return strategy == "RollingUpdate"


def max_surge(d: Mapping[str, Any]) -> int:
    return resolve_fenceposts(d)[0] if is_rolling(d) else 0


def max_unavailable(d: Mapping[str, Any]) -> int:
    if not is_rolling(d) or replicas(d) == 0:
        return 0
    return min(resolve_fenceposts(d)[1], replicas(d))


def new_rs_new_replicas(d: Mapping[str, Any], all_rss: list[Obj], new_rs: Mapping[str, Any]) -> int:
    """How big the new ReplicaSet may be now (upstream `NewRSNewReplicas`)."""
    if not is_rolling(d):
        return replicas(d)
    current = sum_replicas(all_rss)
    max_total = replicas(d) + max_surge(d)
    if current >= max_total:
        return replicas(new_rs)
    scale_up = min(max_total - current, replicas(d) - replicas(new_rs))
    return replicas(new_rs) + scale_up


def is_saturated(d: Mapping[str, Any], rs: Mapping[str, Any] | None) -> bool:
    if rs is None:
        return False
    desired = annotation_int(rs, DESIRED_REPLICAS)
    return (
        replicas(rs) == replicas(d)
        and desired == replicas(d)
        and status_count(rs, "availableReplicas") == replicas(d)
    )


def complete(d: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    want = replicas(d)
    return (
        int(status.get("updatedReplicas") or 0) == want
        and int(status.get("replicas") or 0) == want
        and int(status.get("availableReplicas") or 0) == want
        and int(status.get("observedGeneration") or 0) >= int(podutil.meta(d).get("generation", 1))
    )


def progressing(d: Mapping[str, Any], new_status: Mapping[str, Any]) -> bool:
    """Whether the rollout made progress since the stored status (upstream `DeploymentProgressing`)."""
    old = d.get("status") or {}

    def n(status: Mapping[str, Any], field: str) -> int:
        return int(status.get(field) or 0)

    old_old = n(old, "replicas") - n(old, "updatedReplicas")
    new_old = n(new_status, "replicas") - n(new_status, "updatedReplicas")
    return (
        n(new_status, "updatedReplicas") > n(old, "updatedReplicas")
        or new_old < old_old
        or n(new_status, "readyReplicas") > n(old, "readyReplicas")
        or n(new_status, "availableReplicas") > n(old, "availableReplicas")
    )


# ---- annotations ----------------------------------------------------------------------------
def annotation_int(obj: Mapping[str, Any], key: str) -> int | None:
    raw = (podutil.meta(obj).get("annotations") or {}).get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def revision(obj: Mapping[str, Any]) -> int:
    return annotation_int(obj, REVISION) or 0


def max_revision(rss: Iterable[Mapping[str, Any]]) -> int:
    return max((revision(rs) for rs in rss), default=0)


def set_replicas_annotations(rs: Obj, desired: int, max_total: int) -> bool:
    annotations = rs["metadata"].setdefault("annotations", {})
    changed = False
    for key, value in ((DESIRED_REPLICAS, str(desired)), (MAX_REPLICAS, str(max_total))):
        if annotations.get(key) != value:
            annotations[key] = value
            changed = True
    return changed


def replicas_annotations_need_update(rs: Mapping[str, Any], desired: int, max_total: int) -> bool:
    annotations = podutil.meta(rs).get("annotations") or {}
    return annotations.get(DESIRED_REPLICAS) != str(desired) or annotations.get(MAX_REPLICAS) != str(
        max_total
    )


def copy_annotations(d: Mapping[str, Any], rs: Obj) -> bool:
    annotations = rs["metadata"].setdefault("annotations", {})
    changed = False
    for key, value in (podutil.meta(d).get("annotations") or {}).items():
        if key in SKIP_COPY or annotations.get(key) == value:
            continue
        annotations[key] = value
        changed = True
    return changed


def set_new_rs_annotations(d: Mapping[str, Any], rs: Obj, new_revision: int, *, exists: bool) -> bool:
    """Copy the Deployment's annotations, set the revision and keep the history (upstream semantics)."""
    changed = copy_annotations(d, rs)
    annotations = rs["metadata"].setdefault("annotations", {})
    old_text = annotations.get(REVISION)
    try:
        old = int(old_text) if old_text is not None else 0
    except ValueError:
        return changed
    if old < new_revision:
        annotations[REVISION] = str(new_revision)
        changed = True
        if old_text is not None:
            history = annotations.get(REVISION_HISTORY, "")
            entries = history.split(",") if history else []
            entries.append(old_text)
            while len(",".join(entries)) > MAX_REVISION_HISTORY_CHARS and len(entries) > 1:
                entries.pop(0)
            annotations[REVISION_HISTORY] = ",".join(entries)
    if not exists and set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)):
        changed = True
    return changed


# ---- conditions -----------------------------------------------------------------------------
def get_condition(status: Mapping[str, Any], kind: str) -> Obj | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            found: Obj = cond
            return found
    return None


def new_condition(kind: str, status: str, reason: str, message: str, now: str) -> Obj:
    return {
        "type": kind,
        "status": status,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def set_condition(status: Obj, cond: Obj) -> None:
    """Upstream `SetDeploymentCondition`: same status and reason is a no-op; keep the transition time."""
    current = get_condition(status, cond["type"])
    if (
        current is not None
        and current["status"] == cond["status"]
        and current.get("reason") == cond["reason"]
    ):
        return
    if current is not None and current["status"] == cond["status"]:
        cond["lastTransitionTime"] = current["lastTransitionTime"]
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != cond["type"]] + [
        cond
    ]


def remove_condition(status: Obj, kind: str) -> None:
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != kind]


def has_progress_deadline(d: Mapping[str, Any]) -> bool:
    deadline = (d.get("spec") or {}).get("progressDeadlineSeconds", 600)
    return deadline is not None and int(deadline) != NO_PROGRESS_DEADLINE


def progress_deadline(d: Mapping[str, Any]) -> int:
    return int((d.get("spec") or {}).get("progressDeadlineSeconds", 600))


# ---- ordering -------------------------------------------------------------------------------
def by_creation(rs: Mapping[str, Any]) -> tuple[float, str]:
    return (podutil.creation_time(rs), str(podutil.meta(rs).get("name", "")))


def by_revision(rs: Mapping[str, Any]) -> tuple[int, float, str]:
    return (revision(rs), *by_creation(rs))
