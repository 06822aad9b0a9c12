"""kubectl v1.32 against the served emulator: discovery, tables, create/get/delete, explain, watch."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.emulator_fixtures import ServedEmulator

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: nginx
    image: nginx:1.27
"""


CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata: {name: first}
data: {a: "1"}
"""


class Kubectl:
    def __init__(self, served: ServedEmulator, cache: Path) -> None:
        self.base = ["kubectl", "--kubeconfig", str(served.kubeconfig), "--cache-dir", str(cache)]

    def command(self, *args: str) -> list[str]:
        return [*self.base, *args]

    def __call__(
        self, *args: str, stdin: str | None = None, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(*args), input=stdin, capture_output=True, text=True, timeout=30)
        if ok:
            assert done.returncode == 0, done.stderr
        return done


@pytest.fixture
def kubectl(served_emulator: ServedEmulator, tmp_path: Path) -> Kubectl:
    return Kubectl(served_emulator, tmp_path / "kube-cache")


def _table(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_get_tables(kubectl: Kubectl) -> None:
    namespaces = _table(kubectl("get", "namespaces").stdout)
    assert namespaces[0] == ["NAME", "STATUS", "AGE"]
    assert [row[:2] for row in namespaces[1:]] == [
        ["default", "Active"],
        ["kube-node-lease", "Active"],
        ["kube-public", "Active"],
        ["kube-system", "Active"],
    ]
    kubectl("create", "-f", "-", stdin=POD)
    pods = _table(kubectl("get", "pods").stdout)
    assert pods[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods[1][:4] == ["web", "0/1", "Pending", "0"]
    wide = kubectl("get", "pods", "-o", "wide").stdout.splitlines()[0].split()
    assert wide == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        "READINESS",
        "GATES",
    ]
    selected = kubectl("get", "pods", "-l", "app=other").stderr
    assert "No resources found in default namespace." in selected


def test_create_get_yaml_and_delete(kubectl: Kubectl, served_emulator: ServedEmulator) -> None:
    assert kubectl("create", "-f", "-", stdin=POD).stdout.strip() == "pod/web created"
    again = kubectl("create", "-f", "-", stdin=POD, ok=False)
    assert again.returncode != 0 and 'pods "web" already exists' in again.stderr
    obj = yaml.safe_load(kubectl("get", "pod", "web", "-o", "yaml").stdout)
    assert obj["kind"] == "Pod" and obj["metadata"]["labels"] == {"app": "web"} and obj["metadata"]["uid"]
    assert kubectl("delete", "pod", "web", "--wait=false").stdout.strip() == 'pod "web" deleted'
    missing = kubectl("get", "pod", "web", ok=False)
    assert missing.returncode != 0 and 'pods "web" not found' in missing.stderr


def test_api_resources_and_explain(kubectl: Kubectl) -> None:
    resources: dict[str, list[str]] = {}
    for row in _table(kubectl("api-resources").stdout)[1:]:
        resources.setdefault(row[0], row)  # core "pods" comes before metrics.k8s.io "pods"
    assert resources["pods"][1:] == ["po", "v1", "true", "Pod"]
    assert resources["deployments"][1:] == ["deploy", "apps/v1", "true", "Deployment"]
    assert resources["leases"][1:] == ["coordination.k8s.io/v1", "true", "Lease"]
    explained = kubectl("explain", "pods.spec.nodeName").stdout
    assert "KIND:       Pod" in explained and "FIELD: nodeName <string>" in explained
    pdb = kubectl("explain", "pdb.spec.minAvailable").stdout
    assert "GROUP:      policy" in pdb
    # The OpenAPI v2 path: client-go fetches /openapi/v2 in gnostic protobuf.
    v2 = kubectl("explain", "deployments.spec.strategy", "--output=plaintext-openapiv2").stdout
    assert "KIND:     Deployment" in v2 and "rollingUpdate\t<Object>" in v2


def test_get_watch_streams_changes(kubectl: Kubectl) -> None:
    command = kubectl.command("get", "configmaps", "--watch", "--request-timeout=5s")
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as watcher:
        assert watcher.stdout is not None
        try:
            kubectl("create", "-f", "-", stdin=CONFIGMAP)
            lines: list[str] = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                line = watcher.stdout.readline()
                if not line:
                    break
                lines.append(line)
                if line.startswith("first"):
                    break
        finally:
            watcher.kill()
    assert lines and lines[-1].split()[:2] == ["first", "1"], lines


def test_imperative_create_commands_send_protobuf(kubectl: Kubectl) -> None:
    assert kubectl("create", "configmap", "settings", "--from-literal=mode=fast").stdout.strip() == (
        "configmap/settings created"
    )
    assert kubectl("get", "configmap", "settings", "-o", "jsonpath={.data.mode}").stdout == "fast"
    kubectl("create", "deployment", "idle", "--image=nginx:1.27", "--replicas=0")
    assert kubectl("get", "deployment", "idle", "-o", "jsonpath={.spec.replicas}").stdout == "0"
    kubectl("create", "namespace", "team-a")
    assert "team-a" in kubectl("get", "namespaces", "-o", "name").stdout


def test_strict_field_validation(kubectl: Kubectl) -> None:
    typo = POD.replace("image: nginx:1.27", "imagee: nginx:1.27\n    image: nginx:1.27")
    refused = kubectl("create", "-f", "-", stdin=typo, ok=False)
    assert refused.returncode != 0
    assert 'strict decoding error: unknown field "spec.containers[0].imagee"' in refused.stderr
    warned = kubectl("create", "--validate=warn", "-f", "-", stdin=typo)
    assert 'unknown field "spec.containers[0].imagee"' in warned.stderr


def test_apply_validates_and_patches(kubectl: Kubectl) -> None:
    assert kubectl("apply", "-f", "-", stdin=POD).stdout.strip() == "pod/web created"
    labelled = POD.replace("labels: {app: web}", "labels: {app: web, tier: front}")
    assert kubectl("apply", "-f", "-", stdin=labelled).stdout.strip() == "pod/web configured"
    assert kubectl("get", "pod", "web", "-o", "jsonpath={.metadata.labels.tier}").stdout == "front"
    typo = labelled.replace("labels: {app: web, tier: front}", "labels: {app: web, tier: back}\n  lables: {}")
    refused = kubectl("apply", "-f", "-", stdin=typo, ok=False)
    assert refused.returncode != 0 and 'unknown field "metadata.lables"' in refused.stderr
    assert kubectl("get", "pod", "web", "-o", "jsonpath={.metadata.labels.tier}").stdout == "front"


def test_auth_can_i_and_whoami(kubectl: Kubectl) -> None:
    assert kubectl("auth", "can-i", "delete", "nodes").stdout.strip() == "yes"
    assert "system:admin" in kubectl("auth", "whoami").stdout
