"""The emulator's kube-scheduler: watches pods and nodes, schedules, binds, preempts.

The model keeps a `ClusterSnapshot` up to date from store events, queues pending pods of
`default-scheduler` as kube-scheduler's scheduling queue does, and runs scheduling cycles on the
engine (every cycle happens within one emulated instant). Writes go where upstream's would:
the binding subresource (through the Api when it offers one), the pod's status, Events.
"""

from __future__ import annotations

import inspect
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from shipshape.emulator import ratelimit
from shipshape.emulator.admission.builtin import class_priority
from shipshape.emulator.resources import (
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    SERVICES,
    STATEFULSETS,
)
from shipshape.emulator.scheduler import framework, messages
from shipshape.emulator.scheduler.plugins import Cycle, Profile
from shipshape.emulator.scheduler.preemption import Budget
from shipshape.emulator.scheduler.queue import ALL_PLUGINS, QueuedPod, SchedulingQueue
from shipshape.emulator.scheduler.snapshot import ClusterSnapshot, PodInfo, PodKey, pod_info, start_time
from shipshape.emulator.store import DELETED, Obj, Store, WatchEvent
from shipshape.kube import errors
from shipshape.kube import labels as labelsel
from shipshape.kube.clock import VirtualClock, rfc3339

if TYPE_CHECKING:
    from shipshape.emulator.runtime import Cluster
    from shipshape.emulator.scenario import SchedulerSettings

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
# Which plugins' rejections a cluster event may resolve (upstream's cluster events per plugin).
_ON_ASSIGNED_POD_DELETE = frozenset({"NodeResourcesFit", "PodTopologySpread", "InterPodAffinity"})
_ON_ASSIGNED_POD_CHANGE = frozenset({"PodTopologySpread", "InterPodAffinity"})
# Real seconds of scheduling per engine turn in server mode, after which the rest of the queue
# waits for the next turn (so the API server answers during a burst of pending pods).
TURN_SECONDS = 0.02


def _set_condition(pod: Obj, condition: Obj, now: float) -> None:
    """Upstream `UpdatePodCondition`: the transition time moves only when the status changes."""
    conditions: list[Obj] = pod.setdefault("status", {}).setdefault("conditions", [])
    for existing in conditions:
        if existing.get("type") == condition["type"]:
            if existing.get("status") != condition["status"]:
                existing["lastTransitionTime"] = rfc3339(now)
            existing.update({k: v for k, v in condition.items() if k != "lastTransitionTime"})
            for key in ("reason", "message"):
                if key not in condition:
                    existing.pop(key, None)
            return
    conditions.append({**condition, "lastProbeTime": None, "lastTransitionTime": rfc3339(now)})


