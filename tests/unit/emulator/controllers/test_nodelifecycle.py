from __future__ import annotations

from shipshape.emulator.controllers.podutil import condition, is_ready
from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj, WatchEvent

from .helpers import create, events, make_cluster, pod_template, run, set_running, update

UNREACHABLE = "node.kubernetes.io/unreachable"


def bound_pod(name: str, tolerations: list[Obj] | None = None, node: str = "node-a") -> Obj:
    spec = pod_template({})["spec"] | {"nodeName": node}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": name}, "spec": spec}


def taints(cluster: Cluster, node: str = "node-a") -> set[tuple[str, str]]:
    body = cluster.store.must_get(NODES, "", node)
    return {(t["key"], t["effect"]) for t in body["spec"].get("taints") or []}


def watch_deletions(cluster: Cluster) -> dict[str, float]:
    deleted: dict[str, float] = {}

    def record(event: WatchEvent) -> None:
        md = event.object["metadata"]
        if event.resource is PODS and md.get("deletionTimestamp") and md["name"] not in deleted:
            deleted[md["name"]] = cluster.clock.now()

    cluster.store.subscribe(record)
    return deleted


def test_silent_node_becomes_unknown_tainted_and_its_pods_are_evicted_on_time() -> None:
    cluster, fake = make_cluster(nodes=("node-a", "node-b"))
    start = cluster.clock.now()
    # Written straight to the store: no admission adds the default 300 s tolerations.
    set_running(
        cluster,
        cluster.store.create(
            PODS, bound_pod("plain") | {"metadata": {"name": "plain", "namespace": "default"}}
        ),
    )
    create(
        cluster,
        PODS,
        bound_pod(
            "tolerant",
            [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}],
        ),
    )
    create(cluster, PODS, bound_pod("defaulted"))  # admission gives it 300 s
    create(
        cluster,
        PODS,
        bound_pod("forever", [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]),
    )
    deleted = watch_deletions(cluster)
    run(cluster, 15)
    fake.silent.add("node-a")  # last renewal was at +10 s
    run(cluster, 39)  # +54: 44 s of silence, but the monitor (every 5 s) has not looked since +50
    ready = condition(cluster.store.must_get(NODES, "", "node-a"), "Ready")
    assert ready is not None and ready["status"] == "True"
    run(cluster, 1)  # +55
    node = cluster.store.must_get(NODES, "", "node-a")
    ready = condition(node, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "Unknown",
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    assert taints(cluster) == {(UNREACHABLE, "NoExecute"), (UNREACHABLE, "NoSchedule")}
    (not_ready,) = events(cluster, "NodeNotReady", "node-a")
    assert not_ready["message"] == "Node node-a status is now: NodeNotReady"
    assert deleted == {"plain": start + 55}
    marked = events(cluster, "TaintManagerEviction", "plain")
    assert [e["message"] for e in marked] == ["Marking for deletion Pod default/plain"]

    run(cluster, 29)
    assert "tolerant" not in deleted
    run(cluster, 1)
    assert deleted["tolerant"] == start + 85
    target = condition(cluster.store.must_get(PODS, "default", "tolerant"), "DisruptionTarget")
    assert target is not None and target["reason"] == "DeletionByTaintManager"
    run(cluster, 270)
    assert deleted["defaulted"] == start + 355
    run(cluster, 1000)
    assert "forever" not in deleted


def test_pods_on_an_unreachable_node_are_marked_not_ready() -> None:
    cluster, fake = make_cluster()
    pod = set_running(cluster, create(cluster, PODS, bound_pod("app", [{"operator": "Exists"}])))
    assert pod is not None and is_ready(pod)
    fake.silent.add("node-a")
    run(cluster, 60)
    assert not is_ready(cluster.store.must_get(PODS, "default", "app"))


def test_resumed_lease_removes_taints_and_cancels_pending_evictions() -> None:
    cluster, fake = make_cluster(nodes=("node-a", "node-b"))
    toleration = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 120}
    create(cluster, PODS, bound_pod("tolerant", [toleration]))
    deleted = watch_deletions(cluster)
    fake.silent.add("node-a")
    run(cluster, 60)
    assert (UNREACHABLE, "NoExecute") in taints(cluster)
    fake.silent.discard("node-a")
    run(cluster, 15)
    ready = condition(cluster.store.must_get(NODES, "", "node-a"), "Ready")
    assert ready is not None and ready["status"] == "True"
    assert taints(cluster) == set()
    run(cluster, 300)
    assert deleted == {}
    (cancel,) = [
        e
        for e in events(cluster, "TaintManagerEviction", "tolerant")
        if e["message"].startswith("Cancelling")
    ]
    assert cancel["message"] == "Cancelling deletion of Pod default/tolerant"


