"""Usage through a real Prometheus: history written by the emulator's usage model, backfilled with
promtool, read back over PromQL by `PrometheusSource`, equal to the values computed from the data."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shipshape.analyzers.efficiency import analysis
from shipshape.analyzers.efficiency.cluster import read_cluster
from shipshape.analyzers.efficiency.usage import (
    ContainerKey,
    UsageData,
    Window,
    bin_max,
    counter_rate,
    series_from_rows,
)
from shipshape.emulator import usage_history
from shipshape.sources.prometheus import PrometheusError, PrometheusSettings, PrometheusSource
from tests.integration.efficiency.prometheus_server import backfill, serving
from tests.unit.analyzers.efficiency.scenario import running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("prometheus")]

CLUSTER = "prod-1"
SAMPLE = 60.0
HOURS = 6
RATE_RANGE = 300.0


@dataclass
class Served:
    url: str
    window: Window
    pods: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    times: list[float]
    om: str
    restarted: ContainerKey
    oom: ContainerKey
    expected: UsageData


def _parse(om: str) -> dict[tuple[str, frozenset[tuple[str, str]]], tuple[list[float], list[float]]]:
    """The samples of the written text, per (metric, labels) (a reader independent of the writer)."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], tuple[list[float], list[float]]] = {}
    for line in om.splitlines():
        if line.startswith("#"):
            continue
        name, rest = line.split("{", 1)
        labels_text, values = rest.rsplit("}", 1)
        labels = frozenset(tuple(p.split("=", 1)) for p in labels_text.replace('"', "").split(","))  # type: ignore[misc]
        value, at = values.split()
        times, vals = out.setdefault((name, labels), ([], []))
        times.append(float(at))
        vals.append(float(value))
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    cluster, model, pods, nodes = running_cluster()
    start = cluster.clock.now()
    times = [start + SAMPLE * i for i in range(int(HOURS * 3600 / SAMPLE) + 1)]
    web = sorted(p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("web"))
    job = next(p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("crunch"))
    restarted = ContainerKey("default", web[0], "app", CLUSTER)
    oom = ContainerKey("default", job, "work", CLUSTER)
    incidents = usage_history.Incidents(
        restarts={
            ContainerKey("default", web[0], "app"): [start + 3 * 3600],
            ContainerKey("default", job, "work"): [start + 3600],
        },
        oom=frozenset({ContainerKey("default", job, "work")}),
    )
    om = usage_history.openmetrics(
        model, pods, [n["metadata"]["name"] for n in nodes], times, cluster=CLUSTER, incidents=incidents
    )
    directory = tmp_path_factory.mktemp("prometheus")
    data = backfill(om, directory)
    window = Window.covering(start + 600, times[-1], SAMPLE)
    # the expected rows, computed from the written samples by the pure helpers
    parsed = _parse(om)
    cpu: dict[Any, Any] = {}
    memory: dict[Any, Any] = {}
    for (name, labels), (ts, vs) in parsed.items():
        d = dict(labels)
        key: Any = (
            d["node"]
            if d.get("id") == "/"
            else ContainerKey(d.get("namespace", ""), d.get("pod", ""), d.get("container", ""), CLUSTER)
        )
        if name == "container_cpu_usage_seconds_total":
            cpu[key] = counter_rate(window, np.array(ts), np.array(vs), RATE_RANGE)
        elif name == "container_memory_working_set_bytes":
            memory[key] = bin_max(window, np.array(ts), np.array(vs))
    container_keys = sorted(k for k in cpu if isinstance(k, ContainerKey))
    node_keys = sorted(k for k in cpu if isinstance(k, str))
    expected = UsageData(
        window,
        series_from_rows(container_keys, [(cpu[k], memory[k]) for k in container_keys], window.steps),
        series_from_rows(node_keys, [(cpu[k], memory[k]) for k in node_keys], window.steps),
        "expected",
        oom_kills={oom: 1},
        restarts={restarted: 1, oom: 1},
        specs={
            ContainerKey(k.namespace, k.pod, k.container, CLUSTER): v
            for k, v in usage_history.specs_of(pods).items()
        },
    )
    with serving(data, directory) as url:
        yield Served(url, window, pods, nodes, times, om, restarted, oom, expected)


def _fetch(served: Served, cluster: str | None = CLUSTER) -> UsageData:
    with PrometheusSource(
        PrometheusSettings(served.url, cluster=cluster, rate_range_seconds=RATE_RANGE)
    ) as source:
        return source.fetch(served.window)


