"""Workloads through kubectl and the official Python client, on a served cluster with every model running.

Each test checks what a real v1.32 cluster shows: kubectl's tables and messages, the objects'
fields, the events, and (from a watch) that a rolling update kept within maxSurge/maxUnavailable.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shipshape.emulator.resources import DEPLOYMENTS, NAMESPACES, NODES, PODS, REPLICASETS, STATEFULSETS
from shipshape.emulator.store import Obj
from shipshape.kube.quantity import cpu_millis

from .served_cluster import PodWatch, ServedCluster, is_ready, ready_pods, scenario, serve_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 1, maxUnavailable: 1}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: nginx
        image: nginx:1.27
        resources: {requests: {cpu: 100m, memory: 128Mi}}
"""

STATEFULSET = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: db
        image: busybox:1.36
        resources: {requests: {cpu: 200m, memory: 256Mi}}
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ServedCluster]:
    with serve_cluster(tmp_path) as served:
        yield served


def _table(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]


def _wait_ready(cluster: ServedCluster, app: str, count: int, emulated_seconds: float = 120) -> list[Obj]:
    def check() -> list[Obj] | None:
        pods = cluster.pods(app=app)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        ready = ready_pods(pods)
        return ready if len(ready) == count and len(live) == count else None

    return cluster.wait(f"{count} ready pods of {app}", check, emulated_seconds)


def _apply_both(cluster: ServedCluster) -> None:
    applied = cluster.kubectl("apply", "-f", "-", stdin=DEPLOYMENT + "---\n" + STATEFULSET).stdout
    assert applied.splitlines() == ["deployment.apps/web created", "statefulset.apps/db created"]
    _wait_ready(cluster, "web", 4)
    _wait_ready(cluster, "db", 3)


