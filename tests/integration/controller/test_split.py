"""The placement controller process against a served emulator: the webhook over HTTPS registered by
the process itself, the informers, the leader-elected loops."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shipshape.controller.cache import read_decision
from shipshape.emulator.resources import NODES
from tests.integration.emulator.served_cluster import ServedCluster, ready_pods, serve_cluster

from .harness import controller

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

WEB = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    spot.shipshape.dev/enabled: "true"
    spot.shipshape.dev/on-demand-base: "2"
    spot.shipshape.dev/spot-percentage: "75"
spec:
  replicas: 10
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: nginx
        image: nginx:1.27
        resources: {requests: {cpu: 50m, memory: 64Mi}}
"""


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
        assert Counter(d["reason"] for d in decisions) == {
            "on-demand-base": 2,
            "spot-share": 6,
            "on-demand-share": 2,
        }
        assert capacity_split(cluster, "web") == {"on-demand": 4, "spot": 6}
