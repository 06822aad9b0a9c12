"""Spot shortage: pods bound for spot that cannot be scheduled fall back to on-demand, and come back to
spot once the shortage is over (the cluster autoscaler can add spot nodes again)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from shipshape.controller.policy import ControllerConfig
from tests.integration.emulator.served_cluster import SPOT_A, SPOT_B, ready_pods, scenario, serve_cluster

from .harness import controller
from .test_split import capacity_split

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

BIG = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: big
  annotations: {spot.shipshape.dev/enabled: "true"}
spec:
  replicas: 7
  selector: {matchLabels: {app: big}}
  template:
    metadata: {labels: {app: big}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - {name: app, image: "nginx:1.27", resources: {requests: {cpu: 1200m, memory: 256Mi}}}
"""
SHORTAGE_SECONDS = 200.0


def test_shortage_falls_back_to_on_demand_and_returns_to_spot(tmp_path: Path) -> None:
    config = ControllerConfig(fallback_after_seconds=60, fallback_retry_seconds=120)
    sc = scenario(autoscaler={"enabled": True, "scaleUpAfter": 10})
    with (
        serve_cluster(tmp_path, sc) as cluster,
        controller(cluster, tmp_path / "c", config=config) as process,
    ):
        cloud = cluster.served.cluster.services["cloud"]
        cluster.call(lambda: [cloud.shortage(pool, SHORTAGE_SECONDS) for pool in (SPOT_A, SPOT_B)])
        shortage_ends = cluster.now() + SHORTAGE_SECONDS
        cluster.kubectl("apply", "-f", "-", stdin=BIG)

        # Two spot nodes per pool hold one pod each: two of the six spot pods cannot be placed on spot.
        def fell_back() -> bool:
            split = capacity_split(cluster, "big")
            return len(ready_pods(cluster.pods(app="big"))) == 7 and split["on-demand"] >= 3

        cluster.wait("all 7 ready with the overflow on on-demand", fell_back, SHORTAGE_SECONDS - 10)
        assert cluster.now() < shortage_ends
        fallbacks = process.registry.get_sample_value(
            "shipshape_placement_decisions_total", {"capacity_type": "on-demand", "reason": "spot-fallback"}
        )
        assert fallbacks and fallbacks >= 2
        assert process.registry.get_sample_value(
            "shipshape_spot_fallbacks_total", {"direction": "to-on-demand"}
        )

        def back_on_spot() -> bool:
            pods = cluster.pods(app="big")
            return (
                len(ready_pods(pods)) == 7
                and len(pods) == 7
                and capacity_split(cluster, "big") == Counter({"on-demand": 1, "spot": 6})
            )

        cluster.wait("back to 1 on-demand + 6 spot after the shortage", back_on_spot, 1500)
        assert process.registry.get_sample_value(
            "shipshape_rebalance_moves_total", {"direction": "on-demand-to-spot"}
        )