def test_not_ready_and_unschedulable_nodes_get_their_taints() -> None:
    cluster, _ = make_cluster(nodes=("node-a", "node-b"))

    def not_ready(node: Obj) -> None:
        node["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]

    cluster.store.mutate(NODES, "", "node-a", not_ready, subresource="status")
    update(cluster, NODES, "node-b", lambda n: n["spec"].update(unschedulable=True), ns="")
    run(cluster, 1)
    assert taints(cluster, "node-a") == {
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/not-ready", "NoSchedule"),
    }
    assert taints(cluster, "node-b") == {("node.kubernetes.io/unschedulable", "NoSchedule")}
    added = next(
        t for t in cluster.store.must_get(NODES, "", "node-a")["spec"]["taints"] if t["effect"] == "NoExecute"
    )
    assert added["timeAdded"] == "2026-01-01T00:00:00Z"


def test_pods_of_a_deleted_node_are_collected_after_the_quarantine() -> None:
    cluster, _ = make_cluster(nodes=("node-a", "node-b"))
    create(cluster, PODS, bound_pod("stranded", node="node-b"))
    cluster.store.delete(NODES, "", "node-b")
    run(cluster, 39)
    assert cluster.store.get(PODS, "default", "stranded") is not None
    run(cluster, 2)
    assert cluster.store.get(PODS, "default", "stranded") is None


def test_no_execute_tainting_is_rate_limited_per_zone() -> None:
    nodes = [f"n{i}" for i in range(10)]
    cluster, fake = make_cluster(nodes=nodes)
    fake.silent |= {"n0", "n1"}
    tainted: dict[str, float] = {}

    def record(event: WatchEvent) -> None:
        md = event.object["metadata"]
        has = any(t["effect"] == "NoExecute" for t in event.object["spec"].get("taints") or [])
        if event.resource is NODES and has and md["name"] not in tainted:
            tainted[md["name"]] = cluster.clock.now()

    cluster.store.subscribe(record)
    run(cluster, 100)
    first, second = sorted(tainted.values())
    assert second - first == 10.0  # 0.1 node per second


def test_whole_cluster_going_silent_stops_evictions() -> None:
    cluster, fake = make_cluster(nodes=("node-a", "node-b"))
    deleted = watch_deletions(cluster)
    cluster.store.create(PODS, bound_pod("plain") | {"metadata": {"name": "plain", "namespace": "default"}})
    fake.silent |= {"node-a", "node-b"}
    run(cluster, 200)
    assert taints(cluster) == {(UNREACHABLE, "NoSchedule")}
    assert deleted == {}


def test_small_zone_in_partial_disruption_gets_no_execute_taints_no_more() -> None:
    nodes = [f"n{i}" for i in range(5)]
    cluster, fake = make_cluster(nodes=nodes)
    fake.silent |= {"n0", "n1", "n2", "n3"}  # 80 % of the zone: partial disruption, small cluster
    run(cluster, 100)
    for node in ("n0", "n1", "n2", "n3"):
        assert (UNREACHABLE, "NoExecute") not in taints(cluster, node)
        assert (UNREACHABLE, "NoSchedule") in taints(cluster, node)


def test_finished_pods_beyond_the_threshold_are_collected_oldest_first() -> None:
    from shipshape.emulator.api import Api
    from shipshape.emulator.controllers.nodelifecycle import NodeLifecycleController
    from shipshape.kube.clock import VirtualClock

    cluster = Cluster(VirtualClock())
    Api(cluster)
    cluster.add(NodeLifecycleController(terminated_pod_gc_threshold=2))
    for i in range(4):
        body = {"metadata": {"name": f"done-{i}", "namespace": "default"}, "spec": pod_template({})["spec"]}
        cluster.store.create(PODS, body | {"status": {"phase": "Succeeded"}})
        run(cluster, 1)
    cluster.store.create(
        PODS, {"metadata": {"name": "running", "namespace": "default"}, "spec": pod_template({})["spec"]}
    )
    run(cluster, 20)
    assert sorted(p["metadata"]["name"] for p in cluster.store.list(PODS, "default")) == [
        "done-2",
        "done-3",
        "running",
    ]


def test_terminating_pods_of_an_out_of_service_node_are_removed() -> None:
    cluster, fake = make_cluster(nodes=("node-a", "node-b"))
    fake.terminate_after = 10_000.0  # the node's kubelet is gone: nothing finishes the termination
    create(cluster, PODS, bound_pod("stuck", [{"operator": "Exists"}]))
    fake.silent.add("node-a")
    run(cluster, 60)
    cluster.store.delete(PODS, "default", "stuck")
    run(cluster, 30)
    assert cluster.store.get(PODS, "default", "stuck") is not None

    def out_of_service(node: Obj) -> None:
        node["spec"]["taints"] = [
            *node["spec"].get("taints", []),
            {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"},
        ]

    update(cluster, NODES, "node-a", out_of_service, ns="")
    run(cluster, 21)
    assert cluster.store.get(PODS, "default", "stuck") is None


def test_pod_gc_indexes_agree_with_a_full_scan() -> None:
    """The finished pods and out-of-service nodes the GC keeps from events match a scan of the store."""
    from shipshape.emulator.api import Api
    from shipshape.emulator.controllers import podutil
    from shipshape.emulator.controllers.nodelifecycle import NodeLifecycleController
    from shipshape.kube.clock import VirtualClock

    cluster = Cluster(VirtualClock())
    Api(cluster)
    store = cluster.store
    spec = pod_template({})["spec"]
    store.create(
        PODS,
        {"metadata": {"name": "early", "namespace": "default"}, "spec": spec, "status": {"phase": "Failed"}},
    )
    store.create(NODES, {"metadata": {"name": "n1"}, "spec": {}})
    controller = NodeLifecycleController()
    cluster.add(controller)

    def phase(name: str, value: str) -> None:
        def change(pod: Obj) -> None:
            pod.setdefault("status", {})["phase"] = value

        store.mutate(PODS, "default", name, change)

    def check() -> None:
        finished = {
            podutil.key_of(p)
            for p in store.iter(PODS)
            if podutil.phase(p) in podutil.TERMINAL_PHASES and not podutil.is_terminating(p)
        }
        assert set(controller._finished) == finished
        out = {
            n["metadata"]["name"]
            for n in store.iter(NODES)
            if any(t.get("key") == "node.kubernetes.io/out-of-service" for t in n["spec"].get("taints") or [])
        }
        assert controller._out_of_service == out

    check()
    for i in range(4):
        store.create(
            PODS, {"metadata": {"name": f"p{i}", "namespace": "default"}, "spec": {**spec, "nodeName": "n1"}}
        )
    phase("p0", "Succeeded")
    phase("p1", "Failed")
    check()
    store.delete(PODS, "default", "p1", grace_seconds=0)
    phase("p2", "Running")
    store.delete(PODS, "default", "p3")  # terminating (graceful), not finished
    phase("p3", "Succeeded")
    check()

    def taint(node: Obj) -> None:
        node["spec"]["taints"] = [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]

    store.mutate(NODES, "", "n1", taint)
    store.create(NODES, {"metadata": {"name": "n2"}, "spec": {}})
    check()
    store.mutate(NODES, "", "n1", lambda node: node["spec"].pop("taints"))
    check()
    store.mutate(NODES, "", "n1", taint)
    store.delete(NODES, "", "n1")
    check()
