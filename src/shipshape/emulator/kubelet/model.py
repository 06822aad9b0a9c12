"""The kubelet model: one `NodeAgent` per Node object, driven by store changes.

Published as `cluster.services["kubelet"]`. Besides running pods it keeps, for the start-up
analyzers and benchmarks, the exact emulated times of each pod's start-up phases
(`timeline(uid)`) and the values of kubelet's pod start-up SLI histogram.
"""

from __future__ import annotations

from collections import OrderedDict

from prometheus_client import CollectorRegistry, Histogram

from shipshape.emulator.kubelet import images
from shipshape.emulator.kubelet.node import POOL_LABEL, NodeAgent, is_unreachable, ready_status
from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Kubelet, Pool
from shipshape.emulator.store import ADDED, DELETED, Obj, WatchEvent
from shipshape.kube.clock import parse_time
from shipshape.kube.quantity import to_int

Timeline = dict[str, tuple[float, float]]
# Upstream buckets of kubelet_pod_start_sli_duration_seconds.
SLI_BUCKETS = (
    0.5,
    1,
    2,
    3,
    4,
    5,
    6,
    8,
    10,
    20,
    30,
    45,
    60,
    120,
    180,
    240,
    300,
    360,
    480,
    600,
    900,
    1200,
    1800,
    2700,
    3600,
)
MAX_TIMELINES = 200_000


