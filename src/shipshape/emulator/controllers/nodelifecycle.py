"""Node lifecycle: node health from leases, condition taints, taint-based eviction and pod GC.

Three upstream controllers in one model, sharing the node bookkeeping:
- node-lifecycle-controller: every `monitor_period` it checks each node's Lease in
  `kube-node-lease` (and its Ready heartbeat); a node silent for the grace period gets its
  conditions set to Unknown ("Kubelet stopped posting node status."), its pods marked not ready,
  and the `node.kubernetes.io/unreachable` taints (NoSchedule and NoExecute; `not-ready` ones for
  Ready=False). The taints follow the Ready condition back when the node recovers.
- taint-eviction-controller: pods on a node with NoExecute taints they do not tolerate are deleted
  at once, those that tolerate them for `tolerationSeconds` are deleted after that long, and a
  scheduled eviction is cancelled if the taint goes away (Event `TaintManagerEviction`).
- pod GC: pods bound to a node that no longer exists are deleted after a 40 s quarantine, and
  finished pods beyond `terminated_pod_gc_threshold` (12,500) are deleted, oldest first, and
  terminating pods of a not-ready node tainted `node.kubernetes.io/out-of-service` are removed.

NoExecute tainting is rate limited per zone (0.1 node/s; none in a partially disrupted small zone,
0.01/s in a large one), and stops altogether, removing those taints, when every zone is fully
disrupted (the "master disruption mode" of a cluster whose nodes all went silent at once).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.engine import Timer
from shipshape.emulator.resources import LEASES, NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import DELETED, Obj, WatchEvent
from shipshape.kube import errors
from shipshape.kube.clock import rfc3339
from shipshape.kube.scheduling import toleration_tolerates

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
# NoSchedule taints that mirror node conditions (upstream `nodeConditionToTaintKeyStatusMap`).
CONDITION_TAINTS = {
    "MemoryPressure": "node.kubernetes.io/memory-pressure",
    "DiskPressure": "node.kubernetes.io/disk-pressure",
    "PIDPressure": "node.kubernetes.io/pid-pressure",
    "NetworkUnavailable": "node.kubernetes.io/network-unavailable",
}
UNKNOWN_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
POD_GC_QUARANTINE = 40.0
POD_GC_PERIOD = 20.0
EXCLUDE_DISRUPTION_LABEL = "node.kubernetes.io/exclude-disruption"


@dataclass(slots=True)
class _Health:
    probe: float
    renew_time: str = ""
    heartbeat: str = ""


@dataclass(slots=True)
class _Eviction:
    started: float
    timer: Timer


class NodeLifecycleController(Controller):
    name = "node-controller"
    watches = (NODES, LEASES, PODS)

    def __init__(
        self,
        *,
        grace_period: float = 40.0,
        startup_grace_period: float = 60.0,
        monitor_period: float = 5.0,
        eviction_rate: float = 0.1,
        secondary_eviction_rate: float = 0.01,
        unhealthy_zone_threshold: float = 0.55,
        large_cluster_threshold: int = 50,
        terminated_pod_gc_threshold: int = 12500,
    ) -> None:
        super().__init__()
        self.grace_period = grace_period
        self.startup_grace_period = startup_grace_period
        self.monitor_period = monitor_period
        self.eviction_rate = eviction_rate
        self.secondary_eviction_rate = secondary_eviction_rate
        self.unhealthy_zone_threshold = unhealthy_zone_threshold
        self.large_cluster_threshold = large_cluster_threshold
        self.terminated_pod_gc_threshold = terminated_pod_gc_threshold
        self._health: dict[str, _Health] = {}
        self._evictions: dict[tuple[str, str], _Eviction] = {}
        # NoExecute tainting goes through a rate-limited queue per zone, as upstream.
        self._taint_queues: dict[str, dict[str, None]] = {}
        self._zone_rates: dict[str, float] = {}
        self._zone_states: dict[str, str] = {}
        self._next_token: dict[str, float] = {}
        self._pass_timer: Timer | None = None
        # Kept from the watch events so that the pod GC's periodic passes do not walk every pod
        # and node: finished (not terminating) pods, and nodes carrying the out-of-service taint.
        self._finished: dict[tuple[str, str], None] = {}
        self._out_of_service: set[str] = set()

    def start(self, cluster: Cluster) -> None:
        super().start(cluster)
        cluster.engine.call_later(self.monitor_period, self._monitor_tick)
        cluster.engine.call_later(POD_GC_PERIOD, self._pod_gc_tick)

    def _monitor_tick(self) -> None:
        self.enqueue(("monitor",))
        self.c.engine.call_later(self.monitor_period, self._monitor_tick)

    # ---- events -> keys ---------------------------------------------------------------------
    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        ns, name = podutil.key_of(obj)
        self._index(event, ns, name)
        if event.resource is NODES:
            if event.type == DELETED:
                self._health.pop(name, None)
                return [("podgc", name)]
            return [("taints", name), ("evict-node", name)]
        if event.resource is LEASES:
            return [("health", name)] if ns == LEASE_NAMESPACE and event.type != DELETED else []
        if event.type == DELETED:
            self._cancel_eviction((ns, name), event=False)
            return []
        node = (obj.get("spec") or {}).get("nodeName")
        if not node:
            return []
        if self.store.get(NODES, "", node) is None:
            return [("podgc", node)]
        return [("evict-pod", ns, name)]

    def _index(self, event: WatchEvent, ns: str, name: str) -> None:
        obj = event.object
        if event.resource is PODS:
            finished = (
                event.type != DELETED
                and podutil.phase(obj) in podutil.TERMINAL_PHASES
                and not podutil.is_terminating(obj)
            )
            if finished:
                self._finished[(ns, name)] = None
            else:
                self._finished.pop((ns, name), None)
        elif event.resource is NODES:
            if event.type != DELETED and _out_of_service(obj):
                self._out_of_service.add(name)
            else:
                self._out_of_service.discard(name)

    def reconcile(self, key: Any) -> None:
        kind = key[0]
        if kind == "monitor":
            nodes = self.store.list(NODES)
            for node in nodes:
                self._monitor(node["metadata"]["name"])
            self._handle_disruption()
        elif kind == "health":
            self._monitor(key[1])
        elif kind == "taints":
            self._sync_taints(key[1])
        elif kind == "evict-node":
            # Without NoExecute taints on the node and with no eviction pending, processing its pods
            # would only find nothing to cancel (node status writes bring most of these keys).
            if self._evictions or self._has_no_execute_taints(key[1]):
                for on_node in self.store.pods_on_node(key[1]):
                    self._process_pod(on_node)
        elif kind == "evict-pod":
            pod = self.store.get(PODS, key[1], key[2])
            if pod is not None:
                self._process_pod(pod)
        elif kind == "podgc":
            self._schedule_pod_gc(key[1])

    # ---- health ---------------------------------------------------------------------------------
    def _monitor(self, node_name: str) -> None:
        node = self.store.get(NODES, "", node_name)
        if node is None:
            return
        now = self.now()
        health = self._health.get(node_name)
        if health is None:
            health = self._health[node_name] = _Health(probe=podutil.creation_time(node) or now)
        lease = self.store.get(LEASES, LEASE_NAMESPACE, node_name)
        renew = str(((lease or {}).get("spec") or {}).get("renewTime") or "")
        ready = podutil.condition(node, "Ready")
        heartbeat = str(ready.get("lastHeartbeatTime") or "") if ready is not None else ""
        if renew and renew != health.renew_time:
            health.renew_time, health.probe = renew, now
        if heartbeat and heartbeat != health.heartbeat:
            health.heartbeat, health.probe = heartbeat, now
        grace = self.startup_grace_period if ready is None else self.grace_period
        if now > health.probe + grace:
            self._mark_unknown(node, ready is None)

    def _mark_unknown(self, node: Obj, never_posted: bool) -> None:
        now = rfc3339(self.now())
        reason, message = (
            ("NodeStatusNeverUpdated", "Kubelet never posted node status.")
            if never_posted
            else ("NodeStatusUnknown", "Kubelet stopped posting node status.")
        )
        was_ready = podutil.condition_status(node, "Ready") == "True"

        def change(new: Obj) -> None:
            conditions = new.setdefault("status", {}).setdefault("conditions", [])
            by_type = {c["type"]: c for c in conditions}
            for kind in UNKNOWN_CONDITIONS:
                cond = by_type.get(kind)
                if cond is None:
                    created = node["metadata"].get("creationTimestamp", now)
                    conditions.append(
                        {
                            "type": kind,
                            "status": "Unknown",
                            "lastHeartbeatTime": created,
                            "lastTransitionTime": now,
                            "reason": "NodeStatusNeverUpdated",
                            "message": "Kubelet never posted node status.",
                        }
                    )
                elif cond.get("status") != "Unknown":
                    cond.update(status="Unknown", reason=reason, message=message, lastTransitionTime=now)

        name = node["metadata"]["name"]
        updated = self.store.mutate(NODES, "", name, change, subresource="status")
        if was_ready and updated is not None:
            self.event(updated, "NodeNotReady", f"Node {name} status is now: NodeNotReady")
            self._mark_pods_not_ready(name)

    def _mark_pods_not_ready(self, node_name: str) -> None:
        """Upstream `MarkPodsNotReady`: the pods of an unresponsive node stop counting as ready."""
        now = rfc3339(self.now())

        def change(pod: Obj) -> None:
            for cond in pod.get("status", {}).get("conditions", []):
                if cond.get("type") == "Ready" and cond.get("status") != "False":
                    cond.update(status="False", lastTransitionTime=now)

        for pod in self.store.pods_on_node(node_name):
            if podutil.phase(pod) in podutil.TERMINAL_PHASES:
                continue
            ns, name = podutil.key_of(pod)
            self.store.mutate(PODS, ns, name, change, subresource="status")

    # ---- taints ---------------------------------------------------------------------------------
    def _sync_taints(self, node_name: str) -> None:
        """NoSchedule taints follow the conditions at once; NoExecute ones are swapped, removed, or queued."""
        node = self.store.get(NODES, "", node_name)
        if node is None:
            return
        taints: list[Obj] = list((node.get("spec") or {}).get("taints") or [])
        present = {(t.get("key"), t.get("effect")) for t in taints}
        wanted = no_schedule_taints(node)
        status = podutil.condition_status(node, "Ready") or "Unknown"
        add_no_execute: str | None = None
        drop_no_execute: set[str] = set()
        zone = zone_key(node)
        if status == "True":
            drop_no_execute = {UNREACHABLE, NOT_READY}
            self._taint_queues.get(zone, {}).pop(node_name, None)
        else:
            want, other = (NOT_READY, UNREACHABLE) if status == "False" else (UNREACHABLE, NOT_READY)
            if (other, "NoExecute") in present:
                add_no_execute, drop_no_execute = want, {other}  # swap straight away, as upstream
            elif (want, "NoExecute") not in present:
                self._queue_tainting(zone, node_name)
        keep = [
            t
            for t in taints
            if not (t.get("effect") == "NoSchedule" and (t.get("key"), "NoSchedule") in _MANAGED_NO_SCHEDULE)
            or (t["key"], "NoSchedule") in wanted
        ]
        keep = [t for t in keep if not (t.get("effect") == "NoExecute" and t.get("key") in drop_no_execute)]
        have = {(t.get("key"), t.get("effect")) for t in keep}
        for key, effect in sorted(wanted - have):
            keep.append({"key": key, "effect": effect})
        if add_no_execute is not None and (add_no_execute, "NoExecute") not in have:
            keep.append({"key": add_no_execute, "effect": "NoExecute", "timeAdded": rfc3339(self.now())})
        self._write_taints(node_name, taints, keep)

    def _write_taints(self, node_name: str, before: list[Obj], after: list[Obj]) -> None:
        if after == before:
            return

        def change(new: Obj) -> None:
            if after:
                new.setdefault("spec", {})["taints"] = after
            else:
                new.get("spec", {}).pop("taints", None)

        self.store.mutate(NODES, "", node_name, change)

    # ---- rate-limited NoExecute tainting and zone disruption ------------------------------------
    def _queue_tainting(self, zone: str, node_name: str) -> None:
        self._taint_queues.setdefault(zone, {})[node_name] = None
        if zone not in self._zone_rates:
            self._zone_rates[zone] = self.eviction_rate
        self._schedule_pass(self.now())

    def _schedule_pass(self, when: float) -> None:
        if self._pass_timer is not None and not self._pass_timer.cancelled and self._pass_timer.when <= when:
            return
        if self._pass_timer is not None:
            self._pass_timer.cancel()
        self._pass_timer = self.c.engine.call_at(when, self._tainting_pass)

    def _tainting_pass(self) -> None:
        """Taint queued nodes NoExecute, one per token of their zone's rate (`doNoExecuteTaintingPass`)."""
        self._pass_timer = None
        now = self.now()
        for zone, queue in self._taint_queues.items():
            rate = self._zone_rates.get(zone, self.eviction_rate)
            while queue and rate > 0:
                ready_at = self._next_token.get(zone, now)
                if now < ready_at:
                    self._schedule_pass(ready_at)
                    break
                node_name = next(iter(queue))
                del queue[node_name]
                self._next_token[zone] = now + 1.0 / rate
                self._taint_no_execute(node_name)

    def _taint_no_execute(self, node_name: str) -> None:
        node = self.store.get(NODES, "", node_name)
        if node is None:
            return
        status = podutil.condition_status(node, "Ready") or "Unknown"
        if status == "True":
            return
        want, other = (NOT_READY, UNREACHABLE) if status == "False" else (UNREACHABLE, NOT_READY)
        taints: list[Obj] = list((node.get("spec") or {}).get("taints") or [])
        keep = [t for t in taints if not (t.get("effect") == "NoExecute" and t.get("key") in (want, other))]
        existing = next((t for t in taints if t.get("effect") == "NoExecute" and t.get("key") == want), None)
        keep.append(existing or {"key": want, "effect": "NoExecute", "timeAdded": rfc3339(self.now())})
        self._write_taints(node_name, taints, keep)

    def _zone_state(self, ready: list[bool]) -> str:
        not_ready = sum(1 for r in ready if not r)
        if not_ready and not_ready == len(ready):
            return "FullDisruption"
        if not_ready > 2 and not_ready / len(ready) >= self.unhealthy_zone_threshold:
            return "PartialDisruption"
        return "Normal"

    def _zone_rate(self, size: int, state: str) -> float:
        if state == "PartialDisruption":
            return self.secondary_eviction_rate if size > self.large_cluster_threshold else 0.0
        return self.eviction_rate

    def _handle_disruption(self) -> None:
        """Upstream `handleDisruption`: slow or stop NoExecute tainting when zones are largely down."""
        zones: dict[str, list[bool]] = {}
        nodes = self.store.list(NODES)
        for node in nodes:
            if EXCLUDE_DISRUPTION_LABEL in (node["metadata"].get("labels") or {}):
                continue
            ready = podutil.condition_status(node, "Ready") == "True"
            zones.setdefault(zone_key(node), []).append(ready)
        new_states = {zone: self._zone_state(ready) for zone, ready in zones.items()}
        for zone in new_states:
            self._zone_states.setdefault(zone, "Initial")
        for zone in [z for z in self._zone_states if z not in zones]:
            del self._zone_states[zone]
        all_are_full = all(state == "FullDisruption" for state in new_states.values())
        all_were_full = all(state == "FullDisruption" for state in self._zone_states.values())
        if all_are_full and all_were_full:
            return
        if all_are_full:
            log.info("all nodes are not ready: entering master disruption mode, NoExecute tainting stops")
            for node in nodes:
                taints: list[Obj] = list((node.get("spec") or {}).get("taints") or [])
                keep = [
                    t
                    for t in taints
                    if not (t.get("effect") == "NoExecute" and t.get("key") in (UNREACHABLE, NOT_READY))
                ]
                self._write_taints(node["metadata"]["name"], taints, keep)
            for zone in self._zone_states:
                self._zone_rates[zone] = 0.0
                self._zone_states[zone] = "FullDisruption"
            return
        if all_were_full and self._zone_states:
            log.info("some nodes are ready again: leaving master disruption mode")
            now = self.now()
            for health in self._health.values():
                health.probe = now
            for zone in self._zone_states:
                self._zone_rates[zone] = self._zone_rate(len(zones[zone]), new_states[zone])
                self._zone_states[zone] = new_states[zone]
            for node in nodes:
                self.enqueue(("taints", node["metadata"]["name"]))
            return
        for zone, state in new_states.items():
            if self._zone_states.get(zone) != state:
                self._zone_rates[zone] = self._zone_rate(len(zones[zone]), state)
                self._zone_states[zone] = state
        self._schedule_pass(self.now())

    # ---- taint-based eviction -------------------------------------------------------------------
    def _has_no_execute_taints(self, node_name: str) -> bool:
        node = self.store.get(NODES, "", node_name)
        taints = ((node or {}).get("spec") or {}).get("taints") or []
        return any(t.get("effect") == "NoExecute" for t in taints)

    def _process_pod(self, pod: Obj) -> None:
        key = podutil.key_of(pod)
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = self.store.get(NODES, "", node_name) if node_name else None
        if node is None or podutil.is_terminating(pod) or podutil.phase(pod) in podutil.TERMINAL_PHASES:
            self._cancel_eviction(key, event=False)
            return
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"]
        if not taints:
            self._cancel_eviction(key, event=True, pod=pod)
            return
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        used: list[Mapping[str, Any]] = []
        for taint in taints:
            matching = [t for t in tolerations if toleration_tolerates(t, taint)]
            if not matching:
                self._cancel_eviction(key, event=False)
                self._evict(key)
                return
            used.extend(matching)
        seconds = _min_toleration_seconds(used)
        if seconds is None:
            self._cancel_eviction(key, event=True, pod=pod)
            return
        now = self.now()
        existing = self._evictions.get(key)
        started = now
        if existing is not None:
            if existing.started < now:
                return  # upstream keeps an eviction scheduled earlier
            existing.timer.cancel()
            started = existing.started
        timer = self.c.engine.call_at(now + seconds, lambda: self._evict(key))
        self._evictions[key] = _Eviction(started, timer)

    def _cancel_eviction(self, key: tuple[str, str], *, event: bool, pod: Obj | None = None) -> None:
        scheduled = self._evictions.pop(key, None)
        if scheduled is None:
            return
        scheduled.timer.cancel()
        if event and pod is not None:
            self.c.recorder.record(
                pod,
                "TaintManagerEviction",
                f"Cancelling deletion of Pod {key[0]}/{key[1]}",
                component="taint-eviction-controller",
            )

    def _evict(self, key: tuple[str, str]) -> None:
        self._evictions.pop(key, None)
        pod = self.store.get(PODS, *key)
        if pod is None or podutil.is_terminating(pod):
            return
        self.c.recorder.record(
            pod,
            "TaintManagerEviction",
            f"Marking for deletion Pod {key[0]}/{key[1]}",
            component="taint-eviction-controller",
        )
        _add_disruption_target(
            self, pod, "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"
        )
        try:
            self.store.delete(PODS, *key)
        except errors.NotFound:
            return

    # ---- pod GC ---------------------------------------------------------------------------------
    def _pod_gc_tick(self) -> None:
        self._collect_terminated()
        self._collect_out_of_service()
        self.c.engine.call_later(POD_GC_PERIOD, self._pod_gc_tick)

    def _collect_terminated(self) -> None:
        """Upstream `gcTerminated`: beyond the threshold, the oldest finished pods are deleted."""
        if self.terminated_pod_gc_threshold <= 0:
            return
        excess = len(self._finished) - self.terminated_pod_gc_threshold
        if excess <= 0:
            return
        finished = [p for key in self._finished if (p := self.store.get(PODS, *key)) is not None]
        finished.sort(key=lambda p: (podutil.creation_time(p), p["metadata"]["name"]))
        for pod in finished[:excess]:
            ns, name = podutil.key_of(pod)
            try:
                self.store.delete(PODS, ns, name, grace_seconds=0)
            except errors.NotFound:
                continue

    def _collect_out_of_service(self) -> None:
        """Upstream `gcTerminating`: terminating pods of a not-ready, out-of-service node go at once."""
        for node_name in sorted(self._out_of_service):
            node = self.store.get(NODES, "", node_name)
            if node is None or not _out_of_service(node):
                continue
            if podutil.condition_status(node, "Ready") == "True":
                continue
            for pod in self.store.pods_on_node(node["metadata"]["name"]):
                if not podutil.is_terminating(pod):
                    continue
                ns, name = podutil.key_of(pod)
                _add_disruption_target(
                    self, pod, "DeletionByPodGC", "PodGC: node is out of service", fail=True
                )
                try:
                    self.store.delete(PODS, ns, name, grace_seconds=0)
                except errors.NotFound:
                    continue

    def _schedule_pod_gc(self, node_name: str) -> None:
        self.c.engine.call_later(POD_GC_QUARANTINE, lambda: self._collect_orphans(node_name))

    def _collect_orphans(self, node_name: str) -> None:
        if self.store.get(NODES, "", node_name) is not None:
            return
        for pod in self.store.pods_on_node(node_name):
            ns, name = podutil.key_of(pod)
            _add_disruption_target(self, pod, "DeletionByPodGC", "PodGC: node no longer exists", fail=True)
            try:
                self.store.delete(PODS, ns, name, grace_seconds=0)
            except errors.NotFound:
                continue


