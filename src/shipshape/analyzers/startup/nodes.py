"""Node start-up timelines from API objects (and, when published, the node's own log timeline).

The events follow the EKS start-up timing table. From the API alone: registration (the Node's
creationTimestamp), Ready (the kubelet's NodeReady event or the Ready condition), the CNI and
other DaemonSet pods Ready, and the first workload pod started. The node collector adds what only
the host knows (VM initialised, cloud-init stages, containerd, kubelet start) through the
`startup.shipshape.dev/timeline` annotation; the cloud adds the instance launch time.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shipshape.analyzers.startup.events import EventIndex, TimeParser
from shipshape.analyzers.startup.model import NodeInfo, Obj
from shipshape.analyzers.startup.pods import node_info, workload_of
from shipshape.contracts import annotations as wire

# The events are the node collector's wire contract (`contracts.annotations`, which checks the
# annotation's names); named here as well for the analyzers, the collector and the CLI.
INSTANCE_CREATED = wire.INSTANCE_CREATED
VM_INITIALIZED = wire.VM_INITIALIZED
NETWORK_START = wire.NETWORK_START
NETWORK_READY = wire.NETWORK_READY
CONTAINERD_START = wire.CONTAINERD_START
CONTAINERD_READY = wire.CONTAINERD_READY
CLOUD_INIT_LOCAL = wire.CLOUD_INIT_LOCAL
CLOUD_INIT_START = wire.CLOUD_INIT_START
CLOUD_INIT_CONFIG = wire.CLOUD_INIT_CONFIG
CLOUD_INIT_FINAL = wire.CLOUD_INIT_FINAL
CLOUD_INIT_FINISH = wire.CLOUD_INIT_FINISH
KUBELET_START = wire.KUBELET_START
KUBELET_INITIALIZED = wire.KUBELET_INITIALIZED
REGISTERED = wire.REGISTERED
KUBE_PROXY_START = wire.KUBE_PROXY_START
CNI_INIT_START = wire.CNI_INIT_START
CNI_START = wire.CNI_START
CNI_READY = wire.CNI_READY
KUBE_PROXY_READY = wire.KUBE_PROXY_READY
DAEMONSETS_READY = wire.DAEMONSETS_READY
NODE_READY = wire.NODE_READY
FIRST_POD_STARTED = wire.FIRST_POD_STARTED

EVENT_TITLES: Mapping[str, str] = {
    INSTANCE_CREATED: "Instance Created",
    VM_INITIALIZED: "VM Initialized",
    NETWORK_START: "Network Start",
    NETWORK_READY: "Network Ready",
    CONTAINERD_START: "Containerd Start",
    CONTAINERD_READY: "Containerd Initialized",
    CLOUD_INIT_LOCAL: "Cloud-Init Local Start",
    CLOUD_INIT_START: "Cloud-Init Initial Start",
    CLOUD_INIT_CONFIG: "Cloud-Init Config Start",
    CLOUD_INIT_FINAL: "Cloud-Init Final Start",
    CLOUD_INIT_FINISH: "Cloud-Init Final Finish",
    KUBELET_START: "Kubelet Start",
    KUBELET_INITIALIZED: "Kubelet Initialized",
    REGISTERED: "Kubelet Registered",
    KUBE_PROXY_START: "Kube-Proxy Start",
    CNI_INIT_START: "VPC CNI Init Start",
    CNI_START: "AWS Node Start",
    CNI_READY: "CNI Initialized",
    KUBE_PROXY_READY: "Kube-Proxy Ready",
    DAEMONSETS_READY: "DaemonSets Ready",
    NODE_READY: "Node Ready",
    FIRST_POD_STARTED: "First Pod Started",
}
NODE_EVENTS: tuple[str, ...] = wire.NODE_STARTUP_EVENTS
EVENT_ORDER: Mapping[str, int] = wire.EVENT_ORDER

# Consecutive milestones; each segment is named for the work between two of them. Cloud-init
# begins with its first stage: 'init-local' where it is logged, else 'init'.
CLOUD_INIT_BEGIN = "cloud_init_begin"
SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("instance launch", INSTANCE_CREATED, VM_INITIALIZED),
    ("OS boot", VM_INITIALIZED, CLOUD_INIT_BEGIN),
    ("cloud-init", CLOUD_INIT_BEGIN, KUBELET_START),
    ("kubelet registration", KUBELET_START, REGISTERED),
    ("CNI", REGISTERED, CNI_READY),
    ("node ready", CNI_READY, NODE_READY),
    ("first pod", NODE_READY, FIRST_POD_STARTED),
)
SEGMENT_NAMES: tuple[str, ...] = tuple(name for name, _, _ in SEGMENTS)

TIMELINE_ANNOTATION = wire.STARTUP_TIMELINE
CNI_DAEMONSETS = frozenset(
    {"aws-node", "calico-node", "cilium", "kube-flannel-ds", "weave-net", "antrea-agent", "kindnet", "canal"}
)
KUBE_PROXY_DAEMONSETS = frozenset({"kube-proxy"})


@dataclass(slots=True)
class NodeTimeline:
    name: str
    info: NodeInfo
    events: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # event -> "log" | "api" | "cloud"
    missing: dict[str, str] = field(default_factory=dict)
    segments: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def origin(self) -> tuple[str, float] | None:
        """The earliest milestone known: instance launch, else VM start, else registration."""
        for event in (INSTANCE_CREATED, VM_INITIALIZED, REGISTERED):
            if event in self.events:
                return event, self.events[event]
        return None

    @property
    def time_to_ready(self) -> float | None:
        origin = self.origin
        if origin is None or NODE_READY not in self.events:
            return None
        return max(0.0, self.events[NODE_READY] - origin[1])

    def dominant_segment(self) -> str | None:
        known = [(value, name) for name, value in self.segments.items() if value is not None]
        return max(known)[1] if known else None

    def to_json(self) -> dict[str, Any]:
        origin = self.origin
        return {
            "name": self.name,
            "pool": self.info.pool_key,
            "instanceType": self.info.instance_type,
            "zone": self.info.zone,
            "capacityType": self.info.capacity_type,
            "origin": origin[0] if origin else None,
            "timeToReady": self.time_to_ready,
            "events": {
                name: {"time": self.events[name], "t": self.events[name] - origin[1] if origin else None}
                | {"source": self.sources.get(name, "")}
                for name in sorted(self.events, key=lambda n: (self.events[n], EVENT_ORDER[n]))
            },
            "segments": dict(self.segments),
            "missing": dict(self.missing),
            "notes": list(self.notes),
        }


def parse_timeline_annotation(text: str, parse_time: TimeParser | None = None) -> dict[str, float]:
    """`{"v":1,"vm_initialized":"2022-11-28T02:59:07.000000Z",...}` -> event -> POSIX seconds
    (`contracts.annotations.NodeStartupTimeline`; `AnnotationError` says what is wrong with it)."""
    parse = parse_time or TimeParser()
    timeline = wire.NodeStartupTimeline.parse(text)
    return {name: parse(value) for name, value in timeline.events.items()}


def _pod_ready(pod: Obj, parse: TimeParser) -> float | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return parse.optional(condition.get("lastTransitionTime"))
    return None


def _pod_started(pod: Obj, parse: TimeParser) -> float | None:
    starts: list[float] = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for state_name in ("state", "lastState"):
            state = status.get(state_name) or {}
            for kind in ("running", "terminated"):
                when = parse.optional((state.get(kind) or {}).get("startedAt"))
                if when is not None:
                    starts.append(when)
    return min(starts) if starts else None


def segment_durations(events: Mapping[str, float]) -> dict[str, float | None]:
    """Split the node's start-up into SEGMENTS. A segment whose starting milestone is unknown runs
    from the last known earlier milestone, so time is never lost or counted twice."""
    durations: dict[str, float | None] = {}
    stages = [events[name] for name in (CLOUD_INIT_LOCAL, CLOUD_INIT_START) if name in events]
    if stages:
        events = {**events, CLOUD_INIT_BEGIN: min(stages)}
    last_known: float | None = events.get(SEGMENTS[0][1])
    for name, _, end in SEGMENTS:
        end_time = events.get(end)
        if end_time is None or last_known is None:
            durations[name] = None
            if end_time is not None:
                last_known = end_time
            continue
        durations[name] = max(0.0, end_time - last_known)
        last_known = max(last_known, end_time)
    return durations


def node_timeline(
    node: Obj,
    pods_on_node: Iterable[Obj] = (),
    *,
    events: EventIndex | None = None,
    launch_time: float | None = None,
    log_times: Mapping[str, float] | None = None,
) -> NodeTimeline:
    """One node's start-up from the API (and the node's log timeline when there is one)."""
    index = events or EventIndex()
    parse = index.time
    info = node_info(node, parse)
    timeline = NodeTimeline(info.name, info)
    found: dict[str, tuple[float, str]] = {}

    if launch_time is not None:
        found[INSTANCE_CREATED] = (launch_time, "cloud")
    if info.created is not None:
        found[REGISTERED] = (info.created, "api")
    ready_events = [event.time for event in index.for_node(info.name) if event.reason == "NodeReady"]
    ready_condition = None
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            ready_condition = condition
    if ready_events:
        found[NODE_READY] = (min(ready_events), "api")
    elif ready_condition is not None and ready_condition.get("status") == "True":
        when = parse.optional(ready_condition.get("lastTransitionTime"))
        if when is not None:
            found[NODE_READY] = (when, "api")
            timeline.notes.append(
                "Node Ready from the Ready condition: its latest transition, not necessarily the first"
            )
    elif ready_condition is not None:
        reason = ready_condition.get("reason") or ready_condition.get("message") or ""
        timeline.missing[NODE_READY] = f"Ready condition is {ready_condition.get('status')}" + (
            f": {reason}" if reason else ""
        )

    daemonset_ready: list[float | None] = []
    workload_starts: list[float] = []
    cni_pods: list[tuple[str, float | None]] = []
    proxy_pods: list[tuple[str, float | None]] = []
    for pod in pods_on_node:
        workload, _ = workload_of(pod)
        name = (pod.get("metadata") or {}).get("name") or ""
        if workload.kind == "DaemonSet":
            ready = _pod_ready(pod, parse)
            daemonset_ready.append(ready)
            if workload.name in CNI_DAEMONSETS:
                cni_pods.append((name, ready))
            if workload.name in KUBE_PROXY_DAEMONSETS:
                proxy_pods.append((name, ready))
        else:
            started = _pod_started(pod, parse)
            if started is not None:
                workload_starts.append(started)
    for event_name, pods in ((CNI_READY, cni_pods), (KUBE_PROXY_READY, proxy_pods)):
        ready_times = [ready for _, ready in pods if ready is not None]
        if ready_times:
            found[event_name] = (min(ready_times), "api")
        elif pods:
            timeline.missing[event_name] = "pod " + ", ".join(name for name, _ in pods) + " not Ready"
        else:
            kind = "CNI" if event_name == CNI_READY else "kube-proxy"
            timeline.missing[event_name] = f"no {kind} DaemonSet pod on this node"
    if daemonset_ready and all(ready is not None for ready in daemonset_ready):
        found[DAEMONSETS_READY] = (max(r for r in daemonset_ready if r is not None), "api")
    elif daemonset_ready:
        timeline.missing[DAEMONSETS_READY] = "some DaemonSet pods are not Ready"
    if workload_starts:
        found[FIRST_POD_STARTED] = (min(workload_starts), "api")

    # The node's own logs are more precise than the API's second-resolution stamps.
    for event_name, when in (log_times or {}).items():
        found[event_name] = (when, "log")

    for event_name, (when, source) in found.items():
        timeline.events[event_name] = when
        timeline.sources[event_name] = source
        timeline.missing.pop(event_name, None)
    for event_name in NODE_EVENTS:
        if event_name not in timeline.events:
            timeline.missing.setdefault(event_name, "not observed")
    timeline.segments = segment_durations(timeline.events)
    return timeline


def analyze_nodes(
    nodes: Iterable[Obj],
    pods: Iterable[Obj] = (),
    events: Iterable[Obj] = (),
    *,
    launch_times: Mapping[str, float] | None = None,
    log_timelines: Mapping[str, Mapping[str, float]] | None = None,
    index: EventIndex | None = None,
) -> list[NodeTimeline]:
    """Timelines of every node. A node's `startup.shipshape.dev/timeline` annotation counts as its
    log timeline unless one is passed in `log_timelines`; an invalid annotation is reported in the
    node's notes and ignored. `index` replaces `events` when they are already indexed."""
    index = index if index is not None else EventIndex.of(events)
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            by_node.setdefault(node_name, []).append(pod)
    timelines: list[NodeTimeline] = []
    for node in nodes:
        metadata = node.get("metadata") or {}
        name = metadata.get("name") or ""
        log_times = (log_timelines or {}).get(name)
        problem = ""
        annotation = (metadata.get("annotations") or {}).get(TIMELINE_ANNOTATION)
        if log_times is None and annotation:
            try:
                log_times = parse_timeline_annotation(annotation, index.time)
            except wire.AnnotationError as error:
                problem = str(error)
        timeline = node_timeline(
            node,
            by_node.get(name, ()),
            events=index,
            launch_time=(launch_times or {}).get(name),
            log_times=log_times,
        )
        if problem:
            timeline.notes.append(f"ignored: {problem}")
        timelines.append(timeline)
    return timelines


