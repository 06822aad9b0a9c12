from __future__ import annotations

import json

import pytest

from shipshape.analyzers.startup import aggregate, model, nodes
from shipshape.analyzers.startup.pods import analyze_pods, node_infos

from .builders import T0, C, Json, PodPlan, event, node, pod_and_events, ts


def plan(
    name: str, node_name: str, e2e: float, *, pulled: bool = False, volumes: list[Json] | None = None
) -> PodPlan:
    container = C("app", started=e2e - 1.0)
    if pulled:
        container = C("app", started=e2e - 1.0, pull_start=1.0, pull=e2e - 3.0)
    return PodPlan(
        name=name,
        node=node_name,
        created=0.0,
        scheduled=0.5,
        sandbox=1.0,
        initialized=0.0,
        containers_ready=e2e,
        ready=e2e,
        containers=[container],
        volumes=volumes or [],
    )


def build(plans: list[PodPlan]) -> list[model.PodTimeline]:
    pods, events = [], []
    for p in plans:
        pod, pod_events = pod_and_events(p)
        pods.append(pod)
        events.extend(pod_events)
    return analyze_pods(pods, events)


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    assert aggregate.percentile(values, 0.5) == 50.0
    assert aggregate.percentile(values, 0.99) == 99.0
    assert aggregate.percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError):
        aggregate.percentile([], 0.5)


def test_groups_by_node_labels() -> None:
    timelines = build([plan(f"a{i}", "spot-1", 4.0 + i) for i in range(3)] + [plan("b", "od-1", 20.0)])
    infos = node_infos(
        [
            node("spot-1", instance_type="c6a.4xlarge", capacity="spot"),
            node("od-1", instance_type="m5.large", capacity="on-demand"),
        ]
    )
    by_capacity = {g.key: g for g in aggregate.aggregate(timelines, aggregate.CAPACITY_TYPE, infos)}
    assert set(by_capacity) == {"spot", "on-demand"}
    spot = by_capacity["spot"]
    assert spot.pods == spot.ready == 3
    assert spot.end_to_end is not None and (spot.end_to_end.p50, spot.end_to_end.p99) == (5.0, 6.0)
    pools = aggregate.aggregate(timelines, aggregate.POOL, infos)
    assert [g.key for g in pools] == ["m5.large/us-east-1a", "c6a.4xlarge/us-east-1a"]  # slowest first
    assert pools[0].dominant_phase == model.CONTAINER_START  # started at 19 s of 20
    workloads = aggregate.aggregate(timelines, aggregate.WORKLOAD, infos)
    assert [g.key for g in workloads] == ["default/Deployment/web"]
    with pytest.raises(ValueError, match="unknown dimension"):
        aggregate.aggregate(timelines, "colour", infos)


def test_slo_counts_only_stateless_prepulled_pods() -> None:
    fast = [plan(f"f{i}", "n", 3.0) for i in range(99)]
    slow_pulled = [plan("p", "n", 60.0, pulled=True)]
    stateful = [plan("s", "n", 60.0, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}])]
    check = aggregate.slo_check(build(fast + slow_pulled + stateful))
    assert check.eligible == 99 and check.met is True and check.value == pytest.approx(2.0)
    assert check.excluded == {"images pulled": 1, "stateful (persistent volumes)": 1}
    late = [plan("late", "n", 12.0)]
    check = aggregate.slo_check(build(fast[:50] + late))
    assert check.met is False and check.value == pytest.approx(11.0)
    assert aggregate.slo_check([]).met is None


def ds_pod(name: str, ds: str, node_name: str, ready: float | None) -> Json:
    conditions = (
        [{"type": "Ready", "status": "True", "lastTransitionTime": ts(ready)}] if ready is not None else []
    )
    return {
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "ownerReferences": [{"kind": "DaemonSet", "name": ds, "controller": True}],
        },
        "spec": {"nodeName": node_name},
        "status": {"conditions": conditions},
    }


def workload_pod(node_name: str, started: float) -> Json:
    return {
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"nodeName": node_name},
        "status": {"containerStatuses": [{"name": "app", "state": {"running": {"startedAt": ts(started)}}}]},
    }


