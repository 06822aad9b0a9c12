"""Deletion-cost keeper: `controller.kubernetes.io/pod-deletion-cost` on managed Deployments' pods, so
that a scale-down removes the pods that bring the split back to target (`decisions.deletion_costs`).

Only changed values are written. Pods a surge marked as doomed keep their lowest cost, and a
Deployment being surged is left to the interruption responder.
"""

from __future__ import annotations

import logging

from shipshape.controller.decisions import deletion_cost_updates
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.loops.interruptions import DOOMED_COST, surging
from shipshape.controller.ops import OpsError
from shipshape.controller.policy import DELETION_COST

LOG = logging.getLogger("shipshape.controller.loops.deletion_cost")


class DeletionCostKeeper(Reconciler):
    name = "deletion-cost"

    @property
    def interval(self) -> float:
        return self.settings.deletion_cost_interval_seconds

    def reconcile(self, now: float) -> None:
        writes: list[tuple[str, str, str]] = []
        with self.reading():
            pool_risk = self.cache.placement_view(now, self.shared.risk).pool_risk
            for workload in self.managed():
                if surging(workload.ref.obj):
                    continue
                doomed = {pod.name for pod in workload.state.pods if pod.deletion_cost == DOOMED_COST}
                updates = deletion_cost_updates(workload.state, pool_risk)
                writes.extend(
                    (workload.ref.namespace, pod, cost) for pod, cost in updates.items() if pod not in doomed
                )
        for namespace, pod, cost in writes:
            try:
                self.ops.annotate_pod(namespace, pod, {DELETION_COST: cost})
            except OpsError as error:
                LOG.debug("cannot set the deletion cost of %s/%s: %s", namespace, pod, error)
