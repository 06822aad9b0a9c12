"""The kinds the controller's `ClusterCache` holds, kept by the informer kit (`kube/informers.py`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from shipshape.controller.cache import ClusterCache
from shipshape.controller.growth import AUTOSCALER_STATUS
from shipshape.kube import informers as kit
from shipshape.kube import sources as kube_sources

Obj = dict[str, Any]


def sources(api_client: kube_sources.ApiClient) -> list[kit.Source]:
    """What the cache holds (`cache.KINDS`), cluster-wide; cluster-autoscaler's status ConfigMap and
    Karpenter NodePools only where the cluster has them and the controller may read them (`growth.py`
    reads them): a 404 or 403 counts as none, listed again every `kit.NOT_SERVED_RETRY_SECONDS`."""
    namespace, name = AUTOSCALER_STATUS
    return [
        kube_sources.config_map(api_client, namespace, name),
        kube_sources.custom_objects(api_client, "NodePool", "karpenter.sh", "v1", "nodepools"),
        *kube_sources.cluster_wide(
            api_client,
            ("Namespace", "Node", "Deployment", "StatefulSet", "ReplicaSet", "PodDisruptionBudget", "Pod"),
        ),
    ]


class LockedCache:
    """The cache as an informer sink: every list and event applied under the process's cache lock."""

    def __init__(self, cache: ClusterCache, lock: AbstractContextManager[Any]) -> None:
        self.cache = cache
        self.lock = lock

    def replace(self, kind: str, items: list[Obj]) -> None:
        with self.lock:
            self.cache.replace(kind, items)

    def apply(self, event: Obj, kind: str) -> None:
        with self.lock:
            self.cache.apply(event, kind=kind)


def informers(
    api_client: kube_sources.ApiClient,
    cache: ClusterCache,
    lock: AbstractContextManager[Any],
    backoff_max: float = kit.BACKOFF_MAX,
) -> kit.Informers:
    return kit.Informers(sources(api_client), LockedCache(cache, lock), backoff_max)
