"""Builders for controller tests: a cluster on a virtual clock and a tiny kubelet stand-in."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from shipshape.emulator.api import Api
from shipshape.emulator.controllers import all_controllers
from shipshape.emulator.controllers.podutil import is_terminating
from shipshape.emulator.resources import LEASES, NAMESPACES, NODES, PODS, ResourceType
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import ADDED, DELETED, Obj, WatchEvent
from shipshape.kube.clock import VirtualClock, rfc3339, rfc3339_micro


class FakeKubelet:
    """Binds new pods to nodes and runs them as a kubelet would, on the engine's clock.

    `start_after` seconds after a pod is bound it is Running (and Ready unless its name is in
    `never_ready`); `terminate_after` seconds after a graceful delete it is gone.
    """

    name = "fake-kubelet"

    def __init__(
        self,
        nodes: Iterable[str] = ("node-a",),
        *,
        start_after: float = 2.0,
        terminate_after: float = 1.0,
        bind: bool = True,
        heartbeat: float = 10.0,
    ) -> None:
        self.nodes = list(nodes)
        self.start_after = start_after
        self.terminate_after = terminate_after
        self.bind = bind
        self.heartbeat = heartbeat
        self.never_ready: set[str] = set()
        self.silent: set[str] = set()  # nodes whose lease is no longer renewed
        self._next = 0
        self.cluster: Cluster | None = None

    def start(self, cluster: Cluster) -> None:
        self.cluster = cluster
        cluster.store.subscribe(self._on_event)
        for node in self.nodes:
            self._renew(node)

    def _renew(self, node: str) -> None:
        assert self.cluster is not None
        store = self.cluster.store
        if node not in self.silent and store.get(NODES, "", node) is not None:
            now = rfc3339_micro(self.cluster.clock.now())
            if store.get(LEASES, "kube-node-lease", node) is None:
                lease = {
                    "metadata": {"name": node, "namespace": "kube-node-lease"},
                    "spec": {"holderIdentity": node},
                }
                store.create(LEASES, lease)

            def renew(new: Obj) -> None:
                new["spec"]["renewTime"] = now
                new["spec"]["leaseDurationSeconds"] = 40

            store.mutate(LEASES, "kube-node-lease", node, renew)
            self._post_ready(node)
        self.cluster.engine.call_later(self.heartbeat, lambda: self._renew(node))

    def _post_ready(self, node: str) -> None:
        """A kubelet back in touch reports its node Ready again (after the controller's Unknown)."""
        assert self.cluster is not None
        now = rfc3339(self.cluster.clock.now())

        def change(body: Obj) -> None:
            for cond in body.get("status", {}).get("conditions", []):
                if cond["type"] == "Ready" and cond["status"] == "Unknown":
                    cond.update(
                        status="True", reason="KubeletReady", message="kubelet is posting ready status"
                    )
                    cond.update(lastHeartbeatTime=now, lastTransitionTime=now)

        self.cluster.store.mutate(NODES, "", node, change, subresource="status")

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource is not PODS or event.type == DELETED:
            return
        assert self.cluster is not None
        pod = event.object
        md = pod["metadata"]
        key = (md["namespace"], md["name"], md["uid"])
        engine = self.cluster.engine
        if is_terminating(pod):
            engine.call_later(self.terminate_after, lambda: self._remove(key))
        elif event.type == ADDED and self.bind and not pod["spec"].get("nodeName"):
            engine.call_soon(lambda: self._bind(key))

    def _current(self, key: tuple[str, str, str]) -> Obj | None:
        assert self.cluster is not None
        pod = self.cluster.store.get(PODS, key[0], key[1])
        return pod if pod is not None and pod["metadata"]["uid"] == key[2] else None

    def _target(self, pod: Obj) -> str:
        affinity = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        for term in affinity.get("nodeSelectorTerms") or []:
            for field in term.get("matchFields") or []:
                if field.get("key") == "metadata.name":
                    return str(field["values"][0])
        node = self.nodes[self._next % len(self.nodes)]
        self._next += 1
        return node

    def _bind(self, key: tuple[str, str, str]) -> None:
        assert self.cluster is not None
        pod = self._current(key)
        if pod is None or is_terminating(pod) or pod["spec"].get("nodeName"):
            return
        node = self._target(pod)

        def bind(new: Obj) -> None:
            new["spec"]["nodeName"] = node

        self.cluster.store.mutate(PODS, key[0], key[1], bind)
        self.cluster.engine.call_later(self.start_after, lambda: self._run(key))

    def _run(self, key: tuple[str, str, str]) -> None:
        assert self.cluster is not None
        pod = self._current(key)
        if pod is None or is_terminating(pod):
            return
        ready = key[1] not in self.never_ready
        set_running(self.cluster, pod, ready=ready)

    def _remove(self, key: tuple[str, str, str]) -> None:
        assert self.cluster is not None
        if self._current(key) is not None:
            self.cluster.store.remove(PODS, key[0], key[1])


def set_running(cluster: Cluster, pod: Obj, *, ready: bool = True, restarts: int = 0) -> Obj | None:
    """Mark a pod Running (and Ready or not) now, as the kubelet's status update would."""
    now = rfc3339(cluster.clock.now())

    def change(new: Obj) -> None:
        status = new.setdefault("status", {})
        status["phase"] = "Running"
        uid = new["metadata"]["uid"]
        status.setdefault("podIP", f"10.{int(uid[:2], 16)}.{int(uid[2:4], 16)}.{int(uid[4:6], 16)}")
        status["containerStatuses"] = [
            {
                "name": c["name"],
                "ready": ready,
                "restartCount": restarts,
                "state": {"running": {"startedAt": now}},
            }
            for c in new["spec"].get("containers", [])
        ]
        old = {c["type"]: c for c in status.get("conditions") or []}
        value = "True" if ready else "False"
        previous = old.get("Ready")
        since = previous["lastTransitionTime"] if previous and previous["status"] == value else now
        status["conditions"] = [{"type": "Ready", "status": value, "lastTransitionTime": since}]

    md = pod["metadata"]
    return cluster.store.mutate(PODS, md["namespace"], md["name"], change, subresource="status")


def make_cluster(
    *,
    nodes: Iterable[str] = ("node-a",),
    kubelet: FakeKubelet | None = None,
    controllers: bool = True,
) -> tuple[Cluster, FakeKubelet]:
    cluster = Cluster(VirtualClock())
    Api(cluster)
    for ns in ("default", "kube-node-lease"):
        cluster.store.create(NAMESPACES, {"metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}})
    node_names = list(nodes)
    for node in node_names:
        cluster.store.create(NODES, node_body(node))
    fake = kubelet or FakeKubelet(node_names)
    if controllers:
        for model in all_controllers():
            cluster.add(model)
    cluster.add(fake)
    return cluster, fake


def node_body(name: str, *, labels: dict[str, str] | None = None, taints: list[Obj] | None = None) -> Obj:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def create(cluster: Cluster, rt: ResourceType, body: Obj, namespace: str = "default") -> Obj:
    """Create through the API, synchronously (no event loop in these tests)."""
    coro = cluster.services["api"].create(rt, namespace, body)
    try:
        coro.send(None)
    except StopIteration as stop:
        created: Obj = stop.value
        return created
    raise AssertionError("an API create suspended")


def run(cluster: Cluster, seconds: float) -> None:
    cluster.engine.run_until(cluster.clock.now() + seconds)


def update(
    cluster: Cluster, rt: ResourceType, name: str, change: Callable[[Obj], None], ns: str = "default"
) -> Obj:
    updated = cluster.store.mutate(rt, ns, name, change)
    assert updated is not None
    return updated


def pods_of(cluster: Cluster, owner: Obj) -> list[Obj]:
    uid = owner["metadata"]["uid"]
    return [
        p
        for p in cluster.store.list(PODS, owner["metadata"].get("namespace", "default"))
        if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
    ]


def events(cluster: Cluster, reason: str | None = None, name: str | None = None) -> list[Obj]:
    from shipshape.emulator.resources import EVENTS

    return [
        e
        for e in cluster.store.list(EVENTS)
        if (reason is None or e["reason"] == reason)
        and (name is None or e["involvedObject"].get("name") == name)
    ]


def pod_template(labels: dict[str, str], **spec: Any) -> Obj:
    return {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}], **spec},
    }
