"""How the emulator's models are wired: one clock, one engine, one store, explicit registration.

A model is a small unit that `start`s on a `Cluster`: it subscribes to store changes and/or sets
timers on the engine. Watch-driven models use `Reconciler`, which collects dirty keys and
reconciles them in a batch on the next engine turn, in server mode and discrete-event mode alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from shipshape.emulator.engine import Engine
from shipshape.emulator.resources import EVENTS, ResourceType
from shipshape.emulator.store import Obj, Store, WatchEvent
from shipshape.kube.clock import Clock, rfc3339, rfc3339_micro

if TYPE_CHECKING:
    from shipshape.emulator.scenario import Scenario

log = logging.getLogger(__name__)


class Model(Protocol):
    name: str

    def start(self, cluster: Cluster) -> None: ...


class EventRecorder:
    """Writes core/v1 Events as upstream components do, aggregating repeats into `count`."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._recent: dict[tuple[str, str, str, str, str, str], str] = {}
        self._last_nanos: dict[tuple[str, str], int] = {}

    def record(
        self,
        involved: Obj,
        reason: str,
        message: str,
        *,
        type: str = "Normal",
        component: str = "",
        host: str = "",
        field_path: str = "",
        at: float | None = None,
    ) -> Obj:
        """Record (or count again) an Event. `at` stamps an Event about something that happened
        before now (a node that was Ready before the emulated cluster started): its timestamps and
        its creation are then that moment's."""
        md = involved["metadata"]
        namespace = md.get("namespace") or "default"
        key = (namespace, md.get("uid", ""), reason, message, component, field_path)
        now = self.clock.now() if at is None else min(at, self.clock.now())
        existing_name = self._recent.get(key)
        if existing_name is not None:
            existing = self.store.get(EVENTS, namespace, existing_name)
            if existing is not None:

                def bump(ev: Obj) -> None:
                    ev["count"] = int(ev.get("count", 1)) + 1
                    ev["lastTimestamp"] = rfc3339(now)

                updated = self.store.mutate(EVENTS, namespace, existing_name, bump)
                if updated is not None:
                    return updated
        source: dict[str, str] = {"component": component} if component else {}
        if host:
            source["host"] = host
        involved_ref = {
            "kind": involved.get("kind", ""),
            "namespace": md.get("namespace", ""),
            "name": md.get("name", ""),
            "uid": md.get("uid", ""),
            "apiVersion": involved.get("apiVersion", ""),
            "resourceVersion": md.get("resourceVersion", ""),
        }
        if field_path:
            involved_ref["fieldPath"] = field_path
        event = {
            "metadata": {
                "name": self._unique_name(namespace, md.get("name", "unknown"), now),
                "namespace": namespace,
            },
            "involvedObject": {k: v for k, v in involved_ref.items() if v},
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "eventTime": None,
            "count": 1,
            "type": type,
            "reportingComponent": component,
            "reportingInstance": host,
        }
        created = self.store.create(EVENTS, event, created_at=None if at is None else now)
        self._recent[key] = created["metadata"]["name"]
        if len(self._recent) > 50_000:
            self._recent.clear()
        return created

    def _unique_name(self, namespace: str, involved_name: str, now: float) -> str:
        """`<name>.<unix nanos in hex>` as upstream; Events in one virtual instant take the next nanos.

        The last nanos used per object is remembered, so a burst of Events about one object in one
        instant (a ReplicaSet creating hundreds of pods) does not probe every name taken before.
        """
        nanos = int(now * 1e9)
        last = self._last_nanos.get((namespace, involved_name))
        if last is not None and nanos <= last:
            nanos = last + 1
        while self.store.get(EVENTS, namespace, f"{involved_name}.{nanos:x}") is not None:
            nanos += 1
        if len(self._last_nanos) > 50_000:
            self._last_nanos.clear()
        self._last_nanos[(namespace, involved_name)] = nanos
        return f"{involved_name}.{nanos:x}"


def micro_now(clock: Clock) -> str:
    return rfc3339_micro(clock.now())


class Cluster:
    """The emulated cluster: clock, engine, store, event recorder and the registered models."""

    def __init__(self, clock: Clock, scenario: Scenario | None = None) -> None:
        self.clock = clock
        self.engine = Engine(clock)
        self.store = Store(clock)
        self.recorder = EventRecorder(self.store, clock)
        self.scenario = scenario
        self.models: dict[str, Model] = {}
        # Services a model offers to others (e.g. "cloud", "kubelet", "usage"), by name.
        self.services: dict[str, Any] = {}

    def add(self, model: Model) -> None:
        if model.name in self.models:
            raise ValueError(f"model {model.name!r} registered twice")
        self.models[model.name] = model
        model.start(self)

    def now(self) -> float:
        return self.clock.now()


class Reconciler:
    """Base for watch-driven models: map store changes to keys, reconcile dirty keys in batches."""

    name = "reconciler"
    watches: tuple[ResourceType, ...] = ()
    # Seconds a batch of dirty keys waits before it is reconciled (0: at once, after the current
    # event); a longer wait coalesces bursts of changes into one sync per key.
    drain_delay: float = 0.0

    def __init__(self) -> None:
        self._dirty: dict[Any, None] = {}
        self._scheduled = False
        self.cluster: Cluster | None = None

    def start(self, cluster: Cluster) -> None:
        self.cluster = cluster
        cluster.store.subscribe(self._on_event, kinds=self.watches)
        for rt in self.watches:
            for obj in cluster.store.iter(rt):
                for key in self.keys_for(WatchEvent("ADDED", rt, obj, 0)):
                    self.enqueue(key)

    @property
    def c(self) -> Cluster:
        assert self.cluster is not None, f"{self.name} used before start()"
        return self.cluster

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource in self.watches:
            for key in self.keys_for(event):
                self.enqueue(key)

    def keys_for(self, event: WatchEvent) -> list[Any]:
        """Which keys a change makes dirty. Default: the object's (namespace, name)."""
        md = event.object["metadata"]
        return [(md.get("namespace", ""), md["name"])]

    def enqueue(self, key: Any, after: float = 0.0) -> None:
        if after > 0:
            self.c.engine.call_later(after, lambda: self.enqueue(key))
            return
        self._dirty[key] = None
        if not self._scheduled:
            self._scheduled = True
            if self.drain_delay > 0:
                self.c.engine.call_later(self.drain_delay, self._drain)
            else:
                self.c.engine.call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        batch = list(self._dirty)
        self._dirty.clear()
        for key in batch:
            try:
                self.reconcile(key)
            except Exception:
                log.exception("%s failed to reconcile %r", self.name, key)

    def reconcile(self, key: Any) -> None:
        raise NotImplementedError


Factory = Callable[[], Model]
