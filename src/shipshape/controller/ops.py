"""What the controller's loops do to a cluster: the few writes they need, behind one small interface.

`ClusterOps` is implemented by `kube_ops.KubeOps` (the official client, for real clusters and the
served emulator), by `simulate.ops.ApiOps` (the emulator's API in process, for the what-if
simulator) and by `RecordingOps` here, a fake that records every call and answers as the cluster a
test describes would, so the loops can be tested without a cluster. One conformance suite
(`tests/integration/controller/test_ops_conformance.py`) holds all three to the contract below.
Bodies are plain JSON dicts, as the API server speaks them.

What the implementations share is written once here: the Eviction body and what its answers mean
(`evict_through`), a delete that finds nothing (`delete_through`), the conditional taint patch
(`taints_patch`), the kinds `apply` and `delete` manage (`MANAGED_KINDS`) and when `apply` changes
an object (`replacement`: what the API server adds itself, defaults included, is no change).

Errors: an implementation raises `OpsError` (with `retryable`) and nothing else, so no client
exception leaks into the loops. The fake raises `UnscriptedCall` for a call the test did not prepare
it for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol

from shipshape.controller.policy import WorkloadKind

Obj = dict[str, Any]
ApplyResult = Literal["created", "updated", "unchanged"]
# The kinds the loops create, replace or delete by reference (placeholders and their PriorityClass and
# Namespace, the single-replica guard PodDisruptionBudgets).
MANAGED_KINDS = frozenset({"Deployment", "PodDisruptionBudget", "PriorityClass", "Namespace"})


class EvictionOutcome(StrEnum):
    EVICTED = "evicted"
    # 429 TooManyRequests: a PodDisruptionBudget does not allow the disruption now.
    BLOCKED = "blocked"
    # 404: the pod is already gone.
    GONE = "gone"


class OpsError(RuntimeError):
    """A write the cluster refused or could not take; `retryable` when trying again later may work."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An object the loops create or delete by name (placeholder Deployments, the PriorityClass, the
    single-replica guard PodDisruptionBudgets)."""

    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> ObjectRef:
        metadata = body.get("metadata") or {}
        return cls(
            str(body.get("apiVersion")),
            str(body.get("kind")),
            str(metadata.get("namespace") or ""),
            str(metadata.get("name")),
        )


def eviction_body(namespace: str, pod: str) -> Obj:
    """The policy/v1 Eviction a loop posts to a pod's `eviction` subresource."""
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}


def taints_patch(taints: Sequence[Obj], resource_version: str) -> Obj:
    """A JSON merge patch setting a node's taints, conditional on its resourceVersion (a concurrent
    change of the node makes it a 409 conflict instead of losing that change)."""
    return {"metadata": {"resourceVersion": resource_version}, "spec": {"taints": list(taints)}}


def evict_through(post: Callable[[Obj], object], namespace: str, pod: str) -> EvictionOutcome:
    """Post an Eviction with `post` and translate the API's answer into an `EvictionOutcome`.

    Every `ClusterOps` implementation shares this: 429 means a PDB blocks it now, 404 that the pod
    is already gone; any other `OpsError` propagates.
    """
    try:
        post(eviction_body(namespace, pod))
    except OpsError as error:
        if error.status == 429:
            return EvictionOutcome.BLOCKED
        if error.status == 404:
            return EvictionOutcome.GONE
        raise
    return EvictionOutcome.EVICTED


def retryable_status(status: int | None) -> bool:
    """Whether a write refused with `status` may work later: no answer at all, a conflict (409: a newer
    copy to retry from), too many requests (429) or a server error (5xx); not a 4xx about the request."""
    return status is None or status in (409, 429) or status >= 500


def event_namespace(body: Mapping[str, Any]) -> str:
    """Where an Event is posted: its own namespace ("default" for one about a cluster-scoped object)."""
    return str((body.get("metadata") or {}).get("namespace") or "default")


def not_managed(kind: str, verb: str = "manage") -> OpsError:
    return OpsError(f"the controller does not {verb} {kind} objects", retryable=False)