def test_node_timeline_from_api_objects() -> None:
    body = node("n1", created=10.0, ready=30.0)
    ready_event = event("Node", "", "n1", "NodeReady", "Node n1 status is now: NodeReady", 25.0)
    pods = [ds_pod("aws-node-x", "aws-node", "n1", 22.0), ds_pod("kube-proxy-x", "kube-proxy", "n1", 15.0)]
    (timeline,) = nodes.analyze_nodes(
        [body], [*pods, workload_pod("n1", 40.0)], [ready_event], launch_times={"n1": T0}
    )
    assert timeline.events[nodes.REGISTERED] == T0 + 10.0
    assert timeline.events[nodes.NODE_READY] == T0 + 25.0  # the first NodeReady, not the condition's latest
    assert timeline.events[nodes.CNI_READY] == T0 + 22.0
    assert timeline.events[nodes.DAEMONSETS_READY] == T0 + 22.0
    assert timeline.events[nodes.FIRST_POD_STARTED] == T0 + 40.0
    assert timeline.time_to_ready == 25.0
    assert timeline.segments["CNI"] == 12.0 and timeline.segments["node ready"] == 3.0
    assert timeline.segments["first pod"] == 15.0
    assert nodes.VM_INITIALIZED in timeline.missing


def test_node_not_ready_is_missing_with_the_condition() -> None:
    body = node("n1", created=10.0)
    body["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    (timeline,) = nodes.analyze_nodes([body], [ds_pod("aws-node-x", "aws-node", "n1", None)])
    assert timeline.missing[nodes.NODE_READY] == "Ready condition is False: KubeletNotReady"
    assert timeline.missing[nodes.CNI_READY] == "pod aws-node-x not Ready"
    assert timeline.time_to_ready is None


def test_log_timeline_annotation_fills_host_events() -> None:
    body = node("n1", created=10.0, ready=30.0)
    annotation = {
        nodes.VM_INITIALIZED: ts(0.0),
        nodes.CLOUD_INIT_START: ts(3.0),
        nodes.KUBELET_START: ts(7.5),
    }
    body["metadata"]["annotations"] = {nodes.TIMELINE_ANNOTATION: json.dumps(annotation)}
    (timeline,) = nodes.analyze_nodes([body])
    assert timeline.origin == (nodes.VM_INITIALIZED, T0)
    assert timeline.sources[nodes.VM_INITIALIZED] == "log"
    assert timeline.segments["OS boot"] == 3.0 and timeline.segments["cloud-init"] == 4.0
    assert timeline.time_to_ready == 30.0
    body["metadata"]["annotations"] = {nodes.TIMELINE_ANNOTATION: '{"teleported": "now"}'}
    (timeline,) = nodes.analyze_nodes([body])
    assert any("unknown event 'teleported'" in note for note in timeline.notes)
    body["metadata"]["annotations"] = {nodes.TIMELINE_ANNOTATION: '{"v": 2, "vm_initialized": "x"}'}
    (timeline,) = nodes.analyze_nodes([body])
    assert any("unknown version 2" in note for note in timeline.notes)


def test_pool_comparison_names_the_dominant_segment() -> None:
    bodies, launch = [], {}
    for i in range(4):
        slow = i == 3
        body = node(f"n{i}", created=20.0 + (12.0 if slow else 0.0), ready=30.0 + (12.0 if slow else 0.0))
        body["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "c6a.4xlarge" if slow else "m5.large"
        annotation = {nodes.VM_INITIALIZED: ts(1.0), nodes.CLOUD_INIT_START: ts(4.0)}
        annotation[nodes.KUBELET_START] = ts(10.0 + (12.0 if slow else 0.0))
        body["metadata"]["annotations"] = {nodes.TIMELINE_ANNOTATION: json.dumps(annotation)}
        bodies.append(body)
        launch[f"n{i}"] = T0
    comparisons = nodes.compare_pools(nodes.analyze_nodes(bodies, launch_times=launch))
    slowest = comparisons[0]
    assert slowest.pool == "c6a.4xlarge/us-east-1a"
    assert slowest.delta == pytest.approx(12.0)
    assert slowest.dominant_segment == "cloud-init"
    assert slowest.sentence() == (
        "pool c6a.4xlarge/us-east-1a is 12 s slower to Ready than the cluster median,"
        " dominated by cloud-init (+12 s)"
    )


@pytest.mark.parametrize(
    ("label", "group"),
    [
        ("karpenter.sh/nodepool", "general"),
        ("eks.amazonaws.com/nodegroup", "ng-spot"),
        ("cloud.google.com/gke-nodepool", "pool-1"),
        ("kubernetes.azure.com/agentpool", "spotpool"),
        ("emulator.shipshape.dev/pool", "spot-a"),
    ],
)
def test_a_nodes_pool_is_its_provisioners_node_group(label: str, group: str) -> None:
    labelled = node("n1")
    labelled["metadata"]["labels"][label] = group
    (info,) = node_infos([labelled]).values()
    assert info.pool == group
    (unlabelled,) = node_infos([node("n2")]).values()
    assert unlabelled.pool == ""
