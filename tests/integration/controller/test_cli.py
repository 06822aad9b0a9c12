"""`shipshape controller --kubeconfig K` as a process against a served emulator (the API alone)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from shipshape.cli.main import app
from shipshape.emulator.resources import LEASES, MUTATING_WEBHOOKS
from tests.emulator_fixtures import ServedEmulator
from tests.unit.controller.builders import deployment

pytestmark = [pytest.mark.integration]


def _read_line(process: subprocess.Popen[str], contains: str, timeout: float) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(timeout=0.2):
            line = process.stdout.readline()
            if contains in line:
                return line
            if not line and process.poll() is not None:
                break
    raise AssertionError(f"no line with {contains!r} from the controller (exit {process.poll()})")


def workload_review(obj: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview the API server sends the webhook for a Deployment's creation."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "review-1",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "namespace": obj["metadata"]["namespace"],
            "operation": "CREATE",
            "object": obj,
        },
    }


# An SQS-compatible endpoint that is not there: the controller starts all the same and keeps trying.
QUEUE_URL = "http://127.0.0.1:9/000000000000/shipshape-notices"


def test_controller_command_registers_serves_leads_and_stops_gracefully(
    served_emulator: ServedEmulator, tmp_path: Path
) -> None:
    config = tmp_path / "controller.yaml"
    config.write_text("namespace: shipshape-system\nloops:\n  headroom_enabled: false\n", encoding="utf-8")
    command = [
        str(Path(sys.executable).parent / "shipshape"), "controller",
        "--kubeconfig", str(served_emulator.kubeconfig), "--config", str(config),
        "--metrics-port", "0", "--identity", "replica-a", "--notice-queue-url", QUEUE_URL,
        "--log-format", "json",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AWS_EC2_METADATA_DISABLED": "true"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = _read_line(process, "webhook on port", 60)
        assert line.rstrip().endswith(f", notices also from {QUEUE_URL}")
        metrics_port = int(line.split("metrics on port", 1)[1].split(",")[0])
        webhook_port = int(line.split("webhook on port", 1)[1].split(",")[0])
        store = served_emulator.cluster.store
        registered = served_emulator.call(lambda: store.get(MUTATING_WEBHOOKS, "", "shipshape-placement"))
        assert registered is not None
        pods, workloads = registered["webhooks"]
        for hook in (pods, workloads):
            assert hook["clientConfig"]["url"] == f"https://127.0.0.1:{webhook_port}/mutate"
            assert hook["failurePolicy"] == "Ignore"
        assert pods["rules"][0]["resources"] == ["pods"]
        assert workloads["rules"][0]["resources"] == ["deployments", "statefulsets"]
        deadline = time.monotonic() + 20
        while True:
            lease = served_emulator.call(
                lambda: store.get(LEASES, "shipshape-system", "shipshape-controller")
            )
            if lease is not None and lease["spec"].get("holderIdentity") == "replica-a":
                break
            assert time.monotonic() < deadline, f"the controller did not take the lease: {lease}"
            time.sleep(0.1)
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert "shipshape_placement_decisions_total" in metrics or "shipshape_placement_decisions" in metrics
        # The webhook (a process of its own) logs as the command set up: a Deployment with an invalid
        # policy is warned about, on the same stream, in the same format.
        invalid = {"spot.shipshape.dev/enabled": "true", "spot.shipshape.dev/spot-percentage": "150"}
        answer = httpx.post(
            f"https://127.0.0.1:{webhook_port}/mutate",
            json=workload_review(deployment("bad", 2, invalid, ns="default")),
            verify=False,  # (its own CA: what is checked here is the log line, not the certificate)
            timeout=10,
        ).json()
        assert answer["response"]["warnings"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert process.stdout is not None
        rest = [line for line in process.stdout.read().splitlines() if line.strip()]
        logged = [json.loads(line) for line in rest if not line.startswith("stopping:")]
        # One JSON object a line, and no line per HTTP request of the clients or the server.
        assert logged and all({"time", "level", "logger", "message"} <= set(r) for r in logged)
        assert not [r for r in logged if r["logger"].startswith(("httpx", "urllib3", "uvicorn"))]
        assert [
            r
            for r in logged
            if r["logger"] == "shipshape.controller.webhook" and r["workload"] == "default/bad"
        ]
        lease = served_emulator.call(lambda: store.get(LEASES, "shipshape-system", "shipshape-controller"))
        assert lease is not None and not lease["spec"].get("holderIdentity"), (
            "a graceful stop releases the lease"
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def test_invalid_configuration_is_reported_and_nothing_starts(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(json.dumps({"spot_percentage": 150, "loops": {"rebalance_moves_per_minute": -1}}))
    result = CliRunner().invoke(
        app, ["controller", "--kubeconfig", str(tmp_path / "none"), "--config", str(config)]
    )
    assert result.exit_code == 2
    assert "loops.rebalance_moves_per_minute" in result.output
