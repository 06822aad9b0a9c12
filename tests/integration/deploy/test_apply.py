"""The rendered chart applied with the real kubectl (server-side field validation against the
emulator's OpenAPI) to an emulated cluster of six nodes: every object is stored as sent, the
controller's two replicas are scheduled with their PriorityClass, and the node DaemonSet gets one
pod on every node, tainted ones included."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from shipshape.emulator.resources import BY_KEY, NODES, RESOURCES
from tests.integration.emulator.served_cluster import ServedCluster, scenario, serve_cluster

from .chart import Obj, helm_binary, render

HELM = helm_binary()
IMAGE = "ghcr.io/shipshape-dev/shipshape:0.1.0"
NAMESPACE = "shipshape-system"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
    pytest.mark.skipif(HELM is None, reason="helm is not installed (scripts/ensure-helm.sh fetches it)"),
]
# Served by a v1.30+ API server, not by the emulator: checked against the schema in test_chart.py.
NOT_SERVED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def served_by_emulator(obj: Obj) -> bool:
    return any(rt.api_version == obj["apiVersion"] and rt.kind == obj["kind"] for rt in RESOURCES)


def pods_of(cluster: ServedCluster, name: str) -> list[Obj]:
    return cluster.pods(NAMESPACE, **{"app.kubernetes.io/name": name})


def test_chart_applies_to_the_emulator_and_runs_a_poller_per_node(tmp_path: Path) -> None:
    assert HELM is not None
    objects = render(HELM)
    served = [o for o in objects if served_by_emulator(o)]
    assert {o["kind"] for o in objects if not served_by_emulator(o)} <= NOT_SERVED
    sc = scenario(kubelet={"preloadedImages": [IMAGE]})
    with serve_cluster(tmp_path, sc) as cluster:
        # A node with a notice taint: the poller must run there too.
        node = sorted(n["metadata"]["name"] for n in cluster.objects(NODES))[0]
        cluster.kubectl(
            "taint", "node", node, "spot.shipshape.dev/interruption-notice=aws-metadata:NoSchedule"
        )
        cluster.kubectl("create", "namespace", NAMESPACE)
        done = cluster.kubectl("apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(served))
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        assert len(lines) == len(served) and all(line.endswith(" created") for line in lines), done.stdout
        for obj in served:
            namespace = obj["metadata"].get("namespace", "")
            rt = next(r for r in RESOURCES if r.api_version == obj["apiVersion"] and r.kind == obj["kind"])
            stored = cluster.get(rt, namespace, obj["metadata"]["name"])
            assert stored is not None, obj["metadata"]["name"]
        # A field the schema does not know is refused by the server, not dropped.
        broken = next(o for o in served if o["kind"] == "DaemonSet")
        broken = {
            **broken,
            "metadata": {**broken["metadata"], "name": "broken"},
            "spec": {**broken["spec"], "x": 1},
        }
        refused = cluster.kubectl(
            "apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump(broken), ok=False
        )
        assert refused.returncode != 0 and 'unknown field "spec.x"' in refused.stderr
        nodes = {n["metadata"]["name"] for n in cluster.objects(NODES)}
        assert len(nodes) == 6

        def pollers_everywhere() -> list[Obj] | None:
            pods = pods_of(cluster, "shipshape-node-notices")
            bound = {p["spec"].get("nodeName") for p in pods if p.get("status", {}).get("phase") == "Running"}
            return pods if bound == nodes and len(pods) == len(nodes) else None

        pollers = cluster.wait("a running node poller on every node", pollers_everywhere, 120)
        assert all(p["spec"]["priority"] == 2_000_001_000 for p in pollers)  # system-node-critical
        daemonset = cluster.get(BY_KEY["daemonsets.apps"], NAMESPACE, "shipshape-node-notices")
        assert daemonset is not None

        def controllers_running() -> list[Obj] | None:
            pods = [p for p in pods_of(cluster, "shipshape-controller") if p["spec"].get("nodeName")]
            return pods if len(pods) == 2 else None

        controllers = cluster.wait("two controller replicas scheduled", controllers_running, 120)
        assert {p["spec"]["priority"] for p in controllers} == {100_000_000}
        assert all(p["spec"]["serviceAccountName"] == "shipshape-controller" for p in controllers)
