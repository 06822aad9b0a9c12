"""What kube-controller-manager does, for the emulated cluster: workload and housekeeping controllers.

`all_controllers()` lists them in a fixed order. The order matters only for who sees a change first
within one engine turn: ReplicaSets before Deployments, so a Deployment reads fresh ReplicaSet
status after scaling one.

Each follows its upstream (v1.32) counterpart: ReplicaSet (expectations, slow-start creation,
scale-down ranking), Deployment (rolling/recreate, revisions, rollback by template, proportional
scaling, progress conditions), StatefulSet (ordinal pods, OrderedReady/Parallel, partitioned
rolling updates, ControllerRevisions), DaemonSet (eligibility with daemon tolerations, pinned
node affinity, rolling update with surge), Job (NonIndexed and Indexed, backoff, deadline,
suspend, TTL), garbage collector, disruption (PDB status), node lifecycle (lease health,
condition taints, rate-limited taint-based eviction, pod GC), namespace deletion, Endpoints,
default ServiceAccounts and ResourceQuota usage. Pods are created through the API (admission and
webhooks) as the controllers' kube-system service accounts; other writes go to the store.

Not modelled: PersistentVolumeClaims from StatefulSet volumeClaimTemplates, EndpointSlices,
HorizontalPodAutoscalers and CronJobs (types the emulator does not serve), Job pod failure and
success policies, backoffLimitPerIndex.
"""

from __future__ import annotations

from shipshape.emulator.controllers.daemonset import DaemonSetController
from shipshape.emulator.controllers.deployment import DeploymentController
from shipshape.emulator.controllers.disruption import DisruptionController
from shipshape.emulator.controllers.endpoints import EndpointsController
from shipshape.emulator.controllers.garbagecollector import GarbageCollector
from shipshape.emulator.controllers.job import JobController
from shipshape.emulator.controllers.namespace import NamespaceController
from shipshape.emulator.controllers.nodelifecycle import NodeLifecycleController
from shipshape.emulator.controllers.replicaset import ReplicaSetController
from shipshape.emulator.controllers.resourcequota import ResourceQuotaController
from shipshape.emulator.controllers.serviceaccounts import ServiceAccountsController
from shipshape.emulator.controllers.statefulset import StatefulSetController
from shipshape.emulator.runtime import Model

__all__ = [
    "DaemonSetController",
    "DeploymentController",
    "DisruptionController",
    "EndpointsController",
    "GarbageCollector",
    "JobController",
    "NamespaceController",
    "NodeLifecycleController",
    "ReplicaSetController",
    "ResourceQuotaController",
    "ServiceAccountsController",
    "StatefulSetController",
    "all_controllers",
]


def all_controllers() -> list[Model]:
    return [
        ReplicaSetController(),
        DeploymentController(),
        StatefulSetController(),
        DaemonSetController(),
        JobController(),
        GarbageCollector(),
        NodeLifecycleController(),
        DisruptionController(),
        EndpointsController(),
        NamespaceController(),
        ServiceAccountsController(),
        ResourceQuotaController(),
    ]
