"""Surge guards: a guard PodDisruptionBudget for each single-replica `surge` Deployment that no PDB of
its own protects, and a surge restart for a guarded pod whose node is cordoned (decisions in
`controller/guards.py`).

An interruption handler that drains at the notice evicts at once, before any controller can react;
the guard (`minAvailable: 1`, owned by the Deployment, so garbage-collected with it) makes that
eviction wait until the surged replacement is Ready. It is removed when the Deployment no longer
needs it (more replicas, another mode, a PDB of its own). So that a guard does not hold up an
ordinary drain for good, a cordoned node under a guarded pod gets the same surge restart as a notice
(an expectation shared with the responder, `SharedState.restarts`, so that neither restarts twice).

A guard expires on its own: it carries its deadline (`loops.guard_ttl_seconds` ahead) and the
replica keeping it; the leader renews it once half of its time is gone and removes guards no longer
needed; any replica removes expired guards when it starts (`remove_guards`), and a leader stopping
gracefully removes its own. A controller that is gone thus never holds up a drain for longer than
the TTL.

The guards are looked at every `GUARD_INTERVAL_SECONDS`, and at once when the managed workloads come
or go: a new single-replica workload must have its guard before the first notice, which a handler
drains at once. They run in the interruption lane, after the responder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shipshape.contracts.annotations import RestartNote
from shipshape.controller.events import INTERRUPTION_RESPONSE
from shipshape.controller.guards import (
    GUARD_INTERVAL_SECONDS,
    GuardCandidate,
    guards_to_remove,
    is_guard,
    plan_guards,
)
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.loops.kit import Every
from shipshape.controller.ops import ClusterOps, ObjectRef, OpsError
from shipshape.controller.policy import WorkloadKind
from shipshape.controller.state import Managed
from shipshape.controller.surge import SURGE_GRACE_SECONDS, RestartWatch, restart_patch

LOG = logging.getLogger("shipshape.controller.loops.guards")


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
    for pdb in guards_to_remove(pdbs, expired_at=expired_at, owner=owner):
        ref = ObjectRef.of({**pdb, "apiVersion": "policy/v1", "kind": "PodDisruptionBudget"})
        try:
            if ops.delete(ref):
                removed += 1
        except OpsError as error:
            LOG.warning("cannot remove guard PodDisruptionBudget %s/%s: %s", ref.namespace, ref.name, error)
    return removed


class SurgeGuards(Reconciler):
    name = "surge-guards"
    lane = "interruptions"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sync = Every(GUARD_INTERVAL_SECONDS)
        self._guarded_count = -1  # how many workloads were managed at the last sync
        # Drain restarts waiting for their replacement: workload key -> (restart time, nodes).
        self._awaiting_ready = RestartWatch()

    @property
    def interval(self) -> float:
        return GUARD_INTERVAL_SECONDS

    def reconcile(self, now: float) -> None:
        with self.view(now):
            managed = self.managed()
        self._observe_restarts(managed, now)
        if self._sync.due(now) or len(managed) != self._guarded_count:
            self._sync.ran(now)
            self._guarded_count = len(managed)
            self._sync_guards(managed, now)

    def _sync_guards(self, managed: Sequence[Managed], now: float) -> None:
        """Keep a guard PDB exactly for the single-replica `surge` Deployments without a PDB of their own,
        and restart such a Deployment with a surge when its pod's node is cordoned (a drain)."""
        candidates: list[GuardCandidate] = []
        with self.view(now):
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
                cordoned = tuple(
                    str(pod.node)
                    for pod in workload.state.pods
                    if pod.node
                    and (cached := self.cache.get("Node", "", pod.node)) is not None
                    and (cached.get("spec") or {}).get("unschedulable")
                )
                others = tuple(pdb for pdb in matching if not is_guard(pdb))
                candidates.append(GuardCandidate(workload.ref.obj, workload.state, others, cordoned))
        plan = plan_guards(candidates, existing, now, self.settings.guard_ttl_seconds, self.shared.instance)
        for key, body in plan.apply.items():
            try:
                if self.ops.apply(body) != "unchanged":
                    LOG.info("guard PodDisruptionBudget %s/%s kept for a single replica", *key)
            except OpsError as error:
                LOG.warning("cannot keep guard PodDisruptionBudget %s/%s: %s", *key, error)
        for key in plan.delete:
            try:
                self.ops.delete(ObjectRef("policy/v1", "PodDisruptionBudget", *key))
            except OpsError as error:
                LOG.warning("cannot remove guard PodDisruptionBudget %s/%s: %s", *key, error)
        for candidate, node in plan.drained:
            self._restart_for_drain(candidate, node, now)

    def _restart_for_drain(self, candidate: GuardCandidate, node: str, now: float) -> None:
        """A guarded single replica on a cordoned node: start its replacement so the drain can go on."""
        obj, state = candidate.deployment, candidate.state
        note = RestartNote.read(obj)
        key = state.key
        pending = self.shared.restarts.get(key, now)
        if (note is not None and node in note.nodes) or (pending is not None and node in pending.value):
            return
        if len(state.pods) > 1:
            return  # a rollout is under way: its new pod is the replacement
        try:
            self.ops.patch_workload(
                WorkloadKind.DEPLOYMENT, state.namespace, state.name, restart_patch(obj, [node], now)
            )
        except OpsError as error:
            LOG.warning("restart of %s off cordoned node %s failed, retrying: %s", key, node, error)
            return
        self.shared.restarts.expect(key, frozenset({node}), now, SURGE_GRACE_SECONDS)
        self._awaiting_ready.add(key, now, frozenset({node}))
        message = f"node {node} is cordoned: restarting with a surge so that its drain can go on"
        self.post_event(obj, state.kind.value, INTERRUPTION_RESPONSE, message, now)

    def _observe_restarts(self, managed: Sequence[Managed], now: float) -> None:
        if not self._awaiting_ready:
            return
        for seconds in self._awaiting_ready.ready({m.state.key: m.state for m in managed}, now):
            self.metrics.notice_to_ready.observe(seconds)
