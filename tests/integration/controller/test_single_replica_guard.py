"""A single-replica `surge` Deployment with no PodDisruptionBudget, while an interruption handler drains.

The handler evicts at the notice, before any controller can react; the controller's guard PDB
(minAvailable 1, owned by the Deployment) makes that eviction wait until the surged replacement is
Ready. An independent watcher on the emulator's watch stream checks it never has zero ready replicas.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shipshape.controller.guards import GUARD_LABEL, guard_name
from shipshape.emulator.resources import DEPLOYMENTS, NODES, PDBS
from tests.integration.emulator.served_cluster import ServedCluster, ready_pods, scenario, serve_cluster

from .harness import AvailabilityWatcher, controller, managed_deployment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

SOLO = managed_deployment("solo", 1, {"spot.shipshape.dev/single-replica": "surge"})


def guard(cluster: ServedCluster) -> dict[str, object] | None:
    return cluster.get(PDBS, "default", guard_name("solo"))


def one_ready_pod(cluster: ServedCluster, gone: set[str], off: str | None = None) -> bool:
    """Exactly one pod, Ready, on an existing node (and not on `off`), judged from one listing: a pod
    created between two listings must not be mistaken for the one seen first."""
    nodes = {n["metadata"]["name"] for n in cluster.objects(NODES)}
    pods = cluster.pods(app="solo")
    return (
        not gone & nodes
        and len(pods) == 1
        and len(ready_pods(pods)) == 1
        and pods[0]["spec"].get("nodeName") in nodes
        and pods[0]["spec"].get("nodeName") != off
    )


def node_of_solo(cluster: ServedCluster) -> str:
    (pod,) = cluster.pods(app="solo")
    return str(pod["spec"]["nodeName"])


def test_draining_handler_waits_for_the_surged_replacement(tmp_path: Path) -> None:
    sc = scenario(interruptions={"rateMultiplier": 0, "handler": True})
    with serve_cluster(tmp_path, sc) as cluster, controller(cluster, tmp_path / "controller"):
        cluster.kubectl("apply", "-f", "-", stdin=SOLO)
        cluster.wait("the single replica ready", lambda: one_ready_pod(cluster, set()), 120)
        found = cluster.wait("the guard PDB", lambda: guard(cluster), 60)
        dep = cluster.get(DEPLOYMENTS, "default", "solo")
        assert dep is not None
        metadata = found["metadata"]
        assert isinstance(metadata, dict)
        assert metadata["ownerReferences"][0]["uid"] == dep["metadata"]["uid"]
        assert metadata["labels"][GUARD_LABEL] == "solo"
        assert found["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {"app": "solo"}}}

        watcher = AvailabilityWatcher(cluster, "default", ("solo",))
        watcher.start()
        node = cluster.get(NODES, "", node_of_solo(cluster))
        assert node is not None and node["metadata"]["labels"]["node.kubernetes.io/capacity"] == "spot"
        pool = node["metadata"]["labels"]["emulator.shipshape.dev/pool"]
        pool_nodes = set(cluster.nodes_of(pool))
        cloud = cluster.served.cluster.services["cloud"]
        cluster.call(lambda: cloud.interrupt(pool=pool, notice=120.0))
        cluster.wait(
            "the pool gone, the replica ready elsewhere", lambda: one_ready_pod(cluster, pool_nodes), 300
        )
        watcher.stop()
        assert watcher.breaches == [], watcher.breaches[:5]
        assert watcher.lowest["solo"] == 1

        # Two replicas need no guard (the responder surges them), nor does one the user protects.
        cluster.kubectl("scale", "deployment/solo", "--replicas=2")
        cluster.wait("the guard removed", lambda: guard(cluster) is None, 60)
        cluster.kubectl("scale", "deployment/solo", "--replicas=1")
        cluster.wait("the guard back", lambda: guard(cluster), 60)


def test_a_cordoned_node_gets_the_guarded_replica_restarted_elsewhere(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster, controller(cluster, tmp_path / "controller"):
        cluster.kubectl("apply", "-f", "-", stdin=SOLO)
        cluster.wait("the single replica ready", lambda: one_ready_pod(cluster, set()), 120)
        cluster.wait("the guard PDB", lambda: guard(cluster), 60)
        watcher = AvailabilityWatcher(cluster, "default", ("solo",))
        watcher.start()
        first = node_of_solo(cluster)
        cluster.kubectl("cordon", first)
        cluster.wait(
            "the replica restarted off the cordoned node",
            lambda: one_ready_pod(cluster, set(), off=first),
            120,
        )
        watcher.stop()
        assert watcher.breaches == [], watcher.breaches[:5]
        # With its pod gone from the node, the guard no longer holds up a drain of it.
        assert cluster.kubectl("drain", first, "--ignore-daemonsets", "--timeout=60s").returncode == 0
