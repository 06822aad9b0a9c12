"""Reclaimable batch capacity published on nodes (pure): what to publish, refresh or withdraw.

Each node's reclaimable batch capacity is the QoS colocation model's (`analyzers/efficiency/qos.py`,
Koordinator's formulas and defaults) on the latest metrics.k8s.io samples; `analyzers/efficiency/
publish.py` decides per node whether to publish it as extended resources (`shipshape.dev/batch-cpu` in
millicores, `shipshape.dev/batch-memory` in bytes), keep what is there (hysteresis), or withdraw it
(the node's metrics went stale). A write is a patch of the node's status (capacity and allocatable)
plus the annotation `shipshape.dev/batch-resources-updated` with the time, so that whoever publishes
next (a restarted controller, the other replica) keeps the hysteresis.

The controller's opt-in loop (`loops/batch_resources.py`) and the standalone `shipshape batch-resources`
(`batch_resources.BatchResourcePublisher`) both take their decisions here; they read and write
through `NodeResources`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from shipshape.analyzers.efficiency import publish
from shipshape.kube.clock import parse_time

if TYPE_CHECKING:
    from shipshape.analyzers.efficiency import qos

Obj = dict[str, Any]
# The metrics window: the latest sample of each pod and node.
STEP_SECONDS = 60.0


class NodeResources(Protocol):
    """Where batch resources are read from and written to. Raises `ops.OpsError` and nothing else."""

    def resource_metrics(self) -> tuple[list[Obj], list[Obj]]:
        """The metrics.k8s.io/v1beta1 PodMetrics and NodeMetrics, as metrics-server serves them."""
        ...

    def publish(
        self, node: str, quantities: Mapping[str, str | None], annotations: Mapping[str, str]
    ) -> None:
        """Set (or, with None, remove) extended resources in the node's status capacity and allocatable,
        and merge `annotations` into its metadata."""
        ...


@dataclass(frozen=True, slots=True)
class NodeOutcome:
    node: str
    decision: publish.Decision


def published(node: Mapping[str, Any]) -> dict[str, int] | None:
    """The batch resources a node carries now (None: none)."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    found = {k: int(capacity[k]) for k in (publish.BATCH_CPU, publish.BATCH_MEMORY) if k in capacity}
    return found or None


def last_update(node: Mapping[str, Any]) -> float | None:
    """When the batch resources were last written (the annotation), None if never or unreadable."""
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(publish.UPDATED_ANNOTATION)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def stamp(now: float) -> str:
    """The value of the update annotation written at `now`."""
    return f"{now:.3f}"


def plan_nodes(
    nodes: Sequence[Obj],
    pods: Sequence[Obj],
    pod_metrics: Sequence[Obj],
    node_metrics: Sequence[Obj],
    now: float,
    colocation: qos.ColocationSettings,
    settings: publish.PublishSettings,
) -> list[NodeOutcome]:
    """The decision for every node, in the nodes' order."""
    # The colocation model runs on numpy: imported with the first round, not with the controller.
    from shipshape.analyzers.efficiency import qos
    from shipshape.analyzers.efficiency.cluster import read_cluster
    from shipshape.analyzers.efficiency.metricsapi import usage_from_metrics
    from shipshape.analyzers.efficiency.usage import Window

    sampled: dict[str, float] = {}
    for item in node_metrics:
        when = item.get("timestamp")
        if isinstance(when, str):
            sampled[str(item["metadata"]["name"])] = parse_time(when)
    end = max(sampled.values(), default=now)
    usage = usage_from_metrics(pod_metrics, node_metrics, Window(end, STEP_SECONDS, 1))
    cluster = read_cluster(pods, nodes)
    report = qos.colocation(cluster, usage, colocation)
    computed = {
        n.node: {
            publish.BATCH_CPU: round(n.cpu.batch.minimum * 1000),
            publish.BATCH_MEMORY: int(n.memory.batch.minimum),
        }
        for n in report.nodes
    }
    outcomes: list[NodeOutcome] = []
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        decision = publish.decide(
            published(node), computed[name], last_update(node), sampled.get(name), now, settings
        )
        outcomes.append(NodeOutcome(name, decision))
    return outcomes


def quantities(decision: publish.Decision) -> dict[str, str | None]:
    """The extended resources a `publish` or `withdraw` decision writes (None removes one)."""
    if decision.action == "publish":
        return {name: str(value) for name, value in decision.values.items()}
    return {publish.BATCH_CPU: None, publish.BATCH_MEMORY: None}


def status_patch(values: Mapping[str, str | None]) -> Obj:
    """The node status patch (capacity and allocatable) that writes `values`."""
    return {"status": {"capacity": dict(values), "allocatable": dict(values)}}
