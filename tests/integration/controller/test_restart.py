"""The controller killed in the middle of a reclaim and another replica taking over: the surges and
restarts it started are finished, none is repeated, and availability holds through the handover."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from shipshape.controller.surge import SURGE_NOTE
from shipshape.emulator.resources import DEPLOYMENTS, LEASES, NODES
from tests.integration.emulator.served_cluster import serve_cluster

from .harness import AvailabilityWatcher, DeploymentHistory, controller
from .test_reclaim import MANIFESTS, REPLICAS, settled

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def test_controller_killed_during_a_reclaim_is_replaced_without_repeating_actions(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster:
        with controller(cluster, tmp_path / "a", identity="replica-a", release_lease=False):
            cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
            cluster.wait("every replica ready", lambda: settled(cluster, set()), 180)
            watcher = AvailabilityWatcher(cluster, "default", tuple(REPLICAS))
            history = DeploymentHistory(cluster, "default")
            watcher.start()
            history.start()
            cloud = cluster.served.cluster.services["cloud"]
            # The pool of the single replica: its restart must not be repeated by the second replica.
            (solo,) = cluster.pods(app="solo")
            solo_node = cluster.get(NODES, "", solo["spec"]["nodeName"])
            assert solo_node is not None
            pool = solo_node["metadata"]["labels"]["emulator.shipshape.dev/pool"]
            pool_nodes = set(cluster.nodes_of(pool))
            cluster.call(lambda: cloud.interrupt(pool=pool, notice=120.0))

            def surging() -> bool:
                web = cluster.get(DEPLOYMENTS, "default", "web")
                return web is not None and SURGE_NOTE in web["metadata"].get("annotations", {})

            cluster.wait("the surge under way", surging, 60)
        # Killed: its Lease is left to expire (15 s); the second replica takes over then.
        with controller(cluster, tmp_path / "b", identity="replica-b"):
            cluster.wait(
                "pool reclaimed and every workload whole again", lambda: settled(cluster, pool_nodes), 400
            )
            lease = cluster.get(LEASES, "shipshape-system", "shipshape-controller")
            assert lease is not None and lease["spec"]["holderIdentity"] == "replica-b"
            assert lease["spec"]["leaseTransitions"] >= 1
        watcher.stop()
        history.stop()

    assert watcher.breaches == [], watcher.breaches[:5]
    # One surge up and one scale back for each multi-replica Deployment that had doomed pods.
    for name in ("web", "api"):
        sizes = [replicas for replicas, _ in history.states[name]]
        assert sizes[0] == sizes[-1] == REPLICAS[name]
        increases = sum(1 for a, b in itertools.pairwise(sizes) if b > a)
        assert increases == 1 if name == "web" else increases <= 1, sizes
    # The single replica was never restarted again while its restart was under way.
    assert history.restarts_mid_rollout == []
    assert len({stamp for _, stamp in history.states["solo"] if stamp}) >= 1
