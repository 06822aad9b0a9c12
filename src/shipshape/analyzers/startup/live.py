"""Start-up histograms kept up to date from a list + watch of pods, events and nodes.

Pure: the caller lists and watches (`shipshape startup serve` through `kube.client`) and feeds
`replace` (a list or re-list) and `apply` (one watch event); `flush(now)` observes every pod and
node whose start-up is over into `StartupMetrics`, each exactly once. A pod is observed `settle`
seconds (of the caller's monotonic time) after it was first seen finished, so that events the
kubelet records a moment after the status update (a late `Pulled`) are counted; its events are
then dropped, so memory follows the pods still starting, not the cluster's history.
"""

from __future__ import annotations

from collections.abc import Iterable

from shipshape.analyzers.startup import model, nodes
from shipshape.analyzers.startup.events import EventIndex, TimeParser
from shipshape.analyzers.startup.model import Obj, PodTimeline
from shipshape.analyzers.startup.pods import PodTimelineBuilder, node_info
from shipshape.analyzers.startup.prometheus import StartupMetrics

PODS, EVENTS, NODES = "pods", "events", "nodes"
KINDS = (NODES, EVENTS, PODS)
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _finished(timeline: PodTimeline) -> bool:
    """Over as far as the histograms go (what `StartupMetrics.observe_pod` accepts)."""
    return timeline.started is not None and (
        timeline.ready is not None or timeline.outcome in (model.COMPLETED, model.FAILED)
    )


class LiveStartup:
    """The cluster's pods, events and nodes as a watch delivers them, observed once each."""

    def __init__(self, metrics: StartupMetrics, *, settle: float = 5.0) -> None:
        self.metrics = metrics
        self.settle = settle
        self.time = TimeParser()
        self.events = EventIndex(self.time, track_updates=True)
        self.pods: dict[str, Obj] = {}  # uid -> latest version (every pod: nodes need them)
        self.nodes: dict[str, Obj] = {}  # name -> latest version
        self._pod_uids: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid
        self._dirty: set[str] = set()  # pods to look at again
        self._due: dict[str, float] = {}  # pod uid -> when to observe it
        self._node_due: dict[str, float] = {}
        self._observed: set[str] = set()  # pod uids already in the histograms
        self._now = 0.0

    # ---- feeding ---------------------------------------------------------------------------------
    def replace(self, kind: str, items: Iterable[Obj]) -> None:
        """A (re-)list: the complete current set of one kind."""
        if kind == PODS:
            current = {_uid(pod): pod for pod in items}
            for uid in set(self.pods) - set(current):
                self._drop_pod(self.pods[uid])
            for pod in current.values():
                self._set_pod(pod)
        elif kind == EVENTS:
            self.events = EventIndex(self.time, track_updates=True)
            for event in items:
                self.events.add(event)
            self._dirty.update(self.pods)
        elif kind == NODES:
            self.nodes = {}
            for node in items:
                self._set_node(node)
        else:
            raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")

    def apply(self, kind: str, change: str, obj: Obj) -> None:
        """One watch event (ADDED, MODIFIED, DELETED; BOOKMARK and ERROR are the caller's)."""
        if kind == PODS:
            if change == DELETED:
                self._drop_pod(obj)
            else:
                self._set_pod(obj)
        elif kind == EVENTS:
            if change == DELETED:
                self.events.remove(obj)
                return
            self.events.add(obj)
            involved = obj.get("involvedObject") or obj.get("regarding") or {}
            if involved.get("kind") == "Pod":
                uid = self._pod_uids.get((involved.get("namespace") or "", involved.get("name") or ""))
                if uid is not None:
                    self._dirty.add(uid)
        elif kind == NODES:
            name = (obj.get("metadata") or {}).get("name") or ""
            if change == DELETED:
                self.nodes.pop(name, None)
                self._node_due.pop(name, None)
            else:
                self._set_node(obj)
        else:
            raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")

    def _set_pod(self, pod: Obj) -> None:
        uid = _uid(pod)
        metadata = pod.get("metadata") or {}
        self.pods[uid] = pod
        self._pod_uids[(metadata.get("namespace") or "", metadata.get("name") or "")] = uid
        if uid not in self._observed:
            self._dirty.add(uid)

    def _drop_pod(self, pod: Obj) -> None:
        uid = _uid(pod)
        metadata = pod.get("metadata") or {}
        key = (metadata.get("namespace") or "", metadata.get("name") or "")
        self.pods.pop(uid, None)
        self._dirty.discard(uid)
        self._due.pop(uid, None)
        self._observed.discard(uid)
        if self._pod_uids.get(key) == uid:
            del self._pod_uids[key]
            self.events.forget_pod(*key)

    def _set_node(self, node: Obj) -> None:
        name = (node.get("metadata") or {}).get("name") or ""
        self.nodes[name] = node
        if name not in self._node_due and not self._node_observed(name):
            self._node_due[name] = self._now + self.settle

    def _node_observed(self, name: str) -> bool:
        return name in self.metrics.observed_nodes

    # ---- observing -------------------------------------------------------------------------------
    def flush(self, now: float) -> dict[str, int]:
        """Observe what has been finished for `settle` seconds; `now` is monotonic seconds."""
        self._now = now
        infos = {name: node_info(node, self.time) for name, node in self.nodes.items()}
        builder = PodTimelineBuilder(self.events, infos)
        for uid in self._dirty:
            pod = self.pods.get(uid)
            timeline = builder.build(pod) if pod is not None else None
            if timeline is not None and _finished(timeline):
                self._due.setdefault(uid, now + self.settle)
            else:
                self._due.pop(uid, None)
        self._dirty.clear()
        observed_pods = 0
        for uid, when in list(self._due.items()):
            if when > now:
                continue
            del self._due[uid]
            pod = self.pods[uid]
            timeline = builder.build(pod)
            if timeline is not None and self.metrics.observe_pod(timeline):
                observed_pods += 1
                self._observed.add(uid)
                self.events.forget_pod(timeline.namespace, timeline.name)
        return {"pods": observed_pods, "nodes": self._flush_nodes(now)}

    def _flush_nodes(self, now: float) -> int:
        observed = 0
        by_node: dict[str, list[Obj]] = {}
        for name, when in list(self._node_due.items()):
            if when > now:
                continue
            node = self.nodes.get(name)
            if node is None or self._node_observed(name):
                del self._node_due[name]
                continue
            if not by_node:
                for pod in self.pods.values():
                    node_name = (pod.get("spec") or {}).get("nodeName")
                    if node_name:
                        by_node.setdefault(node_name, []).append(pod)
            (timeline,) = nodes.analyze_nodes([node], by_node.get(name, ()), index=self.events)
            if self.metrics.observe_node(timeline):
                observed += 1
                del self._node_due[name]
            else:
                self._node_due[name] = now + self.settle  # not Ready yet: look again later
        return observed

    @property
    def pending(self) -> int:
        """Pods seen but not observed yet (still starting, or never finishing)."""
        return len(self.pods) - len(self._observed)
