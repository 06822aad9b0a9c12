"""Small builders for Node and Pod bodies used by the scheduler tests."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: int = 110,
    zone: str = "us-east-1a",
    labels: dict[str, str] | None = None,
    taints: list[Obj] | None = None,
    unschedulable: bool = False,
    extra: dict[str, str] | None = None,
) -> Obj:
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra or {})}
    spec: Obj = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": zone,
                "topology.kubernetes.io/region": "us-east-1",
                **(labels or {}),
            },
        },
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    *,
    namespace: str = "default",
    cpu: str | None = "100m",
    memory: str | None = "128Mi",
    labels: dict[str, str] | None = None,
    node_name: str | None = None,
    priority: int | None = None,
    spec: Obj | None = None,
    extra_requests: dict[str, str] | None = None,
) -> Obj:
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    requests.update(extra_requests or {})
    body_spec: Obj = {
        "schedulerName": "default-scheduler",
        "containers": [{"name": "app", "image": "nginx:1.27", "resources": {"requests": requests}}],
    }
    if node_name:
        body_spec["nodeName"] = node_name
    if priority is not None:
        body_spec["priority"] = priority
    body_spec.update(spec or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {"app": name})},
        "spec": body_spec,
        "status": {"phase": "Pending"},
    }


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Obj:
    out = {"key": key, "effect": effect}
    if value:
        out["value"] = value
    return out


def toleration(key: str, value: str | None = None, effect: str = "") -> Obj:
    out: Obj = {"key": key}
    if value is None:
        out["operator"] = "Exists"
    else:
        out["operator"] = "Equal"
        out["value"] = value
    if effect:
        out["effect"] = effect
    return out
