"""`ClusterOps` over the official Kubernetes client: the only module of the controller that writes
to a real API server (informers.py reads, and kube/leader.py holds the Lease, through the same client).

Bodies go out and come back as the API's JSON (`_preload_content=False`); client exceptions are
translated to `OpsError` here and go no further.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import urllib3
from kubernetes import client as k8s

from shipshape.controller.ops import (
    MANAGED_KINDS,
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
from shipshape.kube import client

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.kube_ops")
MERGE_PATCH = "application/merge-patch+json"
# Seconds a single API call may take before it counts as failed (connect, read).
REQUEST_TIMEOUT = (5.0, 30.0)


def call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """One API call returning its JSON body; every failure becomes an `OpsError`."""
    try:
        response = function(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    except k8s.ApiException as error:
        status = int(error.status) if error.status else None
        message = _status_message(error.body) or str(error.reason)
        raise OpsError(f"{status} {message}", status=status, retryable=retryable_status(status)) from error
    except (OSError, urllib3.exceptions.HTTPError) as error:  # connection refused, TLS, timeouts
        raise OpsError(client.unreachable(error)) from error
    raw = response.data
    body = json.loads(raw) if raw else {}
    return body if isinstance(body, dict) else {}


def _status_message(body: Any) -> str | None:
    try:
        status = json.loads(body) if body else None
    except (TypeError, ValueError):
        return None
    return str(status.get("message")) if isinstance(status, dict) and status.get("message") else None


class KubeOps:
    """The loops' writes through the official client (`api_client` from `kube.client.load_api_client`)."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.scheduling = k8s.SchedulingV1Api(api_client)
        self.policy = k8s.PolicyV1Api(api_client)

    def close(self) -> None:
        """Nothing to release (the API client is the caller's)."""

    def evict(self, namespace: str, pod: str) -> EvictionOutcome:
        return evict_through(
            lambda body: call(self.core.create_namespaced_pod_eviction, pod, namespace, body), namespace, pod
        )

    def delete_pod(self, namespace: str, pod: str) -> bool:
        return delete_through(lambda: call(self.core.delete_namespaced_pod, pod, namespace))

    def annotate_pod(self, namespace: str, pod: str, annotations: Mapping[str, str | None]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        call(self.core.patch_namespaced_pod, pod, namespace, body, _content_type=MERGE_PATCH)

    def patch_workload(self, kind: WorkloadKind, namespace: str, name: str, patch: Obj) -> None:
        function = (
            self.apps.patch_namespaced_deployment
            if kind is WorkloadKind.DEPLOYMENT
            else self.apps.patch_namespaced_stateful_set
        )
        call(function, name, namespace, patch, _content_type=MERGE_PATCH)

    def _accessors(
        self, ref: ObjectRef
    ) -> tuple[Callable[[], Obj], Callable[[Obj], Obj], Callable[[Obj], Obj], Callable[[], Obj]]:
        """read, create, replace and delete for the kinds the loops own (`MANAGED_KINDS`)."""
        if ref.kind == "Deployment":
            return (
                lambda: call(self.apps.read_namespaced_deployment, ref.name, ref.namespace),
                lambda body: call(self.apps.create_namespaced_deployment, ref.namespace, body),
                lambda body: call(self.apps.replace_namespaced_deployment, ref.name, ref.namespace, body),
                lambda: call(self.apps.delete_namespaced_deployment, ref.name, ref.namespace),
            )
        if ref.kind == "PodDisruptionBudget":
            return (
                lambda: call(self.policy.read_namespaced_pod_disruption_budget, ref.name, ref.namespace),
                lambda body: call(self.policy.create_namespaced_pod_disruption_budget, ref.namespace, body),
                lambda body: call(
                    self.policy.replace_namespaced_pod_disruption_budget, ref.name, ref.namespace, body
                ),
                lambda: call(self.policy.delete_namespaced_pod_disruption_budget, ref.name, ref.namespace),
            )
        if ref.kind == "PriorityClass":
            return (
                lambda: call(self.scheduling.read_priority_class, ref.name),
                lambda body: call(self.scheduling.create_priority_class, body),
                lambda body: call(self.scheduling.replace_priority_class, ref.name, body),
                lambda: call(self.scheduling.delete_priority_class, ref.name),
            )
        if ref.kind == "Namespace":
            return (
                lambda: call(self.core.read_namespace, ref.name),
                lambda body: call(self.core.create_namespace, body),
                lambda body: call(self.core.replace_namespace, ref.name, body),
                lambda: call(self.core.delete_namespace, ref.name),
            )
        raise not_managed(ref.kind)

    def apply(self, body: Obj) -> ApplyResult:
        ref = ObjectRef.of(body)
        read, create, replace, _ = self._accessors(ref)
        try:
            existing = read()
        except OpsError as error:
            if error.status != 404:
                raise
            try:
                create(body)
            except OpsError as conflict:
                if conflict.status != 409:
                    raise
                return "unchanged"  # created meanwhile (another replica)
            return "created"
        updated = replacement(existing, body)
        if updated is None:
            return "unchanged"
        replace(updated)
        return "updated"

    def delete(self, ref: ObjectRef) -> bool:
        if ref.kind not in MANAGED_KINDS:
            raise not_managed(ref.kind, "delete")
        return delete_through(self._accessors(ref)[3])

    def read_secret(self, namespace: str, name: str) -> Obj | None:
        """The webhook's serving certificate is shared by the replicas through a Secret."""
        try:
            return call(self.core.read_namespaced_secret, name, namespace)
        except OpsError as error:
            if error.status == 404:
                return None
            raise

    def create_secret(self, body: Obj) -> bool:
        """Create a Secret; False when another replica created it first."""
        try:
            call(self.core.create_namespaced_secret, body["metadata"]["namespace"], body)
        except OpsError as error:
            if error.status == 409:
                return False
            raise
        return True

    def replace_secret(self, body: Obj) -> None:
        """Replace a Secret (conditional on the body's resourceVersion: a concurrent change is a 409)."""
        metadata = body["metadata"]
        call(self.core.replace_namespaced_secret, metadata["name"], metadata["namespace"], body)

    def post_event(self, body: Obj) -> None:
        call(self.core.create_namespaced_event, event_namespace(body), body)

    def taint_node(self, node: str, taints: Sequence[Obj], resource_version: str) -> None:
        body = taints_patch(taints, resource_version)
        call(self.core.patch_node, node, body, _content_type=MERGE_PATCH)

    def spot_metadata(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, SpotMetadata]:
        """Nothing: in a cluster, instance metadata is reachable only from the node itself, where
        `shipshape node-notices` reads it and publishes what it says as the Node's taints."""
        return {}
