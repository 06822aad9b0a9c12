"""What the collector publishes: the node annotation that `shipshape startup nodes` reads, and
Prometheus gauges in the shape of node-latency-for-k8s (seconds since the first event)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from shipshape.contracts.annotations import STARTUP_TIMELINE, NodeStartupTimeline
from shipshape.nodecollector.timeline import NodeLogTimeline


def annotation_value(timeline: NodeLogTimeline) -> str:
    """The timeline as its record (`contracts.annotations.NodeStartupTimeline`): compact JSON of
    event -> RFC 3339 time with microseconds, in time order."""
    return NodeStartupTimeline.of_seconds({e.event: e.time for e in timeline.events.values()}).dump()


def annotation_patch(timeline: NodeLogTimeline) -> dict[str, Any]:
    return {"metadata": {"annotations": {STARTUP_TIMELINE: annotation_value(timeline)}}}


class CollectorMetrics:
    """Gauges for one node, in their own registry."""

    def __init__(self, node_name: str, registry: CollectorRegistry | None = None) -> None:
        self.node_name = node_name
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.offset = Gauge(
            "shipshape_node_startup_event_seconds",
            "Seconds from the node's first start-up event (VM initialised) to this event",
            ["node", "event"],
            registry=self.registry,
        )
        self.timestamp = Gauge(
            "shipshape_node_startup_event_timestamp_seconds",
            "When the node start-up event happened, in seconds since the epoch",
            ["node", "event"],
            registry=self.registry,
        )

    def update(self, timeline: NodeLogTimeline) -> None:
        origin = min((event.time for event in timeline.events.values()), default=None)
        if origin is None:
            return
        for event in timeline.events.values():
            self.offset.labels(self.node_name, event.event).set(event.time - origin)
            self.timestamp.labels(self.node_name, event.event).set(event.time)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
