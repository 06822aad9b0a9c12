"""The shipped example scenarios load, and the cloud builds their node pools."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipshape.emulator.resources import NODES
from shipshape.emulator.scenario import load

from .builders import start

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "scenarios"


@pytest.mark.parametrize(
    ("file", "nodes", "zones", "min_kinds"),
    [
        ("demo.yaml", 6, 2, {"Deployment", "StatefulSet", "DaemonSet", "PodDisruptionBudget"}),
        ("reference.yaml", 294, 3, {"Deployment", "StatefulSet", "DaemonSet", "PodDisruptionBudget"}),
    ],
)
def test_example_scenarios_load_and_start(file: str, nodes: int, zones: int, min_kinds: set[str]) -> None:
    sc = load(EXAMPLES / file)
    assert {o["kind"] for o in sc.objects} >= min_kinds
    assert {p.capacity_type for p in sc.pools} == {"spot", "on-demand"}
    env = start(sc)
    all_nodes = env.cluster.store.list(NODES)
    assert len(all_nodes) == nodes
    assert len({n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in all_nodes}) == zones
    assert all(p.price_per_hour > 0 for p in env.cloud.pools.values())


def test_reference_has_a_gpu_pool_and_a_single_replica_workload() -> None:
    sc = load(EXAMPLES / "reference.yaml")
    assert any(p.gpus > 0 for p in sc.pools)
    assert any(o["kind"] == "Deployment" and o["spec"]["replicas"] == 1 for o in sc.objects)
    demo = load(EXAMPLES / "demo.yaml")
    assert any(o["kind"] == "Deployment" and o["spec"]["replicas"] == 1 for o in demo.objects)


def test_boot_logs_are_written_for_a_node_collector(tmp_path: Path) -> None:
    from .builders import SPOT_A, scenario

    env = start(scenario([{**SPOT_A, "initialSize": 1}], nodeBoot={"logDir": str(tmp_path)}))
    env.cloud.set_desired("spot-a", 2)
    env.run(60)
    for inst in env.cloud.active_instances("spot-a"):
        messages = tmp_path / inst.node_name / "var" / "log" / "messages"
        assert 'event="NodeReady"' in messages.read_text()
        (cni_log,) = (tmp_path / inst.node_name / "var" / "log" / "pods").glob(
            "kube-system_aws-node-*/aws-node/0.log"
        )
        assert "Successfully copied CNI plugin binary and config file." in cni_log.read_text()
