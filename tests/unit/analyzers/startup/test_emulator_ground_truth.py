"""The analyzer on what the emulator writes (pods, events, nodes through its store), against the
kubelet model's exact phase times (its ground truth), in virtual time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shipshape.analyzers.startup import model
from shipshape.analyzers.startup.analysis import PodReport, analyze_pod_startup
from shipshape.emulator import assembly
from shipshape.emulator.resources import EVENTS, NODES, PODS
from shipshape.emulator.scenario import Scenario
from shipshape.kube.clock import VirtualClock

T0 = 1_767_225_600.0


def scenario(serialize: bool, readiness_delay: int = 0) -> Scenario:
    container: dict[str, Any] = {
        "name": "app",
        "image": "registry.example/big:1",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }
    if readiness_delay:
        container["readinessProbe"] = {
            "httpGet": {"path": "/ready", "port": 8080},
            "initialDelaySeconds": readiness_delay,
            "periodSeconds": 1,
        }
    images = {f"registry.example/img{i}:1": "400Mi" for i in range(4)}
    images["registry.example/big:1"] = "400Mi"
    return Scenario.model_validate(
        {
            "name": "startup",
            "seed": 1,
            "pools": [
                {
                    "name": "od",
                    "instanceType": "m5.xlarge",
                    "zone": "us-east-1a",
                    "capacityType": "on-demand",
                    "cpu": "4",
                    "memory": "16Gi",
                    "minSize": 1,
                    "initialSize": 1,
                    "maxSize": 1,
                }
            ],
            "autoscaler": {"enabled": False},
            "interruptions": {"enabled": False},
            "kubelet": {"serializeImagePulls": serialize, "bandwidthMBps": 100, "images": images},
            "objects": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": f"web{i}", "namespace": "default"},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": {"app": f"web{i}"}},
                        "template": {
                            "metadata": {"labels": {"app": f"web{i}"}},
                            "spec": {"containers": [{**container, "image": f"registry.example/img{i}:1"}]},
                        },
                    },
                }
                for i in range(4)
            ],
        }
    )


def run(
    spec: Scenario, seconds: float = 300.0
) -> tuple[PodReport, dict[str, dict[str, tuple[float, float]]]]:
    cluster = assembly.build(spec, VirtualClock(T0))
    asyncio.run(assembly.apply_objects(cluster))
    cluster.engine.run_until(T0 + seconds)
    store = cluster.store
    pods = [p for p in store.list(PODS) if p["metadata"]["namespace"] == "default"]
    report = analyze_pod_startup(pods, store.list(EVENTS), store.list(NODES))
    kubelet = cluster.services["kubelet"]
    truth = {t.uid: kubelet.timeline(t.uid) for t in report.timelines}
    return report, truth


def test_phases_match_the_emulated_ground_truth() -> None:
    report, truth = run(scenario(serialize=True))
    assert len(report.timelines) == 4
    for timeline in report.timelines:
        exact = truth[timeline.uid]
        assert timeline.outcome == model.READY
        (container,) = timeline.containers
        pull_start, pull_end = exact["pull:app"]
        requested, available = exact["image:app"]
        # the Pulled message carries milliseconds
        assert container.pull == pytest.approx(pull_end - pull_start, abs=2e-3)
        assert container.pull_wait == pytest.approx(
            (available - requested) - (pull_end - pull_start), abs=2e-3
        )
        # phases from API timestamps agree within their one-second resolution
        start, end = exact["startup"]
        assert timeline.end_to_end == pytest.approx(end - start, abs=1.0)
        _, sandbox_end = exact["sandbox"]
        assert timeline.sandbox_ready == pytest.approx(sandbox_end, abs=1.0)


def test_serialized_pulls_are_diagnosed_and_parallel_ones_are_not() -> None:
    serial, _ = run(scenario(serialize=True))
    assert "serialized-image-pulls" in {f.rule for f in serial.findings}
    parallel, _ = run(scenario(serialize=False))
    assert "serialized-image-pulls" not in {f.rule for f in parallel.findings}
    waits = [t.phases[model.IMAGE_PULL_WAIT] or 0.0 for t in parallel.timelines]
    assert max(waits) < 0.5


def test_readiness_delay_is_diagnosed() -> None:
    report, truth = run(scenario(serialize=False, readiness_delay=20))
    assert "readiness-initial-delay" in {f.rule for f in report.findings}
    for timeline in report.timelines:
        ready_start, ready_end = truth[timeline.uid]["ready"]
        assert timeline.phases[model.PROBE_WAIT] == pytest.approx(ready_end - ready_start, abs=1.0)