@dataclass(frozen=True, slots=True)
class PoolComparison:
    pool: str
    nodes: int
    median_to_ready: float
    cluster_median: float
    dominant_segment: str | None
    dominant_delta: float

    @property
    def delta(self) -> float:
        return self.median_to_ready - self.cluster_median

    def sentence(self) -> str:
        if abs(self.delta) < 1.0:
            return (
                f"pool {self.pool} is as fast to Ready as the cluster median ({self.median_to_ready:.0f} s)"
            )
        direction = "slower" if self.delta > 0 else "faster"
        text = f"pool {self.pool} is {abs(self.delta):.0f} s {direction} to Ready than the cluster median"
        if self.dominant_segment and abs(self.dominant_delta) >= 1.0:
            text += f", dominated by {self.dominant_segment} ({self.dominant_delta:+.0f} s)"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "nodes": self.nodes,
            "medianToReady": self.median_to_ready,
            "clusterMedian": self.cluster_median,
            "delta": self.delta,
            "dominantSegment": self.dominant_segment,
            "dominantDelta": self.dominant_delta,
            "summary": self.sentence(),
        }


def _median_segments(timelines: Sequence[NodeTimeline]) -> dict[str, float]:
    medians: dict[str, float] = {}
    for name in SEGMENT_NAMES:
        values = [t.segments[name] for t in timelines if t.segments.get(name) is not None]
        if values:
            medians[name] = statistics.median(v for v in values if v is not None)
    return medians


