"""`ClusterOps` in process: the controller's loops writing to an emulated cluster through its `Api`.

The same API semantics as over HTTP (admission, validation, PodDisruptionBudgets on evictions), with no
network in between: in discrete-event mode a write completes within the call. API errors become
`OpsError`, as `kube_ops.KubeOps` turns client errors into them.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from shipshape.controller.ops import (
    ApplyResult,
    EvictionOutcome,
    ObjectRef,
    OpsError,
    SpotMetadata,
    delete_through,
    event_namespace,
    evict_through,
    not_managed,
    replacement,
    retryable_status,
    taints_patch,
)
from shipshape.controller.policy import WorkloadKind
from shipshape.emulator import resources as r
from shipshape.emulator.api import Api, DeleteOptions
from shipshape.emulator.resources import ResourceType
from shipshape.kube import errors
from shipshape.kube.patch import MERGE_PATCH

Obj = dict[str, Any]
# The kinds the loops create, replace or delete by reference (`ops.MANAGED_KINDS`).
_OWNED: Mapping[str, ResourceType] = {
    "Deployment": r.DEPLOYMENTS,
    "PriorityClass": r.PRIORITYCLASSES,
    "Namespace": r.NAMESPACES,
    "PodDisruptionBudget": r.PDBS,
}


def complete(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run an `Api` coroutine that does not suspend (no webhooks are configured in a simulation)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise OpsError("an in-process API call had to wait on I/O (is a webhook configured?)", retryable=False)


def _ops_error(error: errors.ApiError) -> OpsError:
    status = error.code
    return OpsError(f"{status} {error}", status=status, retryable=retryable_status(status))


class ApiOps:
    """The loops' writes against `cluster.services["api"]`; metadata answers from the cloud model."""

    def __init__(self, api: Api, cloud: Any | None = None) -> None:
        self.api = api
        self.cloud = cloud

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        try:
            return complete(coro)
        except errors.ApiError as error:
            raise _ops_error(error) from error

    def evict(self, namespace: str, pod: str) -> EvictionOutcome:
        return evict_through(
            lambda body: self._call(self.api.create_subresource(r.PODS, namespace, pod, "eviction", body)),
            namespace,
            pod,
        )

    def delete_pod(self, namespace: str, pod: str) -> bool:
        return delete_through(lambda: self._call(self.api.delete(r.PODS, namespace, pod, DeleteOptions())))

    def annotate_pod(self, namespace: str, pod: str, annotations: Mapping[str, str | None]) -> None:
        patch = {"metadata": {"annotations": dict(annotations)}}
        self._call(self.api.patch(r.PODS, namespace, pod, MERGE_PATCH, patch))

    def patch_workload(self, kind: WorkloadKind, namespace: str, name: str, patch: Obj) -> None:
        rt = r.DEPLOYMENTS if kind is WorkloadKind.DEPLOYMENT else r.STATEFULSETS
        self._call(self.api.patch(rt, namespace, name, MERGE_PATCH, patch))

    def apply(self, body: Obj) -> ApplyResult:
        ref = ObjectRef.of(body)
        rt = _OWNED.get(ref.kind)
        if rt is None:
            raise not_managed(ref.kind)
        namespace = ref.namespace if rt.namespaced else ""
        existing = self.api.store.get(rt, namespace, ref.name)
        if existing is None:
            try:
                self._call(self.api.create(rt, namespace, body))
            except OpsError as error:
                if error.status != 409:
                    raise
                return "unchanged"
            return "created"
        updated = replacement(existing, body)
        if updated is None:
            return "unchanged"
        self._call(self.api.update(rt, namespace, ref.name, updated))
        return "updated"

    def delete(self, ref: ObjectRef) -> bool:
        rt = _OWNED.get(ref.kind)
        if rt is None:
            raise not_managed(ref.kind, "delete")
        namespace = ref.namespace if rt.namespaced else ""
        return delete_through(lambda: self._call(self.api.delete(rt, namespace, ref.name, DeleteOptions())))

    def post_event(self, body: Obj) -> None:
        self._call(self.api.create(r.EVENTS, event_namespace(body), body))

    def taint_node(self, node: str, taints: Sequence[Obj], resource_version: str) -> None:
        body = taints_patch(taints, resource_version)
        self._call(self.api.patch(r.NODES, "", node, MERGE_PATCH, body))

    def spot_metadata(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, SpotMetadata]:
        """The cloud model's answers for the nodes that have something to say (the others answer
        None to both, as a node's endpoint would with 404s)."""
        if self.cloud is None:
            return {}
        speakers = self.cloud.metadata_speakers()
        if not speakers:
            return {}
        out: dict[str, SpotMetadata] = {}
        for node in nodes:
            name = str((node.get("metadata") or {}).get("name"))
            if name in speakers:
                action = self.cloud.instance_action(name)
                rebalance = self.cloud.rebalance_recommendation(name)
                out[name] = SpotMetadata(
                    action if isinstance(action, dict) else None,
                    rebalance if isinstance(rebalance, dict) else None,
                )
        return out
