"""An emulated cluster with known usage profiles: reclaimable capacity and right-sizing findings
equal hand-computed values (within the usage model's documented jitter where it applies)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shipshape.analyzers.efficiency import analysis, qos
from shipshape.analyzers.efficiency.analysis import AnalysisSettings
from shipshape.analyzers.efficiency.usage import UsageData, Window
from shipshape.emulator import usage_history
from tests.unit.analyzers.efficiency.scenario import GIB, RESERVED_MEMORY_BYTES, running_cluster

MIB = 2**20
PRICE = 0.192  # USD/h given for the node
RESERVED_MEMORY = RESERVED_MEMORY_BYTES
CORE_SHARE = 4 * 0.031611 / (4 * 0.031611 + 16 * 0.004237)
PER_CORE = PRICE * CORE_SHARE / 4
PER_GIB = PRICE * (1 - CORE_SHARE) / 16


@pytest.fixture(scope="module")
def recorded() -> tuple[list[dict[str, Any]], list[dict[str, Any]], UsageData]:
    cluster, model, pods, nodes = running_cluster()
    window = Window(cluster.clock.now(), 60.0, 6 * 60)
    return pods, nodes, usage_history.record(model, pods, [n["metadata"]["name"] for n in nodes], window)


def _report(recorded: Any, **settings: Any) -> analysis.EfficiencyReport:
    pods, nodes, usage = recorded
    prices = {nodes[0]["metadata"]["name"]: PRICE}
    return analysis.analyze(pods, nodes, usage, node_prices=prices, settings=AnalysisSettings(**settings))


def test_pods_are_classified_by_kind_and_qos(recorded: Any) -> None:
    report = _report(recorded)
    pods = recorded[0]
    bands = {
        p["metadata"]["name"].split("-")[0]: band
        for p, band in zip(pods, report.colocation.bands, strict=True)
    }
    assert bands == {"web": ("latency-sensitive", "Burstable QoS"), "crunch": ("batch", "owned by a Job")}


def test_reclaimable_batch_capacity_by_usage_policy(recorded: Any) -> None:
    (node,) = _report(recorded).colocation.nodes
    # cpu: 4 - 4 x 40 % - system 0.1 (the model's, above the 80m reservation) - LS 2 x 0.5 x (1 +- 5 %)
    # (usage rows are float32: 1e-6 of slack)
    assert (
        4 - 1.6 - 0.1 - 1.05 - 1e-6
        <= node.cpu.batch.minimum
        <= node.cpu.batch.maximum
        <= 4 - 1.6 - 0.1 - 0.95 + 1e-6
    )
    # memory: 16 GiB - 35 % - the kubelet reservation (above the model's 512 MiB)
    # - LS 2 x 1.2 GiB x (1 +- 2 %)
    base = 16 * GIB * 0.65 - RESERVED_MEMORY
    assert (
        base - 2.4 * GIB * 1.02 - 1e-6 * 16 * GIB
        <= node.memory.batch.minimum
        <= node.memory.batch.maximum
        <= base - 2.4 * GIB * 0.98 + 1e-6 * 16 * GIB
    )
    assert node.ls_pods == 2 and node.batch_pods == 1 and node.stale_steps == 0
    assert not node.interference_risk


def test_request_and_max_usage_request_policies_are_exact(recorded: Any) -> None:
    settings = qos.ColocationSettings(
        cpu_calculate_policy="maxUsageRequest", memory_calculate_policy="request"
    )
    (node,) = _report(recorded, colocation=settings).colocation.nodes
    # cpu: LS use half their requests, so max(used, request) = the requests, 2 cores
    assert node.cpu.batch.minimum == pytest.approx(4 - 1.6 - 0.1 - 2.0)
    assert node.cpu.batch.maximum == pytest.approx(4 - 1.6 - 0.1 - 2.0)
    # memory by request: 16 GiB x 65 % - reserved - 2 x 2 GiB
    assert node.memory.batch.minimum == pytest.approx(16 * GIB * 0.65 - RESERVED_MEMORY - 4 * GIB)


def test_thresholds_are_configurable_and_the_result_floored_at_zero(recorded: Any) -> None:
    settings = qos.ColocationSettings(cpu_reclaim_threshold_percent=20, memory_reclaim_threshold_percent=10)
    (node,) = _report(recorded, colocation=settings).colocation.nodes
    assert node.cpu.batch.maximum == 0.0  # 4 x 20 % - 0.1 - ~1.0 < 0
    assert node.memory.batch.maximum == 0.0


def test_right_sizing_web_and_its_savings(recorded: Any) -> None:
    report = _report(recorded)
    web = next(r for r in report.recommendations if r.workload == "web")
    assert (web.kind, web.pods, web.current_cpu_request, web.current_memory_request) == (
        "Deployment",
        2,
        1.0,
        2 * GIB,
    )
    assert web.cpu_request is not None and web.memory_request is not None and web.memory_peak is not None
    # cpu p95 of 0.5 x (1 +- 5 %), rounded up to 1m
    assert 0.475 <= web.cpu_request <= 0.526
    # memory: the peak of 1.2 GiB x (1 +- 2 %) plus 15 %, rounded up to 1 MiB; request = limit
    assert web.memory_peak <= 1.2 * GIB * 1.02 + 1e-6 * GIB
    assert web.memory_request == np.ceil(web.memory_peak * 1.15 / MIB) * MIB == web.memory_limit
    expected = 2 * ((1.0 - web.cpu_request) * PER_CORE + (2 * GIB - web.memory_request) / GIB * PER_GIB) * 730
    assert web.monthly_savings == pytest.approx(expected)
    assert expected >= 2 * (0.474 * PER_CORE + 0.59 * PER_GIB) * 730
    finding = next(f for f in report.findings if f.target == "default/Deployment/web/app")
    assert finding.instruction is not None
    patch = finding.instruction["patch"]["spec"]["template"]["spec"]["containers"][0]
    assert patch["resources"]["limits"]["memory"] == patch["resources"]["requests"]["memory"]
    assert "history: 6.0 h of the 168 h wanted" in finding.lacking
    assert finding.confidence == pytest.approx(6 / 168)


def test_replaying_the_window_no_recommendation_would_have_oom_killed(recorded: Any) -> None:
    usage = recorded[2]
    for strategy in ("simple", "vpa"):
        report = _report(recorded, strategy=strategy)
        assert report.oom_replay_kills == 0
        for rec in report.recommendations:
            for key in usage.containers.keys:
                if key.container == rec.container and key.pod.startswith(rec.workload):
                    row = usage.containers.row(key)
                    assert row is not None and rec.memory_limit is not None
                    assert float(np.nanmax(row[1])) <= rec.memory_limit


def test_an_hpa_on_cpu_leaves_the_cpu_request_and_says_so(recorded: Any) -> None:
    pods, nodes, usage = recorded
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2,
            "maxReplicas": 5,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}],
        },
    }
    report = analysis.analyze(pods, nodes, usage, hpas=[hpa])
    web = next(r for r in report.recommendations if r.workload == "web")
    assert web.cpu_request is None and web.memory_request is not None
    assert any("HPA web scales on cpu" in s for s in web.skipped)
    skip_all = analysis.analyze(pods, nodes, usage, hpas=[hpa], settings=AnalysisSettings(hpa_policy="skip"))
    web = next(r for r in skip_all.recommendations if r.workload == "web")
    assert web.cpu_request is None and web.memory_request is None
