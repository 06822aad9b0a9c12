"""Batch resources (opt-in, `loops.batch_resources.enabled`): each node's reclaimable batch capacity
published as extended resources (`shipshape.dev/batch-cpu` in millicores, `shipshape.dev/batch-memory`
in bytes), refreshed every `loops.batch_resources.interval_seconds` with hysteresis and withdrawn
when the node's metrics go stale (decisions in `controller/batch_capacity.py`).

Nodes and pods come from the cache; the latest metrics.k8s.io samples and the node writes go through
`batch_capacity.NodeResources` (`batch_resources.KubeNodeResources` in a cluster). The leader writes;
a node written is not written again until the cache shows the write (its update annotation) or the
expectation lapses after two intervals. In recommend-only mode (`dry_run`) the decisions are logged
and nothing is written.
"""

from __future__ import annotations

import logging
from typing import Any

from shipshape.analyzers.efficiency import publish
from shipshape.controller import batch_capacity
from shipshape.controller.batch_capacity import NodeResources
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.loops.kit import Expectations
from shipshape.controller.ops import OpsError

LOG = logging.getLogger("shipshape.controller.loops.batch_resources")


class BatchResources(Reconciler):
    name = "batch-resources"
    # What it publishes depends on the nodes and their pods (and on metrics, which are polled).
    watches = frozenset({"Node", "Pod"})

    def __init__(self, *args: Any, node_resources: NodeResources, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_resources = node_resources
        # Nodes written, not yet seen with that write in the cache: node -> the update stamp written.
        self._written: Expectations[str, str] = Expectations()
        self.outcomes: list[batch_capacity.NodeOutcome] = []  # the last round's decisions

    @property
    def interval(self) -> float:
        return self.settings.batch_resources.interval_seconds

    def reconcile(self, now: float) -> None:
        settings = self.settings.batch_resources
        if not settings.enabled:
            return
        with self.view(now):
            nodes = list(self.cache.objects("Node"))
            pods = list(self.cache.objects("Pod"))
        for node in nodes:
            name = str(node["metadata"].get("name"))
            written = self._written.get(name, now)
            if written is not None and batch_capacity.last_update(node) == float(written.value):
                self._written.observed(name)
        self._written.expire(now)
        try:
            pod_metrics, node_metrics = self.node_resources.resource_metrics()
        except OpsError as error:
            LOG.warning("batch resources not refreshed, metrics unavailable: %s", error)
            return
        colocation, publishing = settings.colocation_settings(), settings.publish_settings()
        self.outcomes = batch_capacity.plan_nodes(
            nodes, pods, pod_metrics, node_metrics, now, colocation, publishing
        )
        for outcome in self.outcomes:
            decision = outcome.decision
            if decision.action == "keep" or self._written.pending(outcome.node, now):
                continue
            if self.config.dry_run:
                LOG.info(
                    "batch resources not written (dry run)",
                    extra={"node": outcome.node, "decision": decision.action, "reason": decision.reason},
                )
                continue
            stamp = batch_capacity.stamp(now)
            try:
                self.node_resources.publish(
                    outcome.node, batch_capacity.quantities(decision), {publish.UPDATED_ANNOTATION: stamp}
                )
            except OpsError as error:
                LOG.warning("batch resources of node %s not written: %s", outcome.node, error)
                continue
            self._written.expect(outcome.node, stamp, now, 2 * self.interval)
            LOG.info(
                "node %s: %s %s (%s)", outcome.node, decision.action, dict(decision.values), decision.reason
            )
