"""A whole spot pool, then a whole zone, reclaimed with a 2-minute notice while the controller runs.

The check is independent of the controller: a watcher on the emulator's own watch stream records the
ready replicas of every managed Deployment after each pod event; none may reach zero, and none may go
below its PodDisruptionBudget (nor, without one, below one replica).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from shipshape.controller.state import read_decision
from shipshape.controller.surge import SURGE_NOTE
from shipshape.emulator.resources import DEPLOYMENTS, NODES
from tests.integration.emulator.served_cluster import (
    SPOT_A,
    ServedCluster,
    ready_pods,
    scenario,
    serve_cluster,
)

from .harness import AvailabilityWatcher, controller, managed_deployment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

WEB_PDB = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 5
  selector: {matchLabels: {app: web}}
"""
MANIFESTS = "---\n".join(
    [
        managed_deployment(
            "web", 6, {"spot.shipshape.dev/on-demand-base": "2", "spot.shipshape.dev/spot-percentage": "75"}
        ),
        WEB_PDB,
        managed_deployment("api", 4),
        managed_deployment("solo", 1, {"spot.shipshape.dev/single-replica": "surge"}),
    ]
)
REPLICAS = {"web": 6, "api": 4, "solo": 1}


def settled(cluster: ServedCluster, gone: set[str]) -> bool:
    """The reclaimed nodes are gone, every Deployment is back to its own size, fully ready, unsurged, and no
    pod is left on a node that no longer exists."""
    nodes = {n["metadata"]["name"] for n in cluster.objects(NODES)}
    if gone & nodes:
        return False
    for name, replicas in REPLICAS.items():
        dep = cluster.get(DEPLOYMENTS, "default", name)
        assert dep is not None
        if dep["spec"]["replicas"] != replicas or SURGE_NOTE in dep["metadata"].get("annotations", {}):
            return False
        pods = cluster.pods(app=name)
        if len(ready_pods(pods)) != replicas or len(pods) != replicas:
            return False
        if any(p["spec"].get("nodeName") not in nodes for p in pods):
            return False
    return True


def spot_nodes_in(cluster: ServedCluster, zone: str) -> set[str]:
    return {
        n["metadata"]["name"]
        for n in cluster.objects(NODES)
        if n["metadata"]["labels"].get("topology.kubernetes.io/zone") == zone
        and n["metadata"]["labels"].get("node.kubernetes.io/capacity") == "spot"
    }


def placed_after(cluster: ServedCluster, since: float) -> list[dict[str, Any]]:
    """Managed pods created at or after `since` (emulated time)."""
    from shipshape.kube.clock import parse_time

    return [
        p
        for app in REPLICAS
        for p in cluster.pods(app=app)
        if parse_time(p["metadata"]["creationTimestamp"]) >= since - 1
    ]


SOLO_PDB = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: solo}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: solo}}
"""


@pytest.mark.parametrize("handler", [False, True], ids=["no-handler", "handler-drains"])
def test_pool_then_zone_reclaim_keeps_every_deployment_available(tmp_path: Path, handler: bool) -> None:
    """With an interruption handler that cordons and drains at the notice, the single replica needs a
    PDB so that the drain's eviction waits for its surged replacement (docs/controller.md)."""
    sc = scenario(interruptions={"rateMultiplier": 0, "handler": handler})
    with serve_cluster(tmp_path, sc) as cluster, controller(cluster, tmp_path / "controller") as process:
        cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS + ("---" + SOLO_PDB if handler else ""))
        cluster.wait("every replica ready", lambda: settled(cluster, set()), 180)
        assert all(read_decision(p) for app in REPLICAS for p in cluster.pods(app=app))
        watcher = AvailabilityWatcher(cluster, "default", tuple(REPLICAS))
        watcher.start()
        cloud = cluster.served.cluster.services["cloud"]

        pool_nodes = set(cluster.nodes_of(SPOT_A))
        started = cluster.now()
        noticed = cluster.call(lambda: cloud.interrupt(pool=SPOT_A, notice=120.0))
        assert set(noticed) == pool_nodes
        cluster.wait(
            "pool reclaimed and every workload whole again", lambda: settled(cluster, pool_nodes), 400
        )
        assert not [p for p in placed_after(cluster, started) if p["spec"].get("nodeName") in pool_nodes]

        zone_nodes = spot_nodes_in(cluster, "us-east-1b")
        assert zone_nodes
        started = cluster.now()
        cluster.call(lambda: cloud.interrupt(zone="us-east-1b", notice=120.0))
        cluster.wait(
            "zone reclaimed and every workload whole again", lambda: settled(cluster, zone_nodes), 400
        )
        assert not [p for p in placed_after(cluster, started) if p["spec"].get("nodeName") in zone_nodes]
        watcher.stop()

        assert watcher.breaches == [], watcher.breaches[:5]
        assert min(watcher.lowest.values()) >= 1
        assert process.registry.get_sample_value(
            "shipshape_interruption_notices_total",
            {"source": "taint:emulator.shipshape.dev/spot-interruption"},
        )
