"""The placement controller process against a served emulator: the webhook over HTTPS registered by
the process itself, the informers, the leader-elected loops."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shipshape.controller.state import read_decision
from shipshape.emulator.resources import NODES
from tests.integration.emulator.served_cluster import ServedCluster, ready_pods, serve_cluster

from .harness import controller, managed_deployment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

WEB = managed_deployment(
    "web", 10, {"spot.shipshape.dev/on-demand-base": "2", "spot.shipshape.dev/spot-percentage": "75"}
)


def capacity_split(cluster: ServedCluster, app: str) -> Counter[str]:
    nodes = {n["metadata"]["name"]: n for n in cluster.objects(NODES)}
    split: Counter[str] = Counter()
    for pod in ready_pods(cluster.pods(app=app)):
        node = nodes.get(pod["spec"].get("nodeName", ""))
        if node is not None:
            split[node["metadata"]["labels"]["node.kubernetes.io/capacity"]] += 1
    return split


def test_ten_replica_burst_lands_on_the_exact_split(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster, controller(cluster, tmp_path / "controller"):
        cluster.kubectl("apply", "-f", "-", stdin=WEB)
        cluster.wait("10 ready replicas", lambda: len(ready_pods(cluster.pods(app="web"))) == 10, 120)
        pods = cluster.pods(app="web")
        decisions: list[Any] = [read_decision(p) for p in pods]
        assert all(decisions), "every pod went through the webhook"
        assert Counter(d.reason for d in decisions) == {
            "on-demand-base": 2,
            "spot-share": 6,
            "on-demand-share": 2,
        }
        assert capacity_split(cluster, "web") == {"on-demand": 4, "spot": 6}


def wait_split(cluster: ServedCluster, replicas: int, on_demand: int, spot: int) -> None:
    def settled() -> bool:
        pods = cluster.pods(app="web")
        if len(pods) != replicas or len(ready_pods(pods)) != replicas:
            return False
        return capacity_split(cluster, "web") == {"on-demand": on_demand, "spot": spot}

    cluster.wait(f"{replicas} ready replicas split {on_demand}/{spot}", settled, 300)


def costs_written(cluster: ServedCluster) -> bool:
    pods = cluster.pods(app="web")
    return bool(pods) and all(
        "controller.kubernetes.io/pod-deletion-cost" in p["metadata"].get("annotations", {}) for p in pods
    )


def test_split_holds_across_scale_up_scale_down_and_a_rolling_update(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster, controller(cluster, tmp_path / "controller"):
        cluster.kubectl("apply", "-f", "-", stdin=WEB)
        wait_split(cluster, 10, 4, 6)
        cluster.kubectl("scale", "deployment/web", "--replicas=14")
        wait_split(cluster, 14, 5, 9)  # base 2 + 12 above it: 9 spot, 3 on-demand
        cluster.wait("deletion costs on every pod", lambda: costs_written(cluster), 60)
        cluster.kubectl("scale", "deployment/web", "--replicas=6")
        wait_split(cluster, 6, 3, 3)  # base 2 + 4 above it: 3 spot, 1 on-demand
        cluster.kubectl("scale", "deployment/web", "--replicas=10")
        wait_split(cluster, 10, 4, 6)
        cluster.kubectl("set", "image", "deployment/web", "nginx=nginx:1.28")
        cluster.kubectl("rollout", "status", "deployment/web", "--timeout=60s")
        wait_split(cluster, 10, 4, 6)
        images = {p["spec"]["containers"][0]["image"] for p in cluster.pods(app="web")}
        assert images == {"nginx:1.28"}
