"""`shipshape analyze --kubeconfig` end to end: the served emulator through the real Kubernetes
client (pods, nodes, PriorityClasses, metrics.k8s.io), and a real Prometheus holding the usage
model's history of those same pods up to now."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shipshape.cli.main import app
from shipshape.emulator import assembly, usage_history
from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.scenario import Scenario
from shipshape.kube.clock import ScaledClock
from shipshape.simulate.ops import complete
from tests.emulator_fixtures import ServedEmulator, running
from tests.integration.efficiency.prometheus_server import backfill, serving
from tests.unit.analyzers.efficiency.scenario import SCENARIO

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("prometheus")]

SPEED = 60.0
STEP = 60


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServedEmulator, list[Any], list[Any]]]:
    cluster = assembly.build(Scenario.model_validate(SCENARIO), ScaledClock(SPEED))
    with running(cluster, tmp_path_factory.mktemp("emulator")) as emulator:
        emulator.call(lambda: complete(assembly.apply_objects(cluster)))
        deadline = time.monotonic() + 30
        while True:
            pods = emulator.call(
                lambda: [
                    p for p in cluster.store.list(PODS) if (p.get("status") or {}).get("phase") == "Running"
                ]
            )
            if len(pods) == 3:
                break
            assert time.monotonic() < deadline, "the scenario's pods did not start"
            time.sleep(0.1)
        nodes = emulator.call(lambda: list(cluster.store.list(NODES)))
        yield emulator, pods, nodes


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["analyze", *args], env={"COLUMNS": "240"})


def test_metrics_api_sample_through_the_kubernetes_client(served: Any) -> None:
    emulator, _, _ = served
    result = run("--kubeconfig", str(emulator.kubeconfig), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["source"] == "metrics.k8s.io" and report["window"]["steps"] == 1
    web = next((f for f in report["findings"] if f["target"] == "default/Deployment/web/app"), None)
    assert web is not None, report
    assert web["confidenceLevel"] == "low"
    assert any(line.startswith("history: 0.1 h") for line in web["lacking"])
    assert any("HorizontalPodAutoscalers not readable" in line for line in report["lacking"])


def test_prometheus_history_of_the_same_pods(served: Any, tmp_path: Path) -> None:
    emulator, pods, nodes = served
    model = emulator.cluster.services["usage"]
    end = (int(time.time()) // STEP) * STEP
    times = [float(end - 3 * 3600 + STEP * i) for i in range(3 * 3600 // STEP + 1)]
    om = usage_history.openmetrics(model, pods, [n["metadata"]["name"] for n in nodes], times, cluster="east")
    with serving(backfill(om, tmp_path), tmp_path) as url:
        result = run(
            "--kubeconfig",
            str(emulator.kubeconfig),
            "--prometheus",
            url,
            "--cluster",
            "east",
            "--window",
            "2h",
            "--step",
            "60s",
            "--json",
        )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["source"] == "prometheus" and report["oomReplayKills"] == 0
    web = next(f for f in report["findings"] if f["target"] == "default/Deployment/web/app")
    # 0.5 cores +- 5 % per replica: the p95 rounded up to 1m
    cpu = web["instruction"]["patch"]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][
        "cpu"
    ]
    assert 475 <= int(cpu.removesuffix("m")) <= 526
    assert web["monthlySavings"] > 0  # priced from the catalog's m5.xlarge on-demand price
    node = next(f for f in report["findings"] if f["kind"] == "colocation")
    assert 1250 <= node["instruction"]["resources"]["shipshape.dev/batch-cpu"] <= 1350


def test_an_unreachable_prometheus_is_one_error_line(served: Any) -> None:
    emulator, _, _ = served
    result = run("--kubeconfig", str(emulator.kubeconfig), "--prometheus", "http://127.0.0.1:9")
    assert result.exit_code == 2
    assert (
        "cannot reach Prometheus at http://127.0.0.1:9" in result.output and "Traceback" not in result.output
    )
