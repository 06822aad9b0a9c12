"""Admission webhooks registered by the test, called by the served cluster on pods a ReplicaSet creates.

The webhook is the test's own HTTPS server (a thread, a throwaway CA made with `cryptography`),
registered with `kubectl apply` as a MutatingWebhookConfiguration for one labelled namespace.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from shipshape.emulator.resources import REPLICASETS
from shipshape.emulator.store import Obj
from tests.webhook_server import Certificates, make_certificates

from .served_cluster import ServedCluster, ready_pods, serve_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

NAMESPACE = "hooked"
HOOK_NAME = "placement.shipshape.test"

WORKLOAD = f"""
apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
  labels: {{webhooks: enabled}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {NAMESPACE}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}
"""


class MutatingWebhook:
    """A tiny HTTPS admission webhook in a thread: it labels pods and adds a spot toleration."""

    def __init__(self, certificates: Certificates, workdir: Path) -> None:
        self.reviews: list[Obj] = []
        reviews = self.reviews

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                reviews.append(review)
                patch = [
                    {"op": "add", "path": "/metadata/labels/placement", "value": "spot"},
                    {
                        "op": "add",
                        "path": "/spec/tolerations",
                        "value": [
                            {
                                "key": "emulator.shipshape.dev/spot-interruption",
                                "operator": "Exists",
                                "effect": "NoSchedule",
                            }
                        ],
                    },
                ]
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {
                            "uid": review["request"]["uid"],
                            "allowed": True,
                            "patchType": "JSONPatch",
                            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        cert, key = workdir / "webhook.crt", workdir / "webhook.key"
        cert.write_bytes(certificates.cert_pem)
        key.write_bytes(certificates.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook", daemon=True)
        self._thread.start()

    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/mutate"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


def _configuration(url: str, ca_bundle: str, failure_policy: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "placement"},
            "webhooks": [
                {
                    "name": HOOK_NAME,
                    "clientConfig": {"url": url, "caBundle": ca_bundle},
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"webhooks": "enabled"}},
                    "failurePolicy": failure_policy,
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 5,
                }
            ],
        }
    )


def _dead_port() -> int:
    """A local port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ServedCluster]:
    with serve_cluster(tmp_path) as served:
        yield served


@pytest.fixture
def certificates() -> Certificates:
    return make_certificates(["webhook.test.svc"])


def _web_pods(cluster: ServedCluster) -> list[Obj]:
    return cluster.pods(NAMESPACE, app="web")


def test_mutating_webhook_patches_pods_of_a_replicaset(
    cluster: ServedCluster, certificates: Certificates, tmp_path: Path
) -> None:
    hook = MutatingWebhook(certificates, tmp_path)
    try:
        applied = cluster.kubectl(
            "apply", "-f", "-", stdin=_configuration(hook.url(), certificates.ca_bundle, "Fail")
        )
        assert (
            applied.stdout.strip()
            == "mutatingwebhookconfiguration.admissionregistration.k8s.io/placement created"
        )
        cluster.kubectl("apply", "-f", "-", stdin=WORKLOAD)
        cluster.wait("2 web pods ready", lambda: len(ready_pods(_web_pods(cluster))) == 2, 120)
        pods = _web_pods(cluster)
    finally:
        hook.close()
    for pod in pods:
        assert pod["metadata"]["labels"]["placement"] == "spot"
        assert {
            "key": "emulator.shipshape.dev/spot-interruption",
            "operator": "Exists",
            "effect": "NoSchedule",
        } in pod["spec"]["tolerations"]
    # One review per pod, for a pod the ReplicaSet asked for (generateName, owner reference).
    assert len(hook.reviews) == 2
    (rs,) = cluster.objects(REPLICASETS, NAMESPACE)
    for review in hook.reviews:
        assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
        request = review["request"]
        assert request["operation"] == "CREATE" and request["namespace"] == NAMESPACE
        assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
        assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
        assert request["dryRun"] is False
        obj = request["object"]
        assert obj["metadata"]["generateName"] == rs["metadata"]["name"] + "-"
        assert obj["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert "placement" not in obj["metadata"]["labels"]
    # Pods outside the selected namespace are left alone (and the webhook is not called).
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]},
    }
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(pod))
    plain = cluster.core.read_namespaced_pod("plain", "default")
    assert "placement" not in (plain.metadata.labels or {}) and len(hook.reviews) == 2


def test_failure_policy_ignore_lets_pods_through_a_dead_webhook(
    cluster: ServedCluster, certificates: Certificates
) -> None:
    url = f"https://127.0.0.1:{_dead_port()}/mutate"
    cluster.kubectl("apply", "-f", "-", stdin=_configuration(url, certificates.ca_bundle, "Ignore"))
    cluster.kubectl("apply", "-f", "-", stdin=WORKLOAD)
    cluster.wait("2 web pods ready", lambda: len(ready_pods(_web_pods(cluster))) == 2, 120)
    assert all("placement" not in p["metadata"]["labels"] for p in _web_pods(cluster))


