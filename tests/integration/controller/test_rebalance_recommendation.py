"""A rebalance recommendation served by a node's instance metadata
(`/latest/meta-data/events/recommendations/rebalance`), read by the node-side poller and published as
the rebalance taint: the controller stops placing new pods on that node without draining it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from shipshape.controller.state import read_decision
from shipshape.emulator.resources import NODES
from shipshape.nodecollector.notices import detect, publish
from shipshape.nodecollector.notices.poller import NoticePoller
from tests.integration.emulator.served_cluster import SPOT_A, ServedCluster, ready_pods, serve_cluster

from .harness import controller, managed_deployment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

WEB = managed_deployment(
    "web", 4, {"spot.shipshape.dev/on-demand-base": "0", "spot.shipshape.dev/max-pool-share": "1"}
)


def all_ready(cluster: ServedCluster, replicas: int) -> bool:
    pods = cluster.pods(app="web")
    return len(pods) == replicas and len(ready_pods(pods)) == replicas


def avoided_in(pod: dict[str, object]) -> set[str]:
    spec = pod["spec"]
    assert isinstance(spec, dict)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return {
        value
        for term in terms["nodeSelectorTerms"]
        for expr in term["matchExpressions"]
        if expr["key"] == "kubernetes.io/hostname" and expr["operator"] == "NotIn"
        for value in expr["values"]
    }


def test_metadata_rebalance_recommendation_stops_new_placements_without_draining(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster, controller(cluster, tmp_path / "controller") as process:
        cluster.kubectl("apply", "-f", "-", stdin=WEB)
        cluster.wait("every replica ready", lambda: all_ready(cluster, 4), 120)
        node = cluster.nodes_of(SPOT_A)[0]
        found = cluster.get(NODES, "", node)
        assert found is not None
        on_node = {p["metadata"]["name"] for p in cluster.pods(app="web") if p["spec"]["nodeName"] == node}
        cloud = cluster.served.cluster.services["cloud"]
        assert cluster.call(lambda: cloud.rebalance(node=node)) == [node]
        # Only the node's metadata knows: the controller does not ask it, the node's poller does.
        assert not (found["spec"].get("taints") or [])
        before = {p["metadata"]["name"] for p in cluster.pods(app="web")}
        with httpx.Client(timeout=10) as http:
            base = f"{cluster.served.cluster.services['metadata_url']}/{node}"
            source = detect.detect(http, base, found["spec"]["providerID"], time.monotonic)
            poller = NoticePoller(source, publish.NodeWriter(cluster.api_client, node), cluster.now)
            assert [n.kind.value for n in poller.round()] == ["rebalance"]

        def avoided() -> bool:
            with process.lock:
                return node in process.cache.placement_view(cluster.now(), process.shared.risk).avoided_nodes

        cluster.wait("the rebalance taint in the controller's cache", avoided, 30)
        cluster.kubectl("scale", "deployment/web", "--replicas=8")
        cluster.wait("the new pods placed", lambda: all_ready(cluster, 8), 120)
        new = [p for p in cluster.pods(app="web") if p["metadata"]["name"] not in before]
        assert len(new) == 4
        for pod in new:
            decision = read_decision(pod)
            assert decision is not None
            if decision.capacity_type == "spot":
                assert node in avoided_in(pod)
            assert pod["spec"]["nodeName"] != node
        # Not drained: the pods already on the node are still there.
        still = {p["metadata"]["name"] for p in cluster.pods(app="web") if p["spec"]["nodeName"] == node}
        assert on_node <= still