def test_apply_get_and_describe(cluster: ServedCluster) -> None:
    _apply_both(cluster)
    kubectl = cluster.kubectl
    deploy = _table(kubectl("get", "deployments").stdout)
    assert deploy[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert deploy[1][:4] == ["web", "4/4", "4", "4"]
    wide = _table(kubectl("get", "deployments", "-o", "wide").stdout)
    assert wide[0][-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert wide[1][-3:] == ["nginx", "nginx:1.27", "app=web"]
    sts = _table(kubectl("get", "statefulsets").stdout)
    assert sts[0] == ["NAME", "READY", "AGE"] and sts[1][:2] == ["db", "3/3"]

    node_names = {n["metadata"]["name"] for n in cluster.objects(NODES)}
    pods = _table(kubectl("get", "pods", "-l", "app=db", "-o", "wide").stdout)
    assert pods[0][:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert [row[0] for row in pods[1:]] == ["db-0", "db-1", "db-2"]  # ordinals
    for row in pods[1:]:
        assert row[1:4] == ["1/1", "Running", "0"]
        assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", row[5]) and row[6] in node_names

    # The ReplicaSet is named after the template hash, which its pods carry as a label.
    (rs,) = cluster.objects(REPLICASETS, "default")
    hash_label = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{hash_label}"
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    assert all(p["metadata"]["labels"]["pod-template-hash"] == hash_label for p in cluster.pods(app="web"))

    described = kubectl("describe", "deployment", "web").stdout
    assert re.search(
        r"Replicas:\s+4 desired \| 4 updated \| 4 total \| 4 available \| 0 unavailable", described
    )
    assert re.search(r"RollingUpdateStrategy:\s+1 max unavailable, 1 max surge", described)
    assert re.search(r"Available\s+True\s+MinimumReplicasAvailable", described)
    assert f"NewReplicaSet:   web-{hash_label} (4/4 replicas created)" in described
    assert re.search(
        rf"Normal\s+ScalingReplicaSet\s+.*Scaled up replica set web-{hash_label} from 0 to 4", described
    )

    pod = kubectl("describe", "pod", "db-0").stdout
    assert re.search(r"Status:\s+Running", pod)
    assert re.search(r"Controlled By:\s+StatefulSet/db", pod)
    for reason, message in [
        ("Scheduled", r"Successfully assigned default/db-0 to ip-"),
        ("Pulled", r'Container image "busybox:1.36" already present on machine'),
        ("Created", r"Created container: db"),
        ("Started", r"Started container db"),
    ]:
        assert re.search(rf"Normal\s+{reason}\s+.*{message}", pod), (reason, pod)

    sts_described = kubectl("describe", "statefulset", "db").stdout
    assert re.search(r"Pods Status:\s+3 Running / 0 Waiting / 0 Succeeded / 0 Failed", sts_described)
    for ordinal in range(3):
        assert re.search(
            rf"SuccessfulCreate\s+.*create Pod db-{ordinal} in StatefulSet db successful", sts_described
        )


def test_scale(cluster: ServedCluster) -> None:
    _apply_both(cluster)
    kubectl = cluster.kubectl
    assert (
        kubectl("scale", "deployment", "web", "--replicas=6").stdout.strip() == "deployment.apps/web scaled"
    )
    _wait_ready(cluster, "web", 6)
    assert (
        kubectl("scale", "statefulset", "db", "--replicas=1").stdout.strip() == "statefulset.apps/db scaled"
    )
    remaining = cluster.wait(
        "db scaled down to db-0",
        lambda: [p["metadata"]["name"] for p in cluster.pods(app="db")] == ["db-0"],
        120,
    )
    assert remaining
    scale = cluster.apps.read_namespaced_deployment_scale("web", "default")
    assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (6, 6, "app=web")
    sts = cluster.get(STATEFULSETS, "default", "db")
    assert sts is not None and sts["spec"]["replicas"] == 1
    cluster.wait(
        "db status shows one replica",
        lambda: (cluster.get(STATEFULSETS, "default", "db") or {}).get("status", {}).get("replicas") == 1,
        60,
    )
    # Scale-down of a StatefulSet goes from the highest ordinal: db-2 was told to stop before db-1.
    events = [
        e for e in cluster.core.list_namespaced_event("default").items if e.reason == "SuccessfulDelete"
    ]
    deleted = [e.message for e in sorted(events, key=lambda e: int(e.metadata.resource_version))]
    assert deleted == [
        "delete Pod db-2 in StatefulSet db successful",
        "delete Pod db-1 in StatefulSet db successful",
    ]


def test_rollout_restart_status_and_history(cluster: ServedCluster) -> None:
    _apply_both(cluster)
    kubectl = cluster.kubectl
    before = {p["metadata"]["name"] for p in cluster.pods(app="web")}
    assert kubectl("rollout", "restart", "deployment/web").stdout.strip() == "deployment.apps/web restarted"
    status = kubectl("rollout", "status", "deployment/web", "--timeout=60s").stdout
    assert status.strip().splitlines()[-1] == 'deployment "web" successfully rolled out'
    after = _wait_ready(cluster, "web", 4)
    assert not before & {p["metadata"]["name"] for p in after}
    restarted = after[0]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d|.*Z", restarted)

    history = _table(kubectl("rollout", "history", "deployment/web").stdout)
    assert history[0] == ["deployment.apps/web"]
    assert history[1] == ["REVISION", "CHANGE-CAUSE"]
    assert [row[0] for row in history[2:]] == ["1", "2"]
    rev2 = kubectl("rollout", "history", "deployment/web", "--revision=2").stdout
    assert "kubectl.kubernetes.io/restartedAt" in rev2
    revisions = sorted(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
        for rs in cluster.objects(REPLICASETS, "default")
        if rs["metadata"]["name"].startswith("web-")
    )
    assert revisions == ["1", "2"]


def test_statefulset_rollout_restart_goes_from_the_highest_ordinal(cluster: ServedCluster) -> None:
    _apply_both(cluster)
    kubectl = cluster.kubectl
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods(app="db")}
    assert kubectl("rollout", "restart", "statefulset/db").stdout.strip() == "statefulset.apps/db restarted"
    status = kubectl("rollout", "status", "statefulset/db", "--timeout=60s").stdout.strip().splitlines()
    # apps/v1 defaults rollingUpdate.partition to 0, so kubectl reports a partitioned roll out.
    assert status[-1] == "partitioned roll out complete: 3 new pods have been updated..."
    pods = _wait_ready(cluster, "db", 3)
    assert {p["metadata"]["name"] for p in pods} == set(before)
    assert not {p["metadata"]["uid"] for p in pods} & set(before.values())
    sts = cluster.get(STATEFULSETS, "default", "db")
    assert sts is not None
    assert sts["status"]["currentRevision"] == sts["status"]["updateRevision"]
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert {p["metadata"]["labels"]["controller-revision-hash"] for p in pods} == {
        sts["status"]["updateRevision"]
    }
    deletes = [
        e.message
        for e in sorted(
            cluster.core.list_namespaced_event("default", field_selector="reason=SuccessfulDelete").items,
            key=lambda e: int(e.metadata.resource_version),
        )
    ]
    assert deletes == [f"delete Pod db-{ordinal} in StatefulSet db successful" for ordinal in (2, 1, 0)]


def test_rollout_undo_reuses_the_previous_replicaset(cluster: ServedCluster) -> None:
    _apply_both(cluster)
    kubectl = cluster.kubectl
    kubectl("rollout", "restart", "deployment/web")
    kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    assert kubectl("rollout", "undo", "deployment/web").stdout.strip() == "deployment.apps/web rolled back"
    kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    _wait_ready(cluster, "web", 4)
    deploy = cluster.get(DEPLOYMENTS, "default", "web")
    assert deploy is not None
    assert "kubectl.kubernetes.io/restartedAt" not in (
        deploy["spec"]["template"]["metadata"].get("annotations") or {}
    )
    # Undo re-uses revision 1's ReplicaSet, which becomes revision 3.
    assert deploy["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    sets = {rs["metadata"]["name"]: rs for rs in cluster.objects(REPLICASETS, "default")}
    assert len(sets) == 2
    replicas = sorted(
        (rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"], rs["spec"]["replicas"])
        for rs in sets.values()
    )
    assert replicas == [("2", 0), ("3", 4)]


@pytest.mark.parametrize(
    ("replicas", "strategy", "most", "fewest_ready"),
    [
        (4, {"maxSurge": 1, "maxUnavailable": 1}, 5, 3),
        # Percentages: surge rounds up (25% of 10 -> 3), unavailability rounds down (-> 2).
        (10, {"maxSurge": "25%", "maxUnavailable": "25%"}, 13, 8),
    ],
)
def test_watch_rolling_update_keeps_surge_and_unavailability(
    cluster: ServedCluster, replicas: int, strategy: dict[str, Any], most: int, fewest_ready: int
) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=DEPLOYMENT)
    cluster.apps.patch_namespaced_deployment(
        "web", "default", {"spec": {"replicas": replicas, "strategy": {"rollingUpdate": strategy}}}
    )
    _wait_ready(cluster, "web", replicas)
    pod_watch = PodWatch(cluster, "default", "app=web")
    try:
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.28"}]}}}}
        cluster.apps.patch_namespaced_deployment("web", "default", patch)

        def rolled_out() -> bool:
            pods = cluster.pods(app="web")
            return (
                len(pods) == replicas
                and all(p["spec"]["containers"][0]["image"] == "nginx:1.28" for p in pods)
                and len(ready_pods(pods)) == replicas
            )

        cluster.wait("rollout to nginx:1.28", rolled_out, 300)
        # Let the watch catch up with the last changes before reading it.
        cluster.wait(
            "the watch saw the rollout end",
            lambda: _ready_new(list(pod_watch.states())[-1]) == replicas,
            30,
        )
    finally:
        pod_watch.stop()
    states = list(pod_watch.states())
    assert len(states) > 2 * replicas, "the watch showed the rollout"
    for state in states:
        live = [p for p in state.values() if not p["metadata"].get("deletionTimestamp")]
        assert len(live) <= most, sorted(state)
        ready = [p for p in state.values() if is_ready(p)]
        assert len(ready) >= fewest_ready, sorted(state)
    kinds = {kind for kind, _, _ in pod_watch.events}
    assert {"ADDED", "MODIFIED", "DELETED"} <= kinds


def test_rollout_of_a_missing_image_stalls_and_exceeds_its_progress_deadline(tmp_path: Path) -> None:
    sc = scenario(kubelet={"preloadedImages": ["nginx:1.27"], "missingImages": ["nginx:missing"]})
    with serve_cluster(tmp_path, sc) as cluster:
        kubectl = cluster.kubectl
        kubectl("apply", "-f", "-", stdin=DEPLOYMENT)
        _wait_ready(cluster, "web", 4)
        kubectl("patch", "deployment", "web", "-p", '{"spec": {"progressDeadlineSeconds": 120}}')
        kubectl("set", "image", "deployment/web", "nginx=nginx:missing")

        def pulling_fails() -> list[list[str]] | None:
            rows = _table(kubectl("get", "pods", "-l", "app=web").stdout)[1:]
            failing = [row for row in rows if row[2] in ("ErrImagePull", "ImagePullBackOff")]
            return rows if failing else None

        rows = cluster.wait("a new pod that cannot pull its image", pulling_fails, 60)
        # maxSurge 1, maxUnavailable 1: one old pod may go, the other three keep serving.
        assert len([row for row in rows if row[1:3] == ["1/1", "Running"]]) >= 3
        stalled = kubectl("rollout", "status", "deployment/web", "--timeout=1s", ok=False)
        assert stalled.returncode == 1
        assert stalled.stderr.strip().endswith("error: timed out waiting for the condition")
        assert 'Waiting for deployment "web" rollout to finish: ' in stalled.stdout

        def timed_out() -> bool:
            deploy = cluster.get(DEPLOYMENTS, "default", "web") or {}
            return any(
                c["type"] == "Progressing"
                and c["status"] == "False"
                and c["reason"] == "ProgressDeadlineExceeded"
                for c in deploy.get("status", {}).get("conditions") or []
            )

        cluster.wait("the progress deadline exceeded", timed_out, 240)
        failed = kubectl("rollout", "status", "deployment/web", "--timeout=10s", ok=False)
        assert failed.returncode == 1
        assert failed.stderr.strip() == 'error: deployment "web" exceeded its progress deadline'
        described = kubectl("describe", "deployment", "web").stdout
        assert re.search(r"Progressing\s+False\s+ProgressDeadlineExceeded", described)
        # Surge 1 then one old pod down: two new pods, neither able to start.
        bad = [p for p in cluster.pods(app="web") if p["spec"]["containers"][0]["image"] == "nginx:missing"]
        assert len(bad) == 2
        events = kubectl("describe", "pod", bad[0]["metadata"]["name"]).stdout
        assert 'Failed to pull image "nginx:missing": ' in events
        assert re.search(r'Back-off pulling image "nginx:missing"', events)
        assert len(ready_pods(cluster.pods(app="web"))) == 3  # the old ReplicaSet's, still serving


def _pod_manifest(name: str, cpu: str, node_selector: dict[str, str] | None = None) -> str:
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "nginx:1.27", "resources": {"requests": {"cpu": cpu}}}]
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def test_unschedulable_pods_explain_themselves(cluster: ServedCluster) -> None:
    kubectl = cluster.kubectl
    on_demand = {"node.kubernetes.io/capacity": "on-demand"}
    for name in ("filler-0", "filler-1"):  # 2 of each on-demand node's 3920m
        kubectl("create", "-f", "-", stdin=_pod_manifest(name, "2", on_demand))
    cluster.wait(
        "the fillers on both on-demand nodes",
        lambda: len({p["spec"].get("nodeName") for p in ready_pods(cluster.objects(PODS, "default"))}) == 2,
        60,
    )
    # 3 cpu: more than a spot node's allocatable (1930m: preemption cannot help there) and more
    # than an on-demand node has left (where no lower-priority pod could make room).
    kubectl("create", "-f", "-", stdin=_pod_manifest("big", "3"))
    kubectl("create", "-f", "-", stdin=_pod_manifest("picky", "100m", {"disk": "ssd"}))
    expected = {
        "big": "0/6 nodes are available: 6 Insufficient cpu. preemption: 0/6 nodes are available: "
        "2 No preemption victims found for incoming pod, 4 Preemption is not helpful for scheduling..",
        "picky": "0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector. preemption: "
        "0/6 nodes are available: 6 Preemption is not helpful for scheduling..",
    }
    for name, message in expected.items():

        def condition(name: str = name) -> Obj | None:
            pod = cluster.get(PODS, "default", name) or {}
            conditions = pod.get("status", {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "PodScheduled"), None)

        scheduled = cluster.wait(f"{name} marked unschedulable", condition, 60)
        assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
            "False",
            "Unschedulable",
            message,
        )
        described = kubectl("describe", "pod", name).stdout
        assert re.search(r"Status:\s+Pending", described)
        assert re.search(
            rf"Warning\s+FailedScheduling\s+.*default-scheduler\s+{re.escape(message)}", described
        )
    rows = {row[0]: row for row in _table(kubectl("get", "pods").stdout)[1:]}
    assert rows["big"][1:3] == ["0/1", "Pending"] and rows["picky"][1:3] == ["0/1", "Pending"]


