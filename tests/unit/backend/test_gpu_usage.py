"""GPU activity in the stored usage, pure parts: the contract's `gpus` lines (checks, a report
without them reads and writes as before), folded per workload onto slots, laid out on a window,
summed up per workload, and the idle-GPU recommendation with hand-computed figures."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shipshape.analyzers.gpu.idle import workload_activity
from shipshape.backend import analysis
from shipshape.backend import usage as store
from shipshape.contracts.instructions import SetReplicas
from shipshape.contracts.usage import dump, parse_usage
from shipshape.pricing.catalog import default_catalog
from tests.unit.backend.test_usage import T0, pod_usage, report

SPOT = default_catalog().spot_price("g4dn.xlarge", "us-east-1")


def gpu_line(
    pod: str, mean: float, high: float | None = None, devices: int = 1, samples: int = 10
) -> dict[str, Any]:
    return {
        "namespace": "shop",
        "name": pod,
        "workload": {"kind": "Deployment", "name": "infer"},
        "devices": devices,
        "model": "Tesla-T4",
        "samples": samples,
        "activity_mean": mean,
        "activity_max": mean if high is None else high,
    }


def with_gpus(start: int, lines: list[dict[str, Any]]) -> dict[str, Any]:
    names = dict.fromkeys(line["name"] for line in lines)
    pods = [pod_usage(name, 0.1, 2**20, workload="infer") for name in names]
    return {**report(start, pods), "gpus": lines}


def test_the_contract_checks_gpu_lines_and_leaves_them_out_when_there_are_none() -> None:
    good = with_gpus(T0, [gpu_line("infer-a", 0.0, 0.01)])
    parsed = parse_usage(good)
    assert parsed.gpus[0].devices == 1 and b'"gpus"' in dump(parsed)
    plain = parse_usage(report(T0, [pod_usage("web-a", 0.2, 2**20)]))
    assert b'"gpus"' not in dump(plain)  # the wire form of a report without GPUs is unchanged
    for lines, problem in [
        ([gpu_line("infer-a", 0.5, 0.2)], "above activity_max"),
        ([gpu_line("infer-a", 1.5)], "less than or equal to 1"),
        ([gpu_line("infer-a", 0.1, devices=0)], "greater than or equal to 1"),
        ([gpu_line("infer-a", 0.1, devices=65)], "less than or equal to 64"),
        ([gpu_line("infer-a", 0.1, samples=301)], "samples in a bucket"),
        ([gpu_line("infer-a", 0.1), gpu_line("infer-a", 0.2)], "appear twice"),
        ([{**gpu_line("infer-a", 0.1), "model": "x" * 129}], "at most 128"),
    ]:
        with pytest.raises(ValidationError, match=problem):
            parse_usage(with_gpus(T0, lines))


def _chunks(
    reports: list[dict[str, Any]], step: int = 300
) -> dict[tuple[store.WorkloadKey, int], store.GpuChunk]:
    chunks: dict[tuple[store.WorkloadKey, int], store.GpuChunk] = {}
    for body in reports:
        folded = store.fold(parse_usage(body), step)
        for key, part in folded.gpus.items():
            chunks.setdefault((key, folded.chunk_start), store.GpuChunk.empty()).merge(folded.slot, part)
    return chunks


def test_pods_fold_per_workload_and_buckets_merge_into_their_slot() -> None:
    one = {**with_gpus(T0, [gpu_line("infer-a", 0.0, 0.02, samples=6), gpu_line("infer-b", 0.6, 0.9, 2, 6)])}
    two = {**with_gpus(T0 + 60, [gpu_line("infer-a", 0.3, 0.4, samples=6)])}
    chunks = _chunks([{**one, "bucket_seconds": 60}, {**two, "bucket_seconds": 60}])
    (((key, start), chunk),) = chunks.items()
    assert key == store.WorkloadKey("shop", "Deployment", "infer") and start == T0
    assert chunk.samples[0] == 12
    # first bucket: (0 x 1 + 0.6 x 2) / 3 devices = 0.4; then 0.3: weighted by samples
    assert chunk.activity_mean[0] == pytest.approx((0.4 * 6 + 0.3 * 6) / 12)
    assert chunk.activity_high[0] == pytest.approx(0.6) and chunk.activity_max[0] == pytest.approx(0.9)
    assert (chunk.pods[0], chunk.devices[0], chunk.idle_pods[0]) == (2, 3, 0)  # fewest idle of the two
    assert store.GpuChunk.from_bytes(chunk.to_bytes()).to_bytes() == chunk.to_bytes()
    with pytest.raises(store.UsageStoreError, match="GPU usage chunk"):
        store.GpuChunk.from_bytes(b"short")


def test_the_surplus_is_the_pods_idle_in_95_percent_of_the_slots() -> None:
    slots = 40
    idle = [1] * slots
    idle[3] = 0  # one slot of 40 (2.5 %) with both busy does not save the idle replica
    found = workload_activity([10] * slots, [0.3] * slots, [0.6] * slots, [2] * slots, [2] * slots, idle, 300)
    assert found is not None and found.surplus == 1 and found.hours == pytest.approx(40 * 300 / 3600)
    idle[4] = idle[5] = 0  # three slots of 40: 7.5 % > 5 %
    found = workload_activity([10] * slots, [0.3] * slots, [0.6] * slots, [2] * slots, [2] * slots, idle, 300)
    assert found is not None and found.surplus == 0
    assert workload_activity([0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0], 300) is None


def _objects(hpa: bool = False, replicas: int = 2) -> dict[str, list[dict[str, Any]]]:
    def node(name: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "labels": {
                    "node.kubernetes.io/instance-type": "g4dn.xlarge",
                    "topology.kubernetes.io/region": "us-east-1",
                    "topology.kubernetes.io/zone": "us-east-1a",
                    "node.kubernetes.io/capacity": "spot",
                    "nvidia.com/gpu.product": "Tesla-T4",
                },
            },
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                "allocatable": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
            },
        }

    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}
    pods = [
        {
            "metadata": {
                "name": f"infer-7d9f-{suffix}",
                "namespace": "shop",
                "labels": {"app": "infer", "pod-template-hash": "7d9f"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": "infer-7d9f", "controller": True}],
            },
            "spec": {"nodeName": f"n-{suffix}", "containers": [{"name": "cuda", "resources": resources}]},
            "status": {"phase": "Running"},
        }
        for suffix in ("a", "b")[:replicas]
    ]
    deployment = {
        "metadata": {"name": "infer", "namespace": "shop", "generation": 4, "resourceVersion": "9"},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "cuda", "resources": resources}]}},
        },
    }
    hpas = [
        {
            "metadata": {"name": "infer", "namespace": "shop"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "infer"}, "maxReplicas": 4},
        }
    ]
    return {
        "pods": pods,
        "nodes": [node("n-a"), node("n-b")],
        "deployments": [deployment],
        "horizontalpodautoscalers": hpas if hpa else [],
    }


def _findings(
    means: tuple[float, float],
    slots: int = 24,
    hpa: bool = False,
    min_hours: float = 1.0,
    replicas: int = 2,
) -> list[Any]:
    settings = analysis.EfficiencySettings(window_hours=168, min_history_hours=min_hours)
    bodies = [
        with_gpus(T0 + i * 300, [gpu_line("infer-7d9f-a", means[0]), gpu_line("infer-7d9f-b", means[1])])
        for i in range(slots)
    ]
    chunks = _chunks(bodies)
    window = store.slot_window(T0, T0 + slots * 300, 300, settings.window_hours)
    gpus = store.lay_out_gpus([(k, s, "Tesla-T4", c.to_bytes()) for (k, s), c in chunks.items()], window)
    empty = store.lay_out([], window)
    inputs = analysis.EfficiencyInputs(
        _objects(hpa, replicas), window, empty, store.lay_out([], window, "cpu_mean"), {}, gpus
    )
    return [f for f in analysis.efficiency_findings(inputs, settings) if f.kind == analysis.GPU_IDLE]


def test_an_idle_deployment_is_scaled_to_zero_by_hand() -> None:
    (rec,) = _findings((0.0, 0.01))
    assert SPOT is not None
    # by hand: 2 pods x 1 GPU x the spot price of a g4dn.xlarge (1 GPU) x 730 h
    assert rec.monthly_savings_usd == pytest.approx(round(2 * SPOT * 730, 2))
    assert isinstance(rec.instruction, SetReplicas)
    assert rec.instruction.replicas == 0 and rec.instruction.precondition.generation == 4
    assert rec.instruction.target.text() == "Deployment/shop/infer"
    evidence = rec.evidence
    assert (evidence["idle_gpus"], evidence["gpu_model"], evidence["capacity_types"]) == (
        2,
        "Tesla-T4",
        ["spot"],
    )
    assert evidence["hours_observed"] == 2.0 and evidence["activity_mean"] == pytest.approx(0.005)
    assert rec.confidence == pytest.approx(2 / 168)
    assert rec.title.startswith("Scale Deployment shop/infer from 2 to 0 replica(s): 2 Tesla-T4 GPU(s) idle")


def test_one_idle_replica_of_two_is_one_replica_less() -> None:
    (rec,) = _findings((0.0, 0.7))
    assert SPOT is not None
    assert rec.monthly_savings_usd == pytest.approx(round(SPOT * 730, 2))
    assert isinstance(rec.instruction, SetReplicas) and rec.instruction.replicas == 1


def test_an_hpa_scaled_workload_gets_the_advice_without_the_instruction() -> None:
    (rec,) = _findings((0.0, 0.0), hpa=True)
    assert rec.instruction is None and rec.monthly_savings_usd is not None
    assert any("lower its minReplicas to 0" in line for line in rec.evidence["summary"])


def test_busy_gpus_or_too_little_history_give_nothing() -> None:
    assert _findings((0.3, 0.7)) == []
    assert _findings((0.0, 0.0), slots=6, min_hours=1.0) == []  # 30 min observed, 1 h needed


def test_a_workload_scaled_down_since_gets_no_more_than_what_runs() -> None:
    (rec,) = _findings((0.0, 0.0), replicas=1)  # the history says 2 idle; 1 runs now
    assert isinstance(rec.instruction, SetReplicas) and rec.instruction.replicas == 0
    assert rec.evidence["idle_pods"] == 1 and rec.evidence["replicas"] == 1
    assert _findings((0.0, 0.0), replicas=0) == []  # scaled to 0: nothing left to recommend
