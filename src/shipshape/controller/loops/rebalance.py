"""Rebalancer: moves pods one at a time toward each workload's desired split (decisions in
`controller/rebalance.py`: `next_move`, `replacement_lands`).

Moves go through the Eviction API (PodDisruptionBudgets apply); a single-replica Deployment is moved
by a surge restart instead. A workload being surged for a notice is left to the interruption
responder. The pace is rate-limited cluster-wide (`rebalance_moves_per_minute`), and a pod already
evicted is not evicted again while the cache still shows it (an expectation, for `RECENT_SECONDS`). A
workload found balanced is not looked at again until the state says it changed or the placement view
differs from the last round's (`base.WorkloadQueue`, with a full pass every `workload_resync_seconds`).
"""

from __future__ import annotations

import logging
from typing import Any

from shipshape.controller.events import REBALANCED
from shipshape.controller.loops.base import Reconciler, WorkloadQueue
from shipshape.controller.loops.kit import Expectations
from shipshape.controller.ops import EvictionOutcome, OpsError
from shipshape.controller.placement import PlacementView
from shipshape.controller.policy import WorkloadKind
from shipshape.controller.rebalance import Move, MoveKind, next_move, replacement_lands
from shipshape.controller.state import Managed
from shipshape.controller.surge import restart_patch, surging

LOG = logging.getLogger("shipshape.controller.loops.rebalance")
# An evicted pod is not evicted again for this long (it may still show in the cache meanwhile).
RECENT_SECONDS = 120.0


class Rebalancer(Reconciler):
    name = "rebalancer"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tokens = 1.0
        self._last = float("nan")
        # Pods evicted (or restarted), not to be moved again while the cache may still show them.
        self._moved: Expectations[str, None] = Expectations()
        # The workloads to look at: those that changed since they were last found balanced.
        self.workloads = WorkloadQueue(self.settings.workload_resync_seconds)

    @property
    def interval(self) -> float:
        return self.settings.rebalance_interval_seconds

    def _refill(self, now: float) -> None:
        rate = self.settings.rebalance_moves_per_minute / 60.0
        if self._last == self._last:  # not NaN: a previous round happened
            self._tokens = min(max(1.0, rate * self.interval), self._tokens + (now - self._last) * rate)
        self._last = now

    def reconcile(self, now: float) -> None:
        self._refill(now)
        self._moved.expire(now)
        if self._tokens < 1.0:
            return
        with self.view(now):
            view = self.cache.placement_view(now, self.shared.risk, self.shared.shortages.shortages(now))
            moves: list[tuple[Managed, Move]] = []
            # The view with each pool's room now, for the pre-check of a move (built once, when needed).
            strict: PlacementView | None = None
            for workload in self.workloads.due(self.cache, self.config, now, (view,)):
                if surging(workload.ref.obj) or _rolling_out(workload.ref.obj):
                    continue
                key = workload.state.key
                move = next_move(workload.state, view)
                if move is None:
                    self.workloads.settled(workload)
                    continue
                if self._moved.pending(f"{workload.ref.namespace}/{move.pod}", now):
                    continue
                if strict is None:
                    strict = self.cache.placement_view(
                        now, self.shared.risk, self.shared.shortages.shortages(now), strict=True
                    )
                if not replacement_lands(workload.state, move, strict):
                    # Its replacement would stay Pending: no move now (looked at again next round).
                    LOG.debug("%s: no move of %s, its replacement would not be scheduled", key, move.pod)
                    continue
                moves.append((workload, move))
        for workload, move in moves:
            if self._tokens < 1.0:
                break
            try:
                done = self._move(workload, move, now)
            except OpsError as error:
                LOG.warning("rebalance move of %s failed: %s", move.pod, error)
                continue
            if done:
                self._tokens -= 1.0
                self.metrics.rebalances.labels(direction=move.direction.value).inc()

    def _move(self, workload: Managed, move: Move, now: float) -> bool:
        namespace = workload.ref.namespace
        # Marked before the call: a move whose answer was lost is not sent again while the cache catches up.
        self._moved.expect(f"{namespace}/{move.pod}", None, now, RECENT_SECONDS)
        if not self.config.rebalance_evictions:
            LOG.info(
                "rebalance move not made (rebalance_evictions is off)",
                extra={"workload": workload.state.key, "pod": move.pod, "direction": move.direction.value},
            )
            return False
        if move.kind is MoveKind.SURGE_RESTART:
            self.ops.patch_workload(
                WorkloadKind.DEPLOYMENT,
                namespace,
                workload.ref.name,
                restart_patch(workload.ref.obj, [], now),
            )
        else:
            outcome = self.ops.evict(namespace, move.pod)
            if outcome is EvictionOutcome.BLOCKED:
                LOG.info("eviction of %s/%s blocked by its disruption budget", namespace, move.pod)
                self._moved.observed(f"{namespace}/{move.pod}")
                return False
            if outcome is EvictionOutcome.GONE:
                return False
        message = f"moved pod {move.pod} ({move.direction.value}) toward the desired spot/on-demand split"
        self.post_event(workload.ref.obj, workload.ref.kind.value, REBALANCED, message, now)
        LOG.info("%s: %s", workload.state.key, message)
        return True


def _rolling_out(obj: dict[str, Any]) -> bool:
    """A Deployment/StatefulSet whose controller has not caught up with its spec yet."""
    metadata, status = obj.get("metadata") or {}, obj.get("status") or {}
    generation = metadata.get("generation")
    return generation is not None and status.get("observedGeneration") != generation
