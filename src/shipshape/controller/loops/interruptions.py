"""Interruption responder: termination notices handled together, replacements started before pods go.

Every notice at hand (interruption handlers' taints, the instance-metadata endpoint) goes through
`decisions.plan_interruptions` in one round, so a pool or a zone reclaimed at once is one plan:

- the noticed pools (and, for a zone reclaim, the zone's other pools) are recorded in the shared
  `RiskModel`, so every replica's webhook keeps new pods off them for the cool-down;
- a single-replica Deployment in `surge` mode gets a rollout restart with maxSurge 1 /
  maxUnavailable 0: the new pod (placed off the reclaimed pools) is Ready before the old one goes;
- a multi-replica Deployment is surged: `spec.replicas` grows by the number of doomed pods, whose
  pod-deletion-cost drops to the lowest value; once the replacements are Ready (or the doomed pods
  are gone) the replicas go back and the ReplicaSet removes the doomed pods first;
- a StatefulSet cannot surge: its doomed pods are evicted one at a time through the Eviction API
  (PDBs apply), each once the previous replacement is Ready off the reclaimed pools, so the
  replacements start before the nodes go (`decisions.next_replacement`); placement keeps at most its
  disruption allowance of spot replicas in any one zone, so even a zone reclaim with no time to spare
  takes it at most to its floor.

What was done is written on the Deployment (annotations below), so a restarted controller neither
repeats a restart nor surges twice, and finishes a surge another replica started.

A single-replica `surge` Deployment that no PodDisruptionBudget selects gets a **guard PDB**
(`minAvailable: 1`, owned by the Deployment so that it is garbage-collected with it, labelled
`spot.shipshape.dev/guard`): an interruption handler that drains at the notice evicts at once, before
any controller can react, and the guard makes that eviction wait until the surged replacement is
Ready. It is removed when the Deployment no longer needs it (more replicas, another mode, a PDB of
its own). So that the guard does not hold up a drain for good, a cordoned node holding the guarded
pod gets the same surge restart as a notice. The guards live in the cluster, so a restarted
controller finds them there.

A guard expires on its own: it carries its deadline (`spot.shipshape.dev/guard-expires-at`, RFC 3339,
`loops.guard_ttl_seconds` ahead) and the identity of the replica that keeps it
(`spot.shipshape.dev/guard-owner`). The leader renews the deadline while the guard is needed and
removes guards past it; any replica removes expired guards when it starts (`remove_guards`), and a
leader stopping gracefully removes its own. A controller that is gone thus never holds up a drain for
longer than the TTL, and anyone (`kubectl`) can tell whether a guard is still kept.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shipshape.contracts.annotations import (
    GUARD_EXPIRES,
    GUARD_LABEL,
    GUARD_OWNER,
    RESTART_NOTE,
    SURGE_NOTE,
    RestartNote,
    SurgeNote,
)
from shipshape.contracts.notices import QUEUE_VALUE
from shipshape.controller.availability import deployment_max_unavailable
from shipshape.controller.cache import (
    NOTICE_TAINTS,
    QUEUE_NOTICE_TAINT,
    QUEUE_REBALANCE_TAINT,
    REBALANCE_TAINTS,
    taint_keys,
)
from shipshape.controller.decisions import (
    ActionKind,
    InterruptionPlan,
    Notice,
    WorkloadAction,
    next_replacement,
    notice_from_instance_action,
    notices_from_taints,
    plan_interruptions,
    rebalance_from_metadata,
)
from shipshape.controller.events import INTERRUPTION_RESPONSE
from shipshape.controller.loops.base import Managed, Reconciler
from shipshape.controller.notices import QueueNoticeSource
from shipshape.controller.ops import ClusterOps, EvictionOutcome, ObjectRef, OpsError
from shipshape.controller.placement import Pool, desired_split
from shipshape.controller.policy import DELETION_COST, CapacityType, WorkloadKind
from shipshape.kube.clock import parse_time, rfc3339
from shipshape.kube.wellknown import RESTARTED_AT

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.loops.interruptions")

# Lowest pod-deletion-cost: the ReplicaSet removes doomed pods first when the surge ends.
DOOMED_COST = "-1000000"
# A surge whose deadline passed this long ago ends whatever the pods look like.
SURGE_GRACE_SECONDS = 300.0
# Guard PDBs (and cordoned nodes under guarded pods) are looked at this often.
GUARD_INTERVAL_SECONDS = 10.0
# The instance-metadata endpoints (notices, rebalance recommendations) are asked this often.
METADATA_POLL_SECONDS = 5.0
# A node tainted for a queue notice is not tainted again for this long while the cache catches up.
MARKING_SECONDS = 10.0


def restart_patch(deployment: Mapping[str, Any], nodes: Sequence[str], stamp: float) -> Obj:
    """A rollout restart that surges: maxSurge 1 / maxUnavailable 0 unless the strategy already surges.

    `stamp` must be a function of what caused the restart (the notice), not of the time the patch is
    sent: a patch whose answer was lost (API server unavailable) and is sent again then changes
    nothing, instead of restarting the pods a second time.
    """
    patch: Obj = {
        "metadata": {"annotations": {RESTART_NOTE: RestartNote(nodes=tuple(sorted(nodes)), at=stamp).dump()}},
        "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: rfc3339(stamp)}}}},
    }
    if deployment_max_unavailable(deployment) != 0:
        patch["spec"]["strategy"] = {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        }
    return patch


def surge_start_patch(replicas: int, note: SurgeNote) -> Obj:
    return {"metadata": {"annotations": {SURGE_NOTE: note.dump()}}, "spec": {"replicas": replicas}}


def surge_end_patch(replicas: int, note: SurgeNote) -> Obj:
    """Replicas back; the note kept (done) until the doomed pods are gone."""
    return {
        "metadata": {"annotations": {SURGE_NOTE: note.ended().dump()}},
        "spec": {"replicas": max(0, replicas)},
    }


def guard_name(deployment: str) -> str:
    name = f"{deployment}-surge-guard"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(deployment.encode()).hexdigest()[:10]
    return f"{deployment[:200]}-{digest}-surge-guard"


def guard_pdb(deployment: Mapping[str, Any], owner: str = "", expires_at: float | None = None) -> Obj:
    """minAvailable 1 over a single-replica Deployment's pods, owned by the Deployment; `owner` (the
    replica keeping it) and `expires_at` (its deadline) are annotations anyone can check."""
    metadata = deployment.get("metadata") or {}
    name = str(metadata.get("name"))
    annotations = {GUARD_OWNER: owner}
    if expires_at is not None:
        annotations[GUARD_EXPIRES] = rfc3339(expires_at)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": guard_name(name),
            "namespace": metadata.get("namespace"),
            "annotations": annotations,
            "labels": {GUARD_LABEL: name if len(name) <= 63 else name[:63].rstrip("-._")},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": metadata.get("uid")}
            ],
        },
        "spec": {"minAvailable": 1, "selector": (deployment.get("spec") or {}).get("selector") or {}},
    }


def is_guard(pdb: Mapping[str, Any]) -> bool:
    return GUARD_LABEL in ((pdb.get("metadata") or {}).get("labels") or {})


def guard_expiry(pdb: Mapping[str, Any]) -> float:
    """A guard's deadline; one without a readable deadline counts as expired."""
    text = ((pdb.get("metadata") or {}).get("annotations") or {}).get(GUARD_EXPIRES)
    try:
        return parse_time(str(text)) if text else float("-inf")
    except ValueError:
        return float("-inf")


