"""A zone reclaimed under a StatefulSet with a PodDisruptionBudget: never below its minAvailable.

A StatefulSet cannot surge, so the controller keeps at most its disruption allowance (replicas minus
the PDB's minAvailable) of spot replicas in any one zone, and on the notice replaces the doomed pods
one at a time through the Eviction API. The check is an independent watcher on the emulator's watch
stream.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from shipshape.controller.policy import ControllerConfig
from shipshape.controller.state import read_decision
from shipshape.emulator.resources import NODES
from tests.integration.emulator.served_cluster import ServedCluster, ready_pods, scenario, serve_cluster

from .harness import AvailabilityWatcher, controller

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

REPLICAS = 6
MANIFESTS = f"""
apiVersion: v1
kind: Service
metadata: {{name: search}}
spec:
  clusterIP: None
  selector: {{app: search}}
  ports: [{{port: 80}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: search
  annotations: {{spot.shipshape.dev/enabled: "true"}}
spec:
  replicas: {REPLICAS}
  serviceName: search
  podManagementPolicy: Parallel
  selector: {{matchLabels: {{app: search}}}}
  template:
    metadata: {{labels: {{app: search}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - {{name: nginx, image: "nginx:1.27", resources: {{requests: {{cpu: 50m, memory: 64Mi}}}}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: search}}
spec:
  maxUnavailable: 2
  selector: {{matchLabels: {{app: search}}}}
"""
FLOOR = REPLICAS - 2


def labels_of(cluster: ServedCluster, node: str) -> dict[str, str]:
    found = cluster.get(NODES, "", node)
    return dict((found or {}).get("metadata", {}).get("labels") or {})


def spot_zones(cluster: ServedCluster) -> Counter[str]:
    """Spot pods of the StatefulSet per zone."""
    zones: Counter[str] = Counter()
    for pod in cluster.pods(app="search"):
        labels = labels_of(cluster, pod["spec"].get("nodeName") or "")
        if labels.get("node.kubernetes.io/capacity") == "spot":
            zones[labels["topology.kubernetes.io/zone"]] += 1
    return zones


def whole(cluster: ServedCluster, gone: set[str]) -> bool:
    nodes = {n["metadata"]["name"] for n in cluster.objects(NODES)}
    pods = cluster.pods(app="search")
    return (
        not gone & nodes
        and len(pods) == REPLICAS
        and len(ready_pods(pods)) == REPLICAS
        and all(p["spec"].get("nodeName") in nodes for p in pods)
    )


@pytest.mark.parametrize(
    ("handler", "lead"),
    [(False, 120.0), (True, 120.0), (False, 30.0)],
    ids=["no-handler", "handler-drains", "30s-notice"],
)
def test_zone_reclaim_keeps_a_statefulset_at_or_above_its_pdb(
    tmp_path: Path, handler: bool, lead: float
) -> None:
    sc = scenario(interruptions={"rateMultiplier": 0, "handler": handler})
    config = ControllerConfig(notice_lead_seconds=lead)
    with (
        serve_cluster(tmp_path, sc) as cluster,
        controller(cluster, tmp_path / "controller", config=config) as process,
    ):
        cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
        cluster.wait("every ordinal ready", lambda: whole(cluster, set()), 180)
        assert all(read_decision(p) for p in cluster.pods(app="search"))
        # Allowance 2 in each of the two spot zones: ordinals 1-4 on spot, two per zone.
        assert spot_zones(cluster) == Counter({"us-east-1a": 2, "us-east-1b": 2})

        watcher = AvailabilityWatcher(cluster, "default", ("search",))
        watcher.start()
        cloud = cluster.served.cluster.services["cloud"]
        zone_nodes = {
            n["metadata"]["name"]
            for n in cluster.objects(NODES)
            if n["metadata"]["labels"].get("topology.kubernetes.io/zone") == "us-east-1b"
        }
        cluster.call(lambda: cloud.interrupt(zone="us-east-1b", notice=lead))
        cluster.wait("zone reclaimed and every ordinal ready", lambda: whole(cluster, zone_nodes), 400)
        watcher.stop()

        # By construction (at most the allowance per zone), whatever the lead time and the handler.
        assert watcher.breaches == [], watcher.breaches[:5]
        assert watcher.lowest["search"] >= FLOOR
        if not handler and lead >= 120:
            # Replaced one at a time before the nodes went: never more than one down at once.
            assert watcher.lowest["search"] == REPLICAS - 1
            assert process.registry.get_sample_value(
                "shipshape_interruption_notices_total",
                {"source": "taint:emulator.shipshape.dev/spot-interruption"},
            )
        assert not any(p["spec"].get("nodeName") in zone_nodes for p in cluster.pods(app="search"))
        # Still at most two spot replicas in any zone.
        assert all(count <= 2 for count in spot_zones(cluster).values())
