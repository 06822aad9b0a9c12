"""The kinds the controller's `ClusterState` holds, kept by the informer kit (`kube/informers.py`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from kubernetes import client as k8s

from shipshape.controller.growth import AUTOSCALER_STATUS
from shipshape.controller.state import ClusterState
from shipshape.kube import informers as kit

Obj = dict[str, Any]


def sources(api_client: k8s.ApiClient) -> list[kit.Source]:
    """What the cache holds (`cache.KINDS`), cluster-wide; cluster-autoscaler's status ConfigMap and
    Karpenter NodePools only where the cluster has them and the controller may read them (`growth.py`
    reads them): a 404 or 403 counts as none, listed again every `kit.NOT_SERVED_RETRY_SECONDS`."""
    core, apps, policy = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client), k8s.PolicyV1Api(api_client)
    custom = k8s.CustomObjectsApi(api_client)
    namespace, name = AUTOSCALER_STATUS
    return [
        kit.Source(
            "ConfigMap",
            partial(core.list_namespaced_config_map, namespace, field_selector=f"metadata.name={name}"),
            optional=True,
        ),
        kit.Source(
            "NodePool",
            partial(custom.list_cluster_custom_object, "karpenter.sh", "v1", "nodepools"),
            optional=True,
        ),
        kit.Source("Namespace", core.list_namespace),
        kit.Source("Node", core.list_node),
        kit.Source("Deployment", apps.list_deployment_for_all_namespaces),
        kit.Source("StatefulSet", apps.list_stateful_set_for_all_namespaces),
        kit.Source("ReplicaSet", apps.list_replica_set_for_all_namespaces),
        kit.Source("PodDisruptionBudget", policy.list_pod_disruption_budget_for_all_namespaces),
        kit.Source("Pod", core.list_pod_for_all_namespaces),
    ]


class LockedCache:
    """The cache as an informer sink: every list and event applied under the process's cache lock."""

    def __init__(self, cache: ClusterState, lock: AbstractContextManager[Any]) -> None:
        self.cache = cache
        self.lock = lock

    def replace(self, kind: str, items: list[Obj]) -> None:
        with self.lock:
            self.cache.replace(kind, items)

    def apply(self, event: Obj, kind: str) -> None:
        with self.lock:
            self.cache.apply(event, kind=kind)


def informers(
    api_client: k8s.ApiClient,
    cache: ClusterState,
    lock: AbstractContextManager[Any],
    backoff_max: float = kit.BACKOFF_MAX,
) -> kit.Informers:
    return kit.Informers(sources(api_client), LockedCache(cache, lock), backoff_max)
