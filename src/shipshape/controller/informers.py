"""The kinds the controller's `ClusterState` holds, kept by the informer kit (`kube/informers.py`)."""

from __future__ import annotations

from typing import Any

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


def informers(
    api_client: kube_sources.ApiClient, sink: kit.Sink, backoff_max: float = kit.BACKOFF_MAX
) -> kit.Informers:
    """The informers of every kind the state holds, delivering to `sink` (in the process, a
    `state.views.Fanout` feeding the webhook's and the loops' replicas)."""
    return kit.Informers(sources(api_client), sink, backoff_max)
