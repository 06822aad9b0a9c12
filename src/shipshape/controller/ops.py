"""What the controller's loops do to a cluster: the few writes they need, behind one small interface.

`ClusterOps` is implemented by `kube_ops.KubeOps` (the official client, for real clusters and the
served emulator) and by whatever drives the loops in process (the what-if simulator, tests).
`RecordingOps` ships here as a fake that records every call and answers from a script, so the
loops can be tested without a cluster. Bodies are plain JSON dicts, as the API server speaks them.

Errors: an implementation raises `OpsError` (with `retryable`) and nothing else, so no client
exception leaks into the loops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol

from shipshape.controller.policy import WorkloadKind

Obj = dict[str, Any]
ApplyResult = Literal["created", "updated", "unchanged"]


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


@dataclass(slots=True)
class RecordingOps:
    """A `ClusterOps` that records calls and changes nothing; answers come from the fields below.

    `evictions` maps "namespace/pod" to the outcome (default EVICTED); `instance_actions` and
    `rebalance_recommendations` map a node name to its metadata answers, and the endpoints of
    `unreachable_metadata` do not answer; `fail` maps an operation name to the error it raises.
    """

    evictions: dict[str, EvictionOutcome] = field(default_factory=dict)
    instance_actions: dict[str, Obj] = field(default_factory=dict)
    rebalance_recommendations: dict[str, Obj] = field(default_factory=dict)
    unreachable_metadata: set[str] = field(default_factory=set)
    fail: dict[str, OpsError] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    on_call: Callable[[Call], None] | None = None

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

    def evict(self, namespace: str, pod: str) -> EvictionOutcome:
        self._record("evict", namespace, pod)
        return self.evictions.get(f"{namespace}/{pod}", EvictionOutcome.EVICTED)

    def delete_pod(self, namespace: str, pod: str) -> bool:
        self._record("delete_pod", namespace, pod)
        return True

    def annotate_pod(self, namespace: str, pod: str, annotations: Mapping[str, str | None]) -> None:
        self._record("annotate_pod", namespace, pod, dict(annotations))

    def patch_workload(self, kind: WorkloadKind, namespace: str, name: str, patch: Obj) -> None:
        self._record("patch_workload", kind, namespace, name, patch)

    def apply(self, body: Obj) -> ApplyResult:
        self._record("apply", body)
        return "created"

    def delete(self, ref: ObjectRef) -> bool:
        self._record("delete", ref)
        return True

    def post_event(self, body: Obj) -> None:
        self._record("post_event", body)

    def taint_node(self, node: str, taints: Sequence[Obj], resource_version: str) -> None:
        self._record("taint_node", node, [dict(t) for t in taints], resource_version)

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
