"""Two controller replicas at once: one Lease holder runs the loops, the other only serves its webhook and
keeps its shared state; a pool reclaim is handled once, not twice."""

from __future__ import annotations

import itertools
import shutil
import time
from pathlib import Path

import pytest

from shipshape.emulator.resources import LEASES, NODES
from tests.integration.emulator.served_cluster import serve_cluster

from .harness import AvailabilityWatcher, DeploymentHistory, controller
from .test_reclaim import MANIFESTS, REPLICAS, settled

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def test_two_replicas_share_the_work_without_doing_it_twice(tmp_path: Path) -> None:
    with (
        serve_cluster(tmp_path) as cluster,
        controller(cluster, tmp_path / "a", identity="replica-a") as first,
        controller(cluster, tmp_path / "b", identity="replica-b") as second,
    ):
        cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
        cluster.wait("every replica ready", lambda: settled(cluster, set()), 180)
        deadline = time.monotonic() + 10
        while [first.elector.is_leader, second.elector.is_leader].count(True) != 1:
            assert time.monotonic() < deadline, "exactly one replica leads"
            time.sleep(0.05)
        lease = cluster.get(LEASES, "shipshape-system", "shipshape-controller")
        assert lease is not None
        leader = first if lease["spec"]["holderIdentity"] == "replica-a" else second
        follower = second if leader is first else first
        assert leader.elector.is_leader and not follower.elector.is_leader

        watcher = AvailabilityWatcher(cluster, "default", tuple(REPLICAS))
        history = DeploymentHistory(cluster, "default")
        watcher.start()
        history.start()
        (solo,) = cluster.pods(app="solo")
        node = cluster.get(NODES, "", solo["spec"]["nodeName"])
        assert node is not None
        pool = node["metadata"]["labels"]["emulator.shipshape.dev/pool"]
        pool_nodes = set(cluster.nodes_of(pool))
        cloud = cluster.served.cluster.services["cloud"]
        cluster.call(lambda: cloud.interrupt(pool=pool, notice=120.0))
        cluster.wait(
            "pool reclaimed and every workload whole again", lambda: settled(cluster, pool_nodes), 400
        )
        watcher.stop()
        history.stop()
        # Both replicas learned of the notice (their webhooks avoid the pool); only the leader acted.
        for replica in (leader, follower):
            assert replica.registry.get_sample_value(
                "shipshape_interruption_notices_total",
                {"source": "taint:emulator.shipshape.dev/spot-interruption"},
            )
        after = cluster.get(LEASES, "shipshape-system", "shipshape-controller")
        assert after is not None
        if after["spec"].get("leaseTransitions") == lease["spec"].get("leaseTransitions"):
            # The Lease never changed hands (on a loaded machine a renewal can come too late, and the
            # other replica then rightly takes over: the checks below still hold work done once).
            assert (
                follower.registry.get_sample_value("shipshape_notice_to_replacement_ready_seconds_count") == 0
            )

    assert watcher.breaches == [], watcher.breaches[:5]
    for name in ("web", "api"):
        sizes = [replicas for replicas, _ in history.states[name]]
        assert sum(1 for a, b in itertools.pairwise(sizes) if b > a) <= 1, sizes
    assert len({stamp for _, stamp in history.states["solo"] if stamp}) == 1
