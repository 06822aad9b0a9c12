"""Opt-in: publish each node's reclaimable batch capacity as extended resources
(`shipshape.dev/batch-cpu` in millicores, `shipshape.dev/batch-memory` in bytes), refreshed on a
period with hysteresis and withdrawn when the node's metrics go stale (`analyzers/efficiency/publish.py`).

The figures are the QoS colocation model's (`analyzers/efficiency/qos.py`, Koordinator's formulas
and defaults) on the latest metrics.k8s.io samples. Each round reads nodes, pods and metrics, and
writes only the nodes whose decision is to publish or withdraw: a merge patch of the node's status
(capacity and allocatable) and the annotation `shipshape.dev/batch-resources-updated` with the
time, so a restarted publisher keeps the hysteresis. Batch pods request these resources; the
scheduler then counts them like any extended resource.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shipshape.analyzers.efficiency import publish, qos
from shipshape.analyzers.efficiency.cluster import read_cluster
from shipshape.analyzers.efficiency.metricsapi import usage_from_metrics
from shipshape.analyzers.efficiency.usage import Window
from shipshape.kube import client
from shipshape.kube.clock import Clock, parse_time

LOG = logging.getLogger("shipshape.controller.batch_resources")
Obj = dict[str, Any]
STEP_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class NodeOutcome:
    node: str
    decision: publish.Decision


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
        nodes = client.list_nodes(self.api)
        pods = client.list_pods(self.api)
        pod_metrics = client.list_resource_metrics(self.api, "pods")
        node_metrics = client.list_resource_metrics(self.api, "nodes")
        sampled: dict[str, float] = {}
        for item in node_metrics:
            stamp = item.get("timestamp")
            if isinstance(stamp, str):
                sampled[str(item["metadata"]["name"])] = parse_time(stamp)
        end = max(sampled.values(), default=now)
        usage = usage_from_metrics(pod_metrics, node_metrics, Window(end, STEP_SECONDS, 1))
        cluster = read_cluster(pods, nodes)
        report = qos.colocation(cluster, usage, self.colocation)
        computed = {
            n.node: {
                publish.BATCH_CPU: round(n.cpu.batch.minimum * 1000),
                publish.BATCH_MEMORY: int(n.memory.batch.minimum),
            }
            for n in report.nodes
        }
        outcomes: list[NodeOutcome] = []
        for node in nodes:
            name = str(node["metadata"]["name"])
            decision = publish.decide(
                _published(node), computed[name], _last_update(node), sampled.get(name), now, self.settings
            )
            outcomes.append(NodeOutcome(name, decision))
            if self.on_outcome is not None:
                self.on_outcome(outcomes[-1])
            if decision.action == "keep" or self.dry_run:
                continue
            self._write(name, decision, now)
        return outcomes

    def _write(self, name: str, decision: publish.Decision, now: float) -> None:
        values: Mapping[str, int | None] = (
            {k: v for k, v in decision.values.items()}
            if decision.action == "publish"
            else {publish.BATCH_CPU: None, publish.BATCH_MEMORY: None}
        )
        quantities = {k: (None if v is None else str(v)) for k, v in values.items()}
        client.patch_node_status(
            self.api, name, {"status": {"capacity": quantities, "allocatable": quantities}}
        )
        client.annotate_node(self.api, name, {publish.UPDATED_ANNOTATION: f"{now:.3f}"})
        LOG.info("node %s: %s %s (%s)", name, decision.action, dict(decision.values), decision.reason)


def _published(node: Obj) -> dict[str, int] | None:
    capacity = (node.get("status") or {}).get("capacity") or {}
    found = {k: int(capacity[k]) for k in (publish.BATCH_CPU, publish.BATCH_MEMORY) if k in capacity}
    return found or None


def _last_update(node: Obj) -> float | None:
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(publish.UPDATED_ANNOTATION)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
