"""Headroom: placeholder pods on on-demand capacity, sized from the largest set of pods one spot pool
could lose that the room on other nodes would not take, below every workload's priority; resized (or
removed) when the room changes."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

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


def ballast(capacity: str, cpu: str) -> str:
    """A DaemonSet taking `cpu` on every node of a capacity type (DaemonSet pods hold no node)."""
    return f"""
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: ballast-{capacity}}}
spec:
  selector: {{matchLabels: {{app: ballast-{capacity}}}}}
  template:
    metadata: {{labels: {{app: ballast-{capacity}}}}}
    spec:
      nodeSelector: {{node.kubernetes.io/capacity: {capacity}}}
      tolerations: [{{operator: Exists}}]
      terminationGracePeriodSeconds: 0
      containers:
      - name: pause
        image: busybox:1.36
        resources: {{requests: {{cpu: {cpu}, memory: 64Mi}}}}
"""


def placeholder_pods(cluster: ServedCluster) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.objects(PODS, NAMESPACE)
        if p["metadata"]["labels"].get("app.kubernetes.io/name") == PLACEHOLDER
        and not p["metadata"].get("deletionTimestamp")
    ]


def placeholders_wanted(cluster: ServedCluster) -> int | None:
    dep = cluster.get(DEPLOYMENTS, NAMESPACE, PLACEHOLDER)
    return None if dep is None else int(dep["spec"]["replicas"])


def test_placeholders_cover_what_the_room_outside_a_pool_cannot_take(tmp_path: Path) -> None:
    loops = LoopSettings(headroom_enabled=True, headroom_interval_seconds=10, headroom_covers="pool")
    with serve_cluster(tmp_path) as cluster, controller(cluster, tmp_path / "c", loops=loops):
        # On-demand nodes (3920m allocatable) keep 120m: room for their two web pods (50m), none for
        # more. Spot nodes (1930m) keep 100m: a pool's three web pods land two and one, so the other
        # pool has room for one of the three pods a pool could lose.
        cluster.kubectl("apply", "-f", "-", stdin=ballast("on-demand", "3800m"))
        cluster.kubectl("apply", "-f", "-", stdin=ballast("spot", "1830m"))
        cluster.wait("ballast ready", lambda: len(ready_pods(cluster.objects(PODS, "default"))) == 6, 120)
        cluster.kubectl("apply", "-f", "-", stdin=WEB)
        cluster.wait("10 ready replicas", lambda: len(ready_pods(cluster.pods(app="web"))) == 10, 120)
        assert largest_spot_pool(cluster) == 3  # 6 spot replicas over two pools
        expected = 2  # one of the three fits in the other pool
        cluster.wait(
            "placeholders for the largest pool", lambda: placeholders_wanted(cluster) == expected, 120
        )
        priority = cluster.get(PRIORITYCLASSES, "", "shipshape-headroom")
        assert (
            priority is not None and -10 < priority["value"] < 0 and priority["preemptionPolicy"] == "Never"
        )
        cluster.wait("placeholder pods", lambda: len(placeholder_pods(cluster)) == expected, 60)
        for pod in placeholder_pods(cluster):
            assert pod["spec"]["priority"] == priority["value"]
            required = pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            on_demand = {"key": "node.kubernetes.io/capacity", "operator": "In", "values": ["on-demand"]}
            assert required["nodeSelectorTerms"] == [{"matchExpressions": [on_demand]}]

        # The on-demand ballast gone, the on-demand room takes a whole pool's pods: no placeholders.
        cluster.kubectl("delete", "daemonset/ballast-on-demand")
        cluster.wait("placeholders removed", lambda: placeholders_wanted(cluster) is None, 120)
        cluster.wait("placeholder pods gone", lambda: not placeholder_pods(cluster), 60)