def _out_of_service(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == OUT_OF_SERVICE and t.get("effect") == "NoExecute" for t in taints)


_MANAGED_NO_SCHEDULE = frozenset(
    {
        (UNREACHABLE, "NoSchedule"),
        (NOT_READY, "NoSchedule"),
        (UNSCHEDULABLE, "NoSchedule"),
        *((key, "NoSchedule") for key in CONDITION_TAINTS.values()),
    }
)


def no_schedule_taints(node: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The NoSchedule taints the controller keeps on a node to mirror its conditions (taint by condition)."""
    wanted: set[tuple[str, str]] = set()
    status = podutil.condition_status(node, "Ready") or "Unknown"
    if status == "False":
        wanted.add((NOT_READY, "NoSchedule"))
    elif status == "Unknown":
        wanted.add((UNREACHABLE, "NoSchedule"))
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.add((UNSCHEDULABLE, "NoSchedule"))
    for kind, key in CONDITION_TAINTS.items():
        if podutil.condition_status(node, kind) == "True":
            wanted.add((key, "NoSchedule"))
    return wanted


def zone_key(node: Mapping[str, Any]) -> str:
    """Upstream `GetZoneKey`: region and zone labels (current or legacy beta ones)."""
    labels = podutil.meta(node).get("labels") or {}
    region = labels.get("topology.kubernetes.io/region") or labels.get(
        "failure-domain.beta.kubernetes.io/region", ""
    )
    zone = labels.get("topology.kubernetes.io/zone") or labels.get(
        "failure-domain.beta.kubernetes.io/zone", ""
    )
    return f"{region}:\x00:{zone}" if region or zone else ""


def _min_toleration_seconds(tolerations: list[Mapping[str, Any]]) -> float | None:
    """The shortest tolerationSeconds among the used tolerations; None when all tolerate forever."""
    seconds = [int(t["tolerationSeconds"]) for t in tolerations if t.get("tolerationSeconds") is not None]
    if not seconds:
        return None
    return float(max(0, min(seconds)))


def _add_disruption_target(
    controller: Controller, pod: Obj, reason: str, message: str, *, fail: bool = False
) -> None:
    now = rfc3339(controller.now())

    def change(new: Obj) -> None:
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "lastTransitionTime": now,
                "reason": reason,
                "message": message,
            }
        )
        status["conditions"] = conditions
        if fail and status.get("phase") not in podutil.TERMINAL_PHASES:
            status["phase"] = "Failed"

    ns, name = podutil.key_of(pod)
    controller.store.mutate(PODS, ns, name, change, subresource="status")
