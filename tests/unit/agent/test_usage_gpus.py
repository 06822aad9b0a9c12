"""GPU lines in the agent's usage: dcgm-exporter's per-device activity (from the cluster's
Prometheus) folded into one line per pod when a bucket closes, valid against the usage contract;
Prometheus away means reports without GPU lines, said once, never a lost bucket."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from shipshape.agent.spool import Spool
from shipshape.agent.usage import RecordedMetrics, UsageLoop, UsageSettings, gpu_lines
from shipshape.contracts.usage import parse_usage
from shipshape.kube.clock import VirtualClock
from shipshape.sources.prometheus import GpuSample, PrometheusError
from tests.unit.agent.test_usage import T0, WALL, RecordingPusher, owner_of, sample


def device(pod: str, gpu: str, mean: float, high: float, samples: int = 10) -> GpuSample:
    return GpuSample("shop", pod, "n1", gpu, "Tesla-T4", mean, high, samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")


class FakePrometheus:
    def __init__(self) -> None:
        self.samples: list[GpuSample] = []
        self.error: PrometheusError | None = None
        self.asked: list[tuple[float, float]] = []

    def gpu_activity(self, end: float, range_seconds: float) -> list[GpuSample]:
        self.asked.append((end, range_seconds))
        if self.error is not None:
            raise self.error
        return self.samples


def test_devices_fold_into_one_line_per_pod_of_this_cluster() -> None:
    lines = gpu_lines(
        [
            device("web-7d9f-a", "0", 0.1, 0.4, 8),
            device("web-7d9f-a", "1", 0.3, 0.5, 10),
            device("elsewhere-0", "0", 0, 0),  # not in the mirror: another cluster's pod
            device("Bad_Name", "0", 0, 0),  # a label the contract refuses: left out, not the bucket
        ],
        lambda namespace, name: ("Pod", name) if name == "Bad_Name" else owner_of(namespace, name),
        300,
    )
    assert lines == [
        {
            "namespace": "shop",
            "name": "web-7d9f-a",
            "workload": {"kind": "Deployment", "name": "web"},
            "devices": 2,
            "model": "Tesla-T4",
            "samples": 10,
            "activity_mean": pytest.approx(0.2),
            "activity_max": 0.5,
        }
    ]


def _loop(tmp_path: Path, prometheus: FakePrometheus) -> tuple[UsageLoop, VirtualClock]:
    clock = VirtualClock(T0)
    loop = UsageLoop(
        RecordedMetrics(),
        owner_of,
        RecordingPusher(),  # type: ignore[arg-type]
        Spool(tmp_path / "usage"),
        clock,
        UsageSettings(interval=30, bucket_seconds=300),
        wall=lambda: WALL,
        gpu=prometheus,
    )
    return loop, clock


def test_a_closed_bucket_carries_its_gpu_lines(tmp_path: Path) -> None:
    prometheus = FakePrometheus()
    prometheus.samples = [device("web-7d9f-a", "0", 0.0, 0.01, 300)]
    loop, clock = _loop(tmp_path, prometheus)
    loop.aggregator.add_pod(sample("web-7d9f-a", T0 + 10, 0.1))
    clock.set(T0 + 300 + 30)
    assert loop.close_due() == 1
    assert prometheus.asked == [(T0 + 300.0, 300.0)]  # the bucket's own range, at its end
    (item,) = loop.spool.items()
    report = parse_usage(orjson.loads(item.body()))
    (line,) = report.gpus
    assert (line.name, line.devices, line.activity_mean, line.activity_max, line.samples) == (
        "web-7d9f-a", 1, 0.0, 0.01, 300,
    )  # fmt: skip


def test_prometheus_away_means_no_gpu_lines_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prometheus = FakePrometheus()
    prometheus.error = PrometheusError("cannot reach Prometheus at http://p:9090: refused")
    loop, clock = _loop(tmp_path, prometheus)
    with caplog.at_level(logging.INFO, logger="shipshape.agent.usage"):
        for bucket in range(3):
            loop.aggregator.add_pod(sample("web-7d9f-a", T0 + bucket * 300 + 10, 0.1))
            clock.set(T0 + (bucket + 1) * 300 + 30)
            assert loop.close_due() == 1  # the usage goes on
        prometheus.error = None
        prometheus.samples = [device("web-7d9f-a", "0", 0.5, 0.6)]
        loop.aggregator.add_pod(sample("web-7d9f-a", T0 + 3 * 300 + 10, 0.1))
        clock.set(T0 + 4 * 300 + 30)
        loop.close_due()
    bodies = [orjson.loads(item.body()) for item in loop.spool.items()]
    assert ["gpus" in body for body in bodies] == [False, False, False, True]
    assert all(parse_usage(body).pods for body in bodies)
    warnings = [r for r in caplog.records if "GPU activity unavailable" in r.getMessage()]
    assert len(warnings) == 1 and "cannot reach Prometheus" in warnings[0].getMessage()
    assert any("answers again" in r.getMessage() for r in caplog.records)
    assert loop.gpu_available is True