def _ready_new(state: dict[str, Obj]) -> int:
    return len(
        [p for p in state.values() if is_ready(p) and p["spec"]["containers"][0]["image"] == "nginx:1.28"]
    )


def test_delete_cascades_background_and_foreground(cluster: ServedCluster) -> None:
    _apply_both(cluster)
    kubectl = cluster.kubectl
    second = yaml.safe_load(DEPLOYMENT)
    second["metadata"] = {"name": "api", "labels": {"app": "api"}}
    second["spec"]["selector"] = {"matchLabels": {"app": "api"}}
    second["spec"]["template"]["metadata"]["labels"] = {"app": "api"}
    second["spec"]["replicas"] = 2
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(second))
    _wait_ready(cluster, "api", 2)

    # Background (kubectl's default): the Deployment goes at once, the garbage collector follows.
    assert kubectl("delete", "deployment", "web").stdout.strip() == 'deployment.apps "web" deleted'
    assert cluster.get(DEPLOYMENTS, "default", "web") is None

    def web_gone() -> bool:
        return not cluster.pods(app="web") and not [
            rs for rs in cluster.objects(REPLICASETS, "default") if rs["metadata"]["name"].startswith("web-")
        ]

    cluster.wait("web's ReplicaSet and pods collected", web_gone, 120)

    # Foreground: kubectl waits until the Deployment is gone, which happens only after its dependents.
    done = kubectl("delete", "deployment", "api", "--cascade=foreground")
    assert done.stdout.strip() == 'deployment.apps "api" deleted'
    assert cluster.get(DEPLOYMENTS, "default", "api") is None
    assert not [
        rs for rs in cluster.objects(REPLICASETS, "default") if rs["metadata"]["name"].startswith("api-")
    ]
    assert not cluster.pods(app="api")
    # The StatefulSet was not touched.
    assert len(ready_pods(cluster.pods(app="db"))) == 3

    # Orphan: the StatefulSet goes, its pods stay, without their owner reference.
    orphaned = kubectl("delete", "statefulset", "db", "--cascade=orphan")
    assert orphaned.stdout.strip() == 'statefulset.apps "db" deleted'
    assert cluster.get(STATEFULSETS, "default", "db") is None
    pods = cluster.wait(
        "db pods released",
        lambda: [p for p in cluster.pods(app="db") if not p["metadata"].get("ownerReferences")],
        30,
    )
    assert sorted(p["metadata"]["name"] for p in pods) == ["db-0", "db-1", "db-2"]
    assert len(ready_pods(pods)) == 3