class KubeletModel:
    """Runs the pods bound to every reachable Node, with upstream timings, statuses and Events."""

    name = "kubelet"

    def __init__(self, settings: Kubelet | None = None) -> None:
        self._settings = settings
        self.cluster: Cluster | None = None
        self.agents: dict[str, NodeAgent] = {}
        self._pools: dict[str, Pool] = {}
        self._image_sizes: dict[str, int] = {}
        self._missing_images: set[str] = set()
        self._default_image_size = 0
        self._timelines: OrderedDict[str, Timeline] = OrderedDict()
        self._node_index = 0
        self._pending: set[str] = set()  # bound pods waiting for their admission turn
        self.registry = CollectorRegistry()
        # As upstream: one series for the first pod with pod networking on each node (CNI start-up).
        self._sli = Histogram(
            "kubelet_pod_start_sli_duration_seconds",
            "Duration in seconds to start a pod, excluding time to pull images, measured from pod creation "
            "to when all its containers are reported as started",
            ["first_network_pod"],
            buckets=SLI_BUCKETS,
            registry=self.registry,
        )
        self._total = Histogram(
            "kubelet_pod_start_total_duration_seconds",
            "Duration in seconds to start a pod since creation, including time to pull images, measured "
            "from pod creation to when all its containers are reported as started",
            ["first_network_pod"],
            buckets=SLI_BUCKETS,
            registry=self.registry,
        )
        self.pod_start_sli_seconds: list[float] = []

    # ---- wiring ------------------------------------------------------------------------------
    @property
    def c(self) -> Cluster:
        assert self.cluster is not None, "kubelet used before start()"
        return self.cluster

    @property
    def settings(self) -> Kubelet:
        assert self._settings is not None
        return self._settings

    def start(self, cluster: Cluster) -> None:
        self.cluster = cluster
        scenario = cluster.scenario
        if self._settings is None:
            self._settings = scenario.kubelet if scenario is not None else Kubelet()
        self._pools = {pool.name: pool for pool in scenario.pools} if scenario is not None else {}
        self._default_image_size = to_int(self.settings.default_image_size)
        self._image_sizes = {
            images.normalize(name): to_int(size) for name, size in self.settings.images.items()
        }
        self._missing_images = {images.normalize(name) for name in self.settings.missing_images}
        cluster.services["kubelet"] = self
        cluster.store.subscribe(self._on_change, kinds=(PODS, NODES))
        for pod in cluster.store.iter(PODS):
            created = pod["metadata"].get("creationTimestamp")
            self.timeline_record(pod["metadata"]["uid"]).setdefault(
                "created", (parse_time(created),) * 2 if created else (cluster.now(),) * 2
            )
        for node in cluster.store.iter(NODES):
            self._node_added(node)

    # ---- what others read ----------------------------------------------------------------------
    def timeline(self, pod_uid: str) -> Timeline:
        """Exact emulated (start, end) of each start-up phase of a pod seen by this kubelet.

        Phases: created, scheduled (created -> bound), network-wait, sandbox, image:<c> (request ->
        image available, waiting included), pull:<c> (actual download), start:<c> (create ->
        running), init:<c> (running -> completed), initialized, containers-started, ready
        (all started -> pod Ready), startup (created -> pod Ready), terminating.
        """
        return dict(self._timelines.get(pod_uid, {}))

    def images_on(self, node_name: str) -> list[str]:
        agent = self.agents.get(node_name)
        return sorted(agent.images) if agent else []

    def bandwidth_mbps(self, node: Obj) -> float:
        pool = self._pools.get(((node.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL, ""))
        if pool is not None and pool.bandwidth_mbps:
            return pool.bandwidth_mbps
        return self.settings.bandwidth_mbps

    def image_missing(self, image: str) -> bool:
        return images.normalize(image) in self._missing_images

    def image_size(self, image: str) -> int:
        return self._image_sizes.get(images.normalize(image), self._default_image_size)

    # ---- bookkeeping used by the pod workers ------------------------------------------------------
    def timeline_record(self, pod_uid: str) -> Timeline:
        record = self._timelines.get(pod_uid)
        if record is None:
            record = self._timelines[pod_uid] = {}
            if len(self._timelines) > MAX_TIMELINES:
                self._timelines.popitem(last=False)
        return record

    def observe_pod_start(self, *, sli: float, total: float, first_network_pod: bool) -> None:
        self.pod_start_sli_seconds.append(sli)
        label = "true" if first_network_pod else ""
        self._sli.labels(label).observe(sli)
        self._total.labels(label).observe(total)

    # ---- watch handling --------------------------------------------------------------------------
    def _on_change(self, event: WatchEvent) -> None:
        if event.resource is PODS:
            self._on_pod(event)
        elif event.resource is NODES:
            self._on_node(event)

    def _on_pod(self, event: WatchEvent) -> None:
        pod = event.object
        md = pod["metadata"]
        uid = md["uid"]
        now = self.c.now()
        if event.type == ADDED:
            self.timeline_record(uid).setdefault("created", (now, now))
        node_name = (pod.get("spec") or {}).get("nodeName")
        if event.type == DELETED:
            agent = self.agents.get(node_name or "")
            if agent is not None:
                agent.forget(uid)
            return
        if not node_name:
            return
        record = self.timeline_record(uid)
        if "scheduled" not in record:
            created = record.get("created", (now, now))[0]
            record["scheduled"] = (created, now)
        agent = self.agents.get(node_name)
        if agent is None or not agent.running:
            return
        worker = agent.workers.get(uid)
        if worker is None:
            if uid not in self._pending:
                self._pending.add(uid)
                self.c.engine.call_soon(
                    lambda: self._admit_later(node_name, uid, md.get("namespace", ""), md["name"])
                )
        elif md.get("deletionTimestamp") and not worker.terminating and worker.alive:
            self.c.engine.call_soon(worker.terminate)
        elif worker.readiness_gates and worker.alive and not worker.terminating:
            worker.flush_soon()  # a readiness gate's condition may have changed (a no-op write otherwise)

    def _admit_later(self, node_name: str, uid: str, namespace: str, name: str) -> None:
        self._pending.discard(uid)
        pod = self.c.store.get(PODS, namespace, name)
        agent = self.agents.get(node_name)
        if pod is None or agent is None or pod["metadata"]["uid"] != uid:
            return
        self.consider(pod)

    def consider(self, pod: Obj) -> None:
        """Hand a bound pod to its node's agent unless it already finished."""
        node_name = (pod.get("spec") or {}).get("nodeName")
        agent = self.agents.get(node_name or "")
        if agent is None or not agent.running:
            return
        if pod["metadata"]["uid"] in agent.workers:
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        agent.admit(pod)

    def _on_node(self, event: WatchEvent) -> None:
        node = event.object
        name = node["metadata"]["name"]
        if event.type == DELETED:
            agent = self.agents.pop(name, None)
            if agent is not None:
                agent.suspend()
            return
        agent = self.agents.get(name)
        if agent is None or agent.uid != node["metadata"].get("uid"):
            if agent is not None:
                agent.suspend()
            self._node_added(node)
            return
        agent.node = node
        if agent.running == is_unreachable(node) or agent.network_ready != (ready_status(node) == "True"):
            self.c.engine.call_soon(lambda: self._refresh(name))

    def _refresh(self, name: str) -> None:
        agent = self.agents.get(name)
        node = self.c.store.get(NODES, "", name)
        if agent is not None and node is not None:
            agent.update(node)

    def _node_added(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        agent = NodeAgent(self, node, self._node_index)
        self._node_index += 1
        self.agents[name] = agent
        if not is_unreachable(node):
            self.c.engine.call_soon(lambda: self._refresh(name))
