"""Builders of Kubernetes objects and AdmissionReviews for the controller's tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from shipshape.controller.loops.base import Reconciler, SharedState
from shipshape.controller.loops.guards import SurgeGuards
from shipshape.controller.loops.interruptions import InterruptionResponder
from shipshape.controller.loops.notices import NoticeWatcher
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.notices import QueueNoticeSource
from shipshape.controller.ops import ClusterOps
from shipshape.controller.placement import Pool
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import KINDS, ClusterState
from shipshape.controller.webhook.admission import PodPlacer
from shipshape.kube.clock import Clock, VirtualClock

Obj = dict[str, Any]
_uids = itertools.count(1)


def namespace(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def deployment(
    name: str,
    replicas: int,
    annotations: dict[str, str] | None = None,
    ns: str = "shop",
    max_unavailable: int | str | None = None,
) -> Obj:
    spec: Obj = {"replicas": replicas, "selector": {"matchLabels": {"app": name}}}
    if max_unavailable is not None:
        spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable}}
    return {
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "uid": f"dep-{name}", "annotations": annotations or {}},
        "spec": spec,
    }


def statefulset(name: str, replicas: int, annotations: dict[str, str] | None = None, ns: str = "shop") -> Obj:
    return {
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "uid": f"sts-{name}", "annotations": annotations or {}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}},
    }


def replicaset(deploy: Obj, hash_: str = "abc12") -> Obj:
    name = deploy["metadata"]["name"]
    return {
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-{hash_}",
            "namespace": deploy["metadata"]["namespace"],
            "uid": f"rs-{name}-{hash_}",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": name,
                    "uid": deploy["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": deploy["spec"]["replicas"]},
    }


def pod_of(
    owner: Obj,
    name: str = "",
    *,
    node: str | None = None,
    ready: bool = True,
    labels: dict[str, str] | None = None,
) -> Obj:
    kind = owner["kind"]
    owner_name = owner["metadata"]["name"]
    app = owner_name.rsplit("-", 1)[0] if kind == "ReplicaSet" else owner_name
    metadata: Obj = {
        "namespace": owner["metadata"]["namespace"],
        "labels": {"app": app, **(labels or {})},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": kind,
                "name": owner_name,
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ],
    }
    if name:
        metadata["name"] = name
        metadata["uid"] = f"pod-{next(_uids)}"
    else:
        metadata["generateName"] = owner_name + "-"
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx",
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                }
            ]
        },
    }
    if node is not None:
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
    return pod


def node(
    name: str,
    capacity: str,
    instance_type: str = "m5.large",
    zone: str = "us-east-1a",
    taints: list[Obj] | None = None,
) -> Obj:
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/capacity": capacity,
                "node.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/zone": zone,
                "topology.kubernetes.io/region": "us-east-1",
            },
        },
        "spec": {"taints": taints or []},
    }


def with_room(item: Obj, cpu: str = "2", memory: str = "8Gi", pods: str = "110") -> Obj:
    """The node Ready, with allocatable room (the rebalancer moves a pod only where it would land)."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    ready = [{"type": "Ready", "status": "True"}]
    return {**item, "status": {"allocatable": allocatable, "capacity": allocatable, "conditions": ready}}


def review(
    pod: Obj, ns: str = "shop", uid: str | None = None, operation: str = "CREATE", dry_run: bool = False
) -> Obj:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or f"req-{next(_uids)}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def added(obj: Obj) -> Obj:
    return {"type": "ADDED", "object": obj}


def objects_of(objs: Iterable[Obj]) -> Callable[[str, str, str], Obj | None]:
    """A lookup of these objects by (kind, namespace, name), as `RecordingOps(objects=...)` asks."""
    by_key = {
        (str(o.get("kind")), str(o["metadata"].get("namespace") or ""), str(o["metadata"]["name"])): o
        for o in objs
    }
    return lambda kind, namespace, name: by_key.get((kind, namespace, name))


class Harness:
    """A placer over a cache, on a virtual clock, with its own metrics registry."""

    def __init__(self, config: ControllerConfig | None = None, risk: RiskModel | None = None) -> None:
        self.config = config or ControllerConfig()
        self.clock = VirtualClock()
        self.cache = ClusterState(self.config)
        self.risk = risk or RiskModel(cooldown_seconds=self.config.risk_cooldown_seconds)
        self.registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry)
        self.shortages: set[Any] = set()
        self.placer = PodPlacer(
            self.cache, self.config, self.risk, self.clock, self.metrics, shortages=lambda now: self.shortages
        )

    def add(self, *objs: Obj) -> None:
        for obj in objs:
            self.cache.apply(added(obj))

    def objects(self, kind: str, namespace: str, name: str) -> Obj | None:
        """What the cache holds, as `RecordingOps(objects=...)` asks it (kinds it does not hold: none)."""
        return self.cache.get(kind, namespace, name) if kind in KINDS else None

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value


class InterruptionLane:
    """The interruption lane's loops (notice watcher, responder, guards) over one `SharedState`, each
    round run back to back as the scheduler runs a lane: what the tests of the response to notices drive."""

    def __init__(
        self,
        clock: Clock,
        cache: ClusterState,
        ops: ClusterOps,
        config: ControllerConfig,
        metrics: ControllerMetrics,
        shared: SharedState | None = None,
        *,
        queue: QueueNoticeSource | None = None,
    ) -> None:
        self.shared = shared or SharedState.for_config(config)
        common = (clock, cache, ops, config, metrics, self.shared)
        self.watcher = NoticeWatcher(*common, queue=queue)
        self.responder = InterruptionResponder(*common)
        self.guards = SurgeGuards(*common)
        self.loops: tuple[Reconciler, ...] = (self.watcher, self.responder, self.guards)

    def observe(self, now: float) -> None:
        for loop in self.loops:
            loop.observe(now)

    def reconcile(self, now: float) -> None:
        for loop in self.loops:
            loop.reconcile(now)

    def recommended(self) -> Mapping[str, Pool | None]:
        return self.shared.notices.recommended
