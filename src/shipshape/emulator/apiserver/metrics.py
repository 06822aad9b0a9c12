"""metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics, computed on request from the usage model.

Shapes and units follow metrics-server: CPU in nanocores ("123456789n"), memory in Ki.
"""

from __future__ import annotations

from typing import Any, Protocol

from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.store import Obj, Store
from shipshape.kube import errors
from shipshape.kube.clock import rfc3339

WINDOW = "10s"
API_VERSION = "metrics.k8s.io/v1beta1"


class UsageSource(Protocol):
    def pod_usage(self, pod: Obj) -> list[tuple[str, int, int]]: ...

    def node_usage(self, node_name: str) -> tuple[int, int]: ...


def _cpu(millicores: int) -> str:
    return f"{int(millicores) * 1_000_000}n"


def _memory(num_bytes: int) -> str:
    return f"{int(num_bytes) // 1024}Ki"


def _metadata(obj: Obj, now: float) -> Obj:
    md = obj.get("metadata", {})
    out: Obj = {"name": md.get("name", ""), "creationTimestamp": rfc3339(now)}
    if md.get("namespace"):
        out["namespace"] = md["namespace"]
    if md.get("labels"):
        out["labels"] = md["labels"]
    return out


def node_metrics(usage: UsageSource, node: Obj, now: float) -> Obj:
    cpu, memory = usage.node_usage(node["metadata"]["name"])
    return {
        "kind": "NodeMetrics",
        "apiVersion": API_VERSION,
        "metadata": _metadata(node, now),
        "timestamp": rfc3339(now),
        "window": WINDOW,
        "usage": {"cpu": _cpu(cpu), "memory": _memory(memory)},
    }


def pod_metrics(usage: UsageSource, pod: Obj, now: float) -> Obj:
    return {
        "kind": "PodMetrics",
        "apiVersion": API_VERSION,
        "metadata": _metadata(pod, now),
        "timestamp": rfc3339(now),
        "window": WINDOW,
        "containers": [
            {"name": name, "usage": {"cpu": _cpu(cpu), "memory": _memory(memory)}}
            for name, cpu, memory in usage.pod_usage(pod)
        ],
    }


def _running(pod: Obj) -> bool:
    return bool(pod.get("spec", {}).get("nodeName")) and pod.get("status", {}).get("phase") == "Running"


class MetricsView:
    """Get/list of node and pod metrics over the store, as metrics-server answers them."""

    def __init__(self, store: Store, usage: Any) -> None:
        self.store = store
        if usage is None:
            raise errors.ServiceUnavailable(
                "the server is currently unable to handle the request: no usage model is running in this "
                "emulated cluster, so metrics.k8s.io has nothing to report"
            )
        self.usage: UsageSource = usage

    def nodes(self, names: list[Obj], now: float) -> list[Obj]:
        return [node_metrics(self.usage, node, now) for node in names]

    def node(self, name: str, now: float) -> Obj:
        node = self.store.get(NODES, "", name)
        if node is None:
            raise errors.NotFound.of("nodes", name, "metrics.k8s.io")
        return node_metrics(self.usage, node, now)

    def pods(self, pods: list[Obj], now: float) -> list[Obj]:
        return [pod_metrics(self.usage, pod, now) for pod in pods if _running(pod)]

    def pod(self, namespace: str, name: str, now: float) -> Obj:
        pod = self.store.get(PODS, namespace, name)
        if pod is None or not _running(pod):
            raise errors.NotFound.of("pods", name, "metrics.k8s.io")
        return pod_metrics(self.usage, pod, now)
