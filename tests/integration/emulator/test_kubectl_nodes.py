"""Nodes through kubectl: get, cordon, drain with a PodDisruptionBudget in place, uncordon.

The drained workload runs on the two nodes of one spot pool (at least two pods on the drained one),
guarded by a PDB with minAvailable 3 of 4: kubectl drain's second eviction gets 429 until a
replacement is Ready on the other node, retries, and completes; a watch shows the ready count
never went below 3.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipshape.emulator.resources import NODES, PDBS
from shipshape.emulator.store import Obj

from .served_cluster import SPOT_A, PodWatch, ServedCluster, is_ready, ready_pods, serve_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

GUARDED = f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: guarded}}
spec:
  replicas: 4
  selector: {{matchLabels: {{app: guarded}}}}
  template:
    metadata: {{labels: {{app: guarded}}}}
    spec:
      terminationGracePeriodSeconds: 5
      nodeSelector: {{emulator.shipshape.dev/pool: {SPOT_A}}}
      containers:
      - name: app
        image: nginx:1.27
        resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}
        # Ready a while after start: a replacement cannot be Ready before kubectl's second eviction.
        readinessProbe: {{httpGet: {{path: /, port: 80}}, initialDelaySeconds: 40, periodSeconds: 10}}
        volumeMounts: [{{name: scratch, mountPath: /scratch}}]
      volumes: [{{name: scratch, emptyDir: {{}}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: guarded}}
spec:
  minAvailable: 3
  selector: {{matchLabels: {{app: guarded}}}}
"""

AGENT = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers:
      - name: agent
        image: busybox:1.36
        resources: {requests: {cpu: 50m, memory: 64Mi}}
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ServedCluster]:
    with serve_cluster(tmp_path) as served:
        yield served


def _table(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]


def _node(cluster: ServedCluster, name: str) -> Obj:
    node = cluster.get(NODES, "", name)
    assert node is not None, name
    return node


def _guarded_ready(cluster: ServedCluster) -> list[Obj] | None:
    pods = cluster.pods(app="guarded")
    ready = ready_pods(pods)
    return ready if len(ready) == 4 and len(pods) == 4 else None


def test_get_nodes_shows_pools_and_well_known_labels(cluster: ServedCluster) -> None:
    rows = _table(cluster.kubectl("get", "nodes", "-L", "node.kubernetes.io/capacity").stdout)
    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "CAPACITY"]
    assert sorted(row[5] for row in rows[1:]) == ["on-demand"] * 2 + ["spot"] * 4
    assert {(row[1], row[2], row[4]) for row in rows[1:]} == {("Ready", "<none>", "v1.32.0")}
    wide = _table(cluster.kubectl("get", "nodes", "-o", "wide").stdout)
    assert wide[0][5:8] == ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE"]
    name = cluster.nodes_of(SPOT_A)[0]
    described = cluster.kubectl("describe", "node", name).stdout
    for label in (
        "node.kubernetes.io/capacity=spot",
        "node.kubernetes.io/instance-type=m5.large",
        "topology.kubernetes.io/zone=us-east-1a",
        f"kubernetes.io/hostname={name}",
    ):
        assert label in described
    assert re.search(r"Ready\s+True\s+.*KubeletReady\s+kubelet is posting ready status", described)
    assert re.search(r"Taints:\s+<none>", described) and re.search(r"Unschedulable:\s+false", described)


