"""An independent observer of the emulated cluster's watch stream: availability, replacements, churn.

It reads only the store's watch events (Pods, ReplicaSets, Deployments, StatefulSets,
PodDisruptionBudgets, Nodes), never the controller's bookkeeping, and integrates over time:

- per workload, the seconds with zero ready replicas and the seconds below the PodDisruptionBudget's
  desired healthy count (as the disruption controller computes it from minAvailable/maxUnavailable,
  over the replicas the workload was declared with, or its current replicas when fewer: replicas a
  surge adds for a while do not raise the bar), counted from `measure_from` (the end of the warm-up);
- replacement latency: for each workload pod on a node when its termination notice comes, the time
  until a pod of the same workload created after the notice, on a node without one, is Ready;
- node churn: nodes registered and removed, and notices.

A ready replica is a pod with the Ready condition True that is not terminating (the endpoints
controller takes a terminating pod out of service).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from shipshape.controller.state import NOTICE_TAINTS, taint_keys
from shipshape.emulator import resources as r
from shipshape.emulator.store import DELETED, Obj, Store, WatchEvent
from shipshape.kube import objects, workloads
from shipshape.kube.clock import Clock, parse_time
from shipshape.kube.intstr import IntOrStringError
from shipshape.kube.labels import SelectorError, from_label_selector

WorkloadKey = tuple[str, str, str]  # namespace, kind, name


def workload_label(key: WorkloadKey) -> str:
    return f"{key[0]}/{key[1]}/{key[2]}"


def pdb_floor(pdb_spec: Obj, expected: int) -> int | None:
    """The disruption controller's desired healthy pods for `expected` (`kube.workloads`), or None for
    a budget that sets neither field or an invalid value (the workload is then held to one ready pod)."""
    if pdb_spec.get("minAvailable") is None and pdb_spec.get("maxUnavailable") is None:
        return None
    try:
        return workloads.pdb_desired_healthy(pdb_spec, expected)
    except IntOrStringError:
        return None


def is_ready(pod: Obj) -> bool:
    """A replica in service: Ready and not terminating."""
    return not objects.is_deleting(pod) and objects.pod_ready(pod)


@dataclass(slots=True)
class WorkloadTrack:
    key: WorkloadKey
    replicas: int = 0
    # The replicas the workload was declared with: replicas added for a while (a surge before a
    # reclaim) do not raise the floor, fewer (a scale-down) lower it.
    declared: int = 0
    template_labels: dict[str, str] = field(default_factory=dict)
    ready: set[str] = field(default_factory=set)
    floor: int | None = None
    pdb: str | None = None
    last: float = 0.0
    zero_seconds: float = 0.0
    below_seconds: float = 0.0
    measured_seconds: float = 0.0
    first_full: float | None = None
    min_ready: int | None = None

    def integrate(self, now: float, measure_from: float) -> None:
        start = max(self.last, measure_from)
        if now > start and self.replicas > 0:
            span = now - start
            self.measured_seconds += span
            count = len(self.ready)
            if count == 0:
                self.zero_seconds += span
            if self.floor is not None and count < self.floor:
                self.below_seconds += span
            self.min_ready = count if self.min_ready is None else min(self.min_ready, count)
        self.last = max(self.last, now)


@dataclass(frozen=True, slots=True)
class Replacement:
    workload: WorkloadKey
    notice: float
    pod: str


@dataclass(slots=True)
class Churn:
    nodes_added: int = 0
    nodes_removed: int = 0
    notices: int = 0


class Observer:
    """Subscribes to a store and keeps the figures above; call `finish(now)` before reading them."""

    WATCHED = frozenset({r.PODS, r.REPLICASETS, r.DEPLOYMENTS, r.STATEFULSETS, r.PDBS, r.NODES})

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        measure_from: float,
        excluded_namespaces: frozenset[str] = frozenset(),
    ) -> None:
        self.store = store
        self.clock = clock
        self.measure_from = measure_from
        self.excluded = excluded_namespaces
        self.workloads: dict[WorkloadKey, WorkloadTrack] = {}
        self._rs_owner: dict[tuple[str, str], objects.WorkloadRef] = {}
        self._pod_owner: dict[tuple[str, str], WorkloadKey] = {}
        self._pdbs: dict[tuple[str, str], Obj] = {}
        self._noticed: dict[str, float] = {}
        self._pending: dict[WorkloadKey, deque[Replacement]] = {}
        self.latencies: list[float] = []
        self.churn = Churn()
        self._started = clock.now()
        for rt in (r.NODES, r.DEPLOYMENTS, r.STATEFULSETS, r.REPLICASETS, r.PDBS, r.PODS):
            for obj in store.iter(rt):
                self._apply(WatchEvent("ADDED", rt, obj, 0), initial=True)
        # Only the watched kinds' changes reach it (not the Leases' renewals, nor Events).
        store.subscribe(self.on_event, kinds=self.WATCHED)

    # ---- events ---------------------------------------------------------------------------------
    def on_event(self, event: WatchEvent) -> None:
        self._apply(event)  # one of `WATCHED`: the subscription's kinds

    def _apply(self, event: WatchEvent, *, initial: bool = False) -> None:
        rt, obj = event.resource, event.object
        metadata = obj.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        if rt is r.NODES:
            self._on_node(event, name, initial)
        elif namespace in self.excluded:
            return
        elif rt is r.PODS:
            self._on_pod(event, namespace, name)
        elif rt is r.REPLICASETS:
            self._on_replicaset(event, namespace, name)
        elif rt is r.PDBS:
            old = self._pdbs.get((namespace, name))
            if event.type == DELETED:
                self._pdbs.pop((namespace, name), None)
            else:
                self._pdbs[(namespace, name)] = obj
                if old is not None and old.get("spec") == obj.get("spec"):
                    return  # a status or an annotation (a guard's renewed expiry): the floors stand
            self._refresh_floors(namespace)
        else:
            self._on_workload(event, rt.kind, namespace, name)

    def _on_node(self, event: WatchEvent, name: str, initial: bool) -> None:
        now = self.clock.now()
        if event.type == DELETED:
            self.churn.nodes_removed += 1
            return
        if event.type == "ADDED" and not initial:
            self.churn.nodes_added += 1
        if name not in self._noticed and taint_keys(event.object) & NOTICE_TAINTS:
            self._noticed[name] = now
            self.churn.notices += 1
            for pod in self.store.pods_on_node(name):
                md = pod.get("metadata") or {}
                key = self._pod_owner.get((str(md.get("namespace") or ""), str(md.get("name") or "")))
                if key is not None and not md.get("deletionTimestamp"):
                    self._pending.setdefault(key, deque()).append(Replacement(key, now, str(md.get("name"))))

    def _on_workload(self, event: WatchEvent, kind: str, namespace: str, name: str) -> None:
        key = (namespace, kind, name)
        now = self.clock.now()
        if event.type == DELETED:
            track = self.workloads.pop(key, None)
            if track is not None:
                track.integrate(now, self.measure_from)
            return
        spec = event.object.get("spec") or {}
        replicas = 1 if spec.get("replicas") is None else int(spec["replicas"])
        track = self.workloads.get(key)
        if track is None:
            track = self.workloads[key] = WorkloadTrack(key, last=now, declared=replicas)
        track.integrate(now, self.measure_from)
        track.replicas = replicas
        track.template_labels = dict(((spec.get("template") or {}).get("metadata") or {}).get("labels") or {})
        self._refresh_floor(track)

    def _on_replicaset(self, event: WatchEvent, namespace: str, name: str) -> None:
        if event.type == DELETED:
            self._rs_owner.pop((namespace, name), None)
            return
        owner = objects.controller_workload(event.object)
        if owner is not None and owner.kind == "Deployment":
            self._rs_owner[(namespace, name)] = owner

    def _replicaset_owner(self, namespace: str, name: str) -> objects.WorkloadRef | None:
        return self._rs_owner.get((namespace, name))

    def _owner_of(self, pod: Obj, namespace: str) -> WorkloadKey | None:
        """The Deployment or StatefulSet of a pod (a ReplicaSet's pod by the ReplicaSet's controller)."""
        owner = objects.workload_of(pod, self._replicaset_owner)
        if owner is None or owner.kind not in ("Deployment", "StatefulSet"):
            return None
        return (namespace, owner.kind, owner.name)

    def _on_pod(self, event: WatchEvent, namespace: str, name: str) -> None:
        pod_key = (namespace, name)
        key = self._pod_owner.get(pod_key)
        if key is None:
            key = self._owner_of(event.object, namespace)
            if key is None:
                return
            self._pod_owner[pod_key] = key
        track = self.workloads.get(key)
        ready = event.type != DELETED and is_ready(event.object)
        if event.type == DELETED:
            self._pod_owner.pop(pod_key, None)
        if track is None:
            return
        was_ready = name in track.ready
        if ready == was_ready:
            return
        now = self.clock.now()
        track.integrate(now, self.measure_from)
        if ready:
            track.ready.add(name)
            self._replaced(key, event.object, now)
            if track.first_full is None and len(track.ready) >= track.replicas:
                track.first_full = now
        else:
            track.ready.discard(name)

    def _replaced(self, key: WorkloadKey, pod: Obj, now: float) -> None:
        pending = self._pending.get(key)
        if not pending:
            return
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if node in self._noticed:
            return
        try:
            created = parse_time(str((pod.get("metadata") or {}).get("creationTimestamp") or ""))
        except ValueError:
            return
        oldest = pending[0]
        # creationTimestamp has whole seconds: a pod created in the notice's second counts.
        if created < math.floor(oldest.notice):
            return
        pending.popleft()
        self.latencies.append(now - oldest.notice)

    # ---- PDB floors -----------------------------------------------------------------------------
    def _refresh_floors(self, namespace: str) -> None:
        now = self.clock.now()
        for track in self.workloads.values():
            if track.key[0] == namespace:
                track.integrate(now, self.measure_from)
                self._refresh_floor(track)

    def _refresh_floor(self, track: WorkloadTrack) -> None:
        track.floor, track.pdb = None, None
        for (namespace, name), pdb in self._pdbs.items():
            if namespace != track.key[0]:
                continue
            spec = pdb.get("spec") or {}
            selector = spec.get("selector")
            if selector is None:
                continue
            try:
                matches = from_label_selector(selector).matches(track.template_labels)
            except SelectorError:
                continue
            if matches:
                track.floor = pdb_floor(spec, min(track.replicas, track.declared))
                track.pdb = name
                return

    # ---- results --------------------------------------------------------------------------------
    def finish(self, now: float) -> None:
        for track in self.workloads.values():
            track.integrate(now, self.measure_from)

    def unreplaced(self) -> int:
        return sum(len(queue) for queue in self._pending.values())