def guard_owner(pdb: Mapping[str, Any]) -> str:
    return str(((pdb.get("metadata") or {}).get("annotations") or {}).get(GUARD_OWNER) or "")


def remove_guards(
    ops: ClusterOps,
    pdbs: Iterable[Mapping[str, Any]],
    *,
    expired_at: float | None = None,
    owner: str | None = None,
) -> int:
    """Delete the guard PDBs past their deadline at `expired_at`, or kept by `owner`; how many went.
    Best effort: a guard that cannot be deleted now is logged (it is tried again later)."""
    removed = 0
    for pdb in pdbs:
        if not is_guard(pdb):
            continue
        expired = expired_at is not None and guard_expiry(pdb) <= expired_at
        owned = owner is not None and guard_owner(pdb) == owner
        if not (expired or owned):
            continue
        ref = ObjectRef.of({**pdb, "apiVersion": "policy/v1", "kind": "PodDisruptionBudget"})
        try:
            if ops.delete(ref):
                removed += 1
        except OpsError as error:
            LOG.warning("cannot remove guard PodDisruptionBudget %s/%s: %s", ref.namespace, ref.name, error)
    return removed


def needs_guard(workload: Managed, other_pdbs: Sequence[Mapping[str, Any]]) -> bool:
    """A single-replica Deployment in `surge` mode (on spot) that no other PDB protects."""
    return (
        workload.ref.kind is WorkloadKind.DEPLOYMENT
        and workload.ref.replicas == 1
        and desired_split(1, workload.state.policy).spot == 1
        and not other_pdbs
    )


