"""Prometheus exposition of start-up histograms, with the kubelet's bucket boundaries.

`shipshape_pod_start_sli_duration_seconds` has the definition of the kubelet's
`kubelet_pod_start_sli_duration_seconds` (creation to all containers started, less image pulling
and init containers) and the same buckets; it is measured from the API rather than inside one
kubelet, so it covers every node. Each pod and node is observed once.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from shipshape.analyzers.startup import model
from shipshape.analyzers.startup.model import PodTimeline
from shipshape.analyzers.startup.nodes import NodeTimeline

# pkg/kubelet/metrics: podStartupDurationBuckets and imagePullDurationBuckets.
POD_START_BUCKETS: tuple[float, ...] = (
    0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800,
    2700, 3600,
)  # fmt: skip
IMAGE_PULL_BUCKETS: tuple[float, ...] = (
    1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600,
)  # fmt: skip


class StartupMetrics:
    """Histograms in their own registry (never the global one)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._seen_pods: set[str] = set()
        self._seen_nodes: set[str] = set()
        self.pod_sli = Histogram(
            "shipshape_pod_start_sli_duration_seconds",
            "Duration in seconds to start a pod, excluding time to pull images and run init containers, "
            "measured from pod creation timestamp to when all its containers are reported as started",
            ["namespace"],
            buckets=POD_START_BUCKETS,
            registry=self.registry,
        )
        self.pod_total = Histogram(
            "shipshape_pod_start_total_duration_seconds",
            "Duration in seconds from pod creation timestamp to the pod's Ready condition",
            ["namespace"],
            buckets=POD_START_BUCKETS,
            registry=self.registry,
        )
        self.pod_phase = Histogram(
            "shipshape_pod_start_phase_duration_seconds",
            "Duration in seconds of each phase of pod start-up",
            ["phase"],
            buckets=POD_START_BUCKETS,
            registry=self.registry,
        )
        self.image_pull = Histogram(
            "shipshape_image_pull_duration_seconds",
            "Duration in seconds to pull an image, excluding the wait in the kubelet's pull queue",
            [],
            buckets=IMAGE_PULL_BUCKETS,
            registry=self.registry,
        )
        self.node_ready = Histogram(
            "shipshape_node_startup_ready_duration_seconds",
            "Duration in seconds from a node's first known start-up event (instance launch, VM start or "
            "registration) to Node Ready",
            ["pool", "capacity_type"],
            buckets=POD_START_BUCKETS,
            registry=self.registry,
        )
        self.node_segment = Histogram(
            "shipshape_node_startup_segment_duration_seconds",
            "Duration in seconds of each segment of node start-up",
            ["segment"],
            buckets=POD_START_BUCKETS,
            registry=self.registry,
        )

    @property
    def observed_nodes(self) -> frozenset[str]:
        return frozenset(self._seen_nodes)

    def observe_pod(self, timeline: PodTimeline) -> bool:
        """Record a pod once its start-up is over (Ready, or started for pods that never report it)."""
        if timeline.uid in self._seen_pods or timeline.started is None:
            return False
        if timeline.ready is None and timeline.outcome not in (model.COMPLETED, model.FAILED):
            return False
        self._seen_pods.add(timeline.uid)
        if timeline.sli is not None:
            self.pod_sli.labels(timeline.namespace).observe(timeline.sli)
        if timeline.end_to_end is not None:
            self.pod_total.labels(timeline.namespace).observe(timeline.end_to_end)
        for phase, value in timeline.phases.items():
            if value is not None:
                self.pod_phase.labels(phase).observe(value)
        for container in timeline.containers:
            if container.image_present is False and container.pull is not None:
                self.image_pull.observe(container.pull)
        return True

    def observe_node(self, timeline: NodeTimeline) -> bool:
        if timeline.name in self._seen_nodes or timeline.time_to_ready is None:
            return False
        self._seen_nodes.add(timeline.name)
        self.node_ready.labels(timeline.info.pool_key, timeline.info.capacity_type).observe(
            timeline.time_to_ready
        )
        for name, value in timeline.segments.items():
            if value is not None:
                self.node_segment.labels(name).observe(value)
        return True

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
