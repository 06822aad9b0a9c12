"""Pods, events and nodes shaped exactly as the Kubernetes API returns them, from a plan of what
happened when (offsets in seconds from T0). Pod timestamps are truncated to the second like the
API's; the scheduler's events carry microsecond `eventTime` like events.k8s.io's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from shipshape.kube.clock import rfc3339, rfc3339_micro

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z

Json = dict[str, Any]


def ts(offset: float) -> str:
    return rfc3339(T0 + offset)


def micro(offset: float) -> str:
    return rfc3339_micro(T0 + offset)


@dataclass
class C:
    """A container's plan. `pull_start` None: the image was already present."""

    name: str
    started: float | None
    image: str = "registry.example/app:1"
    pull_start: float | None = None
    wait: float = 0.0
    pull: float = 0.0
    size: int = 52_428_800
    finished: float | None = None  # init containers
    readiness_delay: int | None = None
    startup_probe: bool = False
    cpu_limit: str | None = None
    restarts: int = 0
    waiting_reason: str = ""
    events: bool = True


@dataclass
class PodPlan:
    name: str
    created: float
    namespace: str = "default"
    node: str = "node-a"
    scheduled: float | None = None
    sandbox: float | None = None
    initialized: float | None = None
    containers_ready: float | None = None
    ready: float | None = None
    containers: list[C] = field(default_factory=list)
    init: list[C] = field(default_factory=list)
    owner: tuple[str, str] | None = ("ReplicaSet", "web-6b7f9c8d5")
    template_hash: str = "6b7f9c8d5"
    failed_scheduling: list[tuple[float, str, int]] = field(default_factory=list)
    phase: str = "Running"
    volumes: list[Json] = field(default_factory=list)
    uid: str = ""


def event(
    kind: str,
    namespace: str,
    name: str,
    reason: str,
    message: str,
    at: float,
    *,
    field_path: str | None = None,
    component: str = "kubelet",
    with_micro: bool = False,
    count: int = 1,
    last: float | None = None,
    uid: str = "",
    event_type: str = "Normal",
) -> Json:
    involved: Json = {"kind": kind, "namespace": namespace, "name": name, "apiVersion": "v1"}
    if uid:
        involved["uid"] = uid
    if field_path:
        involved["fieldPath"] = field_path
    body: Json = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{int(at * 1000):x}", "namespace": namespace or "default"},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "type": event_type,
        "count": count,
        "firstTimestamp": None if with_micro else ts(at),
        "lastTimestamp": None if with_micro else ts(last if last is not None else at),
        "eventTime": micro(at) if with_micro else None,
        "reportingComponent": component,
    }
    return body


def _go(seconds: float) -> str:
    if seconds >= 60:
        minutes = math.floor(seconds / 60)
        return f"{minutes}m{seconds - minutes * 60:g}s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def _container_events(plan: PodPlan, c: C, init: bool) -> list[Json]:
    if not c.events:
        return []
    path = f"spec.{'initContainers' if init else 'containers'}{{{c.name}}}"
    out: list[Json] = []
    if c.pull_start is None:
        at = (c.started if c.started is not None else plan.created) - 0.05
        message = f'Container image "{c.image}" already present on machine'
        out.append(event("Pod", plan.namespace, plan.name, "Pulled", message, at, field_path=path))
    else:
        out.append(
            event(
                "Pod",
                plan.namespace,
                plan.name,
                "Pulling",
                f'Pulling image "{c.image}"',
                c.pull_start,
                field_path=path,
            )
        )
        total = c.wait + c.pull
        message = (
            f'Successfully pulled image "{c.image}" in {_go(c.pull)} ({_go(total)} including waiting).'
            f" Image size: {c.size} bytes."
        )
        out.append(
            event("Pod", plan.namespace, plan.name, "Pulled", message, c.pull_start + total, field_path=path)
        )
    if c.started is not None:
        out.append(
            event(
                "Pod",
                plan.namespace,
                plan.name,
                "Created",
                f"Created container: {c.name}",
                c.started,
                field_path=path,
            )
        )
        out.append(
            event(
                "Pod",
                plan.namespace,
                plan.name,
                "Started",
                f"Started container {c.name}",
                c.started,
                field_path=path,
            )
        )
    return out