def surging(deployment: Mapping[str, Any]) -> bool:
    """A surge is under way (other loops leave the Deployment alone meanwhile)."""
    note = SurgeNote.read(deployment)
    return note is not None and note.active


def surge_done(state_pods: Sequence[Any], note: SurgeNote, replicas: int, now: float) -> bool:
    """The surge can end: the replacements are Ready, the doomed pods are gone, or it is long overdue."""
    doomed = set(note.pods)
    doomed_active = [pod for pod in state_pods if pod.name in doomed]
    others_ready = sum(1 for pod in state_pods if pod.ready and pod.name not in doomed)
    base = replicas - note.surge
    return not doomed_active or others_ready >= base or now > note.deadline + SURGE_GRACE_SECONDS


class InterruptionResponder(Reconciler):
    name = "interruption-responder"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._metadata_notices: dict[str, Notice] = {}
        self._last_poll = float("-inf")
        # Restarts and surges written, not yet seen in the cache: workload key -> (nodes, until when
        # the write counts as in flight: the action's deadline plus a grace, as the cache may lag).
        self._pending: dict[str, tuple[frozenset[str], float]] = {}
        # Deadline of each noticed node as first seen: a taint without a time gives the same deadline
        # in every round, so a write sent again is the same write.
        self._deadlines: dict[str, float] = {}
        # Single-replica restarts waiting for their replacement: workload key -> (notice time, nodes).
        self._awaiting_ready: dict[str, tuple[float, frozenset[str]]] = {}
        # Doomed pods evicted, not yet seen gone in the cache: "namespace/pod" -> (node, until when).
        self._evicted: dict[str, tuple[str | None, float]] = {}
        self._last_guard_sync = float("-inf")
        self._guarded_count = -1  # how many workloads were managed at the last guard sync
        # Metadata rebalance recommendations: node -> its pool.
        self._recommended: Mapping[str, Pool | None] = {}
        # A cloud event queue (leader only: its messages go to one consumer).
        self._queue: QueueNoticeSource | None = None
        self._queue_recommended: Mapping[str, Pool | None] = {}
        # Taints sent for what the queue said, not yet seen in the cache: "node/taint key" -> until when.
        self._marking: dict[str, float] = {}

    @property
    def interval(self) -> float:
        return self.settings.interruption_interval_seconds

    # --- every replica ----------------------------------------------------------------------------

    def observe(self, now: float) -> None:
        self._poll_metadata(now)
        with self.reading():
            nodes, notices = self._read_notices(now)
        self._record(notices, nodes, now)

    def _read_notices(self, now: float) -> tuple[dict[str, Obj], list[Notice]]:
        """Every node by name, and the notices from taints (deadlines kept stable) and from the metadata
        endpoints for the nodes still there (call inside `reading()`)."""
        nodes = self.cache.nodes_by_name()
        notices = self._stable(
            notices_from_taints(self.cache.noticed_nodes(), now, self.config.notice_lead_seconds), nodes
        )
        notices += [n for name, n in self._metadata_notices.items() if name in nodes]
        return nodes, notices

    def _stable(self, notices: Sequence[Notice], nodes: Mapping[str, Any]) -> list[Notice]:
        self._deadlines = {node: deadline for node, deadline in self._deadlines.items() if node in nodes}
        return [Notice(n.node, self._deadlines.setdefault(n.node, n.deadline), n.source) for n in notices]

    def _record(self, notices: Sequence[Notice], nodes: Mapping[str, Mapping[str, Any]], now: float) -> None:
        """Pools with a notice (and the other pools of a reclaimed zone) become at risk."""
        with self.reading():  # the webhook reads the risk model under the same lock
            self._record_risk(notices, nodes, now)

    def _record_risk(
        self, notices: Sequence[Notice], nodes: Mapping[str, Mapping[str, Any]], now: float
    ) -> None:
        lead = self.config.notice_lead_seconds
        for notice in notices:
            node = nodes.get(notice.node)
            pool = self.cache.pool_of(node) if node is not None else None
            if pool is not None and self.shared.risk.record_notice(
                notice.node, pool, min(now, notice.deadline - lead)
            ):
                self.metrics.notices.labels(source=notice.source).inc()
                LOG.info("termination notice for node %s (pool %s) from %s", notice.node, pool, notice.source)
        pools = {
            p for n in notices if n.node in nodes and (p := self.cache.pool_of(nodes[n.node])) is not None
        }
        zones = {pool.zone for pool in pools if sum(1 for other in pools if other.zone == pool.zone) >= 2}
        if not zones:
            return
        for node in nodes.values():
            pool = self.cache.pool_of(node)
            if pool is not None and pool.zone in zones and pool not in pools:
                self.shared.risk.record_notice(f"zone-reclaim/{pool}", pool, now)

    # --- leader -----------------------------------------------------------------------------------

    def reconcile(self, now: float) -> None:
        self._poll_metadata(now)  # already done by `observe` in this round, unless called alone
        self._poll_queue(now)
        with self.reading():
            nodes, notices = self._read_notices(now)
            queued = self._queue.notices(nodes) if self._queue is not None else []
            notices += queued
            managed = self.managed()
            plan = plan_interruptions(notices, nodes, [m.state for m in managed], self.cache.conventions)
        self._record(notices, nodes, now)
        self._mark(queued, nodes, now)
        by_key = {m.state.key: m for m in managed}
        acted: set[str] = set()
        for action in plan.actions:
            workload = by_key[action.workload]
            try:
                if self._act(workload, action, plan, now):
                    acted.add(action.workload)
            except OpsError as error:
                LOG.warning("interruption response for %s failed, retrying: %s", action.workload, error)
        for workload in managed:
            if workload.state.key in acted:
                continue
            try:
                self._finish_surge(workload, now)
            except OpsError as error:
                LOG.warning("ending the surge of %s failed, retrying: %s", workload.state.key, error)
        self._observe_restarts(managed, now)
        # On the interval, and at once when the managed workloads come or go: a new single-replica
        # workload must have its guard before the first notice, which a handler drains at once.
        if now - self._last_guard_sync >= GUARD_INTERVAL_SECONDS or len(managed) != self._guarded_count:
            self._last_guard_sync = now
            self._guarded_count = len(managed)
            self._sync_guards(managed, now)
        self._pending = {k: v for k, v in self._pending.items() if now < v[1]}
        self._evicted = {k: v for k, v in self._evicted.items() if now < v[1]}

    def _poll_metadata(self, now: float) -> None:
        """Ask each spot node's metadata endpoint for a notice and a rebalance recommendation (every
        replica: the recommendations steer every replica's webhook)."""
        if not self.settings.poll_instance_metadata or now - self._last_poll < METADATA_POLL_SECONDS:
            return
        self._last_poll = now
        with self.reading():
            spot = self.cache.nodes_of_capacity(CapacityType.SPOT)
        try:
            answers = self.ops.spot_metadata(spot)
        except OpsError as error:
            LOG.debug("instance metadata not polled: %s", error)
            return  # what was known stands
        found: dict[str, Notice] = {}
        recommended: dict[str, Pool | None] = {}
        for name, answer in answers.items():
            if answer.unreachable:
                notice = self._metadata_notices.get(name)
                recommendation = name in self._recommended
            else:
                notice = notice_from_instance_action(name, answer.instance_action)
                recommendation = rebalance_from_metadata(answer.rebalance)
            if notice is not None:
                found[name] = notice
            if recommendation:
                with self.reading():
                    node = self.cache.get("Node", "", name)
                pool = self.cache.pool_of(node) if node is not None else self._recommended.get(name)
                recommended[name] = pool
                if name not in self._recommended:
                    LOG.info("rebalance recommendation for node %s (pool %s)", name, pool)
        self._metadata_notices = found
        with self.reading():  # the webhook reads them under the same lock
            self._recommended = recommended

    def recommended(self) -> Mapping[str, Pool | None]:
        """Spot nodes with a rebalance recommendation (metadata endpoint, event queue), and their pools:
        no new pods there, and their pools count as riskier (the webhook reads this)."""
        if not self._queue_recommended:
            return self._recommended
        return {**self._recommended, **self._queue_recommended}

    def use_notice_source(self, source: QueueNoticeSource) -> None:
        """Consume a cloud event queue too (on the leader, every round)."""
        self._queue = source

    def _poll_queue(self, now: float) -> None:
        if self._queue is None:
            return
        with self.reading():
            nodes = self.cache.nodes_by_name()
        for notice in self._queue.poll(nodes, now):
            LOG.info("event queue: interruption warning for node %s", notice.node)
        with self.reading():
            self._queue_recommended = self._queue.recommended()

    def _mark(self, notices: Sequence[Notice], nodes: Mapping[str, Mapping[str, Any]], now: float) -> None:
        """Taint the nodes that only the event queue told about, so that every replica's cache and
        kube-scheduler know too, and a restarted controller reads it again (the queue's messages reach
        the leader alone): a warning as `QUEUE_NOTICE_TAINT` (NoSchedule, timeAdded at the warning's
        time), a rebalance recommendation as `QUEUE_REBALANCE_TAINT` (PreferNoSchedule: no new pods
        from the webhook, kube-scheduler prefers other nodes, nothing is drained)."""
        self._marking = {key: until for key, until in self._marking.items() if now < until}
        lead = self.config.notice_lead_seconds
        for notice in notices:
            taint = {
                "key": QUEUE_NOTICE_TAINT,
                "value": QUEUE_VALUE,
                "effect": "NoSchedule",
                "timeAdded": rfc3339(min(now, notice.deadline - lead)),
            }
            self._taint_once(nodes.get(notice.node), taint, NOTICE_TAINTS, now)
        for name in self._queue_recommended:
            taint = {"key": QUEUE_REBALANCE_TAINT, "value": QUEUE_VALUE, "effect": "PreferNoSchedule"}
            self._taint_once(nodes.get(name), taint, NOTICE_TAINTS | REBALANCE_TAINTS, now)

    def _taint_once(
        self, node: Mapping[str, Any] | None, taint: Obj, already: frozenset[str], now: float
    ) -> None:
        """Add `taint` to a node that carries none of the `already` taints, unless sent moments ago."""
        if node is None or taint_keys(node) & already:
            return
        name = str((node.get("metadata") or {}).get("name"))
        if f"{name}/{taint['key']}" in self._marking:
            return
        taints = list((node.get("spec") or {}).get("taints") or [])
        version = str((node.get("metadata") or {}).get("resourceVersion") or "")
        try:
            self.ops.taint_node(name, [*taints, taint], version)
        except OpsError as error:
            LOG.warning("tainting node %s %s failed, retrying: %s", name, taint["key"], error)
            return
        self._marking[f"{name}/{taint['key']}"] = now + MARKING_SECONDS
        LOG.info("node %s tainted %s for what the event queue said", name, taint["key"])

    def _act(self, workload: Managed, action: WorkloadAction, plan: InterruptionPlan, now: float) -> bool:
        doomed_nodes = frozenset(
            pod.node for pod in workload.state.pods if pod.name in action.doomed_pods and pod.node
        )
        """Start what the action needs; True when a write was made now or is still in flight."""
        obj = workload.ref.obj
        if action.kind is ActionKind.REPLACE:
            return self._replace(workload, action, plan, now)
        if action.kind is ActionKind.SURGE_RESTART:
            restarted = RestartNote.read(obj)
            done = doomed_nodes <= set(restarted.nodes if restarted is not None else ())
        else:
            surge = SurgeNote.read(obj)
            done = surge is not None and set(action.doomed_pods) <= set(surge.pods)
        if done:
            self._pending.pop(action.workload, None)
            return False
        pending = self._pending.get(action.workload)
        if pending is not None and doomed_nodes <= pending[0]:
            return True  # written, not yet seen in the cache
        if action.kind is ActionKind.SURGE_RESTART:
            self.ops.patch_workload(
                WorkloadKind.DEPLOYMENT,
                workload.ref.namespace,
                workload.ref.name,
                restart_patch(obj, sorted(doomed_nodes), action.deadline - self.config.notice_lead_seconds),
            )
            self._pending[action.workload] = (doomed_nodes, action.deadline + SURGE_GRACE_SECONDS)
            self._awaiting_ready[action.workload] = (now, doomed_nodes)
            self._event(
                workload,
                action,
                plan,
                f"restarting with a surge before node(s) {_names(doomed_nodes)} go",
                now,
            )
            return True
        if action.kind is ActionKind.SURGE:
            return self._surge(workload, action, plan, doomed_nodes, now)
        return False

    def _surge(
        self,
        workload: Managed,
        action: WorkloadAction,
        plan: InterruptionPlan,
        doomed_nodes: frozenset[str],
        now: float,
    ) -> bool:
        obj = workload.ref.obj
        note = SurgeNote.read(obj)
        recorded = set(note.pods) if note is not None else set()
        new = [name for name in action.doomed_pods if name not in recorded]
        if not new:
            return False
        by_name = {pod.name: pod for pod in workload.state.pods}
        for name in action.doomed_pods:
            if by_name[name].deletion_cost != DOOMED_COST:
                self.ops.annotate_pod(workload.ref.namespace, name, {DELETION_COST: DOOMED_COST})
        replicas = workload.ref.replicas + len(new)
        ongoing = note if note is not None and note.active else None
        updated = SurgeNote(
            surge=(ongoing.surge if ongoing is not None else 0) + len(new),
            pods=tuple(sorted(recorded | set(new))),
            nodes=tuple(sorted(set(note.nodes if note is not None else ()) | doomed_nodes)),
            since=ongoing.since if ongoing is not None else now,
            deadline=min(action.deadline, ongoing.deadline) if ongoing is not None else action.deadline,
        )
        self.ops.patch_workload(
            WorkloadKind.DEPLOYMENT,
            workload.ref.namespace,
            workload.ref.name,
            surge_start_patch(replicas, updated),
        )
        self._pending[action.workload] = (doomed_nodes, action.deadline + SURGE_GRACE_SECONDS)
        self._event(
            workload,
            action,
            plan,
            f"surging {len(new)} replacement(s) before node(s) {_names(doomed_nodes)} go",
            now,
        )
        return True

    def _replace(self, workload: Managed, action: WorkloadAction, plan: InterruptionPlan, now: float) -> bool:
        """Evict the next doomed pod of a workload that cannot surge, once the previous one is replaced.

        The Eviction API applies the PDB; the StatefulSet re-creates the ordinal, which the webhook
        keeps off the reclaimed pools. State comes from the cluster (which pods exist and are Ready), so
        a restarted controller carries on; an eviction already sent is not sent again while the cache
        still shows the pod on its doomed node.
        """
        victim = next_replacement(workload.state, plan.deadlines)
        if victim is None:
            return False
        node = next((pod.node for pod in workload.state.pods if pod.name == victim), None)
        key = f"{workload.ref.namespace}/{victim}"
        sent = self._evicted.get(key)
        if sent is not None and sent[0] == node:
            return True
        self._evicted[key] = (node, action.deadline + SURGE_GRACE_SECONDS)
        outcome = self.ops.evict(workload.ref.namespace, victim)
        if outcome is EvictionOutcome.BLOCKED:
            del self._evicted[key]
            LOG.info("eviction of doomed pod %s blocked by its disruption budget; retrying", key)
            return False
        if outcome is EvictionOutcome.EVICTED:
            what = f"evicted pod {victim} so that it restarts before node {node} goes"
            self._event(workload, action, plan, what, now)
        return True

    def _sync_guards(self, managed: Sequence[Managed], now: float) -> None:
        """Keep a guard PDB exactly for the single-replica `surge` Deployments without a PDB of their own,
        and restart such a Deployment with a surge when its pod's node is cordoned (a drain)."""
        wanted: dict[tuple[str, str], Obj] = {}
        cordoned: list[tuple[Managed, str]] = []
        ttl = self.settings.guard_ttl_seconds
        with self.reading():
            existing = {
                (str(pdb["metadata"].get("namespace")), str(pdb["metadata"].get("name"))): pdb
                for pdb in self.cache.objects("PodDisruptionBudget")
                if is_guard(pdb)
            }
            for workload in managed:
                if workload.ref.kind is not WorkloadKind.DEPLOYMENT or workload.ref.replicas != 1:
                    continue
                selector = (workload.ref.obj.get("spec") or {}).get("selector") or {}
                matching = self.cache.pdbs_matching(workload.ref.namespace, selector.get("matchLabels") or {})
                others = [p for p in matching if GUARD_LABEL not in (p["metadata"].get("labels") or {})]
                if not needs_guard(workload, others):
                    continue
                body = guard_pdb(workload.ref.obj, self.shared.instance, now + ttl)
                wanted[(workload.ref.namespace, body["metadata"]["name"])] = body
                for pod in workload.state.pods:
                    node = self.cache.get("Node", "", pod.node) if pod.node else None
                    if node is not None and (node.get("spec") or {}).get("unschedulable"):
                        cordoned.append((workload, str(pod.node)))
        for key, body in wanted.items():
            have = existing.get(key)
            if (
                have is not None
                and (have.get("spec") or {}).get("minAvailable") == 1
                and guard_owner(have) == self.shared.instance
                and guard_expiry(have) - now > ttl / 2
            ):
                continue  # renewed once half of its time is gone
            try:
                if self.ops.apply(body) != "unchanged":
                    LOG.info("guard PodDisruptionBudget %s/%s kept for a single replica", *key)
            except OpsError as error:
                LOG.warning("cannot keep guard PodDisruptionBudget %s/%s: %s", *key, error)
        for key in existing.keys() - wanted.keys():
            try:
                self.ops.delete(ObjectRef("policy/v1", "PodDisruptionBudget", *key))
            except OpsError as error:
                LOG.warning("cannot remove guard PodDisruptionBudget %s/%s: %s", *key, error)
        for workload, node_name in cordoned:
            self._restart_for_drain(workload, node_name, now)

    def _restart_for_drain(self, workload: Managed, node: str, now: float) -> None:
        """A guarded single replica on a cordoned node: start its replacement so the drain can go on."""
        obj = workload.ref.obj
        note = RestartNote.read(obj)
        key = workload.state.key
        pending = self._pending.get(key)
        if (note is not None and node in note.nodes) or (pending is not None and node in pending[0]):
            return
        if len(workload.state.pods) > 1:
            return  # a rollout is under way: its new pod is the replacement
        try:
            self.ops.patch_workload(
                WorkloadKind.DEPLOYMENT,
                workload.ref.namespace,
                workload.ref.name,
                restart_patch(obj, [node], now),
            )
        except OpsError as error:
            LOG.warning("restart of %s off cordoned node %s failed, retrying: %s", key, node, error)
            return
        self._pending[key] = (frozenset({node}), now + SURGE_GRACE_SECONDS)
        self._awaiting_ready[key] = (now, frozenset({node}))
        message = f"node {node} is cordoned: restarting with a surge so that its drain can go on"
        self.post_event(obj, workload.ref.kind.value, INTERRUPTION_RESPONSE, message, now)

    def _finish_surge(self, workload: Managed, now: float) -> None:
        if workload.ref.kind is not WorkloadKind.DEPLOYMENT:
            return
        note = SurgeNote.read(workload.ref.obj)
        if note is None:
            return
        if note.done:
            if not set(note.pods) & {pod.name for pod in workload.state.pods}:
                self.ops.patch_workload(
                    WorkloadKind.DEPLOYMENT,
                    workload.ref.namespace,
                    workload.ref.name,
                    {"metadata": {"annotations": {SURGE_NOTE: None}}},
                )
            return
        if not surge_done(workload.state.pods, note, workload.ref.replicas, now):
            return
        doomed = set(note.pods)
        for pod in workload.state.pods:
            if pod.name in doomed and pod.deletion_cost != DOOMED_COST:
                self.ops.annotate_pod(workload.ref.namespace, pod.name, {DELETION_COST: DOOMED_COST})
        self.ops.patch_workload(
            WorkloadKind.DEPLOYMENT,
            workload.ref.namespace,
            workload.ref.name,
            surge_end_patch(workload.ref.replicas - note.surge, note),
        )
        self._pending.pop(workload.state.key, None)
        self.metrics.notice_to_ready.observe(max(0.0, now - note.since))
        LOG.info("surge of %s ended after %.0fs", workload.state.key, now - note.since)

    def _observe_restarts(self, managed: Sequence[Managed], now: float) -> None:
        by_key = {m.state.key: m for m in managed}
        for key, (since, nodes) in list(self._awaiting_ready.items()):
            workload = by_key.get(key)
            if workload is None or now - since > 3600:
                del self._awaiting_ready[key]
                continue
            if any(pod.ready and pod.node not in nodes for pod in workload.state.pods):
                self.metrics.notice_to_ready.observe(now - since)
                del self._awaiting_ready[key]

    def _event(
        self, workload: Managed, action: WorkloadAction, plan: InterruptionPlan, what: str, now: float
    ) -> None:
        scope = ", ".join(str(pool) for pool in sorted(plan.reclaimed_pools)) or "on-demand nodes"
        zones = (
            f"; zone(s) {', '.join(sorted(plan.reclaimed_zones))} reclaimed" if plan.reclaimed_zones else ""
        )
        message = (
            f"termination notice for pool(s) {scope}{zones}: {what}; deadline {rfc3339(action.deadline)}, "
            f"ready {action.ready_now}, floor {action.floor}"
        )
        self.post_event(workload.ref.obj, workload.ref.kind.value, INTERRUPTION_RESPONSE, message, now)


def _names(nodes: frozenset[str]) -> str:
    return ", ".join(sorted(nodes))
