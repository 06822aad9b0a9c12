"""The cloud behind the real API server: Node annotations and the instance metadata endpoint."""

from __future__ import annotations

from pathlib import Path

import httpx

from shipshape.emulator import assembly
from shipshape.emulator.cloud import nodes
from shipshape.emulator.cloud.model import CloudModel
from shipshape.emulator.resources import NODES
from shipshape.kube.clock import RealClock
from tests.emulator_fixtures import running

from .builders import SPOT_A, scenario


def test_metadata_endpoint_of_a_served_cluster(tmp_path: Path) -> None:
    sc = scenario(
        [{**SPOT_A, "initialSize": 1}], interruptions={"enabled": False}, autoscaler={"enabled": False}
    )
    cluster = assembly.build(sc, RealClock())
    with running(cluster, tmp_path) as served:
        cloud: CloudModel = cluster.services["cloud"]
        (node_name,) = served.call(lambda: [i.node_name for i in cloud.active_instances("spot-a")])
        node = served.call(lambda: cluster.store.get(NODES, "", node_name))
        assert node is not None
        url = node["metadata"]["annotations"][nodes.METADATA_URL_ANNOTATION]
        assert url.endswith(f"/{node_name}")
        action = f"{url}/latest/meta-data/spot/instance-action"
        assert httpx.get(action).status_code == 404
        served.call(lambda: cloud.interrupt(node=node_name, notice=300))
        answer = httpx.get(action)
        assert answer.status_code == 200
        assert answer.json()["action"] == "terminate"
        assert httpx.get(f"{url}/latest/meta-data/instance-type").text == "m5.large"
