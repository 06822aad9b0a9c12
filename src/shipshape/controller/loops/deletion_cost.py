"""Deletion-cost keeper: `controller.kubernetes.io/pod-deletion-cost` on managed Deployments' pods, so
that a scale-down removes the pods that bring the split back to target (decisions in
`controller/deletion_cost.py`).

Only the costs out of the removal order are written (`deletion_cost_updates`: pods that left
do not renumber the rest), at most `deletion_cost_writes_per_round` per round (whole workloads; the
rest follow in the next rounds), and a workload whose state and pool risks did not change since a
round that found nothing to write is not ranked again (`kit.Unchanged`). Pods a surge marked as
doomed keep their lowest cost, and a Deployment being surged is left to the interruption responder.
"""

from __future__ import annotations

import logging
from typing import Any

from shipshape.controller.deletion_cost import deletion_cost_updates
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.loops.kit import Unchanged
from shipshape.controller.ops import OpsError
from shipshape.controller.policy import DELETION_COST
from shipshape.controller.surge import DOOMED_COST, surging

LOG = logging.getLogger("shipshape.controller.loops.deletion_cost")


class DeletionCostKeeper(Reconciler):
    name = "deletion-cost"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Workloads found in order, and the state and pool risks they were ranked with.
        self._in_order: Unchanged[str, bool] = Unchanged()

    @property
    def interval(self) -> float:
        return self.settings.deletion_cost_interval_seconds

    def reconcile(self, now: float) -> None:
        budget = self.settings.deletion_cost_writes_per_round
        writes: list[tuple[str, str, str]] = []
        with self.reading(), self._in_order.round():
            pool_risk = self.cache.placement_view(now, self.shared.risk).pool_risk
            for workload in self.managed():
                if surging(workload.ref.obj):
                    continue
                key = workload.state.key
                if self._in_order.recall(key, (workload.state, pool_risk)):
                    continue
                if len(writes) >= budget:
                    continue
                doomed = frozenset(
                    pod.name for pod in workload.state.pods if pod.deletion_cost == DOOMED_COST
                )
                updates = deletion_cost_updates(workload.state, pool_risk, doomed)
                if not updates:
                    self._in_order.keep(key, (workload.state, pool_risk), True)
                writes.extend((workload.ref.namespace, pod, cost) for pod, cost in sorted(updates.items()))
        for namespace, pod, cost in writes:
            try:
                self.ops.annotate_pod(namespace, pod, {DELETION_COST: cost})
            except OpsError as error:
                LOG.debug("cannot set the deletion cost of %s/%s: %s", namespace, pod, error)
