"""The emulated cluster-autoscaler consolidating a served cluster: of two half-empty nodes one is
drained through the eviction API and removed, the Deployment's pods run on the other, and a
PodDisruptionBudget that allows no disruption keeps both nodes. Observed with kubectl and the
python client's watch, as a user of a real cluster would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shipshape.emulator.resources import NODES
from shipshape.emulator.scenario import Scenario

from .served_cluster import SPOT_A, ServedCluster, Watch, ready_pods, scenario, serve_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

# Long enough that the spot-a nodes, empty at the start, are still there when web lands on them.
UNNEEDED = 180.0
POOL_LABEL = "emulator.shipshape.dev/pool"

WEB = f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 5
      nodeSelector: {{{POOL_LABEL}: {SPOT_A}}}
      topologySpreadConstraints:
      - {{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway,
          labelSelector: {{matchLabels: {{app: web}}}}}}
      containers:
      - name: nginx
        image: nginx:1.27
        resources: {{requests: {{cpu: 400m, memory: 256Mi}}}}
"""

CLOSED_BUDGET = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
"""


def _scale_down_scenario() -> Scenario:
    """Only spot-a may shrink (the other pools are at their minimum size)."""
    doc = scenario()
    pools = []
    for pool in doc.pools:
        minimum = 0 if pool.name == SPOT_A else pool.initial_size
        pools.append(pool.model_copy(update={"min_size": minimum}))
    autoscaler = doc.autoscaler.model_copy(
        update={"enabled": True, "scale_down_unneeded": UNNEEDED, "scale_down_delay_after_add": 0.0}
    )
    return doc.model_copy(update={"pools": pools, "autoscaler": autoscaler})


def _deploy_web(cluster: ServedCluster, *extra: str) -> list[str]:
    for manifest in extra:
        cluster.kubectl("apply", "-f", "-", stdin=manifest)
    cluster.kubectl("apply", "-f", "-", stdin=WEB)
    cluster.wait("web ready", lambda: len(ready_pods(cluster.pods(app="web"))) == 2, 120)
    nodes = sorted({p["spec"]["nodeName"] for p in cluster.pods(app="web")})
    assert nodes == cluster.nodes_of(SPOT_A), "one web pod on each spot-a node"
    return nodes


def _events(cluster: ServedCluster, reason: str) -> list[dict[str, object]]:
    listed = cluster.kubectl(
        "get", "events", "-A", "--field-selector", f"reason={reason}", "-o", "json"
    ).stdout
    items: list[dict[str, object]] = json.loads(listed)["items"]
    return items


def test_a_half_empty_node_is_drained_and_removed(tmp_path: Path) -> None:
    with serve_cluster(tmp_path, _scale_down_scenario()) as cluster:
        # Watched from the start: the spot-a nodes are unneeded from the start, and on a loaded machine
        # deploying web can take most of UNNEEDED, so the taint may come right after it.
        nodes = Watch(cluster, cluster.core.list_node)
        try:
            before = _deploy_web(cluster)
            cluster.wait(
                "one spot-a node removed", lambda: len(cluster.nodes_of(SPOT_A)) == 1, UNNEEDED + 180
            )
            (kept,) = cluster.nodes_of(SPOT_A)
            (gone,) = set(before) - {kept}
            cluster.wait(
                "both web pods ready on the node that stays",
                lambda: [p["spec"]["nodeName"] for p in ready_pods(cluster.pods(app="web"))] == [kept, kept],
                120,
            )
        finally:
            nodes.stop()
        # The node carried the autoscaler's taint before it went.
        tainted = [
            obj
            for kind, obj, _ in nodes.events
            if kind == "MODIFIED"
            and obj["metadata"]["name"] == gone
            and any(t["key"] == "ToBeDeletedByClusterAutoscaler" for t in obj["spec"].get("taints") or [])
        ]
        seen = [
            (kind, obj["metadata"]["name"], [t["key"] for t in obj["spec"].get("taints") or []], round(at))
            for kind, obj, at in nodes.events
        ]
        assert tainted, f"no MODIFIED event showed {gone} tainted; the watch saw {seen}"
        assert cluster.get(NODES, "", gone) is None
        scale_downs = _events(cluster, "ScaleDown")
        messages = {(e["involvedObject"]["kind"], e["message"]) for e in scale_downs}  # type: ignore[index]
        assert ("Node", "marked the node as toBeDeleted/unschedulable") in messages
        assert ("Pod", "deleting pod for node scale down") in messages
        assert ("ConfigMap", f"Scale-down: node {gone} removed with drain") in messages
        described = cluster.kubectl(
            "describe", "configmap", "-n", "kube-system", "cluster-autoscaler-status"
        ).stdout
        assert f"Scale-down: removing node {gone}, utilization:" in described
        # The other pools were at their minimum size and kept every node.
        assert len(cluster.objects(NODES)) == 5


def test_a_budget_that_allows_no_disruption_keeps_both_nodes(tmp_path: Path) -> None:
    with serve_cluster(tmp_path, _scale_down_scenario()) as cluster:
        before = _deploy_web(cluster, CLOSED_BUDGET)
        start = cluster.now()
        cluster.wait(
            "time for two scale-down rounds", lambda: cluster.now() > start + 2 * UNNEEDED + 60, 3 * UNNEEDED
        )
        assert cluster.nodes_of(SPOT_A) == before
        assert not [e for e in _events(cluster, "ScaleDown") if e["involvedObject"]["kind"] == "Node"]  # type: ignore[index]
        assert len(ready_pods(cluster.pods(app="web"))) == 2
