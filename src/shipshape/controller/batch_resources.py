"""Batch resources on a real API server (an edge module): `KubeNodeResources`, the official client behind
`batch_capacity.NodeResources`, and `BatchResourcePublisher`, one round of the standalone publisher
that `shipshape batch-resources` runs (the controller runs the same decisions as its opt-in loop,
`loops/batch_resources.py`, from its cache).

Each round reads nodes, pods and metrics, and writes only the nodes whose decision is to publish or
withdraw (`batch_capacity.py`). Batch pods request these resources; the scheduler then counts them
like any extended resource.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shipshape.analyzers.efficiency import publish, qos
from shipshape.controller import batch_capacity
from shipshape.controller.batch_capacity import NodeOutcome
from shipshape.controller.ops import OpsError
from shipshape.kube import client
from shipshape.kube.clock import Clock

LOG = logging.getLogger("shipshape.controller.batch_resources")
Obj = dict[str, Any]

__all__ = ["BatchResourcePublisher", "KubeNodeResources", "NodeOutcome"]


@dataclass(frozen=True, slots=True)
class KubeNodeResources:
    """Metrics and node writes through the official client; client errors become `OpsError`."""

    api: Any

    def resource_metrics(self) -> tuple[list[Obj], list[Obj]]:
        try:
            return (
                client.list_resource_metrics(self.api, "pods"),
                client.list_resource_metrics(self.api, "nodes"),
            )
        except client.KubeClientError as error:
            raise OpsError(f"cannot read metrics.k8s.io: {error}", status=error.status) from error

    def publish(
        self, node: str, quantities: Mapping[str, str | None], annotations: Mapping[str, str]
    ) -> None:
        try:
            client.patch_node_status(self.api, node, batch_capacity.status_patch(quantities))
            client.annotate_node(self.api, node, annotations)
        except client.KubeClientError as error:
            message = f"cannot write batch resources on node {node}: {error}"
            raise OpsError(message, status=error.status) from error


@dataclass(slots=True)
class BatchResourcePublisher:
    """One round per `reconcile()`; the clock is injected (the API server's time in the emulator)."""

    api: Any
    clock: Clock
    colocation: qos.ColocationSettings = field(default_factory=qos.ColocationSettings)
    settings: publish.PublishSettings = field(default_factory=publish.PublishSettings)
    dry_run: bool = False
    on_outcome: Callable[[NodeOutcome], None] | None = None

    def reconcile(self) -> list[NodeOutcome]:
        now = self.clock.now()
        resources = KubeNodeResources(self.api)
        nodes = client.list_nodes(self.api)
        pods = client.list_pods(self.api)
        pod_metrics, node_metrics = resources.resource_metrics()
        outcomes = batch_capacity.plan_nodes(
            nodes, pods, pod_metrics, node_metrics, now, self.colocation, self.settings
        )
        for outcome in outcomes:
            if self.on_outcome is not None:
                self.on_outcome(outcome)
            decision = outcome.decision
            if decision.action == "keep" or self.dry_run:
                continue
            resources.publish(
                outcome.node,
                batch_capacity.quantities(decision),
                {publish.UPDATED_ANNOTATION: batch_capacity.stamp(now)},
            )
            LOG.info(
                "node %s: %s %s (%s)", outcome.node, decision.action, dict(decision.values), decision.reason
            )
        return outcomes
