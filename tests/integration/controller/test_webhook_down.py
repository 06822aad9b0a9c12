"""The webhook down: pods are still created (failurePolicy Ignore), unplaced; once the controller is back
the rebalancer moves them, one at a time, to the desired split."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from shipshape.controller.state import read_decision
from shipshape.emulator.resources import MUTATING_WEBHOOKS
from tests.integration.emulator.served_cluster import SPOT_A, SPOT_B, ready_pods, serve_cluster

from .harness import AvailabilityWatcher, controller
from .test_split import WEB, capacity_split

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def test_pods_created_while_the_webhook_is_down_are_rebalanced_when_it_returns(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster:
        with controller(cluster, tmp_path / "a"):
            pass  # registered its webhook, then went away: the configuration points at a closed port
        assert cluster.get(MUTATING_WEBHOOKS, "", "shipshape-placement") is not None
        spot_nodes = cluster.nodes_of(SPOT_A) + cluster.nodes_of(SPOT_B)
        cluster.kubectl("cordon", *spot_nodes)
        cluster.kubectl("apply", "-f", "-", stdin=WEB)
        cluster.wait("10 ready replicas", lambda: len(ready_pods(cluster.pods(app="web"))) == 10, 120)
        assert not any(read_decision(p) for p in cluster.pods(app="web")), "created without the webhook"
        assert capacity_split(cluster, "web") == Counter({"on-demand": 10})
        cluster.kubectl("uncordon", *spot_nodes)

        watcher = AvailabilityWatcher(cluster, "default", ("web",))
        watcher.start()
        with controller(cluster, tmp_path / "b") as process:

            def rebalanced() -> bool:
                pods = cluster.pods(app="web")
                return (
                    len(pods) == 10
                    and len(ready_pods(pods)) == 10
                    and capacity_split(cluster, "web") == Counter({"on-demand": 4, "spot": 6})
                )

            cluster.wait("rebalanced to 4 on-demand + 6 spot", rebalanced, 900)
            moves = process.registry.get_sample_value(
                "shipshape_rebalance_moves_total", {"direction": "on-demand-to-spot"}
            )
            assert moves == 6
        watcher.stop()
    # One pod at a time: never more than one replica missing (the Deployment's 25 % maxUnavailable is 2).
    assert watcher.lowest["web"] >= 9
