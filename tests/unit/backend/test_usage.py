"""Stored usage, pure parts: the usage contract's checks, reports folded onto slots and merged into
chunks (weighted means, highest values, several buckets in one slot), chunks laid out on a window,
the analyzers' UsageData per pod container, and right-sizing recommendations with hand-computed
requests, savings and instruction."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from shipshape.analyzers.efficiency.analysis import CPU_HOUR_LIST_PRICE, GIB_HOUR_LIST_PRICE
from shipshape.backend import analysis
from shipshape.backend import usage as store
from shipshape.contracts.instructions import SetContainerRequests
from shipshape.contracts.usage import UsageReport, parse_usage
from shipshape.pricing.catalog import default_catalog

T0 = 1_767_225_600  # a multiple of 300 and of 300 x 72
MIB = 2**20


def report(
    start: int, pods: list[dict[str, Any]], nodes: list[dict[str, Any]] = (), bucket: int = 300
) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "schema": "shipshape.dev/usage/v1",
        "bucket_start": datetime.fromtimestamp(start, UTC).isoformat(),
        "bucket_seconds": bucket,
        "taken_at": datetime.fromtimestamp(start + bucket, UTC).isoformat(),
        "pods": pods,
        "nodes": list(nodes),
    }


def pod_usage(
    name: str, cpu: float, memory: float, samples: int = 10, workload: str = "web"
) -> dict[str, Any]:
    return {
        "namespace": "shop",
        "name": name,
        "workload": {"kind": "Deployment", "name": workload},
        "containers": [
            {"name": "app", "samples": samples, "cpu_mean": cpu, "cpu_max": cpu, "memory_max": memory}
        ],
    }


def node_usage(cpu: float, memory: float) -> dict[str, Any]:
    return {"name": "n1", "samples": 10, "cpu_mean": cpu, "cpu_max": cpu, "memory_max": memory}


def test_the_contract_refuses_what_it_cannot_store() -> None:
    good = report(T0, [pod_usage("web-a", 0.2, 256 * MIB)])
    parsed = parse_usage(good)
    assert parsed.idempotency_key() == f"usage-{T0}" and parsed.start == T0
    bad_container = {"name": "app", "samples": 1, "cpu_mean": 0.5, "cpu_max": 0.2, "memory_max": 1}
    for broken, problem in [
        ({**good, "bucket_start": datetime.fromtimestamp(T0 + 7, UTC).isoformat()}, "multiple of"),
        ({**good, "bucket_start": "2026-01-01T00:00:00"}, "offset"),
        ({**good, "pods": [pod_usage("web-a", 0.2, 1, samples=301)]}, "samples in a bucket"),
        ({**good, "pods": [{**pod_usage("web-a", 0.2, 1), "containers": [bad_container]}]}, "above cpu_max"),
        ({**good, "pods": [pod_usage("web-a", -1, 1)]}, "greater than or equal"),
        ({**good, "pods": [pod_usage("web-a", math.nan, 1)]}, "finite"),
        ({**good, "pods": [pod_usage("web-a", 0.1, 1), pod_usage("web-a", 0.1, 1)]}, "appears twice"),
        ({**good, "pods": [pod_usage("Web_A", 0.1, 1)]}, "pattern"),
        ({**good, "surprise": 1}, "Extra inputs"),
    ]:
        with pytest.raises(ValidationError, match=problem):
            parse_usage(broken)
    with pytest.raises(ValueError, match="unknown schema"):
        parse_usage({**good, "schema": "shipshape.dev/usage/v9"})


def _fold_into(chunks: dict[Any, store.Chunk], body: dict[str, Any], step: int = 300) -> store.Folded:
    folded = store.fold(parse_usage(body), step)
    for key, part in folded.workloads.items():
        chunks.setdefault((key, folded.chunk_start), store.Chunk.empty()).merge(folded.slot, part)
    for name, part in folded.nodes.items():
        chunks.setdefault((name, folded.chunk_start), store.Chunk.empty()).merge(folded.slot, part)
    return folded


def test_pods_of_a_workload_fold_into_one_series_and_buckets_merge_into_their_slot() -> None:
    chunks: dict[Any, store.Chunk] = {}
    # two 60-s buckets of the same 300-s slot; two replicas of web
    _fold_into(
        chunks,
        report(
            T0 + 60, [pod_usage("web-a", 0.2, 200 * MIB, 2), pod_usage("web-b", 0.4, 300 * MIB, 2)], bucket=60
        ),
    )
    folded = _fold_into(chunks, report(T0 + 120, [pod_usage("web-a", 0.5, 250 * MIB, 2)], bucket=60))
    key = store.SeriesKey("shop", "Deployment", "web", "app")
    chunk = chunks[(key, T0)]
    assert folded.slot == 0 and folded.bucket_end == T0 + 180
    assert chunk.samples[0] == 6
    assert chunk.cpu_mean[0] == pytest.approx((0.2 * 2 + 0.4 * 2 + 0.5 * 2) / 6)
    assert chunk.cpu_high[0] == pytest.approx(0.5)  # the busiest replica's mean
    assert chunk.memory_max[0] == 300 * MIB
    assert np.isnan(chunk.cpu_mean[1]) and chunk.samples[1] == 0
    again = store.Chunk.from_bytes(chunk.to_bytes())
    assert again.to_bytes() == chunk.to_bytes() and len(chunk.to_bytes()) == store.CHUNK_BYTES
    with pytest.raises(store.UsageStoreError, match="does not divide"):
        store.fold(parse_usage(report(T0, [pod_usage("web-a", 0.1, 1)], bucket=70 * 3)), 300)


def test_chunks_lay_out_on_a_window_across_chunk_boundaries_with_gaps() -> None:
    chunks: dict[Any, store.Chunk] = {}
    step = 300
    span = step * store.SLOTS
    starts = [
        T0 + span - 600,
        T0 + span - 300,
        T0 + span + 300,
    ]  # the last two slots of a chunk, a gap, then the next
    for i, start in enumerate(starts):
        _fold_into(chunks, report(start, [pod_usage("web-a", 0.1 * (i + 1), (100 + i) * MIB)]))
    window = store.slot_window(starts[0], starts[-1] + step, step, 168)
    assert (window.first, window.last, window.steps) == (starts[0], starts[-1], 4)
    rows = store.lay_out([(k, start, c.to_bytes()) for (k, start), c in chunks.items()], window)
    assert len(rows.keys) == 1
    assert np.allclose(rows.cpu[0], [0.1, 0.2, np.nan, 0.3], equal_nan=True)
    assert rows.memory[0][3] == 102 * MIB and rows.samples[0] == 30
    # the window keeps the newest `window_hours`
    assert store.slot_window(T0, T0 + 10 * 3600, step, 1).steps == 12


def test_coarsening_keeps_the_highest_values() -> None:
    rows = np.array([[1, 5, np.nan, 2, np.nan, np.nan, 7]], dtype=np.float32)
    assert np.allclose(store.coarsen(rows, 3), [[5, 2, 7]])
    assert store.coarsening(1000, 2016, budget=1_000_000) == 3


NODE_PRICE = default_catalog().on_demand_price("m5.xlarge", "us-east-1")


def _objects(hpa: bool = False) -> dict[str, list[dict[str, Any]]]:
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}}
    pods = [
        {
            "metadata": {
                "name": f"web-7d9f-{suffix}",
                "namespace": "shop",
                "labels": {"app": "web", "pod-template-hash": "7d9f"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d9f", "controller": True}],
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "resources": resources}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "app", "restartCount": 0}]},
        }
        for suffix in ("a", "b")
    ]
    node = {
        "metadata": {
            "name": "n1",
            "labels": {
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "node.kubernetes.io/capacity": "on-demand",
            },
        },
        "status": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {"cpu": "4", "memory": "16Gi"}},
    }
    deployment = {
        "metadata": {"name": "web", "namespace": "shop", "generation": 3, "resourceVersion": "77"},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "app", "resources": resources}]}},
        },
    }
    hpas = [
        {
            "apiVersion": "autoscaling/v2",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "web"},
                "maxReplicas": 5,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu"}}],
            },
        }
    ]
    return {
        "pods": pods,
        "nodes": [node],
        "deployments": [deployment],
        "horizontalpodautoscalers": hpas if hpa else [],
    }


def _inputs(
    objects: dict[str, list[dict[str, Any]]], slots: int, settings: analysis.EfficiencySettings
) -> analysis.EfficiencyInputs:
    chunks: dict[Any, store.Chunk] = {}
    for i in range(slots):
        start = T0 + i * 300
        _fold_into(
            chunks,
            report(
                start,
                [pod_usage("web-7d9f-a", 0.2, 256 * MIB), pod_usage("web-7d9f-b", 0.2, 256 * MIB)],
                [node_usage(0.6, 3 * 2**30)],
            ),
        )
    window = store.slot_window(T0, T0 + slots * 300, 300, settings.window_hours)
    workloads = [(k, s, c.to_bytes()) for (k, s), c in chunks.items() if isinstance(k, store.SeriesKey)]
    nodes = [(k, s, c.to_bytes()) for (k, s), c in chunks.items() if isinstance(k, str)]
    return analysis.EfficiencyInputs(
        objects, window, store.lay_out(workloads, window), store.lay_out(nodes, window, "cpu_mean"), {}
    )


def test_right_sizing_a_deployment_by_hand() -> None:
    settings = analysis.EfficiencySettings(window_hours=168, min_history_hours=1)
    findings = analysis.efficiency_findings(_inputs(_objects(), 24, settings), settings)
    (rec,) = [f for f in findings if f.kind == "right-sizing"]
    # simple strategy: cpu = p95 of 0.2 = 200m; memory = peak 256 MiB x 1.15 = 294.4 -> 295 MiB
    assert isinstance(rec.instruction, SetContainerRequests)
    assert rec.instruction.target.text() == "Deployment/shop/web"
    assert rec.instruction.precondition.generation == 3
    app = rec.instruction.containers["app"]
    assert app.requests == {"cpu": "200m", "memory": "295Mi"} and app.limits == {"memory": "295Mi"}
    # savings: 2 pods x ((1 - 0.2) cores x core price + (1024 - 295) / 1024 GiB x GiB price) x 730 h
    assert NODE_PRICE is not None
    weight_cpu, weight_memory = 4 * CPU_HOUR_LIST_PRICE, 16 * GIB_HOUR_LIST_PRICE
    per_core = NODE_PRICE * weight_cpu / (weight_cpu + weight_memory) / 4
    per_gib = NODE_PRICE * weight_memory / (weight_cpu + weight_memory) / 16
    expected = 2 * ((1 - 0.2) * per_core + (1024 - 295) / 1024 * per_gib) * 730
    assert rec.monthly_savings_usd == pytest.approx(expected, abs=0.01)
    # confidence: 2 h of the 168 h wanted
    assert rec.confidence == pytest.approx(2 / 168, rel=1e-3)
    evidence = rec.evidence["containers"]["app"]
    assert evidence["samples"] == 24 * 20 and evidence["memory_peak_bytes"] == 256 * MIB
    assert evidence["cpu_strategy_cores"] == pytest.approx(0.2)
    assert rec.fingerprint == "right-sizing:Deployment/shop/web@3"
    assert any("200m" in line and "295Mi" in line for line in rec.evidence["summary"])
    # a colocation finding from the node rows (the advisory QoS recommendation)
    assert any(f.kind == "qos-colocation" for f in findings)


def test_an_hpa_on_cpu_leaves_the_cpu_request_and_short_history_waits() -> None:
    settings = analysis.EfficiencySettings(window_hours=168, min_history_hours=1)
    (rec,) = [
        f
        for f in analysis.efficiency_findings(_inputs(_objects(hpa=True), 24, settings), settings)
        if f.kind == "right-sizing"
    ]
    assert isinstance(rec.instruction, SetContainerRequests)
    assert rec.instruction.containers["app"].requests == {"memory": "295Mi"}
    assert any("HPA web scales on cpu" in note for note in rec.evidence["containers"]["app"]["skipped"])
    waiting = analysis.EfficiencySettings(window_hours=168, min_history_hours=3)
    assert not [
        f
        for f in analysis.efficiency_findings(_inputs(_objects(), 24, waiting), waiting)
        if f.kind == "right-sizing"
    ]


def test_never_below_the_memory_peak_of_the_window() -> None:
    settings = analysis.EfficiencySettings(window_hours=168, min_history_hours=0)
    inputs = _inputs(_objects(), 24, settings)
    key = store.SeriesKey("shop", "Deployment", "web", "app")
    inputs.workloads.memory[inputs.workloads.index[key], 5] = 700 * MIB  # one slot's peak
    (rec,) = [f for f in analysis.efficiency_findings(inputs, settings) if f.kind == "right-sizing"]
    assert isinstance(rec.instruction, SetContainerRequests)
    assert rec.instruction.containers["app"].requests["memory"] == f"{math.ceil(700 * 1.15)}Mi"


def test_usage_data_gives_every_live_pod_its_workload_row() -> None:
    from shipshape.analyzers.efficiency.cluster import read_cluster

    settings = analysis.EfficiencySettings(window_hours=168, min_history_hours=0)
    inputs = _inputs(_objects(), 6, settings)
    cluster = read_cluster(inputs.objects["pods"], inputs.objects["nodes"])
    usage, factor = store.usage_data(
        cluster, inputs.objects["pods"], inputs.workloads, inputs.nodes, inputs.window
    )
    assert factor == 1 and usage.window.steps == 6 and usage.window.step == 300
    assert [str(k) for k in usage.containers.keys] == ["shop/web-7d9f-a/app", "shop/web-7d9f-b/app"]
    assert np.allclose(usage.containers.cpu, 0.2) and usage.nodes.keys == ("n1",)
    coarse, factor = store.usage_data(
        cluster, inputs.objects["pods"], inputs.workloads, inputs.nodes, inputs.window, budget=9
    )
    assert factor == 2 and coarse.window.step == 600 and coarse.window.steps == 3


def test_a_report_parses_into_the_model_it_was_built_from() -> None:
    parsed = parse_usage(report(T0, [pod_usage("web-a", 0.2, 256 * MIB)], [node_usage(0.5, 2**30)]))
    assert isinstance(parsed, UsageReport) and parsed.nodes[0].name == "n1"


def test_the_vpa_strategy_and_two_containers_in_one_instruction() -> None:
    objects = _objects()
    sidecar = {
        "name": "proxy",
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "100m"}},
    }
    for pod in objects["pods"]:
        pod["spec"]["containers"].append(sidecar)
    objects["deployments"][0]["spec"]["template"]["spec"]["containers"].append(sidecar)
    settings = analysis.EfficiencySettings(window_hours=168, min_history_hours=1, strategy="vpa")
    inputs = _inputs(objects, 24, settings)
    chunks: dict[Any, store.Chunk] = {}
    for i in range(24):
        body = report(T0 + i * 300, [pod_usage(f"web-7d9f-{s}", 0.2, 256 * MIB) for s in ("a", "b")])
        for pod in body["pods"]:
            pod["containers"].append(
                {"name": "proxy", "samples": 10, "cpu_mean": 0.19, "cpu_max": 0.19, "memory_max": 64 * MIB}
            )
        _fold_into(chunks, body)
    inputs = analysis.EfficiencyInputs(
        objects,
        inputs.window,
        store.lay_out([(k, s, c.to_bytes()) for (k, s), c in chunks.items()], inputs.window),
        inputs.nodes,
        {},
    )
    (rec,) = [f for f in analysis.efficiency_findings(inputs, settings) if f.kind == "right-sizing"]
    assert isinstance(rec.instruction, SetContainerRequests) and set(rec.instruction.containers) == {
        "app",
        "proxy",
    }
    app, proxy = rec.instruction.containers["app"], rec.instruction.containers["proxy"]
    # vpa: the start of the next 5 % bucket above the p90, plus 15 %: above 0.2 x 1.15, within a bucket of it
    assert 230 <= int(app.requests["cpu"].removesuffix("m")) <= 230 * 1.05 + 1
    # the sidecar's CPU limit (200m) is below its new request: raised with it (a request may not
    # pass its limit)
    assert proxy.limits["cpu"] == proxy.requests["cpu"]
    # memory floors at 100 MiB (64 MiB used)
    assert proxy.requests["memory"] == "100Mi"
    assert rec.evidence["strategy"] == "vpa"
