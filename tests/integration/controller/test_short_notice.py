"""A 30 s lead time (other clouds' notices): a whole spot pool reclaimed with a 30-second notice.

The emulator's pods start in a few seconds (images pre-pulled), which is the case docs/controller.md
describes as covered at 30 s: no managed Deployment at zero ready replicas, none below its PDB."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shipshape.controller.policy import ControllerConfig
from shipshape.emulator.resources import NODES
from tests.integration.emulator.served_cluster import serve_cluster

from .harness import AvailabilityWatcher, controller
from .test_reclaim import MANIFESTS, REPLICAS, settled

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def test_pool_reclaim_with_a_30_second_notice(tmp_path: Path) -> None:
    config = ControllerConfig(notice_lead_seconds=30)
    with serve_cluster(tmp_path) as cluster, controller(cluster, tmp_path / "c", config=config):
        cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
        cluster.wait("every replica ready", lambda: settled(cluster, set()), 180)
        watcher = AvailabilityWatcher(cluster, "default", tuple(REPLICAS))
        watcher.start()
        cloud = cluster.served.cluster.services["cloud"]
        # The pool that holds the single replica, so that its surge restart has 30 s to be Ready.
        (solo,) = cluster.pods(app="solo")
        solo_node = cluster.get(NODES, "", solo["spec"]["nodeName"])
        assert solo_node is not None
        pool = solo_node["metadata"]["labels"]["emulator.shipshape.dev/pool"]
        pool_nodes = set(cluster.nodes_of(pool))
        cluster.call(lambda: cloud.interrupt(pool=pool, notice=30.0))
        cluster.wait(
            "pool reclaimed and every workload whole again", lambda: settled(cluster, pool_nodes), 300
        )
        watcher.stop()
    assert watcher.breaches == [], watcher.breaches[:5]
