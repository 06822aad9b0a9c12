"""GPU fleet inputs from Node and Pod bodies, and the one-call report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from shipshape.analyzers.gpu import idle, objects, report
from shipshape.analyzers.gpu.fleet import Owner
from shipshape.contracts.instructions import Precondition, SetReplicas, WorkloadRef


def node(name: str, allocatable: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "32", **allocatable}},
    }


def pod(name: str, node_name: str | None, limits: dict[str, str], **extra: Any) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ml", **extra.pop("metadata", {})}
    spec = {"containers": [{"name": "main", "resources": {"limits": limits}}], **extra.pop("spec", {})}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": metadata, "spec": spec, "status": {"phase": extra.pop("phase", "Running")}}


def capacity(labels: Mapping[str, str]) -> str | None:
    return {"spot": "spot", "on-demand": "on-demand"}.get(labels.get("node.kubernetes.io/capacity", ""))


NODES = [
    node(
        "a100-1",
        {"nvidia.com/gpu": "8"},
        {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
            "node.kubernetes.io/instance-type": "p4de.24xlarge",
            "topology.kubernetes.io/zone": "us-east-1a",
            "node.kubernetes.io/capacity": "spot",
        },
    ),
    node("mig", {"nvidia.com/mig-1g.10gb": "7"}, {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}),
    node("cpu-only", {}, {}),
]
PODS = [
    pod(
        "train-7d9f8-abcde",
        "a100-1",
        {"nvidia.com/gpu": "4"},
        metadata={
            "labels": {"pod-template-hash": "7d9f8"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "train-7d9f8", "controller": True}],
        },
    ),
    pod("slice", "mig", {"nvidia.com/mig-1g.10gb": "2"}),
    pod(
        "share",
        "a100-1",
        {"alibabacloud.com/gpu-count": "1"},
        metadata={"annotations": {"alibabacloud.com/gpu-milli": "250"}},
    ),
    pod(
        "waiting",
        None,
        {"nvidia.com/gpu": "1"},
        spec={"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        metadata={"ownerReferences": [{"kind": "Job", "name": "sweep", "controller": True}]},
    ),
    pod("done", "a100-1", {"nvidia.com/gpu": "1"}, phase="Succeeded"),
    pod("web", "cpu-only", {"cpu": "1"}),
]


def test_nodes_and_pods_from_objects() -> None:
    nodes, pods = objects.fleet_from_objects(NODES, PODS, capacity, prices={"a100-1": 16.0})
    assert [(n.name, n.gpus, n.gpu_model, n.pool, n.capacity_type, n.price_per_hour) for n in nodes] == [
        ("a100-1", 8, "NVIDIA-A100-SXM4-80GB", "p4de.24xlarge/us-east-1a", "spot", 16.0),
        ("mig", 1, "nvidia-h100-80gb", "unknown/unknown", "unknown", None),
    ]
    by_name = {p.name: p for p in pods}
    assert set(by_name) == {"train-7d9f8-abcde", "slice", "share", "waiting"}
    train = by_name["train-7d9f8-abcde"]
    # A ReplicaSet named after the pod template hash belongs to a Deployment.
    assert (train.gpus, train.owner, train.role) == (4.0, Owner("Deployment", "train"), "inference")
    assert by_name["slice"].gpus == pytest.approx(2 / 7)
    assert by_name["share"].gpus == 0.25
    waiting = by_name["waiting"]
    assert (waiting.node, waiting.gpu_models, waiting.role) == (None, ("NVIDIA-H100-80GB-HBM3",), "training")


def test_report_in_one_call() -> None:
    nodes, pods = objects.fleet_from_objects(NODES, PODS, capacity, prices={"a100-1": 16.0})
    window = idle.IdleSettings(window_start=0.0, window_end=600.0, step_seconds=60.0)
    times = np.arange(10, dtype=np.float64) * 60.0
    series = [
        idle.UtilizationSeries("a100-1", str(i), "ml/train-7d9f8-abcde", times, np.zeros(10))
        for i in range(4)
    ]
    result = report.analyze(nodes, pods, series, window)
    assert (result.gpus, result.pending_pods) == (9, 1)
    assert result.allocated == pytest.approx(4 + 0.25 + 2 / 7)
    # 4 idle GPUs at 16/8 = 2 per GPU-hour, a whole day.
    assert (result.idle_gpus, result.wasted_per_day) == (4.0, pytest.approx(192.0))
    assert result.advice[0].kind == "scale-down"
    assert result.advice[0].instruction == "kubectl scale deployment/train -n ml --replicas=0"
    assert result.advice[0].apply is None  # the Deployment itself was not given
    assert report.analyze(nodes, pods).usage == ()

    # With the Deployment as it stands, the advice carries the instruction the agent executes.
    train = {"metadata": {"name": "train", "namespace": "ml", "generation": 3}, "spec": {"replicas": 1}}
    workloads = objects.workloads_from_objects([train], [])
    scale = report.analyze(nodes, pods, series, window, workloads=workloads).advice[0]
    assert scale.apply == SetReplicas(
        target=WorkloadRef(kind="Deployment", namespace="ml", name="train"),
        precondition=Precondition(generation=3),
        replicas=0,
    )
    assert scale.to_json()["apply"] == {
        "type": "set-replicas",
        "target": {"kind": "Deployment", "namespace": "ml", "name": "train"},
        "precondition": {"generation": 3, "resource_version": None},
        "replicas": 0,
    }
    # An HPA scales it: no instruction to fight it, the advice names the HPA instead.
    hpa = {
        "metadata": {"name": "train-hpa", "namespace": "ml"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "train"}},
    }
    scaled = objects.workloads_from_objects([train], [], [hpa])
    assert scaled[("Deployment", "ml", "train")].autoscaled_by == "train-hpa"
    advised = report.analyze(nodes, pods, series, window, workloads=scaled).advice[0]
    assert advised.apply is None
    assert advised.instruction == (
        "lower the minReplicas of HorizontalPodAutoscaler train-hpa -n ml (it scales deployment/train) to 0"
    )
