"""The opt-in batch resources loop over a cache fed by hand and a recording `NodeResources`: it is built
only when enabled, publishes from fresh metrics, does not write a node again while its write is in
flight, keeps within the hysteresis band, withdraws on stale metrics, and writes nothing in dry-run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shipshape.analyzers.efficiency import publish
from shipshape.cli.controller import load_settings
from shipshape.controller.loops import all_reconcilers
from shipshape.controller.loops.base import BatchResourcesSettings, LoopSettings, SharedState
from shipshape.controller.loops.batch_resources import BatchResources
from shipshape.controller.ops import OpsError, RecordingOps
from shipshape.controller.policy import ConfigError, ControllerConfig
from shipshape.kube.clock import rfc3339

from ..builders import Harness, node, with_room

Obj = dict[str, Any]
ON = LoopSettings(batch_resources=BatchResourcesSettings(enabled=True))


@dataclass
class RecordingNodeResources:
    """Metrics as set by the test (sampled at `sampled_at`); every write recorded."""

    sampled_at: float
    writes: list[tuple[str, dict[str, str | None], dict[str, str]]] = field(default_factory=list)
    fail: OpsError | None = None

    def resource_metrics(self) -> tuple[list[Obj], list[Obj]]:
        if self.fail is not None:
            raise self.fail
        stamp = rfc3339(self.sampled_at)
        pods = [
            {
                "metadata": {"name": "web-0", "namespace": "shop"},
                "timestamp": stamp,
                "window": "30s",
                "containers": [{"name": "app", "usage": {"cpu": "500m", "memory": "1Gi"}}],
            }
        ]
        nodes = [{"metadata": {"name": "n1"}, "timestamp": stamp, "usage": {"cpu": "700m", "memory": "3Gi"}}]
        return pods, nodes

    def publish(
        self, node: str, quantities: Mapping[str, str | None], annotations: Mapping[str, str]
    ) -> None:
        self.writes.append((node, dict(quantities), dict(annotations)))


def web_pod() -> Obj:
    return {
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop", "uid": "web-0", "labels": {"app": "web"}},
        "spec": {
            "nodeName": "n1",
            "priority": 0,
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}],
        },
        "status": {"phase": "Running", "qosClass": "Burstable"},
    }


def world(config: ControllerConfig | None = None) -> tuple[Harness, BatchResources, RecordingNodeResources]:
    h = Harness(config)
    h.add(with_room(node("n1", "on-demand"), cpu="4", memory="16Gi"), web_pod())
    resources = RecordingNodeResources(sampled_at=h.clock.now())
    shared = SharedState.for_config(h.config, ON, h.risk)
    loop = BatchResources(
        h.clock, h.cache, RecordingOps(), h.config, h.metrics, shared, node_resources=resources
    )
    return h, loop, resources


def test_the_loop_is_built_only_when_enabled_and_then_needs_a_metrics_source() -> None:
    h = Harness()
    common = (h.clock, h.cache, RecordingOps(), h.config, h.metrics)
    off = all_reconcilers(*common, SharedState.for_config(h.config))
    assert "batch-resources" not in [loop.name for loop in off]
    on = all_reconcilers(
        *common, SharedState.for_config(h.config, ON), node_resources=RecordingNodeResources(0.0)
    )
    assert on[-1].name == "batch-resources" and on[-1].interval == 60.0
    with pytest.raises(ValueError, match="batch_resources"):
        all_reconcilers(*common, SharedState.for_config(h.config, ON))


def test_fresh_metrics_are_published_once_and_kept_within_the_band() -> None:
    h, loop, resources = world()
    loop.reconcile(h.clock.now())
    ((name, quantities, annotations),) = resources.writes
    assert name == "n1" and set(quantities) == {publish.BATCH_CPU, publish.BATCH_MEMORY}
    assert int(quantities[publish.BATCH_CPU] or 0) > 0
    stamp = annotations[publish.UPDATED_ANNOTATION]
    # The cache has not seen the write yet: not written again.
    h.clock.advance(60)
    resources.sampled_at = h.clock.now()
    loop.reconcile(h.clock.now())
    assert len(resources.writes) == 1
    # It has now: the same figures are within the band, so nothing is written.
    cached = with_room(node("n1", "on-demand"), cpu="4", memory="16Gi")
    cached["status"]["capacity"] = {**cached["status"]["capacity"], **quantities}
    cached["metadata"]["annotations"] = {publish.UPDATED_ANNOTATION: stamp}
    h.add(cached)
    h.clock.advance(60)
    resources.sampled_at = h.clock.now()
    loop.reconcile(h.clock.now())
    assert len(resources.writes) == 1 and loop.outcomes[0].decision.action == "keep"
    # The metrics stop coming: 16 minutes later the resources are withdrawn.
    h.clock.advance(16 * 60)
    loop.reconcile(h.clock.now())
    assert resources.writes[-1][1] == {publish.BATCH_CPU: None, publish.BATCH_MEMORY: None}


def test_dry_run_and_unavailable_metrics_write_nothing() -> None:
    h, loop, resources = world(ControllerConfig(dry_run=True))
    loop.reconcile(h.clock.now())
    assert loop.outcomes[0].decision.action == "publish" and resources.writes == []
    h, loop, resources = world()
    resources.fail = OpsError("503 metrics.k8s.io unavailable", status=503)
    loop.reconcile(h.clock.now())
    assert resources.writes == [] and loop.outcomes == []


def test_the_config_file_switches_the_loop_on_and_says_which_field_is_wrong(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("loops:\n  batch_resources:\n    enabled: true\n    interval_seconds: 30\n")
    _, loops = load_settings(good)
    assert loops.batch_resources.enabled and loops.batch_resources.interval_seconds == 30.0
    assert loops.batch_resources.publish_settings().diff_threshold == 0.1
    assert LoopSettings().batch_resources.enabled is False  # off by default
    bad = tmp_path / "bad.yaml"
    bad.write_text("loops:\n  batch_resources:\n    enabled: true\n    diff_threshold: 2\n")
    with pytest.raises(ConfigError, match=r"loops\.batch_resources\.diff_threshold"):
        load_settings(bad)
