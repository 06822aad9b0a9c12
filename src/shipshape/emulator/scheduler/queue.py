"""kube-scheduler's scheduling queue: activeQ, backoffQ and the unschedulable pods. No I/O.

activeQ pops by priority, then by the time the pod entered it. A pod that failed waits in the
unschedulable set until a cluster event that may help it (keyed on the plugins that rejected
it) moves it back: to activeQ if its backoff (1 s doubling to 10 s) is over, else to backoffQ.
Pods left unschedulable for 5 minutes are retried anyway.

A pod that only lacked resources on some nodes (the others failed on node-local filters such as
affinity or taints, which no pod deletion changes) is moved back by the deletion of an assigned pod
only when that pod ran on one of those nodes: a deletion elsewhere cannot make it fit, and retrying
it would only repeat the same failure (kube-scheduler's NodeResourcesFit hint re-queues on any
deletion; the attempt it adds always fails the same way). Likewise a node event re-queues a pod that
only node-local filters rejected only when the pod passes the filters on that node now: the other
nodes did not change, so an attempt could only end on that node.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from shipshape.emulator.scheduler.snapshot import PodInfo, PodKey

ALL_PLUGINS = frozenset(
    {
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
    }
)


_RESOURCES = frozenset({"NodeResourcesFit"})
# Filters whose verdict on a node depends on that node (and its own pods) alone.
NODE_LOCAL_PLUGINS = frozenset(
    {"NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodeResourcesFit"}
)


@dataclass(slots=True, eq=False)
class QueuedPod:
    info: PodInfo
    timestamp: float  # when it last entered a queue
    attempts: int = 0
    unschedulable_plugins: frozenset[str] = field(default_factory=frozenset)
    # Nodes NodeResourcesFit rejected in the last attempt (None: not known, any node may help).
    short_of_resources: frozenset[str] | None = None
    where: str = "active"  # active | backoff | unschedulable | popped
    seq: int = 0


class SchedulingQueue:
    def __init__(
        self, initial_backoff: float = 1.0, max_backoff: float = 10.0, max_unschedulable: float = 300.0
    ) -> None:
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._entries: dict[PodKey, QueuedPod] = {}
        self._active: list[tuple[int, float, int, PodKey]] = []
        self._seq = itertools.count()
        self._unschedulable: dict[PodKey, QueuedPod] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: PodKey) -> QueuedPod | None:
        return self._entries.get(key)

    def where(self, key: PodKey) -> str:
        entry = self._entries.get(key)
        return entry.where if entry is not None else ""

    # ---- membership -----------------------------------------------------------------------
    def add(self, info: PodInfo, now: float) -> None:
        """A new pending pod (or one not known yet): straight to activeQ."""
        if info.key in self._entries:
            self.update(info, now)
            return
        entry = QueuedPod(info, now)
        self._entries[info.key] = entry
        self._activate(entry, now)

    def update(self, info: PodInfo, now: float, *, changed: bool = False) -> list[QueuedPod]:
        """A pending pod changed. A change that may make it schedulable re-activates it.

        Returns the entries that went to backoffQ (their owner sets a timer for `expire`).
        """
        entry = self._entries.get(info.key)
        if entry is None:
            self.add(info, now)
            return []
        entry.info = info
        if changed and entry.where == "unschedulable":
            return [entry] if self._move(entry, now) == "backoff" else []
        return []

    def delete(self, key: PodKey) -> None:
        self._entries.pop(key, None)  # heap entries of deleted pods are skipped on pop
        self._unschedulable.pop(key, None)

    def _place(self, entry: QueuedPod, where: str) -> None:
        entry.where = where
        if where == "unschedulable":
            self._unschedulable[entry.info.key] = entry
        else:
            self._unschedulable.pop(entry.info.key, None)

    def _activate(self, entry: QueuedPod, now: float) -> None:
        self._place(entry, "active")
        entry.timestamp = now
        entry.seq = next(self._seq)
        heapq.heappush(self._active, (-entry.info.priority, now, entry.seq, entry.info.key))

    # ---- popping and failing --------------------------------------------------------------
    def pop(self) -> QueuedPod | None:
        while self._active:
            _, _, seq, key = heapq.heappop(self._active)
            entry = self._entries.get(key)
            if entry is None or entry.where != "active" or entry.seq != seq:
                continue
            self._place(entry, "popped")
            entry.attempts += 1
            return entry
        return None

    def done(self, key: PodKey) -> None:
        """The pod was bound (or is no longer ours)."""
        self.delete(key)

    def backoff_duration(self, entry: QueuedPod) -> float:
        duration = self.initial_backoff
        for _ in range(1, entry.attempts):
            duration *= 2
            if duration >= self.max_backoff:
                return self.max_backoff
        return min(duration, self.max_backoff)

    def backoff_expiry(self, entry: QueuedPod) -> float:
        return entry.timestamp + self.backoff_duration(entry)

    def failed(
        self,
        entry: QueuedPod,
        now: float,
        plugins: Iterable[str],
        short_of_resources: Iterable[str] | None = None,
    ) -> None:
        """A scheduling attempt failed: park it until something changes."""
        if entry.info.key not in self._entries:
            return
        entry.unschedulable_plugins = frozenset(plugins)
        entry.short_of_resources = None if short_of_resources is None else frozenset(short_of_resources)
        entry.timestamp = now
        self._place(entry, "unschedulable")

    def _move(self, entry: QueuedPod, now: float) -> str:
        if now >= self.backoff_expiry(entry):
            self._activate(entry, now)
        else:
            self._place(entry, "backoff")
        return entry.where

    def move(
        self,
        now: float,
        plugins: Iterable[str] | None = None,
        freed_node: str | None = None,
        rejected_on_changed_node: Callable[[QueuedPod], str | None] | None = None,
        changed_node: str | None = None,
    ) -> list[QueuedPod]:
        """A cluster event: move unschedulable pods that one of `plugins` (None: any) rejected.

        `freed_node`: the event freed resources on that node only (an assigned pod's deletion).
        `rejected_on_changed_node`: the event changed one node only (`changed_node`); the plugin that
        rejects a pod there now, or None when the pod passes (asked only of pods that node-local
        filters alone rejected). A pod left where it is takes that plugin into its rejecting plugins,
        as the attempt it is spared would have: a later event for that plugin on that node (a
        not-ready taint removed from a new node, say) moves it.
        Returns the entries that went to backoffQ (their owner sets a timer for `expire`).
        """
        interested = None if plugins is None else frozenset(plugins)
        backing_off: list[QueuedPod] = []
        for entry in list(self._unschedulable.values()):
            if interested is not None and entry.unschedulable_plugins:
                relevant = entry.unschedulable_plugins & interested
                if not relevant:
                    continue
                if (
                    freed_node is not None
                    and relevant == _RESOURCES
                    and entry.short_of_resources is not None
                    and freed_node not in entry.short_of_resources
                ):
                    continue
            if (
                rejected_on_changed_node is not None
                and entry.unschedulable_plugins
                and entry.unschedulable_plugins <= NODE_LOCAL_PLUGINS
            ):
                rejecting = rejected_on_changed_node(entry)
                if rejecting is not None:
                    entry.unschedulable_plugins = entry.unschedulable_plugins | {rejecting}
                    if rejecting in _RESOURCES and entry.short_of_resources is not None and changed_node:
                        entry.short_of_resources = entry.short_of_resources | {changed_node}
                    continue
            if self._move(entry, now) == "backoff":
                backing_off.append(entry)
        return backing_off

    # ---- timers ---------------------------------------------------------------------------
    def expire(self, key: PodKey, now: float) -> list[QueuedPod]:
        """A timer for one pod: end its backoff, or retry it after 5 minutes unschedulable."""
        entry = self._entries.get(key)
        if entry is None:
            return []
        if entry.where == "backoff" and now >= self.backoff_expiry(entry):
            self._activate(entry, now)
        elif (
            entry.where == "unschedulable"
            and now - entry.timestamp >= self.max_unschedulable
            and self._move(entry, now) == "backoff"
        ):
            return [entry]
        return []

    def may_have_active(self) -> bool:
        """Cheap: False only when activeQ is certainly empty (deleted pods are dropped lazily)."""
        return bool(self._active)

    def pending(self) -> list[QueuedPod]:
        return list(self._entries.values())