def _holds(have: Any, want: Any) -> bool:
    """Whether `have` holds everything `want` sets (the API server adds defaults of its own)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(k in have and _holds(have[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(map(_holds, have, want))
    return bool(have == want)


def replacement(existing: Mapping[str, Any], body: Mapping[str, Any]) -> Obj | None:
    """What `apply` sends to replace `existing` with `body`, or None when nothing would change.

    Nothing changes when the cluster's copy already holds everything the body sets: its top-level
    fields other than apiVersion, kind, metadata and status (`spec`, a PriorityClass's `value`, ...)
    and its labels and annotations. What the API server adds itself (defaults, status, uid,
    timestamps, managedFields) is no change. A replacement is the body with the existing copy's
    resourceVersion, so that a concurrent change makes it a 409 conflict instead of being lost.
    """
    wanted: Obj = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    metadata = body.get("metadata") or {}
    wanted_meta = {key: metadata[key] for key in ("labels", "annotations") if metadata.get(key)}
    if wanted_meta:
        wanted["metadata"] = wanted_meta
    if _holds(existing, wanted):
        return None
    updated: Obj = json.loads(json.dumps(body))
    updated.setdefault("metadata", {})["resourceVersion"] = (existing.get("metadata") or {}).get(
        "resourceVersion"
    )
    return updated


def delete_through(send: Callable[[], object]) -> bool:
    """Run a delete; True when it deleted something, False when the object was already gone (404)."""
    try:
        send()
    except OpsError as error:
        if error.status == 404:
            return False
        raise
    return True


class ClusterOps(Protocol):
    """The writes (and the one outside read) the loops make; everything else they read from the cache."""

    def evict(self, namespace: str, pod: str) -> EvictionOutcome:
        """Evict a pod through the Eviction API (policy/v1), so that PodDisruptionBudgets apply."""
        ...

    def delete_pod(self, namespace: str, pod: str) -> bool:
        """Delete a pod (its controller re-creates it); False when it was already gone."""
        ...

    def annotate_pod(self, namespace: str, pod: str, annotations: Mapping[str, str | None]) -> None:
        """Merge annotations into a pod's metadata (None removes one), e.g. the pod deletion cost."""
        ...

    def patch_workload(self, kind: WorkloadKind, namespace: str, name: str, patch: Obj) -> None:
        """A JSON merge patch on a Deployment or StatefulSet (rollout restart, surge replicas)."""
        ...

    def apply(self, body: Obj) -> ApplyResult:
        """Create the object, or replace it when its spec (or value) differs; idempotent."""
        ...

    def delete(self, ref: ObjectRef) -> bool:
        """Delete an object the loops own; False when it was already gone."""
        ...

    def post_event(self, body: Obj) -> None:
        """Record a core/v1 Event (see `events.py` for the bodies)."""
        ...

    def taint_node(self, node: str, taints: Sequence[Obj], resource_version: str) -> None:
        """Set a node's taints: a merge patch conditional on the node's resourceVersion, so a concurrent
        change of the node is a 409 conflict (retried from the cache's newer copy), never lost."""
        ...

    def spot_metadata(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, SpotMetadata]:
        """The instance-metadata answers of spot `nodes`, by node name in the nodes' order. A node whose
        endpoint answers neither a notice nor a recommendation may be left out."""
        ...


@dataclass(frozen=True, slots=True)
class SpotMetadata:
    """One spot node's instance-metadata answers: `spot/instance-action` and
    `events/recommendations/rebalance` (None: nothing there), or `unreachable` when the endpoint could
    not be asked (whoever polls keeps what it knew)."""

    instance_action: Obj | None = None
    rebalance: Obj | None = None
    unreachable: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    """One recorded call: the operation's name and its arguments."""

    op: str
    args: tuple[Any, ...]


class UnscriptedCall(AssertionError):
    """The fake was asked something its test did not prepare it for (an object it was not told about,
    an answer not scripted): the test fails here instead of running on a made-up answer."""


# What a test says exists: (kind, namespace, name) -> the object, or None ("" namespace: cluster-scoped).
Objects = Callable[[str, str, str], Mapping[str, Any] | None]
Key = tuple[str, str, str]


@dataclass(slots=True)
class RecordingOps:
    """A `ClusterOps` that records calls, changes nothing outside itself, and answers as the cluster
    the test describes would.

    `objects` says what exists (a test harness passes a lookup into the cache it fills);
    what the fake itself created, replaced, evicted or deleted then overrides it, so that a second
    delete finds nothing, as in a cluster. Without `objects`, or for anything the test did not script,
    a call whose answer depends on the cluster raises `UnscriptedCall`.

    Scripts: `evictions` maps "namespace/pod" to the outcome of its eviction (BLOCKED for a PDB that
    refuses it; a pod that exists is otherwise EVICTED); `instance_actions` and
    `rebalance_recommendations` map a node name to its metadata answers, and the endpoints of
    `unreachable_metadata` do not answer; `fail` maps an operation name to the error it raises.
    """

    objects: Objects | None = None
    evictions: dict[str, EvictionOutcome] = field(default_factory=dict)
    instance_actions: dict[str, Obj] = field(default_factory=dict)
    rebalance_recommendations: dict[str, Obj] = field(default_factory=dict)
    unreachable_metadata: set[str] = field(default_factory=set)
    fail: dict[str, OpsError] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    on_call: Callable[[Call], None] | None = None
    # What this fake did: objects it created or replaced, and objects it removed.
    made: dict[Key, Obj] = field(default_factory=dict)
    gone: set[Key] = field(default_factory=set)

    def _record(self, op: str, *args: Any) -> None:
        call = Call(op, args)
        self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        error = self.fail.get(op)
        if error is not None:
            raise error

    def of(self, op: str) -> list[tuple[Any, ...]]:
        """The arguments of every recorded call of one operation, in order."""
        return [call.args for call in self.calls if call.op == op]

    def find(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The object as the fake sees it now; `UnscriptedCall` when the test described no cluster."""
        key = (kind, namespace, name)
        if key in self.gone:
            return None
        if key in self.made:
            return self.made[key]
        if self.objects is None:
            raise UnscriptedCall(
                f"RecordingOps was asked about {kind} {namespace}/{name} but was given no `objects` "
                "(say what exists: RecordingOps(objects=a lookup of (kind, namespace, name)))"
            )
        return self.objects(kind, namespace, name)

    def _must_find(self, kind: str, namespace: str, name: str) -> Mapping[str, Any]:
        found = self.find(kind, namespace, name)
        if found is None:
            raise OpsError(f'404 {kind} "{name}" not found', status=404, retryable=False)
        return found

    def evict(self, namespace: str, pod: str) -> EvictionOutcome:
        self._record("evict", namespace, pod)
        outcome = self.evictions.get(f"{namespace}/{pod}")
        if outcome is None:
            outcome = EvictionOutcome.EVICTED if self.find("Pod", namespace, pod) else EvictionOutcome.GONE
        if outcome is EvictionOutcome.EVICTED:
            self.gone.add(("Pod", namespace, pod))
        return outcome

    def delete_pod(self, namespace: str, pod: str) -> bool:
        self._record("delete_pod", namespace, pod)
        if self.find("Pod", namespace, pod) is None:
            return False
        self.gone.add(("Pod", namespace, pod))
        return True

    def annotate_pod(self, namespace: str, pod: str, annotations: Mapping[str, str | None]) -> None:
        self._record("annotate_pod", namespace, pod, dict(annotations))
        self._must_find("Pod", namespace, pod)

    def patch_workload(self, kind: WorkloadKind, namespace: str, name: str, patch: Obj) -> None:
        self._record("patch_workload", kind, namespace, name, patch)
        self._must_find(kind.value, namespace, name)

    def apply(self, body: Obj) -> ApplyResult:
        self._record("apply", body)
        ref = ObjectRef.of(body)
        if ref.kind not in MANAGED_KINDS:
            raise not_managed(ref.kind)
        key = (ref.kind, ref.namespace, ref.name)
        existing = self.find(*key)
        if existing is None:
            self.gone.discard(key)
            self.made[key] = body
            return "created"
        if replacement(existing, body) is None:
            return "unchanged"
        self.made[key] = body
        return "updated"

    def delete(self, ref: ObjectRef) -> bool:
        self._record("delete", ref)
        if ref.kind not in MANAGED_KINDS:
            raise not_managed(ref.kind, "delete")
        key = (ref.kind, ref.namespace, ref.name)
        if self.find(*key) is None:
            return False
        self.made.pop(key, None)
        self.gone.add(key)
        return True

    def post_event(self, body: Obj) -> None:
        self._record("post_event", body)

    def taint_node(self, node: str, taints: Sequence[Obj], resource_version: str) -> None:
        self._record("taint_node", node, [dict(t) for t in taints], resource_version)
        found = self._must_find("Node", "", node)
        current = str((found.get("metadata") or {}).get("resourceVersion") or "")
        if resource_version and resource_version != current:
            raise OpsError(f'409 Node "{node}": the object has been modified', status=409)

    def spot_metadata(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, SpotMetadata]:
        names = [str((node.get("metadata") or {}).get("name")) for node in nodes]
        self._record("spot_metadata", names)
        return {
            name: SpotMetadata(unreachable=True)
            if name in self.unreachable_metadata
            else SpotMetadata(self.instance_actions.get(name), self.rebalance_recommendations.get(name))
            for name in names
            if name in self.instance_actions
            or name in self.rebalance_recommendations
            or name in self.unreachable_metadata
        }