def test_deleting_a_namespace_empties_it_and_waits_for_finalizers(cluster: ServedCluster) -> None:
    kubectl = cluster.kubectl
    kubectl("create", "namespace", "team")
    kubectl("create", "deployment", "web", "-n", "team", "--image=nginx:1.27", "--replicas=2")
    held = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": "team", "finalizers": ["example.com/hold"]},
    }
    kubectl("create", "-f", "-", stdin=json.dumps(held))
    cluster.wait("web running in team", lambda: len(ready_pods(cluster.pods("team", app="web"))) == 2, 60)

    assert kubectl("delete", "namespace", "team", "--wait=false").stdout.strip() == 'namespace "team" deleted'

    def held_back() -> dict[str, Obj] | None:
        ns = cluster.get(NAMESPACES, "", "team") or {}
        conditions = {c["type"]: c for c in ns.get("status", {}).get("conditions") or []}
        remaining = conditions.get("NamespaceContentRemaining", {})
        return conditions if remaining.get("status") == "True" and not cluster.pods("team") else None

    conditions = cluster.wait("team emptied but for the held ConfigMap", held_back, 120)
    assert conditions["NamespaceContentRemaining"]["message"] == (
        "Some resources are remaining: configmaps has 1 resource instances"
    )
    assert conditions["NamespaceFinalizersRemaining"]["message"] == (
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    )
    assert _table(kubectl("get", "namespace", "team").stdout)[1][:2] == ["team", "Terminating"]
    assert not cluster.objects(DEPLOYMENTS, "team") and not cluster.objects(REPLICASETS, "team")
    refused = kubectl("create", "configmap", "late", "-n", "team", ok=False)
    assert refused.stderr.strip() == (
        'error: failed to create configmap: configmaps "late" is forbidden: '
        "unable to create new content in namespace team because it is being terminated"
    )

    kubectl(
        "patch", "configmap", "held", "-n", "team", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )
    kubectl("wait", "--for=delete", "namespace/team", "--timeout=30s")
    gone = kubectl("get", "namespace", "team", ok=False)
    assert gone.stderr.strip() == 'Error from server (NotFound): namespaces "team" not found'


