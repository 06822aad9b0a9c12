"""metrics.k8s.io objects as the emulator serves them (metrics-server's shapes) into usage rows."""

from __future__ import annotations

import numpy as np
import pytest

from shipshape.analyzers.efficiency.metricsapi import MetricsApiError, usage_from_metrics
from shipshape.analyzers.efficiency.usage import ContainerKey, Window
from shipshape.emulator.apiserver.metrics import node_metrics, pod_metrics
from tests.unit.analyzers.efficiency.scenario import running_cluster


def test_rounds_of_samples_fill_the_window() -> None:
    cluster, model, pods, nodes = running_cluster()
    start = cluster.clock.now()
    pod_items, node_items, expected = [], [], {}
    for i in range(3):
        cluster.engine.run_until(start + 60 * i)
        now = cluster.clock.now()
        pod_items += [pod_metrics(model, pod, now) for pod in pods]
        node_items += [node_metrics(model, node, now) for node in nodes]
        for pod in pods:
            for name, millis, num_bytes in model.pod_usage(pod, now):
                key = ContainerKey("default", pod["metadata"]["name"], name)
                expected.setdefault(key, []).append((millis / 1000, num_bytes // 1024 * 1024))
    usage = usage_from_metrics(pod_items, node_items, Window(start, 60.0, 3))
    assert set(usage.containers.keys) == set(expected)
    for key, values in expected.items():
        row = usage.containers.row(key)
        assert row is not None
        np.testing.assert_allclose(row[0], [v[0] for v in values], rtol=1e-6)
        np.testing.assert_allclose(row[1], [v[1] for v in values], rtol=1e-6)
    assert usage.nodes.keys == (nodes[0]["metadata"]["name"],)
    assert usage.source == "metrics.k8s.io"


def test_an_object_without_a_timestamp_is_named() -> None:
    with pytest.raises(MetricsApiError, match="PodMetrics p: no timestamp"):
        usage_from_metrics([{"kind": "PodMetrics", "metadata": {"name": "p"}}], [], Window(0, 60, 1))