def test_rows_equal_the_values_computed_from_the_written_data(served: Served) -> None:
    got = _fetch(served)
    expected = served.expected
    assert got.containers.keys == expected.containers.keys
    assert got.nodes.keys == expected.nodes.keys
    np.testing.assert_allclose(got.containers.cpu, expected.containers.cpu, rtol=1e-6)
    np.testing.assert_allclose(got.containers.memory, expected.containers.memory, rtol=1e-6)
    np.testing.assert_allclose(got.nodes.cpu, expected.nodes.cpu, rtol=1e-6)
    np.testing.assert_allclose(got.nodes.memory, expected.nodes.memory, rtol=1e-6)
    assert not np.isnan(got.containers.cpu).any()  # the counter reset is no gap


def test_counter_reset_is_handled_like_an_unbroken_counter(served: Served) -> None:
    got = _fetch(served)
    row = got.containers.index(served.restarted)
    assert row is not None
    cpu = got.containers.cpu[row]
    # steady profile: 0.5 cores +-5 % everywhere, also across the restart (the reset loses one
    # sample interval's increase at most, which rate() spreads over its range)
    assert float(np.nanmin(cpu)) > 0.5 * 0.95 * (1 - SAMPLE / RATE_RANGE) - 1e-6
    assert float(np.nanmax(cpu)) < 0.5 * 1.05 + 1e-6


def test_requests_limits_oom_kills_and_restarts_come_from_kube_state_metrics(served: Served) -> None:
    got = _fetch(served)
    assert dict(got.oom_kills) == {served.oom: 1}
    assert got.restarts[served.restarted] == 1 and got.restarts[served.oom] == 1
    spec = got.specs[served.restarted]
    assert (spec.cpu_request, spec.memory_request, spec.memory_limit, spec.cpu_limit) == (
        1.0,
        2.0 * 2**30,
        2.0 * 2**30,
        None,
    )
    assert spec.node == served.nodes[0]["metadata"]["name"]


def test_the_cluster_label_selects_one_cluster(served: Served) -> None:
    assert len(_fetch(served, "another").containers) == 0
    assert len(_fetch(served, None).containers) == 3  # no matcher: every cluster


def test_analysis_through_prometheus_equals_analysis_of_the_written_data(served: Served) -> None:
    got = _fetch(served)
    pods = served.pods
    kwargs: dict[str, Any] = {"node_prices": {served.nodes[0]["metadata"]["name"]: 0.192}}
    cluster = read_cluster(pods, served.nodes, cluster=CLUSTER)
    through = analysis.analyze(pods, served.nodes, got, cluster=cluster, **kwargs)
    direct = analysis.analyze(pods, served.nodes, served.expected, cluster=cluster, **kwargs)
    assert [f.to_json() for f in through.findings] == [f.to_json() for f in direct.findings]
    assert through.oom_replay_kills == 0
    crunch = next(r for r in through.recommendations if r.workload == "crunch")
    assert crunch.oom_kills == 1 and crunch.memory_limit is not None
    peak = crunch.memory_peak or 0.0
    # no limit set: VPA's bump over the peak, max(+20 %, +100 MiB)
    assert crunch.memory_limit >= peak + max(0.2 * peak, 100 * 2**20)


def test_a_prometheus_that_is_not_there_is_one_clear_error(tmp_path: Path) -> None:
    with (
        PrometheusSource(PrometheusSettings("http://127.0.0.1:9", timeout_seconds=2)) as source,
        pytest.raises(PrometheusError, match="cannot reach Prometheus"),
    ):
        source.fetch(Window(0, 60, 10))


def test_hand_computed_values_hold_through_prometheus(served: Served) -> None:
    """The scenario's known profiles (see tests/unit/analyzers/efficiency/scenario.py), read back
    through Prometheus: web uses 0.5 cores +- 5 % and 1.2 GiB +- 2 % per replica."""
    got = _fetch(served)
    cluster = read_cluster(served.pods, served.nodes, cluster=CLUSTER)
    report = analysis.analyze(served.pods, served.nodes, got, cluster=cluster)
    web = next(r for r in report.recommendations if r.workload == "web")
    assert web.cpu_request is not None and 0.475 <= web.cpu_request <= 0.526
    assert web.memory_peak is not None and 1.2 * 2**30 * 0.98 <= web.memory_peak <= 1.2 * 2**30 * 1.02 + 1e3
    (node,) = report.colocation.nodes
    # 4 cores - 40 % - system 0.1 - LS 2 x 0.5 x (1 +- 5 %), as in the emulator-only test; the two
    # restarts lose one sample interval of their counters' increase, which shows as system usage in
    # the steps whose rate range holds the reset (10 of 351), so the p10 figure is the one to hold
    low, high = 4 - 1.6 - 0.1 - 1.05 - 1e-6, 4 - 1.6 - 0.1 - 0.95 + 1e-6
    assert low <= node.cpu.batch.percentile <= high
    assert node.cpu.batch.minimum >= low - 0.5 * SAMPLE / RATE_RANGE
    assert node.ls_pods == 2 and node.batch_pods == 1
