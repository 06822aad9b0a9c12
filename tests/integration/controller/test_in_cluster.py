"""In-cluster mode (`--webhook-service`): the replicas share one CA and serving certificate through a
Secret created by the first to start, and register the webhook through the Service with that CA."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config as kube_config

from shipshape.controller.policy import ControllerConfig
from shipshape.controller.process import TLS_SECRET, ControllerProcess, ProcessSettings
from shipshape.emulator.resources import BY_KEY, MUTATING_WEBHOOKS
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