def _mutate_status(store: Store, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj | None:
    """`store.mutate` of a pod's status subresource for a change to `.status` and its conditions alone:
    only the status and its condition dicts are copied for it, not the whole pod. None if absent."""
    current = store.get(PODS, namespace, name)
    if current is None:
        return None
    status = dict(current.get("status") or {})
    if isinstance(status.get("conditions"), list):
        status["conditions"] = [dict(c) for c in status["conditions"]]
    scratch: Obj = {"status": status}
    change(scratch)
    return store.write_status(PODS, namespace, name, scratch.get("status", {}))


def _scheduling_relevant(pod: Obj) -> Any:
    md = pod.get("metadata") or {}
    return (md.get("labels"), md.get("annotations"), pod.get("spec"))


def _same_for_scheduling(old: Obj, new: Obj) -> bool:
    old_md, new_md = old.get("metadata") or {}, new.get("metadata") or {}
    return (
        old.get("spec") == new.get("spec")
        and old_md.get("labels") == new_md.get("labels")
        and old_md.get("deletionTimestamp") == new_md.get("deletionTimestamp")
    )


def _node_relevant(node: Obj) -> dict[str, Any]:
    md, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    return {
        "NodeResourcesFit": status.get("allocatable") or status.get("capacity"),
        "NodeAffinity": md.get("labels"),
        "PodTopologySpread": md.get("labels"),
        "InterPodAffinity": md.get("labels"),
        "TaintToleration": spec.get("taints"),
        "NodeUnschedulable": spec.get("unschedulable"),
    }


class SchedulerModel:
    """kube-scheduler's default profile over the emulated cluster."""

    name = "scheduler"

    def __init__(self, settings: SchedulerSettings | None = None, *, seed: int | None = None) -> None:
        self._settings = settings
        self._seed = seed
        self.cluster: Cluster | None = None
        self.snapshot = ClusterSnapshot()
        self.queue = SchedulingQueue()
        self.profile = Profile()
        self.rng = random.Random(0)
        self._running = False
        self.attempts = 0
        # The scheduler's client-side rate limit: each scheduling attempt ends in a request (the
        # binding, or the status of a pod that does not fit). None: no limit.
        self.client_limit: ratelimit.TokenBucket | None = None
        self._fit_infos = framework.PodInfos()

    # ---- wiring ---------------------------------------------------------------------------
    @property
    def c(self) -> Cluster:
        assert self.cluster is not None, "scheduler used before start()"
        return self.cluster

    def start(self, cluster: Cluster) -> None:
        self.cluster = cluster
        scenario = cluster.scenario
        settings = self._settings or getattr(scenario, "scheduler", None)
        if settings is not None:
            self.profile = Profile(scoring=settings.scoring)
            self.client_limit = ratelimit.bucket_for(
                settings.kube_api_qps, settings.kube_api_burst, cluster.clock.now()
            )
        seed = self._seed if self._seed is not None else (scenario.seed if scenario is not None else 0)
        self.rng = random.Random(seed)
        cluster.services["scheduler"] = self
        store = cluster.store
        for ns in store.iter(NAMESPACES):
            self.snapshot.namespace_labels[ns["metadata"]["name"]] = ns["metadata"].get("labels") or {}
        for node in store.iter(NODES):
            self.snapshot.set_node(node)
        for pod in store.iter(PODS):
            self._on_pod("ADDED", pod, None)
        store.subscribe(self._on_event, kinds=(PODS, NODES, NAMESPACES))

    def fits(
        self, pod: Mapping[str, Any], node: Mapping[str, Any], pods_on_node: Iterable[Mapping[str, Any]] = ()
    ) -> list[str]:
        """The filters' verdict for a pod on a (template) node: [] when it fits, else the reasons.

        The bodies are compiled once each (`framework.PodInfos`): callers pass stored pod versions
        and bodies they never change."""
        return framework.fits(pod, node, pods_on_node, self._fit_infos)

    # ---- watch ----------------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> None:
        if event.resource is PODS:
            previous = None
            if event.type != "ADDED":
                md = event.object["metadata"]
                key = (md.get("namespace", ""), md["name"])
                known = self.snapshot.pods.get(key)
                entry = self.queue.get(key)
                previous = known.obj if known is not None else (entry.info.obj if entry is not None else None)
            self._on_pod(event.type, event.object, previous)
        elif event.resource is NODES:
            self._on_node(event.type, event.object)
        elif event.resource is NAMESPACES:
            md = event.object["metadata"]
            if event.type == DELETED:
                self.snapshot.namespace_labels.pop(md["name"], None)
            else:
                self.snapshot.namespace_labels[md["name"]] = md.get("labels") or {}

    def _now(self) -> float:
        return self.c.clock.now()

    def _responsible(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (spec.get("schedulerName") or SCHEDULER_NAME) == SCHEDULER_NAME

    def _on_pod(self, kind: str, pod: Obj, previous: Obj | None) -> None:
        md = pod["metadata"]
        key: PodKey = (md.get("namespace", ""), md["name"])
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            self.queue.done(key)
            if kind == DELETED:
                self.snapshot.remove_pod(key)
                self._move(_ON_ASSIGNED_POD_DELETE, freed_node=str(node_name))
                return
            known = self.snapshot.pods.get(key)
            if known is not None and previous is not None and _same_for_scheduling(previous, pod):
                known.obj = pod  # a status-only change (the kubelet's): nothing to re-account
                known.start_time = start_time(pod)
                return
            self.snapshot.add_pod(pod_info(pod, priority=self._priority(pod)))
            if (
                previous is None
                or not (previous.get("spec") or {}).get("nodeName")
                or (previous.get("metadata") or {}).get("labels") != md.get("labels")
            ):
                self._move(_ON_ASSIGNED_POD_CHANGE)
            return
        if kind == DELETED or md.get("deletionTimestamp") or not self._responsible(pod):
            self.queue.delete(key)
            self.snapshot.nominate(key, None)
            return
        if (pod.get("spec") or {}).get("schedulingGates"):
            self.queue.delete(key)  # SchedulingGates (PreEnqueue): not queued until the gates are gone
            return
        info = pod_info(pod, priority=self._priority(pod))
        if info.nominated_node:
            self.snapshot.nominate(key, info, info.nominated_node)
        else:
            self.snapshot.nominate(key, None)
        if key not in self.queue:
            self.queue.add(info, self._now())
        else:
            changed = previous is not None and _scheduling_relevant(previous) != _scheduling_relevant(pod)
            self._backoff_timers(self.queue.update(info, self._now(), changed=changed))
        self._kick()

    def _on_node(self, kind: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        if kind == DELETED:
            self.snapshot.remove_node(name)
            return
        known = self.snapshot.nodes.get(name)
        before = _node_relevant(known.obj) if known is not None and known.obj is not None else None
        self.snapshot.set_node(node)
        if before is None:
            self._move(None, changed_node=name)
            return
        after = _node_relevant(node)
        changed = {plugin for plugin, value in after.items() if before[plugin] != value}
        if changed:
            self._move(changed, changed_node=name)

    def _move(
        self,
        plugins: frozenset[str] | set[str] | None,
        freed_node: str | None = None,
        changed_node: str | None = None,
    ) -> None:
        rejected = (
            None if changed_node is None else (lambda entry: self._rejecting_plugin(entry, changed_node))
        )
        self._backoff_timers(self.queue.move(self._now(), plugins, freed_node, rejected, changed_node))
        self._kick()

    def _rejecting_plugin(self, entry: QueuedPod, node_name: str) -> str | None:
        """The filter plugin that rejects a queued pod on one node as the snapshot has it now; None
        when it passes them all."""
        node = self.snapshot.nodes.get(node_name)
        if node is None or node.obj is None:
            return "NodeName"
        status = Cycle(entry.info, self.snapshot, self.profile).filter(node)
        return None if status is None else (status.plugin or "NodeResourcesFit")

    def _backoff_timers(self, entries: list[QueuedPod]) -> None:
        for entry in entries:
            self._expire_at(self.queue.backoff_expiry(entry), entry.info.key)

    def _expire_at(self, when: float, key: PodKey) -> None:
        def fire() -> None:
            self._backoff_timers(self.queue.expire(key, self._now()))
            self._kick()

        self.c.engine.call_at(when, fire)

    # ---- priorities and default spreading -------------------------------------------------
    def _priority(self, pod: Obj) -> int:
        spec = pod.get("spec") or {}
        if isinstance(spec.get("priority"), int):
            return int(spec["priority"])
        return class_priority(self.c.store, spec.get("priorityClassName"))

    def _default_spread_selector(self, pod: Obj) -> labelsel.Selector | None:
        """The selector system-default spreading uses: the pod's services' and controller's."""
        md = pod.get("metadata") or {}
        namespace = md.get("namespace", "")
        pod_labels = md.get("labels") or {}
        requirements: list[labelsel.Requirement] = []
        for svc in self.c.store.iter(SERVICES):
            selector = (svc.get("spec") or {}).get("selector") or {}
            if (
                svc["metadata"].get("namespace") == namespace
                and selector
                and all(pod_labels.get(k) == v for k, v in selector.items())
            ):
                requirements.extend(labelsel.Requirement(k, "In", (str(v),)) for k, v in selector.items())
        for ref in md.get("ownerReferences") or []:
            rt = {"ReplicaSet": REPLICASETS, "StatefulSet": STATEFULSETS}.get(ref.get("kind", ""))
            if rt is None or not ref.get("controller"):
                continue
            owner = self.c.store.get(rt, namespace, ref.get("name", ""))
            if owner is None:
                continue
            try:
                selector = labelsel.from_label_selector((owner.get("spec") or {}).get("selector"))
            except labelsel.SelectorError:
                continue
            if selector.matches(pod_labels):
                requirements.extend(selector.requirements)
        return labelsel.Selector(tuple(requirements)) if requirements else None

    def _budgets(self) -> list[Budget]:
        return [Budget.of(pdb) for pdb in self.c.store.iter(PDBS)]

    # ---- scheduling -----------------------------------------------------------------------
    def _kick(self) -> None:
        if not self._running and self.queue.may_have_active():
            self._running = True
            self.c.engine.call_soon(self._run)

    def _run(self) -> None:
        self._running = False
        # Discrete-event runs schedule the whole queue in one turn, as they always have: their
        # results must not depend on how fast the host is.
        deadline = (
            None if isinstance(self.c.engine.clock, VirtualClock) else time.perf_counter() + TURN_SECONDS
        )
        while True:
            if deadline is not None and time.perf_counter() >= deadline:
                self._kick()
                return
            if self.client_limit is not None and self.queue.may_have_active():
                now = self._now()
                ready_at = self.client_limit.available_at(now)
                if ready_at > now:  # the client waits for its next token: so does the queue
                    self._running = True
                    self.c.engine.call_at(ratelimit.release_time(ready_at, now), self._run)
                    return
            entry = self.queue.pop()
            if entry is None:
                return
            try:
                self._schedule(entry)
            except Exception:
                log.exception("scheduling %s/%s failed", *entry.info.key)
                self._park(entry, ())

    def _schedule(self, entry: QueuedPod) -> None:
        key = entry.info.key
        pod = self.c.store.get(PODS, *key)
        if pod is None or (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
            self.queue.done(key)
            return
        self.attempts += 1
        if self.client_limit is not None:
            self.client_limit.reserve(self._now())
        info = pod_info(
            pod, priority=self._priority(pod), default_spread_selector=self._default_spread_selector(pod)
        )
        budgets = self._budgets() if self.c.store.count(PDBS) else []
        decision = framework.schedule_one(
            info, self.snapshot, profile=self.profile, rng=self.rng, budgets=budgets, statuses=False
        )
        if decision.scheduled:
            if self._bind(pod, decision.node):
                self.queue.done(key)
                return
            self._park(entry, ALL_PLUGINS)
            self._move(None)  # upstream forgets the assumed pod and retries everyone
            return
        if decision.nominated_node:
            self._preempt(pod, info, decision)
        self._record_failure(pod, decision)
        short = [node for node, status in decision.statuses.items() if status.plugin == "NodeResourcesFit"]
        # Known only when every node was tried (a node not in `statuses` might have been skipped).
        complete = len(decision.statuses) == len(self.snapshot.node_list()) and not decision.nominated_node
        self._park(entry, decision.rejected_by, short if complete else None)

    def _park(self, entry: QueuedPod, plugins: Any, short_of_resources: list[str] | None = None) -> None:
        """Put a pod that failed among the unschedulable ones, with its 5-minute retry timer."""
        now = self._now()
        self.queue.failed(entry, now, plugins, short_of_resources)
        self._expire_at(now + self.queue.max_unschedulable, entry.info.key)

    def _bind(self, pod: Obj, node: str) -> bool:
        """Bind as the binding subresource does; False if the pod is gone or already bound."""
        md = pod["metadata"]
        namespace, name = md.get("namespace", ""), md["name"]
        api = self.c.services.get("api")
        create_subresource: Callable[..., Any] | None = getattr(api, "create_subresource", None)
        bound = False
        if create_subresource is not None:
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "uid": md.get("uid")},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            try:
                result = create_subresource(PODS, namespace, name, "binding", body)
                if inspect.iscoroutine(result):
                    _drive(result)
                bound = True
            except (errors.MethodNotAllowed, NotImplementedError) as exc:
                log.debug("binding through the api is unavailable (%s); writing the store", exc)
            except errors.ApiError as exc:  # gone, already bound, denied by admission
                log.info("binding %s/%s to %s failed: %s", namespace, name, node, exc)
                return False
        if not bound and not self._bind_in_store(namespace, name, node):
            return False
        self.c.recorder.record(
            pod, "Scheduled", f"Successfully assigned {namespace}/{name} to {node}", component=SCHEDULER_NAME
        )
        return True

    def _bind_in_store(self, namespace: str, name: str, node: str) -> bool:
        store, now = self.c.store, self._now()
        current = store.get(PODS, namespace, name)
        if current is None or (current.get("spec") or {}).get("nodeName"):
            return False

        def assign(p: Obj) -> None:
            p.setdefault("spec", {})["nodeName"] = node

        def scheduled(p: Obj) -> None:
            _set_condition(p, {"type": "PodScheduled", "status": "True"}, now)

        store.mutate(PODS, namespace, name, assign)
        _mutate_status(store, namespace, name, scheduled)
        return True

    def _record_failure(self, pod: Obj, decision: framework.Decision) -> None:
        md = pod["metadata"]
        namespace, name = md.get("namespace", ""), md["name"]
        message = decision.message
        now = self._now()

        def unschedulable(p: Obj) -> None:
            _set_condition(
                p,
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message},
                now,
            )
            if decision.nominated_node:
                p["status"]["nominatedNodeName"] = decision.nominated_node

        updated = _mutate_status(self.c.store, namespace, name, unschedulable)
        self.c.recorder.record(
            updated or pod,
            "FailedScheduling",
            messages.truncate(message),
            type="Warning",
            component=SCHEDULER_NAME,
        )

    def _preempt(self, pod: Obj, info: PodInfo, decision: framework.Decision) -> None:
        """Carry out DefaultPreemption's choice: evict the victims, clear weaker nominations."""
        store, now, node = self.c.store, self._now(), decision.nominated_node
        uid = pod["metadata"].get("uid", "")
        for victim in decision.victims:
            namespace, name = victim.key

            def disruption(p: Obj) -> None:
                _set_condition(
                    p,
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                        "message": f"{SCHEDULER_NAME}: preempting to accommodate a higher priority pod",
                    },
                    now,
                )

            target = _mutate_status(store, namespace, name, disruption)
            if target is None:
                continue
            try:
                store.delete(PODS, namespace, name)
            except errors.NotFound:
                continue
            self.c.recorder.record(
                target, "Preempted", f"Preempted by pod {uid} on node {node}", component=SCHEDULER_NAME
            )
        for other in list(self.snapshot.nominated.get(node, {}).values()):
            if other.key != info.key and other.priority < info.priority:

                def clear(p: Obj) -> None:
                    p.setdefault("status", {}).pop("nominatedNodeName", None)

                _mutate_status(store, *other.key, clear)


def _drive(coro: Any) -> None:
    """Run an Api coroutine that completes without suspending (no webhooks on bindings)."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise NotImplementedError("the binding suspended outside an event loop")
