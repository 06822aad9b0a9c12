"""In-cluster mode (`--webhook-service`): the replicas share one CA and serving certificate through a
Secret created by the first to start, the leader registers the webhook through the Service with that
CA, and rotates the certificate when it comes close to expiry (every replica then serves the new one)."""

from __future__ import annotations

import base64
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import config as kube_config

from shipshape.controller.policy import ControllerConfig
from shipshape.controller.process import TLS_SECRET, ControllerProcess, ProcessSettings
from shipshape.emulator.resources import BY_KEY, MUTATING_WEBHOOKS, NAMESPACES
from shipshape.kube.certs import certificate_expires, generate_certificates, service_dns_names
from shipshape.kube.clock import RealClock
from tests.emulator_fixtures import ServedEmulator

pytestmark = [pytest.mark.integration]
SECRETS = BY_KEY["secrets"]


def test_replicas_share_the_serving_certificate_and_register_through_the_service(
    served_emulator: ServedEmulator, tmp_path: Path
) -> None:
    loader: Any = kube_config
    clients = [loader.new_client_from_config(config_file=str(served_emulator.kubeconfig)) for _ in range(2)]
    processes = [
        ControllerProcess(
            client,
            ControllerConfig(),
            ProcessSettings(identity=f"replica-{i}", webhook_service="shipshape-webhook"),
            RealClock(),
            workdir=tmp_path / f"replica-{i}",
        )
        for i, client in enumerate(clients)
    ]
    try:
        for process in processes:
            process.start()
        certificates = {(tmp_path / f"replica-{i}" / "tls.crt").read_bytes() for i in range(2)}
        assert len(certificates) == 1, "both replicas serve the same certificate"
        store = served_emulator.cluster.store
        secret = served_emulator.call(lambda: store.get(SECRETS, "shipshape-system", TLS_SECRET))
        assert secret is not None and secret["type"] == "kubernetes.io/tls"
        assert base64.b64decode(secret["data"]["tls.crt"]) in certificates
        registered = served_emulator.call(lambda: store.get(MUTATING_WEBHOOKS, "", "shipshape-placement"))
        assert registered is not None
        client_config = registered["webhooks"][0]["clientConfig"]
        assert client_config["service"] == {
            "namespace": "shipshape-system",
            "name": "shipshape-webhook",
            "path": "/mutate",
            "port": 443,
        }
        assert "url" not in client_config
        assert client_config["caBundle"] == secret["data"]["ca.crt"]
    finally:
        for process in processes:
            process.stop()
        for client in clients:
            client.close()


def served_certificate(port: int) -> bytes:
    pem = ssl.get_server_certificate(("127.0.0.1", port))
    return x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)


def der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def test_the_leader_rotates_a_certificate_close_to_expiry_and_every_replica_serves_the_new_one(
    served_emulator: ServedEmulator, tmp_path: Path
) -> None:
    store = served_emulator.cluster.store
    old = generate_certificates(
        service_dns_names("shipshape-webhook", "shipshape-system"), now=time.time(), validity_days=10
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shipshape-system"}}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": TLS_SECRET, "namespace": "shipshape-system"},
        "data": {
            "ca.crt": base64.b64encode(old.ca_pem).decode(),
            "tls.crt": base64.b64encode(old.cert_pem).decode(),
            "tls.key": base64.b64encode(old.key_pem).decode(),
        },
    }
    served_emulator.call(lambda: store.create(NAMESPACES, namespace))
    served_emulator.call(lambda: store.create(SECRETS, secret))
    loader: Any = kube_config
    clients = [loader.new_client_from_config(config_file=str(served_emulator.kubeconfig)) for _ in range(2)]
    processes = [
        ControllerProcess(
            client,
            ControllerConfig(),
            ProcessSettings(
                identity=f"replica-{i}", webhook_service="shipshape-webhook", certificate_check_seconds=0.5
            ),
            RealClock(),
            workdir=tmp_path / f"replica-{i}",
        )
        for i, client in enumerate(clients)
    ]
    try:
        for process in processes:
            process.start()
        assert [p.elector.is_leader for p in processes] == [True, False]

        def rotated() -> bool:
            found = served_emulator.call(lambda: store.get(SECRETS, "shipshape-system", TLS_SECRET))
            assert found is not None
            cert = base64.b64decode(found["data"]["tls.crt"])
            if cert == old.cert_pem:
                return False
            registered = served_emulator.call(lambda: store.get(MUTATING_WEBHOOKS, "", "shipshape-placement"))
            assert registered is not None
            return all(served_certificate(p.webhook_port) == der(cert) for p in processes) and all(
                hook["clientConfig"]["caBundle"] == found["data"]["ca.crt"] for hook in registered["webhooks"]
            )

        deadline = time.monotonic() + 20
        while not rotated():
            assert time.monotonic() < deadline, "the certificate was not rotated and served by every replica"
            time.sleep(0.1)
        found = served_emulator.call(lambda: store.get(SECRETS, "shipshape-system", TLS_SECRET))
        assert found is not None
        bundle = base64.b64decode(found["data"]["ca.crt"])
        # The new CA, and the old one for replicas that have not reloaded yet.
        assert bundle.count(b"BEGIN CERTIFICATE") == 2 and bundle.endswith(old.ca_pem)
        assert certificate_expires(base64.b64decode(found["data"]["tls.crt"])) - time.time() > 300 * 86400
    finally:
        for process in processes:
            process.stop()
        for client in clients:
            client.close()
