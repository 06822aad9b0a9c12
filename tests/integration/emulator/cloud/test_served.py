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
from tests.unit.emulator.cloud.builders import SPOT_A, scenario


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
        assert httpx.get(action).status_code == 401  # IMDSv2: a session token is required
        token = httpx.put(f"{url}/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        headers = {"X-aws-ec2-metadata-token": token.text}
        assert httpx.get(action, headers=headers).status_code == 404
        served.call(lambda: cloud.interrupt(node=node_name, notice=300))
        answer = httpx.get(action, headers=headers)
        assert answer.status_code == 200
        assert answer.json()["action"] == "terminate"
        assert httpx.get(f"{url}/latest/meta-data/instance-type", headers=headers).text == "m5.large"


def test_cli_steers_a_served_cluster_over_https(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from shipshape.cli.main import app

    sc = scenario(interruptions={"enabled": False}, autoscaler={"enabled": False})
    cluster = assembly.build(sc, RealClock())
    with running(cluster, tmp_path) as served:
        cloud: CloudModel = cluster.services["cloud"]
        kubeconfig = str(served.kubeconfig)
        result = CliRunner().invoke(
            app, ["emulator", "interrupt", "--zone", "us-east-1a", "--kubeconfig", kubeconfig]
        )
        assert result.exit_code == 0, result.output
        spot_a = served.call(lambda: sorted(i.node_name for i in cloud.active_instances("spot-a")))
        assert all(name in result.output for name in spot_a)
        assert served.call(lambda: all(cloud.instance_action(n) is not None for n in spot_a))
        result = CliRunner().invoke(
            app, ["emulator", "shortage", "--pool", "nope", "--for", "1m", "--kubeconfig", kubeconfig]
        )
        assert result.exit_code == 1
        assert "unknown pool 'nope'" in result.output