def compare_pools(timelines: Sequence[NodeTimeline]) -> list[PoolComparison]:
    """Each pool's median time to Ready against the cluster's, and the segment that explains most
    of the difference. Slowest pool first; nodes that never became Ready are left out."""
    ready = [t for t in timelines if t.time_to_ready is not None]
    if not ready:
        return []
    cluster_median = statistics.median(t.time_to_ready for t in ready if t.time_to_ready is not None)
    cluster_segments = _median_segments(ready)
    pools: dict[str, list[NodeTimeline]] = {}
    for timeline in ready:
        pools.setdefault(timeline.info.pool_key or "(no pool)", []).append(timeline)
    comparisons: list[PoolComparison] = []
    for pool, members in pools.items():
        median = statistics.median(t.time_to_ready for t in members if t.time_to_ready is not None)
        segments = _median_segments(members)
        sign = 1.0 if median >= cluster_median else -1.0
        deltas = [
            (sign * (value - cluster_segments.get(name, 0.0)), name)
            for name, value in segments.items()
            if name != "first pod"
        ]
        best = max(deltas) if deltas else None
        comparisons.append(
            PoolComparison(
                pool=pool,
                nodes=len(members),
                median_to_ready=median,
                cluster_median=cluster_median,
                dominant_segment=best[1] if best else None,
                dominant_delta=sign * best[0] if best else 0.0,
            )
        )
    comparisons.sort(key=lambda c: -c.delta)
    return comparisons