def _container_spec(c: C) -> Json:
    spec: Json = {"name": c.name, "image": c.image}
    if c.cpu_limit:
        spec["resources"] = {"limits": {"cpu": c.cpu_limit}, "requests": {"cpu": c.cpu_limit}}
    if c.readiness_delay is not None:
        spec["readinessProbe"] = {
            "httpGet": {"path": "/ready", "port": 8080},
            "initialDelaySeconds": c.readiness_delay,
        }
    if c.startup_probe:
        spec["startupProbe"] = {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1}
    return spec


def _container_status(c: C, init: bool, ready: bool) -> Json:
    status: Json = {"name": c.name, "image": c.image, "restartCount": c.restarts, "ready": ready}
    if c.waiting_reason:
        status["state"] = {"waiting": {"reason": c.waiting_reason}}
    elif init and c.finished is not None:
        status["state"] = {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": ts(c.started or 0),
                "finishedAt": ts(c.finished),
            }
        }
    elif c.started is not None:
        status["state"] = {"running": {"startedAt": ts(c.started)}}
    else:
        status["state"] = {"waiting": {"reason": "PodInitializing" if not init else "ContainerCreating"}}
    status["started"] = c.started is not None and not init
    return status


def pod_and_events(plan: PodPlan) -> tuple[Json, list[Json]]:
    conditions: list[Json] = []

    def condition(kind: str, at: float | None, reason: str = "") -> None:
        if at is None:
            body: Json = {"type": kind, "status": "False"}
            if reason:
                body["reason"] = reason
            conditions.append(body)
        else:
            conditions.append({"type": kind, "status": "True", "lastTransitionTime": ts(at)})

    if plan.scheduled is None:
        message = plan.failed_scheduling[-1][1] if plan.failed_scheduling else ""
        conditions.append(
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        )
    else:
        condition("PodReadyToStartContainers", plan.sandbox)
        condition("Initialized", plan.initialized, "ContainersNotInitialized")
        condition("Ready", plan.ready, "ContainersNotReady")
        condition("ContainersReady", plan.containers_ready, "ContainersNotReady")
        condition("PodScheduled", plan.scheduled)
    metadata: Json = {
        "name": plan.name,
        "namespace": plan.namespace,
        "uid": plan.uid or f"uid-{plan.name}",
        "creationTimestamp": ts(plan.created),
        "labels": {"app": "web", "pod-template-hash": plan.template_hash},
    }
    if plan.owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": plan.owner[0],
                "name": plan.owner[1],
                "controller": True,
                "uid": "o1",
            }
        ]
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [_container_spec(c) for c in plan.containers],
            "initContainers": [_container_spec(c) for c in plan.init],
            "volumes": plan.volumes,
        },
        "status": {
            "phase": plan.phase if plan.scheduled is not None else "Pending",
            "conditions": conditions,
            "containerStatuses": [
                _container_status(c, False, plan.containers_ready is not None) for c in plan.containers
            ],
            "initContainerStatuses": [_container_status(c, True, c.finished is not None) for c in plan.init],
        },
    }
    if plan.scheduled is not None:
        pod["spec"]["nodeName"] = plan.node
    events: list[Json] = []
    for at, message, count in plan.failed_scheduling:
        events.append(
            event(
                "Pod",
                plan.namespace,
                plan.name,
                "FailedScheduling",
                message,
                at,
                component="default-scheduler",
                with_micro=True,
                count=count,
                event_type="Warning",
            )
        )
    if plan.scheduled is not None:
        events.append(
            event(
                "Pod",
                plan.namespace,
                plan.name,
                "Scheduled",
                f"Successfully assigned {plan.namespace}/{plan.name} to {plan.node}",
                plan.scheduled,
                component="default-scheduler",
                with_micro=True,
            )
        )
        for c in plan.init:
            events.extend(_container_events(plan, c, True))
        for c in plan.containers:
            events.extend(_container_events(plan, c, False))
    return pod, events


def node(
    name: str,
    *,
    created: float = -600.0,
    instance_type: str = "m5.large",
    zone: str = "us-east-1a",
    capacity: str = "on-demand",
    ready: float | None = None,
) -> Json:
    conditions: list[Json] = []
    if ready is not None:
        conditions.append(
            {"type": "Ready", "status": "True", "lastTransitionTime": ts(ready), "reason": "KubeletReady"}
        )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "creationTimestamp": ts(created),
            "labels": {
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/zone": zone,
                "node.kubernetes.io/capacity": capacity,
            },
        },
        "status": {"conditions": conditions},
    }
