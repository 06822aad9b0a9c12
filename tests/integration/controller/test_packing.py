"""On-demand packing through the real API: the webhook's preferences make the emulator's kube-scheduler
model (default LeastAllocated scoring) fill the fuller on-demand node instead of spreading.

The pods belong to different workloads: replicas of one workload are also spread over hosts by the
scheduler's default topology spread, which the preferences weigh against rather than override."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from shipshape.controller.policy import ControllerConfig, Packing
from shipshape.emulator.resources import NODES
from tests.integration.emulator.served_cluster import ON_DEMAND, ready_pods, serve_cluster

from .harness import controller, managed_deployment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def filler(node: str) -> str:
    """A bare pod (no workload, so the webhook leaves it alone) taking 1 cpu on `node`."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "filler", "labels": {"app": "filler"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }
    return yaml.safe_dump(body)


@pytest.mark.parametrize("packing", [Packing.ALL, Packing.ON_DEMAND, Packing.OFF])
def test_on_demand_pods_of_several_workloads_fill_the_fuller_node(tmp_path: Path, packing: Packing) -> None:
    with (
        serve_cluster(tmp_path) as cluster,
        controller(cluster, tmp_path / "controller", config=ControllerConfig(packing=packing)),
    ):
        on_demand = sorted(
            n["metadata"]["name"]
            for n in cluster.objects(NODES)
            if n["metadata"]["labels"].get("emulator.shipshape.dev/pool") == ON_DEMAND
        )
        assert len(on_demand) == 2
        fuller = on_demand[0]
        cluster.kubectl("apply", "-f", "-", stdin=filler(fuller))
        cluster.wait("the filler running", lambda: len(ready_pods(cluster.pods(app="filler"))) == 1, 60)
        apps = ("cart", "mail", "search")
        for app in apps:
            body = yaml.safe_load(
                managed_deployment(app, 1, {"spot.shipshape.dev/single-replica": "on-demand"})
            )
            body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
            cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(body))
        cluster.wait(
            "every replica ready",
            lambda: all(len(ready_pods(cluster.pods(app=app))) == 1 for app in apps),
            120,
        )
        nodes = Counter(cluster.pods(app=app)[0]["spec"]["nodeName"] for app in apps)
        assert set(nodes) <= set(on_demand)
        if packing is not Packing.OFF:
            assert nodes == {fuller: 3}  # 1 + 3 x 0.5 cpu of 3.92 allocatable
        else:
            assert nodes[on_demand[1]] >= 2  # LeastAllocated sends most to the emptier node
