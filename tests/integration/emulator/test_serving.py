"""What the runner wires around the API: metrics, extra routes, the metadata endpoint, the CLI."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from typer.testing import CliRunner

from shipshape.cli import emulator as emulator_cli
from shipshape.emulator import assembly
from shipshape.emulator.resources import NODES, PODS
from shipshape.kube.clock import RealClock
from tests.emulator_fixtures import ServedEmulator, running

pytestmark = pytest.mark.integration


class RecordingUsage:
    """A usage model stand-in: fixed figures per pod and node."""

    def pod_usage(self, pod: dict[str, object]) -> list[tuple[str, int, int]]:
        return [("app", 250, 64 * 1024 * 1024)]

    def node_usage(self, node_name: str) -> tuple[int, int]:
        return (1500, 2 * 1024**3)


async def _ping(request: Request) -> Response:
    return JSONResponse({"pong": True})


async def _instance_action(request: Request) -> Response:
    return PlainTextResponse('{"action": "terminate", "time": "2026-01-01T00:02:00Z"}')


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedEmulator]:
    cluster = assembly.build(None, RealClock(), models=False)
    cluster.services["usage"] = RecordingUsage()
    cluster.services["http_routes"] = [Route("/emulator/v1/ping", _ping)]
    cluster.services["metadata_app"] = Starlette(
        routes=[Route("/latest/meta-data/spot/instance-action", _instance_action)]
    )
    cluster.store.create(NODES, {"metadata": {"name": "n1", "labels": {"pool": "a"}}})
    cluster.store.create(
        PODS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": "Running"},
        },
    )
    with running(cluster, tmp_path) as s:
        yield s


def _client(served: ServedEmulator, token: str | None = None) -> httpx.Client:
    tls = ssl.create_default_context(cafile=str(served.ca_path))
    return httpx.Client(
        base_url=served.url, verify=tls, headers={"Authorization": f"Bearer {token or served.token}"}
    )


def test_metrics_api_serves_usage(served: ServedEmulator) -> None:
    with _client(served) as http:
        nodes = http.get("/apis/metrics.k8s.io/v1beta1/nodes").json()
        pods = http.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods").json()
        one = http.get("/apis/metrics.k8s.io/v1beta1/nodes/n1").json()
        watch = http.get("/apis/metrics.k8s.io/v1beta1/nodes", params={"watch": "1"})
    assert nodes["kind"] == "NodeMetricsList"
    assert nodes["items"][0]["usage"] == {"cpu": "1500000000n", "memory": "2097152Ki"}
    assert pods["items"][0]["containers"] == [
        {"name": "app", "usage": {"cpu": "250000000n", "memory": "65536Ki"}}
    ]
    assert one["metadata"]["name"] == "n1" and one["window"]
    assert watch.status_code == 405


def test_kubectl_top(served: ServedEmulator, tmp_path: Path) -> None:
    if not _has_kubectl():
        pytest.skip("kubectl is not installed")
    base = ["kubectl", "--kubeconfig", str(served.kubeconfig), "--cache-dir", str(tmp_path / "cache")]
    nodes = subprocess.run([*base, "top", "nodes"], capture_output=True, text=True, timeout=30)
    assert nodes.returncode == 0, nodes.stderr
    assert nodes.stdout.split("\n")[1].split()[:2] == ["n1", "1500m"]
    pods = subprocess.run([*base, "top", "pods"], capture_output=True, text=True, timeout=30)
    assert pods.returncode == 0, pods.stderr
    assert pods.stdout.split("\n")[1].split()[:3] == ["web", "250m", "64Mi"]


def test_extra_routes_sit_behind_the_same_auth(served: ServedEmulator) -> None:
    with _client(served) as http:
        assert http.get("/emulator/v1/ping").json() == {"pong": True}
    with _client(served, token="wrong") as http:
        assert http.get("/emulator/v1/ping").status_code == 401


def test_metadata_endpoint_is_plain_http_without_auth(served: ServedEmulator) -> None:
    url = served.call(lambda: served.cluster.services["metadata_url"])
    assert url.startswith("http://127.0.0.1:")
    response = httpx.get(f"{url}/latest/meta-data/spot/instance-action")
    assert response.json()["action"] == "terminate"


def test_metrics_without_usage_model_is_503(tmp_path: Path) -> None:
    with running(assembly.build(None, RealClock(), models=False), tmp_path) as bare, _client(bare) as http:
        response = http.get("/apis/metrics.k8s.io/v1beta1/nodes")
    assert response.status_code == 503 and response.json()["reason"] == "ServiceUnavailable"


def _has_kubectl() -> bool:
    import shutil

    return shutil.which("kubectl") is not None


SCENARIO = """
name: lab
pools:
  - name: spot-a
    instanceType: m5.large
    zone: us-east-1a
    capacityType: spot
    cpu: "2"
    memory: 8Gi
"""


def _shipshape(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "shipshape"), *args]


def test_up_refuses_a_bad_scenario(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: lab\npools: []\n")
    result = CliRunner().invoke(emulator_cli.app, ["up", "--scenario", str(bad)])
    assert result.exit_code == 2
    assert "invalid scenario" in result.output and "pools" in result.output


def test_up_serves_until_sigterm(tmp_path: Path) -> None:
    scenario = tmp_path / "lab.yaml"
    scenario.write_text(SCENARIO)
    kubeconfig = tmp_path / "lab.kubeconfig"
    command = _shipshape(
        "emulator", "up", "--scenario", str(scenario), "--port", "0", "--kubeconfig", str(kubeconfig)
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        try:
            first = proc.stdout.readline()
            assert first.strip() == f"ready {kubeconfig}"
            config = yaml.safe_load(kubeconfig.read_text())
            assert config["current-context"] == "lab"
            server = config["clusters"][0]["cluster"]["server"]
            token = config["users"][0]["user"]["token"]
            ca = tmp_path / "ca.crt"
            import base64

            ca.write_bytes(base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]))
            tls = ssl.create_default_context(cafile=str(ca))
            with httpx.Client(
                base_url=server, verify=tls, headers={"Authorization": f"Bearer {token}"}
            ) as http:
                names = [n["metadata"]["name"] for n in http.get("/api/v1/namespaces").json()["items"]]
            assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= set(names)
        finally:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_up_refuses_scenario_objects_the_api_refuses(tmp_path: Path) -> None:
    scenario = tmp_path / "lab.yaml"
    scenario.write_text(
        SCENARIO
        + """
objects:
  - apiVersion: v1
    kind: Pod
    metadata: {name: empty}
    spec: {containers: []}
"""
    )
    args = ["up", "--scenario", str(scenario), "--port", "0", "--kubeconfig", str(tmp_path / "kc")]
    result = CliRunner().invoke(emulator_cli.app, args)
    assert result.exit_code == 2, result.output
    assert "the scenario's objects cannot be created" in result.output and "empty" in result.output
