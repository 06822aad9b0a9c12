"""Deletion-cost keeper: `controller.kubernetes.io/pod-deletion-cost` on managed Deployments' pods, so
that a scale-down removes the pods that bring the split back to target (decisions in
`controller/deletion_cost.py`).

Only the costs out of the removal order are written (`deletion_cost_updates`: pods that left
do not renumber the rest), at most `deletion_cost_writes_per_round` per round (whole workloads; the
rest follow in the next rounds), and a workload found in order is not ranked again until the state
says it changed or the pool risks differ from the last round's (`base.WorkloadQueue`, with a full pass
every `workload_resync_seconds`). Pods a surge marked as
doomed keep their lowest cost, and a Deployment being surged is left to the interruption responder.
"""

from __future__ import annotations

import logging
from typing import Any

from shipshape.controller.deletion_cost import deletion_cost_updates
from shipshape.controller.loops.base import Reconciler, WorkloadQueue
from shipshape.controller.ops import OpsError
from shipshape.controller.policy import DELETION_COST
from shipshape.controller.surge import DOOMED_COST, surging

LOG = logging.getLogger("shipshape.controller.loops.deletion_cost")


class DeletionCostKeeper(Reconciler):
    name = "deletion-cost"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The workloads to rank: those that changed since they were last found in order.
        self.workloads = WorkloadQueue(self.settings.workload_resync_seconds)

    @property
    def interval(self) -> float:
        return self.settings.deletion_cost_interval_seconds

    def reconcile(self, now: float) -> None:
        budget = self.settings.deletion_cost_writes_per_round
        writes: list[tuple[str, str, str]] = []
        with self.view(now):
            pool_risk = self.cache.placement_view(now, self.shared.risk).pool_risk
            for workload in self.workloads.due(self.cache, self.config, now, (pool_risk,)):
                if surging(workload.ref.obj):
                    continue
                if len(writes) >= budget:
                    continue
                doomed = frozenset(
                    pod.name for pod in workload.state.pods if pod.deletion_cost == DOOMED_COST
                )
                updates = deletion_cost_updates(workload.state, pool_risk, doomed)
                if not updates:
                    self.workloads.settled(workload)
                writes.extend((workload.ref.namespace, pod, cost) for pod, cost in sorted(updates.items()))
        for namespace, pod, cost in writes:
            try:
                self.ops.annotate_pod(namespace, pod, {DELETION_COST: cost})
            except OpsError as error:
                LOG.debug("cannot set the deletion cost of %s/%s: %s", namespace, pod, error)
