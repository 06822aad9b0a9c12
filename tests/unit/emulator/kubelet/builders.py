"""Builders for kubelet tests: a cluster on a virtual clock, Nodes and bound Pods in the store."""

from __future__ import annotations

from typing import Any

from shipshape.emulator.kubelet import KubeletModel
from shipshape.emulator.resources import EVENTS, NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Kubelet
from shipshape.emulator.store import Obj
from shipshape.kube.clock import VirtualClock

T0 = 1_767_225_600.0  # the VirtualClock's default start


def cluster(**kubelet: Any) -> tuple[Cluster, KubeletModel]:
    c = Cluster(VirtualClock(T0))
    model = KubeletModel(Kubelet.model_validate(kubelet))
    c.add(model)
    return c, model


def add_node(
    c: Cluster,
    name: str = "node-a",
    *,
    ready: bool = True,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
) -> Obj:
    return c.store.create(
        NODES,
        {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"podCIDR": "10.244.1.0/24"},
            "status": {
                "capacity": {"cpu": cpu, "memory": memory, "pods": str(pods)},
                "allocatable": {"cpu": cpu, "memory": memory, "pods": str(pods)},
                "addresses": [{"type": "InternalIP", "address": "192.168.0.10"}],
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady" if ready else "KubeletNotReady",
                        "message": "",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            },
        },
    )


def container(name: str = "app", image: str = "nginx:1.25", **extra: Any) -> Obj:
    return {"name": name, "image": image, **extra}


def add_pod(
    c: Cluster,
    name: str = "web",
    *,
    node: str | None = "node-a",
    containers: list[Obj] | None = None,
    init: list[Obj] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    body: Obj = {
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {"containers": containers or [container()], **spec},
    }
    if init:
        body["spec"]["initContainers"] = init
    if node:
        body["spec"]["nodeName"] = node
    return c.store.create(PODS, body)


def pod(c: Cluster, name: str = "web") -> Obj:
    obj = c.store.get(PODS, "default", name)
    assert obj is not None, f"pod {name} is gone"
    return obj


def condition(obj: Obj, ctype: str) -> Obj:
    for cond in obj["status"].get("conditions", []):
        if cond["type"] == ctype:
            return cond  # type: ignore[no-any-return]
    raise AssertionError(f"no {ctype} condition in {obj['status'].get('conditions')}")


def events(c: Cluster, name: str, reason: str | None = None) -> list[Obj]:
    out = [
        e
        for e in c.store.list(EVENTS)
        if e["involvedObject"].get("name") == name and (reason is None or e["reason"] == reason)
    ]
    return sorted(out, key=lambda e: e["metadata"]["resourceVersion"])


def messages(c: Cluster, name: str, reason: str | None = None) -> list[str]:
    return [e["message"] for e in events(c, name, reason)]


def run_for(c: Cluster, seconds: float) -> None:
    c.engine.run_until(c.now() + seconds)
    assert not c.engine.errors, c.engine.errors