def test_failure_policy_fail_refuses_pods_when_the_webhook_is_dead(
    cluster: ServedCluster, certificates: Certificates
) -> None:
    port = _dead_port()
    url = f"https://127.0.0.1:{port}/mutate"
    cluster.kubectl("apply", "-f", "-", stdin=_configuration(url, certificates.ca_bundle, "Fail"))
    cluster.kubectl("apply", "-f", "-", stdin=WORKLOAD)
    expected = (
        f'Internal error occurred: failed calling webhook "{HOOK_NAME}": failed to call webhook: '
        f'Post "https://127.0.0.1:{port}/mutate?timeout=5s": '
    )

    def failed_create() -> list[Any] | None:
        events = cluster.core.list_namespaced_event(NAMESPACE, field_selector="reason=FailedCreate").items
        return events or None

    (event, *_) = cluster.wait("a FailedCreate event on the ReplicaSet", failed_create, 60)
    assert event.type == "Warning" and event.involved_object.kind == "ReplicaSet"
    assert event.message.startswith("Error creating: " + expected), event.message
    (rs,) = cluster.objects(REPLICASETS, NAMESPACE)
    assert rs["metadata"]["name"].startswith("web-")
    assert not _web_pods(cluster)

    # A pod created directly is refused with the same error, as kubectl shows it.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "direct", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]},
    }
    refused = cluster.kubectl("create", "-f", "-", stdin=json.dumps(pod), ok=False)
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        f'Error from server (InternalError): error when creating "STDIN": {expected}'
    )
    assert not _web_pods(cluster)


def test_dead_webhook_error_names_the_refused_connection(
    cluster: ServedCluster, certificates: Certificates
) -> None:
    port = _dead_port()
    url = f"https://127.0.0.1:{port}/mutate"
    cluster.kubectl("apply", "-f", "-", stdin=_configuration(url, certificates.ca_bundle, "Fail"))
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("label", "namespace", NAMESPACE, "webhooks=enabled")
    refused = cluster.kubectl("run", "direct", "-n", NAMESPACE, "--image=nginx:1.27", ok=False)
    assert refused.stderr.strip() == (
        f'Error from server (InternalError): Internal error occurred: failed calling webhook "{HOOK_NAME}": '
        f'failed to call webhook: Post "https://127.0.0.1:{port}/mutate?timeout=5s": '
        f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    )


def test_replicaset_shows_the_failed_creation_as_a_condition(
    cluster: ServedCluster, certificates: Certificates
) -> None:
    port = _dead_port()
    url = f"https://127.0.0.1:{port}/mutate"
    cluster.kubectl("apply", "-f", "-", stdin=_configuration(url, certificates.ca_bundle, "Fail"))
    cluster.kubectl("apply", "-f", "-", stdin=WORKLOAD)

    def failure() -> Obj | None:
        (rs,) = cluster.objects(REPLICASETS, NAMESPACE) or [{}]
        conditions = (rs.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "ReplicaFailure"), None)

    condition = cluster.wait("the ReplicaFailure condition", failure, 30, slack=2)
    assert (condition["status"], condition["reason"]) == ("True", "FailedCreate")
    assert condition["message"].startswith(f'Internal error occurred: failed calling webhook "{HOOK_NAME}"')


def test_replicaset_catches_up_once_the_dead_webhook_is_removed(
    cluster: ServedCluster, certificates: Certificates
) -> None:
    url = f"https://127.0.0.1:{_dead_port()}/mutate"
    cluster.kubectl("apply", "-f", "-", stdin=_configuration(url, certificates.ca_bundle, "Fail"))
    cluster.kubectl("apply", "-f", "-", stdin=WORKLOAD)
    cluster.wait(
        "a FailedCreate event",
        lambda: cluster.core.list_namespaced_event(NAMESPACE, field_selector="reason=FailedCreate").items,
        60,
    )
    cluster.kubectl("delete", "mutatingwebhookconfiguration", "placement")
    # Upstream's retry backoff after a few failures is well under a minute.
    cluster.wait("2 web pods ready", lambda: len(ready_pods(_web_pods(cluster))) == 2, 120, slack=2)


def test_review_of_a_replicaset_pod_names_the_controller(
    cluster: ServedCluster, certificates: Certificates, tmp_path: Path
) -> None:
    hook = MutatingWebhook(certificates, tmp_path)
    try:
        cluster.kubectl("apply", "-f", "-", stdin=_configuration(hook.url(), certificates.ca_bundle, "Fail"))
        cluster.kubectl("apply", "-f", "-", stdin=WORKLOAD)
        cluster.wait("2 reviews", lambda: len(hook.reviews) == 2, 60)
    finally:
        hook.close()
    user = hook.reviews[0]["request"]["userInfo"]
    assert user["username"] == "system:serviceaccount:kube-system:replicaset-controller"
    assert set(user["groups"]) == {
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    }