def test_top_nodes_and_pods(cluster: ServedCluster) -> None:
    _apply_both(cluster)
    kubectl = cluster.kubectl

    def top(*args: str) -> list[list[str]] | None:
        done = kubectl("top", *args, ok=False)
        return _table(done.stdout) if done.returncode == 0 else None

    pods = cluster.wait("metrics for every web pod", lambda: _top_rows(top("pods", "-l", "app=web"), 4), 60)
    assert pods[0] == ["NAME", "CPU(cores)", "MEMORY(bytes)"]
    names = {p["metadata"]["name"] for p in cluster.pods(app="web")}
    assert {row[0] for row in pods[1:]} == names
    for row in pods[1:]:
        # The scenario's usage: steady at half the requests (100m cpu, 128Mi memory), with some noise.
        assert 30 <= cpu_millis(row[1]) <= 70, row
        assert row[2].endswith("Mi") and 40 <= int(row[2][:-2]) <= 90, row

    nodes = top("nodes")
    assert nodes is not None
    assert nodes[0] == ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
    assert {row[0] for row in nodes[1:]} == {n["metadata"]["name"] for n in cluster.objects(NODES)}
    busiest = {p["spec"]["nodeName"] for p in cluster.objects(PODS, "default")}
    for row in nodes[1:]:
        assert cpu_millis(row[1]) > 0 and row[2].endswith("%")
        if row[0] in busiest:
            assert cpu_millis(row[1]) >= 30
    by_container = _table(kubectl("top", "pod", "db-0", "--containers").stdout)
    assert by_container[0] == ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert by_container[1][:2] == ["db-0", "db"]


def _top_rows(table: list[list[str]] | None, count: int) -> list[list[str]] | None:
    return table if table is not None and len(table) == count + 1 else None
