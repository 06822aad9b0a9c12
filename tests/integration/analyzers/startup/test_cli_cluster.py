"""`shipshape startup pods|nodes` against a cluster: a real HTTP server speaking the list endpoints the
official client calls, and one that is not there."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shipshape.analyzers.startup import nodes
from shipshape.cli.main import app
from tests.unit.analyzers.startup.test_cli import snapshot


class _FakeApi(BaseHTTPRequestHandler):
    objects: dict[str, list[dict[str, Any]]] = {}
    paths: list[str] = []

    def do_GET(self) -> None:
        self.paths.append(self.path)
        resource = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        if resource not in self.objects:
            self.send_error(404)
            return
        data = json.dumps({"kind": "List", "metadata": {}, "items": self.objects[resource]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    body = snapshot()
    _FakeApi.objects = {"pods": body["pods"], "events": body["events"], "nodes": body["nodes"]}
    _FakeApi.paths = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{server.server_address[1]}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
    )
    yield path
    server.shutdown()
    server.server_close()
    thread.join()


def test_pods_from_a_cluster_through_the_official_client(kubeconfig: Path) -> None:
    result = CliRunner().invoke(
        app, ["startup", "pods", "--kubeconfig", str(kubeconfig), "-n", "default", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["pods"] == 3
    assert "/api/v1/namespaces/default/pods?limit=500" in _FakeApi.paths


def test_nodes_from_a_cluster_with_log_timelines(kubeconfig: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "node-a.json").write_text(
        json.dumps({"events": [{"event": nodes.VM_INITIALIZED, "time": "2025-12-31T23:49:30Z"}]})
    )
    result = CliRunner().invoke(
        app, ["startup", "nodes", "--kubeconfig", str(kubeconfig), "--logs", str(logs), "--json"]
    )
    assert result.exit_code == 0, result.output
    (body,) = json.loads(result.output)["nodes"]
    assert body["origin"] == nodes.VM_INITIALIZED and body["timeToReady"] == pytest.approx(40.0)


def test_unreachable_cluster_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
    )
    result = CliRunner().invoke(app, ["startup", "pods", "--kubeconfig", str(path)])
    assert result.exit_code == 2
    assert "cannot reach the API server" in result.output
