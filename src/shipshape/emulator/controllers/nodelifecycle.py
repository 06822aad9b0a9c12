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
- pod GC: pods bound to a node that no longer exists are deleted after a 40 s quarantine.

Upstream's per-zone eviction rate limits and full-disruption mode are not modelled.
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
# NoSchedule taints that mirror node conditions (upstream `nodeConditionToTaintKeyStatusMap`).
CONDITION_TAINTS = {
    "MemoryPressure": "node.kubernetes.io/memory-pressure",
    "DiskPressure": "node.kubernetes.io/disk-pressure",
    "PIDPressure": "node.kubernetes.io/pid-pressure",
    "NetworkUnavailable": "node.kubernetes.io/network-unavailable",
}
UNKNOWN_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
POD_GC_QUARANTINE = 40.0


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
    ) -> None:
        super().__init__()
        self.grace_period = grace_period
        self.startup_grace_period = startup_grace_period
        self.monitor_period = monitor_period
        self._health: dict[str, _Health] = {}
        self._evictions: dict[tuple[str, str], _Eviction] = {}

    def start(self, cluster: Cluster) -> None:
        super().start(cluster)
        cluster.engine.call_later(self.monitor_period, self._monitor_tick)

    def _monitor_tick(self) -> None:
        for node in self.store.list(NODES):
            self.enqueue(("health", node["metadata"]["name"]))
        self.c.engine.call_later(self.monitor_period, self._monitor_tick)

    # ---- events -> keys ---------------------------------------------------------------------
    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        ns, name = podutil.key_of(obj)
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

    def reconcile(self, key: Any) -> None:
        kind = key[0]
        if kind == "health":
            self._monitor(key[1])
        elif kind == "taints":
            self._sync_taints(key[1])
        elif kind == "evict-node":
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
        heartbeat = str((ready or {}).get("lastHeartbeatTime") or "")
        if renew and renew != health.renew_time:
            health.renew_time, health.probe = renew, now
        if heartbeat and heartbeat != health.heartbeat:
            health.heartbeat, health.probe = heartbeat, now
        grace = self.startup_grace_period if ready is None else self.grace_period
        if now > health.probe + grace:
            self._mark_unknown(node, ready is None)
        elif (
            ready is not None
            and ready.get("status") == "Unknown"
            and ready.get("reason") == "NodeStatusUnknown"
            and health.renew_time
        ):
            # The lease is being renewed again: report the node as the kubelet's next status post would.
            self._mark_recovered(node)

    def _mark_unknown(self, node: Obj, never_posted: bool) -> None:
        now = rfc3339(self.now())
        reason, message = (
            ("NodeStatusNeverUpdated", "Kubelet never posted node status.")
            if never_posted
            else ("NodeStatusUnknown", "Kubelet stopped posting node status.")
        )
        was_ready = (podutil.condition(node, "Ready") or {}).get("status") == "True"

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

    def _mark_recovered(self, node: Obj) -> None:
        now = rfc3339(self.now())

        def change(new: Obj) -> None:
            for cond in new.get("status", {}).get("conditions", []):
                if cond.get("status") != "Unknown":
                    continue
                if cond["type"] == "Ready":
                    cond.update(
                        status="True", reason="KubeletReady", message="kubelet is posting ready status"
                    )
                else:
                    cond.update(status="False", reason=f"KubeletHasNo{cond['type']}", message="")
                cond.update(lastTransitionTime=now, lastHeartbeatTime=now)

        name = node["metadata"]["name"]
        updated = self.store.mutate(NODES, "", name, change, subresource="status")
        if updated is not None:
            self.event(updated, "NodeReady", f"Node {name} status is now: NodeReady")

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
        node = self.store.get(NODES, "", node_name)
        if node is None:
            return
        wanted = desired_taints(node)
        taints: list[Obj] = list((node.get("spec") or {}).get("taints") or [])
        managed = {(key, effect) for key, effect in _MANAGED}
        keep = [
            t
            for t in taints
            if (t.get("key"), t.get("effect")) not in managed or (t["key"], t["effect"]) in wanted
        ]
        have = {(t.get("key"), t.get("effect")) for t in keep}
        now = rfc3339(self.now())
        for key, effect in sorted(wanted - have):
            taint: Obj = {"key": key, "effect": effect}
            if effect == "NoExecute":
                taint["timeAdded"] = now
            keep.append(taint)
        if keep == taints:
            return

        def change(new: Obj) -> None:
            if keep:
                new.setdefault("spec", {})["taints"] = keep
            else:
                new.get("spec", {}).pop("taints", None)

        self.store.mutate(NODES, "", node_name, change)

    # ---- taint-based eviction -------------------------------------------------------------------
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


_MANAGED = (
    (UNREACHABLE, "NoExecute"),
    (NOT_READY, "NoExecute"),
    (UNREACHABLE, "NoSchedule"),
    (NOT_READY, "NoSchedule"),
    (UNSCHEDULABLE, "NoSchedule"),
    *((key, "NoSchedule") for key in CONDITION_TAINTS.values()),
)


def desired_taints(node: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The (key, effect) taints the node lifecycle controller wants on a node, from its conditions."""
    wanted: set[tuple[str, str]] = set()
    ready = podutil.condition(node, "Ready")
    status = (ready or {}).get("status", "Unknown")
    if status == "False":
        wanted |= {(NOT_READY, "NoExecute"), (NOT_READY, "NoSchedule")}
    elif status == "Unknown":
        wanted |= {(UNREACHABLE, "NoExecute"), (UNREACHABLE, "NoSchedule")}
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.add((UNSCHEDULABLE, "NoSchedule"))
    for kind, key in CONDITION_TAINTS.items():
        if (podutil.condition(node, kind) or {}).get("status") == "True":
            wanted.add((key, "NoSchedule"))
    return wanted


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
