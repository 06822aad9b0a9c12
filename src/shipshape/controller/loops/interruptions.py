"""Interruption responder: the notices at hand answered together, replacements started before pods go
(decisions in `controller/surge.py`).

Every notice the notice watcher put on the board (`loops/notices.py`, in the same lane, just before)
goes through `surge.plan_interruptions` in one round, so a pool or a zone reclaimed at once is one plan:

- a single-replica Deployment in `surge` mode gets a rollout restart with maxSurge 1 /
  maxUnavailable 0: the new pod (placed off the reclaimed pools) is Ready before the old one goes;
- a multi-replica Deployment is surged: `spec.replicas` grows by the number of doomed pods, whose
  pod-deletion-cost drops to the lowest value; once the replacements are Ready (or the doomed pods
  are gone) the replicas go back and the ReplicaSet removes the doomed pods first;
- a StatefulSet cannot surge: its doomed pods are evicted one at a time through the Eviction API
  (PDBs apply), each once the previous replacement is Ready off the reclaimed pools, so the
  replacements start before the nodes go (`surge.next_replacement`); placement keeps at most its
  disruption allowance of spot replicas in any one zone, so even a zone reclaim with no time to spare
  takes it at most to its floor.

What was done is written on the Deployment (`contracts.annotations.SurgeNote`, `RestartNote`), so a restarted
controller neither repeats a restart nor surges twice, and finishes a surge another replica started.
A write sent and not yet seen in the cache is an expectation (`SharedState.restarts`, shared with the
guards, which restart Deployments too; evictions here), held until the action's deadline plus a grace.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from shipshape.contracts.annotations import SURGE_NOTE, SurgeNote
from shipshape.controller.events import INTERRUPTION_RESPONSE
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.loops.kit import Expectations
from shipshape.controller.ops import EvictionOutcome, OpsError
from shipshape.controller.policy import DELETION_COST, WorkloadKind
from shipshape.controller.state import Managed
from shipshape.controller.surge import (
    DOOMED_COST,
    SURGE_GRACE_SECONDS,
    ActionKind,
    InterruptionPlan,
    RestartWatch,
    WorkloadAction,
    action_done,
    doomed_nodes,
    extended_surge,
    next_replacement,
    plan_interruptions,
    restart_patch,
    surge_done,
    surge_end_patch,
    surge_start_patch,
)
from shipshape.kube.clock import rfc3339

LOG = logging.getLogger("shipshape.controller.loops.interruptions")


class InterruptionResponder(Reconciler):
    name = "interruption-responder"
    lane = "interruptions"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Doomed pods evicted, not yet seen gone in the cache: "namespace/pod" -> the node it was on.
        self._evicted: Expectations[str, str | None] = Expectations()
        # Single-replica restarts waiting for their replacement: workload key -> (notice time, nodes).
        self._awaiting_ready = RestartWatch()

    @property
    def interval(self) -> float:
        return self.settings.interruption_interval_seconds

    def busy(self) -> bool:
        """A surge is in progress."""
        with self.view():
            return any(
                SURGE_NOTE in ((d.get("metadata") or {}).get("annotations") or {})
                for d in self.cache.objects("Deployment")
            )

    def reconcile(self, now: float) -> None:
        with self.view(now):
            nodes = self.cache.nodes_by_name()
            notices = list(self.shared.notices.at_hand)
            managed = self.managed()
            plan = plan_interruptions(
                notices, nodes, [m.state for m in managed], self.cache.conventions, self.cache.pool_nodes()
            )
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
        self.shared.restarts.expire(now)
        self._evicted.expire(now)

    def _act(self, workload: Managed, action: WorkloadAction, plan: InterruptionPlan, now: float) -> bool:
        """Start what the action needs; True when a write was made now or is still in flight."""
        if action.kind is ActionKind.REPLACE:
            return self._replace(workload, action, plan, now)
        obj = workload.ref.obj
        nodes = doomed_nodes(workload.state, action)
        if action_done(action, obj, nodes):
            self.shared.restarts.observed(action.workload)
            return False
        pending = self.shared.restarts.get(action.workload, now)
        if pending is not None and nodes <= pending.value:
            return True  # written, not yet seen in the cache
        if action.kind is ActionKind.SURGE_RESTART:
            self.ops.patch_workload(
                WorkloadKind.DEPLOYMENT,
                workload.ref.namespace,
                workload.ref.name,
                restart_patch(obj, sorted(nodes), action.deadline - self.config.notice_lead_seconds),
            )
            self.shared.restarts.expect(action.workload, nodes, action.deadline, SURGE_GRACE_SECONDS)
            self._awaiting_ready.add(action.workload, now, nodes)
            self._event(
                workload, action, plan, f"restarting with a surge before node(s) {_names(nodes)} go", now
            )
            return True
        if action.kind is ActionKind.SURGE:
            return self._surge(workload, action, plan, nodes, now)
        return False

    def _surge(
        self,
        workload: Managed,
        action: WorkloadAction,
        plan: InterruptionPlan,
        nodes: frozenset[str],
        now: float,
    ) -> bool:
        new, updated = extended_surge(SurgeNote.read(workload.ref.obj), action, nodes, now)
        if not new:
            return False
        by_name = {pod.name: pod for pod in workload.state.pods}
        for name in action.doomed_pods:
            if by_name[name].deletion_cost != DOOMED_COST:
                self.ops.annotate_pod(workload.ref.namespace, name, {DELETION_COST: DOOMED_COST})
        self.ops.patch_workload(
            WorkloadKind.DEPLOYMENT,
            workload.ref.namespace,
            workload.ref.name,
            surge_start_patch(workload.ref.replicas + len(new), updated),
        )
        self.shared.restarts.expect(action.workload, nodes, action.deadline, SURGE_GRACE_SECONDS)
        what = f"surging {len(new)} replacement(s) before node(s) {_names(nodes)} go"
        self._event(workload, action, plan, what, now)
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
        sent = self._evicted.get(key, now)
        if sent is not None and sent.value == node:
            return True
        self._evicted.expect(key, node, action.deadline, SURGE_GRACE_SECONDS)
        outcome = self.ops.evict(workload.ref.namespace, victim)
        if outcome is EvictionOutcome.BLOCKED:
            self._evicted.observed(key)
            LOG.info("eviction of doomed pod %s blocked by its disruption budget; retrying", key)
            return False
        if outcome is EvictionOutcome.EVICTED:
            what = f"evicted pod {victim} so that it restarts before node {node} goes"
            self._event(workload, action, plan, what, now)
        return True

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
        self.shared.restarts.observed(workload.state.key)
        self.metrics.notice_to_ready.observe(max(0.0, now - note.since))
        LOG.info("surge of %s ended after %.0fs", workload.state.key, now - note.since)

    def _observe_restarts(self, managed: Sequence[Managed], now: float) -> None:
        if not self._awaiting_ready:
            return
        for seconds in self._awaiting_ready.ready({m.state.key: m.state for m in managed}, now):
            self.metrics.notice_to_ready.observe(seconds)

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
