"""An emulated cluster with known usage profiles, run in virtual time until its pods run.

One on-demand m5.xlarge node (4 cores, 16 GiB; kube-reserved 80m CPU), steady profiles:
- `web` Deployment, 2 replicas, latency-sensitive: request 1 core / 2 GiB (limit 2 GiB), uses
  50 % of its CPU request and 60 % of its memory request;
- `crunch` Job, 1 pod, batch: request 500m / 1 GiB, uses 80 % CPU and 50 % memory.
The usage model adds +-5 % CPU and +-2 % memory jitter per minute and 100m / 512 MiB of system
usage per node, so hand-computed values hold within those bounds.
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

GIB = 2**30
RESERVED_MEMORY_BYTES = 16 * GIB - 15174656 * 1024  # capacity - allocatable of the emulated m5.xlarge
WEB = {"app": "web"}
SCENARIO: dict[str, Any] = {
    "name": "efficiency",
    "seed": 7,
    "pools": [
        {
            "name": "od",
            "instanceType": "m5.xlarge",
            "zone": "us-east-1a",
            "capacityType": "on-demand",
            "cpu": "4",
            "memory": "16Gi",
            "minSize": 1,
            "initialSize": 1,
            "maxSize": 1,
        }
    ],
    "autoscaler": {"enabled": False},
    "interruptions": {"enabled": False},
    "usage": [
        {"selector": WEB, "pattern": "steady", "cpu": 0.5, "memory": 0.6},
        {"selector": {"app": "crunch"}, "pattern": "steady", "cpu": 0.8, "memory": 0.5},
    ],
    "objects": [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": WEB},
                "template": {
                    "metadata": {"labels": WEB},
                    "spec": {
                        "containers": [
                            {
                                "name": "app",
                                "image": "web:1",
                                "resources": {
                                    "requests": {"cpu": "1", "memory": "2Gi"},
                                    "limits": {"memory": "2Gi"},
                                },
                            }
                        ]
                    },
                },
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "crunch", "namespace": "default"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": {"app": "crunch"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "work",
                                "image": "crunch:1",
                                "command": ["sleep", "infinity"],
                                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                            }
                        ],
                    },
                },
            },
        },
    ],
}


def running_cluster() -> tuple[Cluster, UsageModel, list[dict[str, Any]], list[dict[str, Any]]]:
    """The cluster once its three pods run: (cluster, usage model, pods, nodes)."""
    scenario = Scenario.model_validate(SCENARIO)
    clock = VirtualClock()
    cluster = assembly.build(scenario, clock)
    complete(assembly.apply_objects(cluster))
    cluster.engine.run_until(clock.now() + 600)
    pods = [p for p in cluster.store.list(PODS) if (p.get("status") or {}).get("phase") == "Running"]
    nodes = list(cluster.store.list(NODES))
    assert len(pods) == 3, [p["metadata"]["name"] for p in pods]
    return cluster, cluster.services["usage"], pods, nodes
