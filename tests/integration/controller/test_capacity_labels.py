"""Every spot node reclaimed, with no spot capacity coming back, on clusters labelled each common way.

2 on-demand + 4 spot nodes whose capacity type is labelled one convention's way (the original
`node.kubernetes.io/capacity`, Karpenter's, EKS's, GKE's, AKS's); a 10-replica Deployment (base 2,
75 % spot, PDB minAvailable 7) and a single-replica `surge` Deployment, both opted in. The webhook must
steer with the labels the nodes carry (the spot pods land on spot nodes). Then every spot node gets the
node-termination-handler taint (the emulator's handler cordons and drains it) and is deleted 120 s
later; the spot pools are short of capacity for good, so nothing brings spot back (and the pools get
no cool-down after their notices: they take nothing because they have no node left and nothing says
they can grow). An independent
watcher on the emulator's watch stream checks that no Deployment is ever below its PDB (or one ready
replica), and at the end, and for a while after, every managed Deployment has all its replicas Ready
and no pod Pending: no pod is steered or moved toward the pools that are gone.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from shipshape.controller.placement import Pool
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.state import read_decision
from shipshape.controller.surge import SURGE_NOTE
from shipshape.emulator.resources import DEPLOYMENTS, NODES, PDBS
from shipshape.kube import capacity
from tests.integration.emulator.served_cluster import (
    SPOT_A,
    SPOT_B,
    ServedCluster,
    ready_pods,
    scenario,
    scenario_doc,
    serve_cluster,
)

from .harness import AvailabilityWatcher, controller, managed_deployment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

PDB = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: multi}
spec:
  minAvailable: 7
  selector: {matchLabels: {app: multi}}
"""
MANIFESTS = "---\n".join(
    [
        managed_deployment(
            "multi",
            10,
            {"spot.shipshape.dev/on-demand-base": "2", "spot.shipshape.dev/spot-percentage": "75"},
        ),
        PDB,
        managed_deployment("solo", 1, {"spot.shipshape.dev/single-replica": "surge"}),
    ]
)
REPLICAS = {"multi": 10, "solo": 1}
CONVENTIONS = ("capacity", "karpenter", "eks", "gke", "aks")


def whole(cluster: ServedCluster, spot: str) -> dict[str, int] | None:
    """Every Deployment at its own size, unsurged, all replicas Ready, none Pending, none on a node that
    is gone: the number of its pods on spot nodes (by the convention's labels), else None."""
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in cluster.objects(NODES)}
    on_spot: dict[str, int] = {}
    for name, replicas in REPLICAS.items():
        dep = cluster.get(DEPLOYMENTS, "default", name)
        assert dep is not None
        if dep["spec"]["replicas"] != replicas or SURGE_NOTE in dep["metadata"].get("annotations", {}):
            return None
        pods = cluster.pods(app=name)
        if len(pods) != replicas or len(ready_pods(pods)) != replicas:
            return None
        if any(p["spec"].get("nodeName") not in nodes for p in pods):
            return None
        on_spot[name] = sum(
            1 for p in pods if capacity.capacity_type_of(nodes[p["spec"]["nodeName"]], [spot]) == "spot"
        )
    return on_spot


