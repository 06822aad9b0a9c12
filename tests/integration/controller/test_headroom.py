"""Headroom: placeholder pods on on-demand capacity, sized from the largest set of pods one spot pool
could lose, below every workload's priority; resized when the workloads change."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from shipshape.controller.loops import LoopSettings
from shipshape.emulator.resources import DEPLOYMENTS, NODES, PODS, PRIORITYCLASSES
from tests.integration.emulator.served_cluster import ServedCluster, ready_pods, serve_cluster

from .harness import controller
from .test_split import WEB

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]
NAMESPACE = "shipshape-system"
PLACEHOLDER = "shipshape-headroom-50m-64mi"


def largest_spot_pool(cluster: ServedCluster) -> int:
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in cluster.objects(NODES)}
    pools = Counter(
        nodes[p["spec"]["nodeName"]].get("emulator.shipshape.dev/pool")
        for p in ready_pods(cluster.pods(app="web"))
        if nodes.get(p["spec"].get("nodeName", ""), {}).get("node.kubernetes.io/capacity") == "spot"
    )
    return max(pools.values(), default=0)


def placeholders_ready(cluster: ServedCluster, count: int) -> bool:
    dep = cluster.get(DEPLOYMENTS, NAMESPACE, PLACEHOLDER)
    if dep is None or dep["spec"]["replicas"] != count:
        return False
    pods = [
        p
        for p in cluster.objects(PODS, NAMESPACE)
        if p["metadata"]["labels"].get("app.kubernetes.io/name") == PLACEHOLDER
    ]
    return len(ready_pods(pods)) == count == len(pods)


def test_placeholders_follow_the_largest_spot_pool(tmp_path: Path) -> None:
    loops = LoopSettings(headroom_enabled=True, headroom_interval_seconds=10)
    with serve_cluster(tmp_path) as cluster, controller(cluster, tmp_path / "c", loops=loops):
        cluster.kubectl("apply", "-f", "-", stdin=WEB)
        cluster.wait("10 ready replicas", lambda: len(ready_pods(cluster.pods(app="web"))) == 10, 120)
        expected = largest_spot_pool(cluster)
        assert expected == 3  # 6 spot replicas over two pools
        cluster.wait("placeholders for the largest pool", lambda: placeholders_ready(cluster, expected), 120)
        priority = cluster.get(PRIORITYCLASSES, "", "shipshape-headroom")
        assert priority is not None and priority["value"] == -1000 and priority["preemptionPolicy"] == "Never"
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in cluster.objects(NODES)}
        for pod in cluster.objects(PODS, NAMESPACE):
            assert pod["spec"]["priority"] == -1000
            assert nodes[pod["spec"]["nodeName"]]["node.kubernetes.io/capacity"] == "on-demand"

        cluster.kubectl(
            "scale", "deployment/web", "--replicas=4"
        )  # base 2 + 1 spot: one pod per pool at most
        cluster.wait("placeholders resized", lambda: placeholders_ready(cluster, 1), 120)
