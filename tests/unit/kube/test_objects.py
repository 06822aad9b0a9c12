"""The typed readings of pods, nodes and owners that every part shares."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.kube import objects
from shipshape.kube.objects import WorkloadRef

Obj = dict[str, Any]


def _ref(kind: str, name: str, controller: bool | None = True) -> Obj:
    ref: Obj = {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": f"{kind}-{name}"}
    if controller is not None:
        ref["controller"] = controller
    return ref


def _pod(*refs: Obj, labels: Obj | None = None, name: str = "p", namespace: str = "shop") -> Obj:
    metadata: Obj = {"name": name, "namespace": namespace, "labels": labels or {}}
    if refs:
        metadata["ownerReferences"] = list(refs)
    return {"metadata": metadata, "spec": {}, "status": {}}


def test_the_controller_reference_is_the_one_marked_controller() -> None:
    pod = _pod(_ref("Thing", "other", controller=None), _ref("StatefulSet", "db"))
    assert objects.controller_ref(pod) == _ref("StatefulSet", "db")
    assert objects.controller_ref(_pod(_ref("ReplicaSet", "x", controller=False))) is None
    assert objects.controller_ref({}) is None


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        (
            _pod(_ref("ReplicaSet", "web-6b8f7"), labels={"pod-template-hash": "6b8f7"}),
            WorkloadRef("Deployment", "web"),
        ),
        (
            _pod(_ref("ReplicaSet", "web-6b8f7"), labels={"pod-template-hash": "zzz"}),
            WorkloadRef("ReplicaSet", "web-6b8f7"),
        ),
        (_pod(_ref("ReplicaSet", "plain")), WorkloadRef("ReplicaSet", "plain")),
        (_pod(_ref("StatefulSet", "db")), WorkloadRef("StatefulSet", "db")),
        (_pod(_ref("Job", "nightly-2901")), WorkloadRef("Job", "nightly-2901")),
        (_pod(_ref("DaemonSet", "agent")), WorkloadRef("DaemonSet", "agent")),
        (_pod(_ref("Deployment", "web", controller=None)), None),  # not a controller reference
        (_pod(), None),
    ],
)
def test_the_workload_of_a_pod_without_the_replicasets(pod: Obj, want: WorkloadRef | None) -> None:
    assert objects.workload_of(pod) == want


def test_the_workload_of_a_pod_follows_the_replicasets_when_the_caller_has_them() -> None:
    owners = {
        ("shop", "web-abc"): WorkloadRef("Deployment", "web"),
        ("shop", "odd"): WorkloadRef("Rollout", "r"),
    }

    def owner(namespace: str, name: str) -> WorkloadRef | None:
        return owners.get((namespace, name))

    assert objects.workload_of(_pod(_ref("ReplicaSet", "web-abc")), owner) == WorkloadRef("Deployment", "web")
    assert objects.workload_of(_pod(_ref("ReplicaSet", "odd")), owner) == WorkloadRef("Rollout", "r")
    # A ReplicaSet the caller does not know (or that has no controller) is the workload itself.
    assert objects.workload_of(_pod(_ref("ReplicaSet", "lone")), owner) == WorkloadRef("ReplicaSet", "lone")
    assert objects.workload_of(_pod(_ref("ReplicaSet", "web-abc"), namespace="x"), owner) == WorkloadRef(
        "ReplicaSet", "web-abc"
    )
    assert str(WorkloadRef("Deployment", "web")) == "Deployment/web"


def test_a_daemon_pod_is_one_whose_controller_is_a_daemonset() -> None:
    assert objects.is_daemon_pod(_pod(_ref("DaemonSet", "agent")))
    assert not objects.is_daemon_pod(_pod(_ref("DaemonSet", "agent", controller=False)))
    assert not objects.is_daemon_pod(_pod(_ref("ReplicaSet", "x")))


def _with(pod: Obj, phase: str | None = None, ready: str | None = None, deleting: bool = False) -> Obj:
    if phase is not None:
        pod["status"]["phase"] = phase
    if ready is not None:
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": ready},
        ]
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod


def test_pod_phase_readiness_and_activity() -> None:
    assert objects.pod_phase(_pod()) == "Pending"
    assert objects.pod_ready(_with(_pod(), "Running", "True"))
    assert not objects.pod_ready(_with(_pod(), "Running", "False"))
    assert not objects.pod_ready(_pod())
    assert objects.is_active(_with(_pod(), "Running"))
    assert not objects.is_active(_with(_pod(), "Succeeded"))
    assert not objects.is_active(_with(_pod(), "Running", deleting=True))
    assert objects.is_finished(_with(_pod(), "Failed")) and not objects.is_finished(_with(_pod(), "Running"))
    assert objects.is_deleting(_with(_pod(), deleting=True))
    assert objects.condition(_with(_pod(), ready="True"), "PodScheduled") == {
        "type": "PodScheduled",
        "status": "True",
    }
    assert objects.condition_true(_with(_pod(), ready="True"), "Ready")
    assert objects.condition(_pod(), "Ready") is None
    assert objects.condition_status(_with(_pod(), ready="False"), "Ready") == "False"
    assert objects.condition_status(_pod(), "Ready") is None


def test_pod_node_and_metadata() -> None:
    pod = _pod(name="web-1", namespace="shop")
    assert objects.pod_node(pod) is None
    pod["spec"]["nodeName"] = "n1"
    assert objects.pod_node(pod) == "n1"
    assert objects.key(pod) == ("shop", "web-1") and objects.name(pod) == "web-1"
    assert objects.namespace({"metadata": {"name": "n"}}) == ""
    assert objects.labels({}) == {} and objects.annotations({"metadata": {"annotations": None}}) == {}


def test_node_readiness_taints_and_cordon() -> None:
    node: Obj = {
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert objects.node_ready(node) and objects.node_unschedulable(node)
    assert objects.has_taint(node, "k") and not objects.has_taint(node, "other")
    assert objects.node_taints(node) == [{"key": "k", "effect": "NoSchedule"}]
    assert not objects.node_ready({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    assert not objects.node_unschedulable({}) and objects.node_taints({}) == ()


def test_object_list_reads_a_list_or_a_kubernetes_list_and_names_what_is_wrong() -> None:
    pod = {"metadata": {"name": "a"}}
    assert objects.object_list({"pods": [pod]}, "pods") == [pod]
    assert objects.object_list({"pods": {"kind": "List", "items": [pod]}}, "pods") == [pod]
    assert objects.object_list({}, "pods") == []
    with pytest.raises(ValueError, match=r"^snapshot\.pods must be a list of objects$"):
        objects.object_list({"pods": "a"}, "pods")
    with pytest.raises(ValueError, match=r"snapshot\.nodes\[1\] is not a Kubernetes object"):
        objects.object_list({"nodes": [pod, {"name": "b"}]}, "nodes")


def test_snapshots_of_both_analyzers_refuse_a_bad_list_with_their_own_error() -> None:
    from shipshape.analyzers.efficiency.snapshot import EfficiencySnapshot
    from shipshape.analyzers.efficiency.snapshot import SnapshotError as EfficiencySnapshotError
    from shipshape.analyzers.startup.analysis import Snapshot, SnapshotError

    with pytest.raises(SnapshotError, match=r"snapshot\.events\[0\]"):
        Snapshot.from_json({"pods": [], "events": [1], "nodes": []})
    with pytest.raises(EfficiencySnapshotError, match=r"snapshot\.deployments must be a list"):
        EfficiencySnapshot.from_json({"pods": [], "nodes": [], "deployments": 3})
    assert Snapshot.from_json({"pods": [], "events": [], "nodes": []}).webhook_configurations is None
