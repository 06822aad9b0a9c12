"""Bad input gets the error a real cluster gives, and changes nothing.

Through kubectl on a cluster with every model running (the messages people see), through raw HTTPS
on a quiet API-only cluster (status codes, `Status` bodies, and not one write to the store), and
bad scenario files given to `shipshape emulator up` (a clear message, exit code 2).
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from shipshape.cli import emulator as emulator_cli
from shipshape.emulator.resources import CONFIGMAPS, DEPLOYMENTS, PODS
from tests.emulator_fixtures import ServedEmulator

from .served_cluster import Kubectl, ServedCluster, scenario_doc, serve_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

RFC1123 = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    r"is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
MISMATCHED = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "bad"},
    "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "other"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]},
        },
    },
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ServedCluster]:
    with serve_cluster(tmp_path) as served:
        yield served


def _pod(name: str, containers: list[dict[str, Any]]) -> str:
    return json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": containers}}
    )


def test_kubectl_shows_upstream_errors_and_nothing_changes(cluster: ServedCluster, tmp_path: Path) -> None:
    kubectl = cluster.kubectl
    kubectl("create", "configmap", "settings", "--from-literal=mode=fast")
    before = cluster.get(CONFIGMAPS, "default", "settings")
    assert before is not None

    def refused(*args: str, stdin: str | None = None) -> str:
        done = kubectl(*args, stdin=stdin, ok=False)
        assert done.returncode == 1 and not done.stdout, (args, done.stdout)
        return done.stderr.strip()

    assert (
        refused("create", "-f", "-", stdin=_pod("p", []))
        == 'The Pod "p" is invalid: spec.containers: Required value'
    )
    assert refused("create", "-f", "-", stdin=_pod("Bad_Name", [])) == (
        'The Pod "Bad_Name" is invalid: \n'
        f'* metadata.name: Invalid value: "Bad_Name": {RFC1123}\n'
        "* spec.containers: Required value"
    )
    assert refused("get", "widgets") == 'error: the server doesn\'t have a resource type "widgets"'
    assert refused("get", "configmap", "nope") == 'Error from server (NotFound): configmaps "nope" not found'
    assert (
        refused("delete", "deployment", "nope")
        == 'Error from server (NotFound): deployments.apps "nope" not found'
    )
    assert refused("create", "configmap", "settings", "--from-literal=mode=slow") == (
        'error: failed to create configmap: configmaps "settings" already exists'
    )
    stale = json.loads(kubectl("get", "configmap", "settings", "-o", "json").stdout)
    stale["data"] = {"mode": "slow"}
    stale["metadata"]["resourceVersion"] = str(int(stale["metadata"]["resourceVersion"]) - 1)
    assert refused("replace", "-f", "-", stdin=json.dumps(stale)) == (
        'Error from server (Conflict): error when replacing "STDIN": Operation cannot be fulfilled on '
        'configmaps "settings": the object has been modified; please apply your changes to the latest '
        "version and try again"
    )
    patch = '[{"op": "remove", "path": "/data/missing"}]'
    assert refused("patch", "configmap", "settings", "--type=json", "-p", patch).startswith(
        "The request is invalid: "
    )
    assert refused("patch", "configmap", "settings", "--type=merge", "-p", '{"data": ').startswith(
        "Error from server (BadRequest): "
    )
    assert refused("apply", "-f", "-", stdin=json.dumps(MISMATCHED)).startswith(
        'The Deployment "bad" is invalid: spec.template.metadata.labels: Invalid value: '
    )

    wrong = tmp_path / "wrong-token.kubeconfig"
    wrong.write_text(cluster.served.kubeconfig.read_text().replace(cluster.served.token, "not-the-token"))
    denied = Kubectl(wrong, tmp_path / "cache-wrong")("get", "configmaps", ok=False)
    assert denied.returncode == 1
    assert denied.stderr.strip().splitlines()[-1].startswith("error: You must be logged in to the server (")

    after = cluster.get(CONFIGMAPS, "default", "settings")
    assert after == before
    assert cluster.get(DEPLOYMENTS, "default", "bad") is None
    assert not cluster.objects(PODS, "default")


def test_invalid_value_of_a_map_reads_as_upstream(cluster: ServedCluster) -> None:
    done = cluster.kubectl("apply", "-f", "-", stdin=json.dumps(MISMATCHED), ok=False)
    assert done.stderr.strip() == (
        'The Deployment "bad" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"other"}: `selector` does not match template `labels`'
    )


class RawApi:
    """Plain HTTPS requests to the served API, with the token (or another one)."""

    def __init__(self, served: ServedEmulator) -> None:
        tls = ssl.create_default_context(cafile=str(served.ca_path))
        self.http = httpx.Client(base_url=served.url, verify=tls, timeout=10)
        self.token = served.token

    def __call__(
        self, method: str, path: str, body: bytes | dict[str, Any] | None = None, token: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        content = json.dumps(body).encode() if isinstance(body, dict) else body
        headers = {"Content-Type": "application/json"}
        if token != "":  # "" sends no credentials at all
            headers["Authorization"] = f"Bearer {token or self.token}"
        response = self.http.request(method, path, content=content, headers=headers)
        answer: dict[str, Any] = response.json()
        return response.status_code, answer


def _failure(answer: dict[str, Any]) -> tuple[str, str, str]:
    assert answer["apiVersion"] == "v1" and answer["status"] == "Failure"
    return answer["kind"], answer["reason"], answer["message"]


def test_raw_requests_get_status_errors_and_write_nothing(served_emulator: ServedEmulator) -> None:
    api = RawApi(served_emulator)
    store = served_emulator.cluster.store
    cms = "/api/v1/namespaces/default/configmaps"
    code, created = api("POST", cms, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    assert code == 201
    before = served_emulator.call(lambda: store.resource_version)
    try:
        code, answer = api("POST", cms, b'{"metadata": {"name": ')
        kind, reason, message = _failure(answer)
        assert (code, kind, reason) == (400, "Status", "BadRequest")
        assert message.startswith("couldn't get version/kind; json parse error: ")

        code, answer = api("POST", cms, b"[1, 2]")
        assert (code, answer["reason"]) == (400, "BadRequest")

        code, answer = api(
            "PUT", f"{cms}/a", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}
        )
        assert (code, answer["reason"]) == (400, "BadRequest")
        assert answer["message"] == "the name of the object (b) does not match the name on the URL (a)"

        code, answer = api("POST", "/api/v1/namespaces/default/pods", _pod_body("p"))
        assert (code, *_failure(answer)) == (
            422,
            "Status",
            "Invalid",
            'Pod "p" is invalid: spec.containers: Required value',
        )
        assert answer["details"] == {
            "name": "p",
            "kind": "Pod",
            "causes": [
                {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
            ],
        }

        for token in ("not-the-token", ""):
            code, answer = api("GET", cms, token=token)
            assert (code, *_failure(answer)) == (401, "Status", "Unauthorized", "Unauthorized")
        code, answer = api(
            "POST", cms, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, token="no"
        )
        assert code == 401

        code, answer = api("GET", "/api/v1/namespaces/default/widgets")
        assert (code, *_failure(answer)) == (
            404,
            "Status",
            "NotFound",
            "the server could not find the requested resource",
        )
        code, answer = api("DELETE", f"{cms}/nope")
        assert (code, *_failure(answer)) == (404, "Status", "NotFound", 'configmaps "nope" not found')
        assert answer["details"] == {"name": "nope", "kind": "configmaps"}

        stale = {**created, "data": {"k": "v"}}
        stale["metadata"] = {
            **created["metadata"],
            "resourceVersion": str(int(created["metadata"]["resourceVersion"]) - 1),
        }
        code, answer = api("PUT", f"{cms}/a", stale)
        assert (code, answer["reason"]) == (409, "Conflict")
        assert answer["message"] == (
            'Operation cannot be fulfilled on configmaps "a": the object has been modified; '
            "please apply your changes to the latest version and try again"
        )
        code, answer = api("POST", cms, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
        assert (code, answer["reason"], answer["message"]) == (
            409,
            "AlreadyExists",
            'configmaps "a" already exists',
        )
    finally:
        api.http.close()
    assert served_emulator.call(lambda: store.resource_version) == before
    assert served_emulator.call(lambda: store.get(CONFIGMAPS, "default", "a")) == created


def _pod_body(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": []}}


# ---- scenario files -------------------------------------------------------------------------------


def _scenario_text(**changes: Any) -> str:
    return json.dumps(scenario_doc(**changes))


BAD_SCENARIOS = {
    "not yaml": ("pools: [\n  - {name: a", "not valid YAML"),
    "not a mapping": ("- just\n- a list\n", "a scenario must be a YAML mapping, got list"),
    "no pools": (_scenario_text(pools=[]), "pools: List should have at least 1 item"),
    "unknown field": (_scenario_text(clusterName="x"), "clusterName: Extra inputs are not permitted"),
    "bad quantity": (
        _scenario_text(pools=[{**scenario_doc()["pools"][0], "memory": "lots"}]),
        "pools.0.memory",
    ),
    "sizes": (
        _scenario_text(pools=[{**scenario_doc()["pools"][0], "minSize": 3, "maxSize": 1}]),
        "pool spot-a: minSize 3 is above maxSize 1",
    ),
    "timeline pool": (
        _scenario_text(timeline=[{"at": "1m", "action": "interrupt", "pool": "nope"}]),
        "timeline event at 60.0s names unknown pool 'nope'",
    ),
    "bad duration": (
        _scenario_text(timeline=[{"at": "soon", "action": "interrupt", "pool": "spot-a"}]),
        "timeline.0.at",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SCENARIOS))
def test_up_refuses_bad_scenarios_with_a_clear_error(case: str, tmp_path: Path) -> None:
    text, expected = BAD_SCENARIOS[case]
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    kubeconfig = tmp_path / "kubeconfig"
    result = CliRunner().invoke(
        emulator_cli.app, ["up", "--scenario", str(path), "--port", "0", "--kubeconfig", str(kubeconfig)]
    )
    assert result.exit_code == 2, result.output
    assert str(path) in result.output and expected in result.output, result.output
    assert "Traceback" not in result.output
    assert not kubeconfig.exists()


def test_up_with_a_bad_scenario_exits_2_from_the_real_command(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(_scenario_text(pools=[{**scenario_doc()["pools"][0], "capacityType": "cheap"}]))
    command = [str(Path(sys.executable).parent / "shipshape"), "emulator", "up"]
    done = subprocess.run(
        [*command, "--scenario", str(path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert not done.stdout and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {path}: invalid scenario\n")
    assert "pools.0.capacityType: Input should be 'spot' or 'on-demand'" in done.stderr
    assert not (tmp_path / ".shipshape").exists()


def test_up_with_a_missing_scenario_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    result = CliRunner().invoke(emulator_cli.app, ["up", "--scenario", str(missing), "--port", "0"])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {missing}: cannot read scenario: No such file or directory"