def test_cordon_keeps_new_pods_off_and_uncordon_lets_them_back(cluster: ServedCluster) -> None:
    first, second = cluster.nodes_of(SPOT_A)
    kubectl = cluster.kubectl
    assert kubectl("cordon", first).stdout.strip() == f"node/{first} cordoned"
    assert kubectl("cordon", first).stdout.strip() == f"node/{first} already cordoned"
    rows = {row[0]: row for row in _table(kubectl("get", "nodes").stdout)[1:]}
    assert rows[first][1] == "Ready,SchedulingDisabled" and rows[second][1] == "Ready"
    assert _node(cluster, first)["spec"]["unschedulable"] is True
    cluster.wait(
        "the unschedulable taint on the cordoned node",
        lambda: any(
            t["key"] == "node.kubernetes.io/unschedulable" and t["effect"] == "NoSchedule"
            for t in _node(cluster, first)["spec"].get("taints") or []
        ),
        30,
    )

    kubectl("apply", "-f", "-", stdin=GUARDED)
    pods = cluster.wait("4 guarded pods ready", lambda: _guarded_ready(cluster), 120)
    assert {p["spec"]["nodeName"] for p in pods} == {second}
    described = kubectl("describe", "node", second).stdout
    assert re.search(r"Non-terminated Pods:\s+\(4 in total\)", described)
    for pod in pods:
        assert re.search(rf"default\s+{pod['metadata']['name']}\s+100m \(\d+%\)", described)
    assert re.search(r"cpu\s+400m \(\d+%\)\s+0 \(0%\)", described)  # Allocated resources
    on_second = kubectl("get", "pods", "--field-selector", f"spec.nodeName={second}", "-o", "name").stdout
    assert sorted(on_second.split()) == sorted(f"pod/{p['metadata']['name']}" for p in pods)

    assert kubectl("uncordon", first).stdout.strip() == f"node/{first} uncordoned"
    assert "unschedulable" not in _node(cluster, first)["spec"]
    kubectl("rollout", "restart", "deployment/guarded")
    kubectl("rollout", "status", "deployment/guarded", "--timeout=60s")
    cluster.wait(
        "restarted pods spread over both nodes again",
        lambda: {p["spec"]["nodeName"] for p in (_guarded_ready(cluster) or [])} == {first, second},
        120,
    )


def test_drain_with_a_pdb_waits_for_replacements(cluster: ServedCluster) -> None:
    kubectl = cluster.kubectl
    kubectl("apply", "-f", "-", stdin=GUARDED + "---" + AGENT)
    pods = cluster.wait("4 guarded pods ready", lambda: _guarded_ready(cluster), 120)
    node_count = len(cluster.objects(NODES))
    cluster.wait(
        "a daemon pod on every node", lambda: len(ready_pods(cluster.pods(app="agent"))) == node_count, 60
    )
    hosts = [p["spec"]["nodeName"] for p in pods]
    # Drain the node with more of them (two at least): the PDB then has to hold one eviction back.
    first, second = sorted(cluster.nodes_of(SPOT_A), key=hosts.count, reverse=True)
    assert hosts.count(first) >= 2
    cluster.wait(
        "the PDB allows one disruption",
        lambda: (
            (cluster.get(PDBS, "default", "guarded") or {}).get("status", {}).get("disruptionsAllowed") == 1
        ),
        60,
    )

    refused = kubectl("drain", first, "--ignore-daemonsets", "--timeout=20s", ok=False)
    assert refused.returncode != 0
    assert "cannot delete Pods with local storage" in refused.stderr
    assert "--delete-emptydir-data" in refused.stderr
    assert _node(cluster, first)["spec"]["unschedulable"] is True  # drain cordons first

    pod_watch = PodWatch(cluster, "default", "app=guarded")
    try:
        drained = kubectl(
            "drain", first, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s", timeout=120
        )
        cluster.wait("4 guarded pods ready again", lambda: _guarded_ready(cluster), 60)
    finally:
        pod_watch.stop()
    out = drained.stdout + drained.stderr
    on_first = sorted(p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == first)
    for name in on_first:
        assert f"evicting pod default/{name}" in out and f"pod/{name} evicted" in out
    # The second eviction was refused while the PDB allowed none, and kubectl retried it.
    assert re.search(
        r"error when evicting pods/\"guarded-[a-z0-9-]+\" -n \"default\" \(will retry after 5s\): "
        r"Cannot evict pod as it would violate the pod's disruption budget\.",
        out,
    ), out
    assert drained.stdout.strip().splitlines()[-1] == f"node/{first} drained"
    (agent,) = [p for p in cluster.pods(app="agent") if p["spec"]["nodeName"] == first]
    assert f"Warning: ignoring DaemonSet-managed Pods: default/{agent['metadata']['name']}" in drained.stderr
    assert is_ready(agent), "drain leaves daemon pods where they are"

    after = cluster.pods(app="guarded")
    assert {p["spec"]["nodeName"] for p in after} == {second}
    for state in pod_watch.states():
        ready = [p for p in state.values() if is_ready(p)]
        assert len(ready) >= 3, sorted(state)
    assert any(kind == "DELETED" for kind, _, _ in pod_watch.events)

    rows = {row[0]: row for row in _table(kubectl("get", "nodes").stdout)[1:]}
    assert rows[first][1] == "Ready,SchedulingDisabled"
    assert kubectl("uncordon", first).stdout.strip() == f"node/{first} uncordoned"
    rows = {row[0]: row for row in _table(kubectl("get", "nodes").stdout)[1:]}
    assert rows[first][1] == "Ready"
