"""Informer sources by kind: which list call of the official client follows each kind.

The controller's cache and the agent's mirror say which kinds they hold; this module turns the kinds
into `informers.Source`s (the client's cluster-wide list functions), so neither of them imports the
client library. Kinds the cluster may lack or the caller may not read (a ConfigMap by name, a custom
resource) are optional sources: a 404 or 403 counts as none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any, TypeAlias

from kubernetes import client as k8s

from shipshape.kube.informers import Source

ApiClient: TypeAlias = k8s.ApiClient

# Kind -> (the client's API class, its cluster-wide list method).
CLUSTER_WIDE: Mapping[str, tuple[str, str]] = {
    "Namespace": ("CoreV1Api", "list_namespace"),
    "Node": ("CoreV1Api", "list_node"),
    "Pod": ("CoreV1Api", "list_pod_for_all_namespaces"),
    "Event": ("CoreV1Api", "list_event_for_all_namespaces"),
    "ConfigMap": ("CoreV1Api", "list_config_map_for_all_namespaces"),
    "Deployment": ("AppsV1Api", "list_deployment_for_all_namespaces"),
    "ReplicaSet": ("AppsV1Api", "list_replica_set_for_all_namespaces"),
    "StatefulSet": ("AppsV1Api", "list_stateful_set_for_all_namespaces"),
    "DaemonSet": ("AppsV1Api", "list_daemon_set_for_all_namespaces"),
    "Job": ("BatchV1Api", "list_job_for_all_namespaces"),
    "PodDisruptionBudget": ("PolicyV1Api", "list_pod_disruption_budget_for_all_namespaces"),
    "HorizontalPodAutoscaler": ("AutoscalingV2Api", "list_horizontal_pod_autoscaler_for_all_namespaces"),
    "PriorityClass": ("SchedulingV1Api", "list_priority_class"),
}


def _api(api_client: ApiClient, name: str, made: dict[str, Any]) -> Any:
    api = made.get(name)
    if api is None:
        api = made[name] = getattr(k8s, name)(api_client)
    return api


def cluster_wide(api_client: ApiClient, kinds: Iterable[str]) -> list[Source]:
    """A source per kind, listing it in every namespace (a kind not in `CLUSTER_WIDE` is a ValueError)."""
    made: dict[str, Any] = {}
    out: list[Source] = []
    for kind in kinds:
        if kind not in CLUSTER_WIDE:
            raise ValueError(f"no informer source for {kind!r} (known: {', '.join(sorted(CLUSTER_WIDE))})")
        api_name, method = CLUSTER_WIDE[kind]
        out.append(Source(kind, getattr(_api(api_client, api_name, made), method)))
    return out


def config_map(api_client: ApiClient, namespace: str, name: str, *, optional: bool = True) -> Source:
    """One ConfigMap, by namespace and name (a field selector on the namespace's list)."""
    core = k8s.CoreV1Api(api_client)
    function = partial(core.list_namespaced_config_map, namespace, field_selector=f"metadata.name={name}")
    return Source("ConfigMap", function, optional=optional)


def custom_objects(
    api_client: ApiClient, kind: str, group: str, version: str, plural: str, *, optional: bool = True
) -> Source:
    """A cluster-scoped custom resource (Karpenter's NodePools, ...)."""
    custom = k8s.CustomObjectsApi(api_client)
    return Source(kind, partial(custom.list_cluster_custom_object, group, version, plural), optional=optional)
