"""Rebalancer: moves pods one at a time toward each workload's desired split (`decisions.next_move`).

Moves go through the Eviction API (PodDisruptionBudgets apply); a single-replica Deployment is moved
by a surge restart instead. A workload being surged for a notice is left to the interruption
responder. The pace is rate-limited cluster-wide (`rebalance_moves_per_minute`), and a pod already
evicted is not evicted again while the cache still shows it. A workload found balanced is not looked
at again while its state (`decisions.workload_state` keeps one object per change of its inputs) and
the placement view stay the same.
"""

from __future__ import annotations

import logging
from typing import Any

from shipshape.controller.decisions import Move, MoveKind, WorkloadState, next_move, replacement_lands
from shipshape.controller.events import REBALANCED
from shipshape.controller.loops.base import Managed, Reconciler
from shipshape.controller.ops import EvictionOutcome, OpsError
from shipshape.controller.placement import PlacementView
from shipshape.controller.policy import WorkloadKind
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
        self._recent: dict[str, float] = {}
        # Workloads with no move to make: the state and view that said so.
        self._balanced: dict[str, tuple[WorkloadState, PlacementView]] = {}

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
        self._recent = {pod: at for pod, at in self._recent.items() if now - at < RECENT_SECONDS}
        if self._tokens < 1.0:
            return
        with self.reading():
            view = self.cache.placement_view(now, self.shared.risk, self.shared.shortages.shortages(now))
            moves: list[tuple[Managed, Move]] = []
            balanced: dict[str, tuple[WorkloadState, PlacementView]] = {}
            # The view with each pool's room now, for the pre-check of a move (built once, when needed).
            strict: PlacementView | None = None
            for workload in self.managed():
                if surging(workload.ref.obj) or _rolling_out(workload.ref.obj):
                    continue
                key = workload.state.key
                seen = self._balanced.get(key)
                if seen is not None and seen[0] is workload.state and seen[1] == view:
                    balanced[key] = seen
                    continue
                move = next_move(workload.state, view)
                if move is None:
                    balanced[key] = (workload.state, view)
                    continue
                if f"{workload.ref.namespace}/{move.pod}" in self._recent:
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
            self._balanced = balanced
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
        self._recent[f"{namespace}/{move.pod}"] = now
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
                del self._recent[f"{namespace}/{move.pod}"]
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
