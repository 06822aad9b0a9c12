"""Idle GPUs through a real Prometheus: dcgm-exporter series written by the emulator's usage model,
backfilled with promtool, read back over PromQL, and `shipshape analyze --kubeconfig --prometheus`
on the served emulator reporting the idle GPU with its hand-computed waste.

The scenario (tests/unit/emulator/usage/gpu_scenario.py): two spot g4dn.xlarge nodes, one T4 each;
`idle` holds one GPU at 0 % engine activity, `busy` one at 70 %. By hand: the idle GPU wastes
1 GPU x 0.18936 USD/h (spot) x 24 h x 100 % of the window idle = 4.54464 USD a day."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from shipshape.analyzers.efficiency.usage import Window
from shipshape.analyzers.gpu.idle import ENGINE_ACTIVE, GPU_UTIL
from shipshape.cli.main import app
from shipshape.emulator import assembly, usage_history
from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.scenario import Scenario
from shipshape.kube.clock import ScaledClock
from shipshape.simulate.ops import complete
from shipshape.sources.prometheus import PrometheusSettings, PrometheusSource
from tests.emulator_fixtures import ServedEmulator, running
from tests.integration.efficiency.prometheus_server import backfill, serving
from tests.unit.emulator.usage.gpu_scenario import BUSY_ACTIVITY, MODEL, SCENARIO, SPOT_PRICE

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("prometheus")]

SPEED = 60.0
STEP = 60
HOURS = 3
CLUSTER = "east"


@dataclass
class Served:
    emulator: ServedEmulator
    pods: list[Any]
    url: str
    end: float
    om: str  # the OpenMetrics text the Prometheus was filled from


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServedEmulator, list[Any], str, float]]:
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
            if len(pods) == 2:
                break
            assert time.monotonic() < deadline, "the scenario's pods did not start"
            time.sleep(0.1)
        nodes = emulator.call(lambda: list(cluster.store.list(NODES)))
        model = cluster.services["usage"]
        end = float((int(time.time()) // STEP) * STEP)
        times = [end - HOURS * 3600 + STEP * i for i in range(HOURS * 3600 // STEP + 1)]
        om = emulator.call(
            lambda: usage_history.openmetrics(
                model, pods, [n["metadata"]["name"] for n in nodes], times, cluster=CLUSTER
            )
        )
        directory = tmp_path_factory.mktemp("prometheus")
        with serving(backfill(om, directory), directory) as url:
            yield Served(emulator, pods, url, end, om)


def _name(pods: list[Any], prefix: str) -> str:
    return next(p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith(prefix))


def test_dcgm_series_come_back_per_device_and_pod(served: Served) -> None:
    pods, url, end = served.pods, served.url, served.end
    window = Window.covering(end - 3600, end, STEP)
    with PrometheusSource(PrometheusSettings(url, cluster=CLUSTER)) as source:
        series = source.fetch_gpu(window)
    by_pod = {s.pod: s for s in series}
    assert set(by_pod) == {f"default/{_name(pods, 'idle')}", f"default/{_name(pods, 'busy')}"}
    idle, busy = by_pod[f"default/{_name(pods, 'idle')}"], by_pod[f"default/{_name(pods, 'busy')}"]
    assert idle.metric == busy.metric == ENGINE_ACTIVE  # preferred over GPU_UTIL
    assert len(idle.timestamps) == window.steps
    np.testing.assert_array_equal(idle.values, 0.0)
    np.testing.assert_allclose(busy.values, BUSY_ACTIVITY)
    with PrometheusSource(PrometheusSettings(url, cluster="another")) as source:
        assert source.fetch_gpu(window) == []


def test_gpu_util_is_the_fallback_per_device(served: Served, tmp_path: Path) -> None:
    """A device without engine activity (the profiling metrics need a datacenter GPU) is read from
    DCGM_FI_DEV_GPU_UTIL; the other device keeps its engine activity."""
    pods, end, om = served.pods, served.end, served.om
    busy = _name(pods, "busy")
    kept = "".join(
        line
        for line in om.splitlines(keepends=True)
        if not (line.startswith(ENGINE_ACTIVE + "{") and f'pod="{busy}"' in line)
    )
    window = Window.covering(end - 3600, end, STEP)
    with (
        serving(backfill(kept, tmp_path), tmp_path) as url,
        PrometheusSource(PrometheusSettings(url, cluster=CLUSTER)) as source,
    ):
        series = {s.pod: s for s in source.fetch_gpu(window)}
        samples = {s.pod: s for s in source.gpu_activity(end, 300)}
    assert series[f"default/{busy}"].metric == GPU_UTIL
    np.testing.assert_allclose(series[f"default/{busy}"].activity(), BUSY_ACTIVITY)
    assert series[f"default/{_name(pods, 'idle')}"].metric == ENGINE_ACTIVE
    # the bucket's figures: 5 samples a minute apart in (end - 300, end], 70 % -> 0.7
    assert (samples[busy].metric, samples[busy].mean, samples[busy].high, samples[busy].samples) == (
        GPU_UTIL,
        BUSY_ACTIVITY,
        BUSY_ACTIVITY,
        5,
    )
    idle = samples[_name(pods, "idle")]
    assert (idle.metric, idle.mean, idle.high, idle.model) == (ENGINE_ACTIVE, 0.0, 0.0, MODEL)


def test_analyze_reports_the_idle_gpu_with_its_hand_computed_waste(served: Served) -> None:
    emulator, url = served.emulator, served.url
    result = CliRunner().invoke(
        app,
        [
            "analyze",
            "--kubeconfig",
            str(emulator.kubeconfig),
            "--prometheus",
            url,
            "--cluster",
            CLUSTER,
            "--window",
            "2h",
            "--step",
            "60s",
            "--json",
        ],
        env={"COLUMNS": "240"},
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    gpu = report["gpu"]
    expected = 1 * SPOT_PRICE * 24 * 1.0
    assert gpu["wastedPerDay"] == pytest.approx(expected, abs=1e-4)
    assert not any("dcgm-exporter" in line for line in report["lacking"])
    advice = next(a for a in gpu["advice"] if a["kind"] == "scale-down")
    assert advice["target"] == "deployment/default/idle"
    assert advice["savings_per_day"] == pytest.approx(expected, abs=1e-4)
    assert advice["apply"]["type"] == "set-replicas" and advice["apply"]["replicas"] == 0
    assert advice["apply"]["target"] == {"kind": "Deployment", "namespace": "default", "name": "idle"}
