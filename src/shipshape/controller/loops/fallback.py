"""Spot fallback: spot-bound pods unschedulable past `fallback_after_seconds` are re-decided to on-demand.

Every replica marks the pools of such pods in the shared `ShortageTracker` (its webhook then sends new
pods to other pools or on-demand, reason `spot-fallback`); the leader deletes the stuck pods so their
controller re-creates them. Spot is tried again after the tracker's back-off, and the rebalancer then
moves the excess on-demand pods back (`on-demand-to-spot`). A pool's back-off resets when a new node of
the pool appears.
"""

from __future__ import annotations

import logging
from typing import Any

from shipshape.controller.events import FALLBACK
from shipshape.controller.fallback import Fallback, fallback_candidates
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.loops.kit import Expectations
from shipshape.controller.ops import OpsError
from shipshape.controller.placement import Pool

LOG = logging.getLogger("shipshape.controller.loops.fallback")
# A pod deleted is not deleted again for this long (it may still show in the cache meanwhile).
DELETED_SECONDS = 60.0


class SpotFallback(Reconciler):
    name = "spot-fallback"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Nodes of each pool when it was marked: a node not in the list is new capacity.
        self._nodes_when_marked: dict[Pool, frozenset[str]] = {}
        # Pods deleted, not deleted again while the cache may still show them.
        self._deleted: Expectations[str, None] = Expectations()

    @property
    def interval(self) -> float:
        return self.settings.fallback_interval_seconds

    def _scan(self, now: float) -> list[Fallback]:
        with self.view(now):
            candidates = fallback_candidates(
                self.cache.unbound_pods(),
                now,
                self.config.fallback_after_seconds,
                self.cache.spot_pools(),
                self.cache.conventions,
            )
            nodes_by_pool = self.cache.pool_nodes()
        # The tracker takes its own lock: the webhook reads it.
        with self.view(now):
            tracker = self.shared.shortages
            for pool in tracker.shortages(now):
                marked = self._nodes_when_marked.get(pool)
                if marked is not None and nodes_by_pool.get(pool, frozenset()) - marked:
                    tracker.capacity_seen(pool)
                    self._nodes_when_marked.pop(pool, None)
                    LOG.info("spot pool %s has new capacity; spot placements resume", pool)
            for candidate in candidates:
                for pool in tracker.mark(candidate.pools, now):
                    self._nodes_when_marked[pool] = nodes_by_pool.get(pool, frozenset())
                    LOG.info("spot pool %s short of capacity; new pods go elsewhere", pool)
        return candidates

    def observe(self, now: float) -> None:
        self._scan(now)

    def reconcile(self, now: float) -> None:
        candidates = self._scan(now)
        self._deleted.expire(now)
        for candidate in candidates:
            key = f"{candidate.namespace}/{candidate.pod}"
            if self._deleted.pending(key, now):
                continue
            try:
                self.ops.delete_pod(candidate.namespace, candidate.pod)
            except OpsError as error:
                LOG.warning("cannot delete unschedulable pod %s: %s", key, error)
                continue
            self._deleted.expect(key, None, now, DELETED_SECONDS)
            self.metrics.fallbacks.labels(direction="to-on-demand").inc()
            with self.view(now):
                pod = self.cache.get("Pod", candidate.namespace, candidate.pod)
            if pod is not None:
                pools = ", ".join(str(p) for p in candidate.pools) or "any spot pool"
                waited = now - candidate.since
                message = f"unschedulable on spot ({pools}) for {waited:.0f}s: re-created for on-demand"
                self.post_event(pod, "Pod", FALLBACK, message, now, warning=True)
