"""An emulated cluster with GPU pods of known activity, run in virtual time until its pods run.

Two spot g4dn.xlarge nodes (one Tesla T4 each, spot price 0.18936 USD/h in us-east-1), no jitter:
- `idle` Deployment, 1 replica holding 1 GPU at 0 % engine activity;
- `busy` Deployment, 1 replica holding 1 GPU at 70 % engine activity.
By hand, the idle GPU wastes 1 GPU x 0.18936 USD/h x 24 h = 4.54464 USD a day.
"""

from __future__ import annotations

from typing import Any

from shipshape.emulator import assembly
from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Scenario
from shipshape.emulator.usage import UsageModel
from shipshape.kube.clock import VirtualClock
from shipshape.simulate.ops import complete

SPOT_PRICE = 0.18936  # g4dn.xlarge, us-east-1, the shipped catalog
MODEL = "Tesla-T4"
BUSY_ACTIVITY = 0.7


def gpu_deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "cuda",
                            "image": f"{name}:1",
                            "resources": {
                                "requests": {"cpu": "500m", "memory": "1Gi"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ]
                },
            },
        },
    }


GPU_POOL: dict[str, Any] = {
    "name": "gpu",
    "instanceType": "g4dn.xlarge",
    "zone": "us-east-1a",
    "capacityType": "spot",
    "cpu": "4",
    "memory": "16Gi",
    "gpus": 1,
    "labels": {"nvidia.com/gpu.product": MODEL},
    "minSize": 2,
    "initialSize": 2,
    "maxSize": 2,
}
USAGE: list[dict[str, Any]] = [
    {"selector": {"app": "idle"}, "gpu": 0.0, "jitter": False},
    {"selector": {"app": "busy"}, "gpu": BUSY_ACTIVITY, "jitter": False},
]
SCENARIO: dict[str, Any] = {
    "name": "gpus",
    "seed": 3,
    "pools": [GPU_POOL],
    "autoscaler": {"enabled": False},
    "interruptions": {"enabled": False},
    "usage": USAGE,
    "objects": [gpu_deployment("idle"), gpu_deployment("busy")],
}


def running_gpu_cluster() -> tuple[Cluster, UsageModel, list[dict[str, Any]], list[dict[str, Any]]]:
    """The cluster once both GPU pods run: (cluster, usage model, pods, nodes)."""
    scenario = Scenario.model_validate(SCENARIO)
    clock = VirtualClock()
    cluster = assembly.build(scenario, clock)
    complete(assembly.apply_objects(cluster))
    cluster.engine.run_until(clock.now() + 600)
    pods = [p for p in cluster.store.list(PODS) if (p.get("status") or {}).get("phase") == "Running"]
    nodes = list(cluster.store.list(NODES))
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    return cluster, cluster.services["usage"], pods, nodes
