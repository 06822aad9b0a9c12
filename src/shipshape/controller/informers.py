"""The kinds the controller's `ClusterState` holds, kept by the informer kit (`kube/informers.py`)."""

from __future__ import annotations

from functools import partial
from typing import Any

from kubernetes import client as k8s

from shipshape.controller.growth import AUTOSCALER_STATUS
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


def informers(
    api_client: k8s.ApiClient, sink: kit.Sink, backoff_max: float = kit.BACKOFF_MAX
) -> kit.Informers:
    """The informers of every kind the state holds, delivering to `sink` (in the process, a
    `state.views.Fanout` feeding the webhook's and the loops' replicas)."""
    return kit.Informers(sources(api_client), sink, backoff_max)