def pending(cluster: ServedCluster) -> list[str]:
    return [
        p["metadata"]["name"]
        for name in REPLICAS
        for p in cluster.pods(app=name)
        if (p.get("status") or {}).get("phase") == "Pending"
    ]


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_every_spot_node_reclaimed_leaves_every_workload_whole(tmp_path: Path, convention: str) -> None:
    spot_key = next(iter(capacity.node_labels(convention, "spot")))
    doc: dict[str, Any] = scenario_doc(interruptions={"rateMultiplier": 0, "handler": True})
    sc = scenario(**{**doc, "capacityLabels": convention})
    # No cool-down after the notices: what keeps pods off the reclaimed pools is that they have no node
    # left and nothing says they can grow, not the pools' risk.
    config = ControllerConfig(risk_cooldown_seconds=0)
    with (
        serve_cluster(tmp_path, sc) as cluster,
        controller(cluster, tmp_path / "controller", config=config) as process,
    ):
        labels = [n["metadata"]["labels"] for n in cluster.objects(NODES)]
        assert sum(1 for node in labels if capacity.capacity_type_of(node) == "spot") == 4
        assert all("node.kubernetes.io/capacity" not in node for node in labels) or convention == "capacity"

        cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
        placed = cluster.wait("every replica ready", lambda: whole(cluster, spot_key), 180)
        # Steered with the labels the nodes carry: the spot share runs on spot nodes.
        assert placed == {"multi": 6, "solo": 1}
        assert all(read_decision(p) for name in REPLICAS for p in cluster.pods(app=name))
        # The handler drains at the notice: the single replica's guard PDB holds its eviction back.
        cluster.wait("the guard PDB", lambda: cluster.get(PDBS, "default", "solo-surge-guard"), 30)

        watcher = AvailabilityWatcher(cluster, "default", tuple(REPLICAS))
        watcher.start()
        cloud = cluster.served.cluster.services["cloud"]
        spot_nodes = set(cluster.nodes_of(SPOT_A)) | set(cluster.nodes_of(SPOT_B))

        def reclaim() -> list[str]:
            for pool in (SPOT_A, SPOT_B):
                cloud.shortage(pool, 86400.0)  # no spot capacity comes back
            return [*cloud.interrupt(pool=SPOT_A, notice=120.0), *cloud.interrupt(pool=SPOT_B, notice=120.0)]

        assert set(cluster.call(reclaim)) == spot_nodes
        cluster.wait(
            "spot nodes gone",
            lambda: not spot_nodes & {n["metadata"]["name"] for n in cluster.objects(NODES)},
            240,
        )
        after = cluster.wait("every workload whole on on-demand", lambda: whole(cluster, spot_key), 240)
        assert after == {"multi": 0, "solo": 0}
        # A while longer (the rebalancer runs every 10 s): no move toward the pools that are gone.
        gone_at = cluster.now()

        def calm() -> bool:
            assert not pending(cluster), pending(cluster)
            return cluster.now() >= gone_at + 60

        cluster.wait("a minute with no pod pending", calm, 90)
        assert whole(cluster, spot_key) == {"multi": 0, "solo": 0}
        watcher.stop()

        assert watcher.breaches == [], watcher.breaches[:5]
        assert min(watcher.lowest.values()) >= 1
        assert process.registry.get_sample_value(
            "shipshape_rebalance_moves_total", {"direction": "on-demand-to-spot"}
        ) in (None, 0.0)


def test_a_pool_the_autoscaler_can_grow_gets_its_spot_share_back(tmp_path: Path) -> None:
    """The other side: on an EKS-labelled cluster with cluster-autoscaler, the controller reads over the
    API that the pools' node groups can grow (the status ConfigMap, matched to the pools by the nodes'
    `eks.amazonaws.com/nodegroup`); a reclaimed pool that regrows gets its spot share back, with the
    Deployments never below their floor and nothing left Pending."""
    doc: dict[str, Any] = scenario_doc(
        interruptions={"rateMultiplier": 0, "handler": True},
        autoscaler={"enabled": True, "scaleDownUnneeded": "1h", "scaleDownDelayAfterAdd": "1h"},
    )
    sc = scenario(**{**doc, "capacityLabels": "eks"})
    config = ControllerConfig(risk_cooldown_seconds=0)
    with (
        serve_cluster(tmp_path, sc) as cluster,
        controller(cluster, tmp_path / "controller", config=config) as process,
    ):
        spot_key = "eks.amazonaws.com/capacityType"
        cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
        assert cluster.wait("every replica ready", lambda: whole(cluster, spot_key), 180) == {
            "multi": 6,
            "solo": 1,
        }
        cluster.wait("the guard PDB", lambda: cluster.get(PDBS, "default", "solo-surge-guard"), 30)
        pool_a = Pool("m5.large", "us-east-1a")

        def grows() -> bool:
            with process.lock:
                return process.cache.pool_growth().get(pool_a) is True

        cluster.wait("the autoscaler's status read", grows, 60)
        watcher = AvailabilityWatcher(cluster, "default", tuple(REPLICAS))
        watcher.start()
        cloud = cluster.served.cluster.services["cloud"]
        doomed = set(cluster.nodes_of(SPOT_A))
        assert set(cluster.call(lambda: cloud.interrupt(pool=SPOT_A, notice=120.0))) == doomed

        def back() -> bool:
            names = {n["metadata"]["name"] for n in cluster.objects(NODES)}
            placed = whole(cluster, spot_key)
            return not doomed & names and placed == {"multi": 6, "solo": 1}

        cluster.wait("the spot share back on spot", back, 900)
        watcher.stop()
        assert watcher.breaches == [], watcher.breaches[:5]
        assert not pending(cluster)
