"""The API server unavailable for 30 s (emulated) right after a pool's termination notice: the
controller rides out the outage (informers back off and resume, the leader stops acting while it
cannot renew), then finishes the response without repeating any of it."""

from __future__ import annotations

import itertools
import shutil
import time
from pathlib import Path

import pytest

from shipshape.emulator.resources import NODES
from tests.integration.emulator.served_cluster import SPOT_A, serve_cluster

from .harness import ApiOutage, AvailabilityWatcher, DeploymentHistory, controller
from .test_reclaim import MANIFESTS, REPLICAS, settled

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]
OUTAGE_SECONDS = 30.0


def test_api_server_outage_during_a_reclaim(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster:
        proxy = ApiOutage(cluster, tmp_path / "proxy")
        try:
            with controller(cluster, tmp_path / "c", kubeconfig=proxy.kubeconfig) as process:
                cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
                cluster.wait("every replica ready", lambda: settled(cluster, set()), 180)
                watcher = AvailabilityWatcher(cluster, "default", tuple(REPLICAS))
                history = DeploymentHistory(cluster, "default")
                watcher.start()
                history.start()
                cloud = cluster.served.cluster.services["cloud"]
                pool_nodes = set(cluster.nodes_of(SPOT_A))
                cluster.call(lambda: cloud.interrupt(pool=SPOT_A, notice=120.0))
                proxy.down()
                time.sleep(cluster.clock.real_seconds(OUTAGE_SECONDS))
                assert not process.elector.is_leader, "a leader that cannot renew stops acting"
                proxy.up()
                cluster.wait(
                    "pool reclaimed and every workload whole", lambda: settled(cluster, pool_nodes), 400
                )
                # The cache caught up with the cluster after the outage (new spot nodes, old ones gone).

                def caught_up() -> bool:
                    with process.lock:
                        cached = {n["metadata"]["name"] for n in process.cache.objects("Node")}
                    return cached == {n["metadata"]["name"] for n in cluster.objects(NODES)}

                cluster.wait("the cache caught up", caught_up, 60)
                watcher.stop()
                history.stop()
        finally:
            proxy.close()

    assert watcher.breaches == [], watcher.breaches[:5]
    for name in ("web", "api"):
        sizes = [replicas for replicas, _ in history.states[name]]
        assert sum(1 for a, b in itertools.pairwise(sizes) if b > a) <= 1, sizes
    # A restart is sent again after a lost answer as the same patch: no second rollout on top of the first.
    # (A later one is the rebalancer taking the replica back to spot once the first is done.)
    assert history.restarts_mid_rollout == []
