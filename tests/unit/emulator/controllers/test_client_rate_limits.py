"""The control plane's client-side rate limits, on the virtual clock: kube-controller-manager's
controllers create pods at burst + qps (defaults 30 + 20/s), kube-scheduler binds at 100 + 50/s."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator import assembly
from shipshape.emulator.ratelimit import RELEASE_STEP, TokenBucket, release_time
from shipshape.emulator.resources import PODS
from shipshape.emulator.scenario import parse
from shipshape.emulator.store import WatchEvent
from shipshape.kube.clock import VirtualClock
from shipshape.simulate.run import complete


def _deployment(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "nginx",
                            "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}},
                        }
                    ]
                },
            },
        },
    }


def _run(replicas: int, seconds: float, nodes: int = 0, **sections: Any) -> tuple[list[float], list[float]]:
    """Creation and binding times of the Deployment's pods, relative to the start."""
    pool = {
        "name": "od",
        "instanceType": "m5.4xlarge",
        "zone": "us-east-1a",
        "capacityType": "on-demand",
        "cpu": "16",
        "memory": "64Gi",
        "maxPods": 250,
        "initialSize": nodes,
        "maxSize": max(nodes, 1),
    }
    doc = {"name": "limits", "pools": [pool], "autoscaler": {"enabled": False}, **sections}
    doc["objects"] = [_deployment(replicas)]
    clock = VirtualClock()
    cluster = assembly.build(parse(doc), clock)
    start = clock.now()
    # When each pod was stored and bound, to the clock's precision (object timestamps keep seconds).
    created: dict[str, float] = {}
    bound: dict[str, float] = {}

    def observe(event: WatchEvent) -> None:
        name = event.object["metadata"]["name"]
        created.setdefault(name, clock.now() - start)
        if (event.object.get("spec") or {}).get("nodeName"):
            bound.setdefault(name, clock.now() - start)

    cluster.store.subscribe(observe, kinds=(PODS,))
    complete(assembly.apply_objects(cluster))
    cluster.engine.run_until(start + seconds)
    return sorted(created.values()), sorted(bound.values())


def test_token_bucket_starts_full_then_refills_at_qps() -> None:
    bucket = TokenBucket.full(20.0, 30, now=100.0)
    times = [bucket.reserve(100.0) for _ in range(50)]
    assert times[:30] == [100.0] * 30
    assert times[30:] == pytest.approx([100.0 + k / 20.0 for k in range(1, 21)])
    assert bucket.available_at(200.0) == 200.0  # full again after a pause
    assert bucket.tokens == 30


def test_a_thousand_replicas_are_created_at_burst_plus_twenty_per_second() -> None:
    created, _ = _run(1000, 60.0)
    assert len(created) == 1000
    assert sum(1 for t in created if t <= 0.01) == 30  # the burst
    at_ten = sum(1 for t in created if t <= 10.0)
    assert 228 <= at_ten <= 230  # 30 + 20/s
    assert created[-1] == pytest.approx((1000 - 30) / 20.0, abs=0.5)  # 48.5 s, not an instant


def test_scheduler_binds_at_its_own_limit_and_limits_can_be_lifted() -> None:
    lifted = {"controllerManager": {"kubeApiQps": 0}}
    created, bound = _run(300, 20.0, nodes=2, **lifted)
    assert created[-1] < 0.01  # no client limit on the controllers: every pod at once
    assert len(bound) == 300
    assert sum(1 for t in bound if t <= 0.01) == 100  # the scheduler's burst
    assert bound[-1] == pytest.approx(200 / 50.0, abs=0.1)  # then 50 bindings/s
    _, free = _run(300, 20.0, nodes=2, scheduler={"kubeApiQps": 0}, **lifted)
    assert len(free) == 300 and free[-1] < 0.01


def test_waiting_requests_go_on_the_release_grid_never_early() -> None:
    assert release_time(10.0, 10.0) == 10.0  # a token at hand: at once
    for when in (10.01, 10.2, 10.5, 11.49):
        released = release_time(when, 10.0)
        assert when <= released < when + RELEASE_STEP + 1e-9
