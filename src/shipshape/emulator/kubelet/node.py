"""The kubelet of one node: Lease heartbeats, node status, image cache, pod IPs and pod workers."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from shipshape.contracts.annotations import EMULATOR_POOL_LABEL
from shipshape.emulator.engine import Timer
from shipshape.emulator.kubelet import images
from shipshape.emulator.kubelet.pods import PodWorker
from shipshape.emulator.kubelet.resources import admission_check
from shipshape.emulator.resources import LEASES, NODES, PODS
from shipshape.emulator.store import Obj
from shipshape.kube import errors
from shipshape.kube.clock import parse_time, rfc3339, rfc3339_micro
from shipshape.kube.scheduling import pod_requests

if TYPE_CHECKING:
    from shipshape.emulator.kubelet.model import KubeletModel

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
UNREACHABLE_ANNOTATION = "emulator.shipshape.dev/unreachable"
POOL_LABEL = EMULATOR_POOL_LABEL
MAX_REPORTED_IMAGES = 50  # the kubelet's nodeStatusMaxImages default

# (type, reason, message) of the conditions the kubelet owns besides Ready, in upstream order.
PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def is_unreachable(node: Obj) -> bool:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(UNREACHABLE_ANNOTATION, "")).lower() == "true"


def ready_status(node: Obj) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status", "Unknown"))
    return "Unknown"


class NodeAgent:
    """Everything the kubelet does for one Node while that node is reachable."""

    def __init__(self, model: KubeletModel, node: Obj, index: int) -> None:
        self.model = model
        self.engine = model.c.engine
        self.store = model.c.store
        self.recorder = model.c.recorder
        self.settings = model.settings
        self.name: str = node["metadata"]["name"]
        self.uid: str = node["metadata"].get("uid", "")
        self.node = node
        self.running = False
        self.started_once = False
        self.was_ready = ready_status(node) == "True"
        self.network_ready = self.was_ready
        self.workers: dict[str, PodWorker] = {}
        self.first_network_pod_seen = False
        self.images: dict[str, int] = {}
        for image in self.settings.preloaded_images:
            self.images[images.normalize(image)] = model.image_size(image)
        self.puller = self._new_puller()
        self._network_waiters: list[Callable[[], None]] = []
        self._timers: dict[str, Timer] = {}
        self._images_dirty = False
        # (number of images, the `status.images` list) last reported: see `_image_list`.
        self._reported_images: tuple[int, list[Obj]] = (-1, [])
        self.host_ip = _internal_ip(node) or _fallback_host_ip(index)
        self._pod_net = _pod_network(node, index)
        self._ips_in_use: set[str] = set()
        self._next_host = 2

    def _new_puller(self) -> images.ImagePuller:
        bandwidth = self.model.bandwidth_mbps(self.node)
        limit = 1 if self.settings.serialize_image_pulls else self.settings.max_parallel_image_pulls
        return images.ImagePuller(self.engine, bandwidth * 1e6, limit)

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """The kubelet (re)starts on this node: heartbeats resume and bound pods are synced."""
        if self.running:
            return
        self.running = True
        if not self.started_once:
            self.started_once = True
            self._node_events()
        self._renew_lease()
        self._report_status()
        self._every("heartbeat", self.settings.heartbeat_seconds, self._heartbeat)
        self._every("status", self.settings.node_status_report_seconds, self._report_status)
        for pod in sorted(
            self.store.pods_on_node(self.name), key=lambda p: p["metadata"].get("creationTimestamp", "")
        ):
            self.model.consider(pod)

    def suspend(self) -> None:
        """The node stopped answering: no heartbeats, no pod progress, nothing written."""
        if not self.running:
            return
        self.running = False
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.puller.cancel_all()
        self.puller = self._new_puller()
        self._network_waiters.clear()
        for worker in list(self.workers.values()):
            worker.drop()
        self.workers.clear()

    def update(self, node: Obj) -> None:
        """A change to the Node object: reachability and network readiness."""
        self.node = node
        if is_unreachable(node):
            self.suspend()
            return
        ready = ready_status(node) == "True"
        if ready and not self.was_ready:
            self.was_ready = True
            self._record_node_ready()
        if ready and not self.network_ready:
            self.network_ready = True
            waiters, self._network_waiters = self._network_waiters, []
            for waiter in waiters:
                waiter()
        if not self.running:
            self.start()

    def _every(self, key: str, period: float, action: Callable[[], None]) -> None:
        def tick() -> None:
            if not self.running:
                return
            action()
            self._timers[key] = self.engine.call_later(period, tick)

        self._timers[key] = self.engine.call_later(period, tick)

    # ---- heartbeats and node status ----------------------------------------------------------
    def _node_events(self) -> None:
        # A node that registered (and became Ready) before the emulated cluster started gets its
        # kubelet's start-up Events stamped when those happened, as its creation and conditions are.
        registered = self._past_time(self.node["metadata"].get("creationTimestamp"))

        def event(reason: str, message: str) -> None:
            self.recorder.record(
                self.node, reason, message, component="kubelet", host=self.name, at=registered
            )

        event("Starting", "Starting kubelet.")
        event("NodeAllocatableEnforced", "Updated Node Allocatable limit across pods")
        for status in ("NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"):
            event(status, f"Node {self.name} status is now: {status}")
        if self.was_ready:
            ready: Obj = next(
                (c for c in self.node["status"].get("conditions") or [] if c.get("type") == "Ready"), {}
            )
            self._record_node_ready(at=self._past_time(ready.get("lastTransitionTime")))

    def _past_time(self, stamp: str | None) -> float | None:
        """`stamp` as a time when it lies before now, else None (an Event of now)."""
        if not stamp:
            return None
        when = parse_time(stamp)
        return when if when < self.engine.now() else None

    def _record_node_ready(self, at: float | None = None) -> None:
        self.recorder.record(
            self.node,
            "NodeReady",
            f"Node {self.name} status is now: NodeReady",
            component="kubelet",
            host=self.name,
            at=at,
        )

    def _heartbeat(self) -> None:
        self._renew_lease()
        if self._images_dirty:
            self._report_status()

    def _renew_lease(self) -> None:
        now = rfc3339_micro(self.engine.now())
        current = self.store.get(LEASES, LEASE_NAMESPACE, self.name)
        if current is None:
            lease: Obj = {
                "metadata": {
                    "name": self.name,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.uid}
                    ],
                },
                "spec": {
                    "holderIdentity": self.name,
                    "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                    "renewTime": now,
                },
            }
            with contextlib.suppress(errors.AlreadyExists):
                self.store.create(LEASES, lease)
            return

        # The new version is built beside the stored one (the store never changes that one).
        renewed: Obj = {
            **current,
            "metadata": {**current["metadata"]},
            "spec": {**(current.get("spec") or {}), "renewTime": now, "holderIdentity": self.name},
        }
        self.store.update(LEASES, renewed, copy=False)

    def _report_status(self) -> None:
        """Refresh the conditions the kubelet owns and the image list (low rate, or on change).

        The new status is built beside the stored one (condition dicts copied, everything else
        shared) rather than from a deep copy of the whole node.
        """
        self._images_dirty = False
        current = self.store.get(NODES, "", self.name)
        if current is None:
            return
        now = rfc3339(self.engine.now())
        restored = False
        status: Obj = dict(current.get("status") or {})
        conditions: list[Obj] = [dict(c) for c in status.get("conditions") or []]
        status["conditions"] = conditions
        by_type = {c.get("type"): c for c in conditions}
        for ctype, reason, message in PRESSURE_CONDITIONS:
            condition = by_type.get(ctype)
            if condition is None:
                condition = {
                    "type": ctype,
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now,
                }
                ready_at = next(
                    (i for i, c in enumerate(conditions) if c.get("type") == "Ready"), len(conditions)
                )
                conditions.insert(ready_at, condition)
            elif condition.get("status") != "False":  # e.g. Unknown after the node was unreachable
                condition.update(status="False", reason=reason, message=message, lastTransitionTime=now)
            condition["lastHeartbeatTime"] = now
        ready = by_type.get("Ready")
        if ready is not None and ready.get("status") == "True":
            ready["lastHeartbeatTime"] = now
        elif ready is not None and ready.get("status") == "Unknown" and self.was_ready:
            ready.update(
                status="True",
                reason="KubeletReady",
                message="kubelet is posting ready status",
                lastHeartbeatTime=now,
                lastTransitionTime=now,
            )
            restored = True
        status["images"] = self._image_list()

        updated = self.store.write_status(NODES, "", self.name, status)
        if updated is not None:
            self.node = updated
            if restored:
                self._record_node_ready()

    def _image_list(self) -> list[Obj]:
        """The biggest images, as reported in `status.images`.

        Images are only ever added: while their number stands, the list is the one reported last
        time, and the same list object goes into the new status (stored objects are never changed).
        """
        if self._reported_images[0] != len(self.images):
            biggest = sorted(self.images.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_REPORTED_IMAGES]
            self._reported_images = (
                len(self.images),
                [{"names": [images.image_id(ref), ref], "sizeBytes": size} for ref, size in biggest],
            )
        return self._reported_images[1]

    # ---- services for pod workers ------------------------------------------------------------
    def when_network_ready(self, callback: Callable[[], None]) -> None:
        if self.network_ready:
            callback()
        else:
            self._network_waiters.append(callback)

    def has_image(self, ref: str) -> bool:
        return ref in self.images

    def image_size(self, image: str) -> int:
        return self.model.image_size(image)

    def add_image(self, ref: str, size: int) -> None:
        if ref not in self.images:
            self.images[ref] = size
            self._images_dirty = True

    def pull(self, ref: str, size: int, on_done: images.PullDone) -> None:
        self.puller.pull(ref, size, on_done)

    def allocate_ip(self) -> str:
        hosts = self._pod_net.num_addresses - 2
        for _ in range(max(1, hosts)):
            candidate = str(self._pod_net.network_address + self._next_host)
            self._next_host = self._next_host + 1 if self._next_host < hosts else 2
            if candidate not in self._ips_in_use:
                self._ips_in_use.add(candidate)
                return candidate
        raise RuntimeError(f"node {self.name}: no free pod IP in {self._pod_net}")

    def reserve_ip(self, ip: str) -> None:
        self._ips_in_use.add(ip)

    def release_ip(self, ip: str) -> None:
        self._ips_in_use.discard(ip)

    # ---- pods ------------------------------------------------------------------------------
    def admit(self, pod: Obj) -> None:
        """A pod bound to this node that the kubelet has not seen yet."""
        uid = pod["metadata"]["uid"]
        if uid in self.workers or not self.running:
            return
        worker = PodWorker(self, pod)
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running" and not pod["metadata"].get("deletionTimestamp"):
            self.workers[uid] = worker
            worker.adopt_running(pod.get("status") or {})
            return
        if pod["metadata"].get("deletionTimestamp"):
            self.workers[uid] = worker
            worker.terminate()
            return
        active = [w.pod for w in self.workers.values() if w.alive]
        rejection = admission_check(
            pod,
            (self.node.get("status") or {}).get("allocatable") or {},
            active,
            requests_of=self._admitted_requests,
        )
        if rejection is not None:
            worker.reject(rejection.reason, rejection.message)
            return
        self.workers[uid] = worker
        worker.start()

    def _admitted_requests(self, pod: Obj) -> Mapping[str, int]:
        worker = self.workers.get(pod["metadata"]["uid"])
        return worker.requests() if worker is not None and worker.pod is pod else pod_requests(pod)

    def pod_finished(self, worker: PodWorker) -> None:
        """The pod reached Succeeded/Failed on its own: it no longer counts against the node."""
        worker.alive = False
        worker.flush()

    def remove_pod(self, worker: PodWorker) -> None:
        """Final step of a graceful deletion: the kubelet's delete with grace period 0."""
        self.workers.pop(worker.uid, None)
        current = self.store.get(PODS, worker.namespace, worker.name)
        if current is None or current["metadata"]["uid"] != worker.uid:
            return
        if current["metadata"].get("finalizers"):
            self.store.delete(PODS, worker.namespace, worker.name, grace_seconds=0, uid=worker.uid)
        else:
            self.store.remove(PODS, worker.namespace, worker.name)

    def forget(self, uid: str) -> None:
        worker = self.workers.pop(uid, None)
        if worker is not None:
            worker.drop()


def _internal_ip(node: Obj) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP" and address.get("address"):
            return str(address["address"])
    return ""


def _fallback_host_ip(index: int) -> str:
    return f"192.168.{(index // 250) % 256}.{index % 250 + 2}"


def _pod_network(node: Obj, index: int) -> ipaddress.IPv4Network:
    cidr = (node.get("spec") or {}).get("podCIDR")
    if cidr:
        try:
            network = ipaddress.ip_network(cidr, strict=False)
            if isinstance(network, ipaddress.IPv4Network) and network.num_addresses >= 4:
                return network
        except ValueError:
            log.warning("node %s has an invalid podCIDR %r", node["metadata"]["name"], cidr)
    return ipaddress.IPv4Network(f"10.{128 + (index // 256) % 128}.{index % 256}.0/24")
