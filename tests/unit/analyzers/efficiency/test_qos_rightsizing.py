"""Colocation and right-sizing on hand-made usage rows: bands, stale metrics, interference,
strategies, guards."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from shipshape.analyzers.efficiency import analysis, qos, rightsizing
from shipshape.analyzers.efficiency.cluster import container_amounts, qos_of, read_cluster
from shipshape.analyzers.efficiency.usage import ContainerKey, Series, UsageData, Window
from shipshape.kube import scheduling

GIB = 2**30
MIB = 2**20


def node(name: str = "n1", cpu: str = "4", memory: str = "16Gi") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"node.kubernetes.io/capacity": "spot"}},
        "status": {"capacity": {"cpu": cpu, "memory": memory}, "allocatable": {"cpu": cpu, "memory": memory}},
    }


def pod(name: str, cpu: str | None, memory: str | None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if cpu or memory:
        resources["requests"] = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "labels": extra.pop("labels", {})},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": resources}], **extra},
        "status": {"phase": "Running"},
    }
    return body


def usage(
    rows: dict[str, tuple[list[float], list[float]]], node_rows: dict[str, tuple[list[float], list[float]]]
) -> UsageData:
    steps = len(next(iter(rows.values()))[0])
    window = Window(0.0, 60.0, steps)
    keys = [ContainerKey("ns", name, "c") for name in rows]

    def series(keys: Any, values: Any) -> Series[Any]:
        return Series(
            tuple(keys),
            np.array([v[0] for v in values], dtype=np.float32).reshape(len(values), steps),
            np.array([v[1] for v in values], dtype=np.float32).reshape(len(values), steps),
        )

    return UsageData(
        window, series(keys, list(rows.values())), series(node_rows.keys(), list(node_rows.values())), "test"
    )


def test_qos_classes_follow_the_kubelet() -> None:
    guaranteed = {"spec": {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    burstable = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}}
    assert _qos(guaranteed) == "Guaranteed"
    assert _qos(burstable) == "Burstable"
    assert _qos({"spec": {"containers": [{"name": "x"}]}}) == "BestEffort"


def _qos(pod: dict[str, Any]) -> str:
    spec = pod["spec"]
    return qos_of(
        [container_amounts(c) for c in [*spec.get("containers", []), *spec.get("initContainers", [])]]
    )


def test_qos_of_parsed_amounts_agrees_with_the_one_rule_on_random_pods() -> None:
    """`qos_of` works on the columns `read_cluster` parsed; `kube.scheduling.qos_class` is the rule."""
    rng = random.Random(7)
    values = [None, "0", "100m", "250m", "1", "2"]
    memories = [None, "0", "128Mi", "256Mi", "1Gi"]

    def resources() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for part in ("requests", "limits"):
            chosen = {"cpu": rng.choice(values), "memory": rng.choice(memories)}
            chosen = {k: v for k, v in chosen.items() if v is not None}
            if chosen:
                out[part] = chosen
        return out

    for _ in range(3000):
        containers = [{"name": f"c{i}", "resources": resources()} for i in range(rng.randint(1, 3))]
        pod: dict[str, Any] = {"spec": {"containers": containers}}
        if rng.random() < 0.3:
            pod["spec"]["initContainers"] = [{"name": "init", "resources": resources()}]
        assert _qos(pod) == scheduling.qos_class(pod), pod


@pytest.mark.parametrize(
    ("labels", "priority", "kind", "qos_name", "band"),
    [
        ({"koordinator.sh/priority-class": "koord-batch"}, None, "Deployment", "Guaranteed", "batch"),
        (
            {"shipshape.dev/priority-band": "latency-sensitive"},
            None,
            "Job",
            "BestEffort",
            "latency-sensitive",
        ),
        ({}, 5500, "Deployment", "Burstable", "batch"),
        ({}, 9100, "Job", "BestEffort", "latency-sensitive"),
        ({}, -5, "Deployment", "Burstable", "batch"),
        ({}, 0, "Job", "Burstable", "batch"),
        ({}, None, "Deployment", "BestEffort", "batch"),
        ({}, 1000, "StatefulSet", "Burstable", "latency-sensitive"),
    ],
)
def test_priority_bands(
    labels: dict[str, str], priority: int | None, kind: str, qos_name: str, band: str
) -> None:
    assert qos.priority_band(labels, priority, kind, qos_name)[0] == band


def test_priority_comes_from_the_priority_class() -> None:
    cluster = read_cluster(
        [pod("a", "1", "1Gi", priorityClassName="koord-batch")],
        [node()],
        priority_classes=[{"metadata": {"name": "koord-batch"}, "value": 5000}],
    )
    assert qos.pod_bands(cluster)[0] == ("batch", "priority 5000 in 5000-5999")


def test_stale_node_metrics_withdraw_batch_capacity_and_peaks_flag_interference() -> None:
    steps = 40  # 40 minutes; the node metric stops after step 10
    ls_cpu = [1.0] * 20 + [3.0] * 20
    batch_cpu = [2.5] * 40
    node_cpu = [4.0] * 10 + [float("nan")] * 30
    data = usage(
        {"ls": (ls_cpu, [GIB] * steps), "job": (batch_cpu, [GIB] * steps)},
        {"n1": (node_cpu, [3 * GIB] * 10 + [float("nan")] * 30)},
    )
    cluster = read_cluster([pod("ls", "2", "2Gi"), pod("job", None, None)], [node()])
    report = qos.colocation(cluster, data)
    (n1,) = report.nodes
    # fresh for 15 minutes after the last sample (steps 10..24), then stale: no batch capacity
    assert n1.stale_steps == 15
    # at step 0: 4 - 1.6 - max(4 - 3.5, 0) - 1 = 0.9
    assert n1.cpu.batch.maximum == pytest.approx(0.9)
    assert n1.cpu.batch.minimum == 0.0
    # LS peak 3 + batch peak 2.5 + system peak 0.5 > 4 cores
    assert n1.cpu.peaks_exceed_capacity and n1.interference_risk
    assert n1.cpu.coincident_overflow_steps == 20
    findings = analysis.analyze([pod("ls", "2", "2Gi"), pod("job", None, None)], [node()], data).findings
    assert any(f.kind == "interference" and f.target == "n1" for f in findings)


def test_an_ls_pod_without_samples_counts_with_its_request() -> None:
    nan = float("nan")
    data = usage({"ls": ([nan, 1.0], [nan, GIB])}, {"n1": ([0.0, 1.0], [0.0, GIB])})
    cluster = read_cluster([pod("ls", "2", "2Gi")], [node()])
    (n1,) = qos.colocation(cluster, data).nodes
    assert n1.cpu.batch.minimum == pytest.approx(4 - 1.6 - 0 - 2)  # step 0: the 2-core request
    assert n1.cpu.batch.maximum == pytest.approx(4 - 1.6 - 0 - 1)


def test_strategies_and_guards() -> None:
    window = Window(0.0, 300.0, 2016)  # 7 days at 5 minutes
    rng = np.random.default_rng(1)
    cpu = rng.uniform(0.1, 0.3, size=(3, 2016)).astype(np.float32)
    memory = np.full((3, 2016), 500 * MIB, dtype=np.float32)
    memory[1, 100] = 900 * MIB  # one spike
    cpu[2, :1000] = np.nan  # half the window missing
    guards = rightsizing.Guards(
        rightsizing.row_max(memory), np.array([np.nan, 800 * MIB, np.nan]), np.array([False, True, False])
    )
    simple_cpu, simple_memory = rightsizing.recommend("simple", cpu, memory, window, guards)
    assert simple_cpu[0] == pytest.approx(np.ceil(np.percentile(cpu[0].astype(np.float64), 95) * 1000) / 1000)
    assert simple_cpu[2] == pytest.approx(
        np.ceil(np.nanpercentile(cpu[2].astype(np.float64), 95) * 1000) / 1000
    )
    assert simple_memory[0] == np.ceil(500 * 1.15) * MIB
    # OOM-killed with an 800 MiB limit and a 900 MiB peak: 900 + max(20 %, 100 MiB)
    assert simple_memory[1] == 1080 * MIB
    vpa_cpu, vpa_memory = rightsizing.recommend("vpa", cpu, memory, window, guards)
    assert 0.25 < vpa_cpu[0] < 0.3 * 1.05 * 1.15 + 0.001  # p90 of U(0.1, 0.3) is 0.28, + margin
    assert vpa_memory[0] >= 500 * 1.15 * MIB
    assert vpa_memory[1] >= 900 * MIB  # never below the peak
    assert rightsizing.oom_replay(memory, vpa_memory).sum() == 0
    low = rightsizing.recommend(
        "simple", cpu, memory, window, guards, rightsizing.SimpleSettings(memory_buffer_percent=0)
    )
    assert rightsizing.oom_replay(memory, low[1]).sum() == 0
    with pytest.raises(ValueError, match="unknown right-sizing strategy"):
        rightsizing.recommend("nope", cpu, memory, window, guards)
    with pytest.raises(ValueError, match="takes SimpleSettings"):
        rightsizing.recommend("simple", cpu, memory, window, guards, rightsizing.VpaSettings())


def test_row_percentile_matches_numpy_with_and_without_gaps() -> None:
    rng = np.random.default_rng(2)
    rows = rng.random((50, 97))
    rows[::3, rng.integers(0, 97, 10)] = np.nan
    rows[7] = np.nan
    got = rightsizing.row_percentile(rows, 87.5)
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        want = np.nanpercentile(rows, 87.5, axis=1)
    np.testing.assert_allclose(got, want, equal_nan=True)


def test_missing_requests_gaps_and_short_history_are_said() -> None:
    steps = 100
    cpu = [0.2] * steps
    cpu_gappy = [float("nan")] * 30 + [0.2] * 70
    data = usage(
        {"bare": (cpu, [300 * MIB] * steps), "gappy": (cpu_gappy, [300 * MIB] * steps)},
        {"n1": ([1.0] * steps, [GIB] * steps)},
    )
    pods = [pod("bare", None, None), pod("gappy", "1", "1Gi")]
    report = analysis.analyze(pods, [node()], data, node_prices={"n1": 0.2})
    bare = next(f for f in report.findings if f.target == "ns/Pod/bare/c")
    assert (
        "requests: no CPU request set" in bare.lacking and "requests: no memory request set" in bare.lacking
    )
    assert bare.monthly_savings is not None and bare.monthly_savings < 0  # setting requests costs money
    assert bare.instruction is None  # a bare pod has no template to patch
    gappy = next(f for f in report.findings if f.target == "ns/Pod/gappy/c")
    assert "gaps: 30% of the window has no samples" in gappy.lacking
    assert any(line.startswith("history: 1.2 h") for line in gappy.lacking)


def test_an_empty_cluster_and_nodes_without_pods() -> None:
    empty = UsageData(Window(0, 60, 3), Series.empty(3), Series.empty(3), "test")
    report = analysis.analyze([], [], empty)
    assert report.findings == () and report.recommendations == () and report.oom_replay_kills == 0
    lonely = analysis.analyze([], [node()], empty)
    (n1,) = lonely.colocation.nodes
    # no node usage in the data at all: system usage taken as the kubelet reservation (none here),
    # and the report says what it lacked
    assert n1.cpu.batch.maximum == 4 - 1.6 and lonely.colocation.lacking


def test_node_sums_equal_a_plain_loop_whatever_the_row_order() -> None:
    rng = np.random.default_rng(5)
    n_rows, n_nodes, steps = 700, 9, 12
    rows = rng.random((n_rows, steps)).astype(np.float32)
    rows[rng.random((n_rows, steps)) < 0.1] = np.nan
    node_of_row = rng.integers(-1, n_nodes, n_rows)
    ls_row = rng.random(n_rows) < 0.7
    request = rng.random(n_rows)
    placed = np.flatnonzero(node_of_row >= 0)
    order = placed[np.argsort(node_of_row[placed] * 2 + (~ls_row[placed]).astype(np.int64), kind="stable")]
    block = order[(node_of_row[order] >= 2) & (node_of_row[order] < 7)]
    ls_used, batch_used, ls_filled, ls_max = qos._node_sums(
        rows, request, node_of_row, ls_row, block, 2, 5, True
    )
    assert ls_max is not None
    for node_index in range(2, 7):
        mine = node_of_row == node_index
        values = rows[mine].astype(np.float64)
        ls = ls_row[mine]
        filled = np.where(np.isnan(values), request[mine][:, None], values)
        np.testing.assert_allclose(ls_used[node_index - 2], np.nansum(values[ls], axis=0), rtol=1e-6)
        np.testing.assert_allclose(batch_used[node_index - 2], np.nansum(values[~ls], axis=0), rtol=1e-6)
        np.testing.assert_allclose(ls_filled[node_index - 2], filled[ls].sum(axis=0), rtol=1e-6)
        top = np.maximum(filled[ls], request[mine][ls][:, None])
        np.testing.assert_allclose(ls_max[node_index - 2], top.sum(axis=0), rtol=1e-6)


def test_node_sums_with_bands_interleaved_on_a_node() -> None:
    # LS rows 0 and 2, batch rows 1 and 3: (node, band) order is 0, 2, 1, 3 (not a slice)
    rows = np.array([[1.0], [10.0], [100.0], [1000.0]], dtype=np.float32)
    node_of_row = np.zeros(4, dtype=np.int64)
    ls_row = np.array([True, False, True, False])
    order = np.array([0, 2, 1, 3])
    ls_used, batch_used, _, _ = qos._node_sums(rows, np.zeros(4), node_of_row, ls_row, order, 0, 1, False)
    assert ls_used[0, 0] == 101.0 and batch_used[0, 0] == 1010.0
