"""GPU inventory, allocation, idle GPUs, waste and advice on a small hand-built fleet."""

from __future__ import annotations

import numpy as np
import pytest

from shipshape.analyzers.gpu import advice, fleet, idle
from shipshape.analyzers.gpu.fleet import GpuNode, GpuPod, Owner

NODES = [
    GpuNode("g1", 8, "A100", "p4d-a", "on-demand", price_per_hour=32.0),  # 4.0 per GPU-hour
    GpuNode("g2", 8, "A100", "p4d-a", "on-demand", price_per_hour=32.0),
    GpuNode("s1", 4, "A100", "spot-a100", "spot", price_per_hour=8.0),  # 2.0 per GPU-hour
    GpuNode("t1", 1, "T4", "g4dn", "on-demand", price_per_hour=0.5),
]
WEB = Owner("Deployment", "web")
PODS = [
    GpuPod("shop", "web-0", 1, "g1", WEB, "inference", replicas=2),
    GpuPod("shop", "web-1", 1, "g1", WEB, "inference", replicas=2),
    GpuPod(
        "ml",
        "train-0",
        4,
        "g2",
        Owner("Job", "train"),
        "training",
        annotations=((fleet.CHECKPOINTING_ANNOTATION, "true"),),
    ),
    GpuPod("ml", "risky-0", 2, "s1", Owner("Job", "risky"), "training"),
    GpuPod("lab", "nb-0", 0.25, "g2", Owner("Deployment", "notebook")),
    GpuPod("lab", "nb-1", 0.5, "g2", Owner("Deployment", "notebook")),
    GpuPod("shop", "idle-0", 1, "t1", Owner("Deployment", "batch-api"), "inference", replicas=1),
    GpuPod("ml", "pend-0", 1, None, Owner("Job", "h100-only"), "training", gpu_models=("H100",)),
]
SETTINGS = idle.IdleSettings(window_start=0.0, window_end=3600.0, step_seconds=60.0)


def series(
    node: str, gpu: str, pod: str, values: list[float], metric: str = idle.ENGINE_ACTIVE
) -> idle.UtilizationSeries:
    times = np.arange(len(values), dtype=np.float64) * 60.0
    return idle.UtilizationSeries(node, gpu, pod, times, np.array(values, dtype=np.float64), metric)


SERIES = [
    series("t1", "0", "shop/idle-0", [1.0] * 60, idle.GPU_UTIL),  # 1 %: idle
    series("g1", "0", "shop/web-0", [0.2] * 60),  # busy enough, but a share would do
    series("g1", "1", "shop/web-1", [0.5] * 20),  # a third of the window
    *(series("g2", str(i), "ml/train-0", [0.9] * 60) for i in range(4)),
]


def test_allocation_counts_whole_gpus_and_shares() -> None:
    alloc = fleet.allocation(NODES, PODS)
    g2 = alloc["g2"]
    assert (g2.whole, g2.shared, g2.shared_devices, g2.allocated, g2.free_devices) == (4, 0.75, 1, 4.75, 3)
    assert (alloc["g1"].allocated, alloc["g1"].free_devices) == (2, 6)
    assert alloc["t1"].free_devices == 0


def test_inventory_by_model_capacity_type_and_pool() -> None:
    rows = fleet.inventory(fleet.allocation(NODES, PODS))
    assert [
        (r.gpu_model, r.capacity_type, r.pool, r.nodes, r.gpus, r.allocated, r.free_devices, r.price_per_hour)
        for r in rows
    ] == [
        ("A100", "on-demand", "p4d-a", 2, 16, 6.75, 9, 64.0),
        ("A100", "spot", "spot-a100", 1, 4, 2.0, 2, 8.0),
        ("T4", "on-demand", "g4dn", 1, 1, 1.0, 0, 0.5),
    ]
    assert rows[0].allocated_pct == pytest.approx(42.1875)


def test_idle_verdicts_and_waste() -> None:
    nodes = {n.name: n for n in NODES}
    usage = {u.pod.name: u for u in idle.pod_usage(PODS, nodes, SERIES, SETTINGS)}
    assert "pend-0" not in usage
    assert usage["idle-0"].idle is True
    assert usage["idle-0"].mean == pytest.approx(0.01)
    # 1 GPU x 24 h x idle all the window x 0.5 per GPU-hour
    assert usage["idle-0"].wasted_per_day == pytest.approx(12.0)
    assert usage["web-0"].idle is False and usage["web-0"].p95 == pytest.approx(0.2)
    assert usage["web-1"].idle is None
    assert usage["web-1"].lacking == "samples cover 33% of the window, need 50%"
    assert usage["risky-0"].lacking == "no utilisation samples for the pod in the window"
    assert usage["train-0"].coverage == 1.0 and usage["train-0"].idle is False
    assert idle.wasted_per_day(usage.values()) == pytest.approx(12.0)


def test_advice_by_hand() -> None:
    nodes = {n.name: n for n in NODES}
    alloc = fleet.allocation(NODES, PODS)
    usages = idle.pod_usage(PODS, nodes, SERIES, SETTINGS)
    found = advice.advise(alloc, PODS, usages)
    assert [(a.kind, a.target, a.savings_per_day) for a in found] == [
        # g1 and g2 are partly used with 6 + 3 free GPUs: one 8-GPU node's worth, 32/h for a day.
        ("binpack", "pool/p4d-a", 768.0),
        # 4 GPUs at 4.0 on on-demand against 2.0 on spot, a day.
        ("training-on-spot", "job/ml/train", 192.0),
        # 2 replicas x 1 GPU x (4.0 - 2.0) x 24.
        ("inference-on-spot", "deployment/shop/web", 96.0),
        # p95 20 % x 1.25 = 25 %: a quarter GPU; three quarters of 4.0 x 24.
        ("share", "pod/shop/web-0", 72.0),
        ("scale-down", "deployment/shop/batch-api", 12.0),
        ("model-constraint", "pod/ml/pend-0", None),
        ("spread", "deployment/shop/web", None),
        ("training-needs-checkpointing", "pod/ml/risky-0", None),
    ]
    by_kind = {a.kind: a for a in found}
    assert by_kind["scale-down"].instruction == "kubectl scale deployment/batch-api -n shop --replicas=0"
    assert by_kind["inference-on-spot"].instruction.startswith(
        "kubectl annotate deployment/web -n shop spot.shipshape.dev/enabled=true"
    )
    assert "A100 (11 free)" in by_kind["model-constraint"].message
    assert "spot.shipshape.dev/checkpointing=true" in by_kind["training-needs-checkpointing"].instruction


def test_role_from_kind_and_labels() -> None:
    assert fleet.role_of("Job") == "training"
    assert fleet.role_of("Deployment") == "inference"
    assert fleet.role_of("Deployment", {"app.kubernetes.io/component": "trainer"}) == "training"
    assert fleet.role_of(None) == "other"


def test_bad_inputs() -> None:
    with pytest.raises(fleet.FleetError, match="capacity type must be one of spot, on-demand, unknown"):
        GpuNode("x", 1, "T4", "p", "preemptible")
    with pytest.raises(fleet.FleetError, match="more than one GPU must be whole GPUs"):
        GpuPod("a", "b", 1.5)
    with pytest.raises(fleet.FleetError, match="not in the node list"):
        fleet.allocation(NODES, [GpuPod("a", "b", 1, "nowhere")])
    with pytest.raises(idle.IdleError, match="the window must end after it starts"):
        idle.IdleSettings(window_start=10, window_end=10)
