from __future__ import annotations

from collections.abc import Callable

from shipshape.emulator.controllers.podutil import is_ready, is_terminating
from shipshape.emulator.resources import DAEMONSETS, NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj, WatchEvent

from .helpers import FakeKubelet, create, events, make_cluster, node_body, pod_template, run, update
from .test_deployment import set_image


def daemonset(name: str = "agent", **spec: object) -> Obj:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": labels}, "template": pod_template(labels), **spec},
    }


def pods_by_node(cluster: Cluster) -> dict[str, str]:
    out = {}
    for pod in cluster.store.list(PODS, "default"):
        if is_terminating(pod):
            continue
        term = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        (node,) = term["nodeSelectorTerms"][0]["matchFields"][0]["values"]
        out[node] = pod["metadata"]["name"]
    return out


def ds_status(cluster: Cluster) -> Obj:
    return cluster.store.must_get(DAEMONSETS, "default", "agent")["status"]


def test_one_pinned_pod_per_eligible_node() -> None:
    nodes = ("n1", "n2", "gpu", "arm")
    cluster, _ = make_cluster(nodes=(), kubelet=FakeKubelet(nodes))
    cluster.store.create(NODES, node_body("n1", labels={"kubernetes.io/arch": "amd64"}))
    cluster.store.create(NODES, node_body("n2", labels={"kubernetes.io/arch": "amd64"}))
    cluster.store.create(
        NODES,
        node_body(
            "gpu",
            labels={"kubernetes.io/arch": "amd64"},
            taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
        ),
    )
    cluster.store.create(NODES, node_body("arm", labels={"kubernetes.io/arch": "arm64"}))
    template = pod_template({"app": "agent"}, nodeSelector={"kubernetes.io/arch": "amd64"})
    create(cluster, DAEMONSETS, daemonset(template=template))
    run(cluster, 10)
    placed = pods_by_node(cluster)
    assert sorted(placed) == ["n1", "n2"]
    pod = cluster.store.must_get(PODS, "default", placed["n1"])
    assert pod["spec"]["nodeName"] == "n1"
    tolerated = {(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]}
    assert {
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    } <= tolerated
    assert pod["metadata"]["labels"]["controller-revision-hash"]
    assert sorted(e["message"] for e in events(cluster, "SuccessfulCreate", "agent")) == sorted(
        f"Created pod: {name}" for name in placed.values()
    )
    status = ds_status(cluster)
    assert {
        k: status.get(k)
        for k in (
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
            "numberMisscheduled",
        )
    } == {
        "desiredNumberScheduled": 2,
        "currentNumberScheduled": 2,
        "numberReady": 2,
        "updatedNumberScheduled": 2,
        "numberAvailable": 2,
        "numberMisscheduled": 0,
    }

    # A tolerating template lands on the tainted node too; a new node gets its pod.
    def tolerate(ds: Obj) -> None:
        ds["spec"]["template"]["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]

    update(cluster, DAEMONSETS, "agent", tolerate)
    cluster.store.create(NODES, node_body("n3", labels={"kubernetes.io/arch": "amd64"}))
    run(cluster, 30)
    assert sorted(pods_by_node(cluster)) == ["gpu", "n1", "n2", "n3"]


def test_taints_added_later_keep_or_evict_the_daemon_pod() -> None:
    cluster, _ = make_cluster(nodes=("n1", "n2", "n3"))
    create(cluster, DAEMONSETS, daemonset())
    run(cluster, 10)

    def taint(effect: str) -> Callable[[Obj], None]:
        def change(node: Obj) -> None:
            node["spec"]["taints"] = [{"key": "maintenance", "value": "yes", "effect": effect}]

        return change

    update(cluster, NODES, "n1", taint("NoSchedule"), ns="")
    update(cluster, NODES, "n2", taint("NoExecute"), ns="")
    run(cluster, 5)
    assert sorted(pods_by_node(cluster)) == ["n1", "n3"]  # NoSchedule: keeps running; NoExecute: removed
    status = ds_status(cluster)
    assert (status["desiredNumberScheduled"], status["numberMisscheduled"]) == (1, 1)

    # The unreachable taint the node lifecycle controller sets is tolerated by every daemon pod.
    def unreachable(node: Obj) -> None:
        node["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]

    update(cluster, NODES, "n3", unreachable, ns="")
    run(cluster, 5)
    assert "n3" in pods_by_node(cluster)


def watch_availability(cluster: Cluster) -> tuple[list[int], list[int]]:
    available: list[int] = []
    totals: list[int] = []

    def check(_: WatchEvent) -> None:
        pods = [p for p in cluster.store.list(PODS, "default") if not is_terminating(p)]
        available.append(sum(1 for p in pods if is_ready(p)))
        totals.append(len(pods))

    cluster.store.subscribe(check)
    return available, totals


def test_rolling_update_replaces_at_most_max_unavailable_at_a_time() -> None:
    cluster, _ = make_cluster(nodes=("n1", "n2", "n3", "n4"))
    create(cluster, DAEMONSETS, daemonset())
    run(cluster, 10)
    first_hash = next(iter(cluster.store.list(PODS, "default")))["metadata"]["labels"][
        "controller-revision-hash"
    ]
    available, totals = watch_availability(cluster)
    update(cluster, DAEMONSETS, "agent", set_image("nginx:1.28"))
    run(cluster, 60)
    assert min(available) == 3 and max(totals) == 4
    hashes = {
        p["metadata"]["labels"]["controller-revision-hash"] for p in cluster.store.list(PODS, "default")
    }
    assert len(hashes) == 1 and first_hash not in hashes
    status = ds_status(cluster)
    assert status["updatedNumberScheduled"] == status["numberAvailable"] == 4


def test_surge_rolling_update_keeps_every_node_available() -> None:
    cluster, _ = make_cluster(nodes=("n1", "n2", "n3"))
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    create(cluster, DAEMONSETS, daemonset(updateStrategy=strategy))
    run(cluster, 10)
    available, totals = watch_availability(cluster)
    update(cluster, DAEMONSETS, "agent", set_image("nginx:1.28"))
    run(cluster, 60)
    assert min(available) == 3 and max(totals) == 4
    images = {p["spec"]["containers"][0]["image"] for p in cluster.store.list(PODS, "default")}
    assert images == {"nginx:1.28"} and len(cluster.store.list(PODS, "default")) == 3


def test_rolling_back_the_template_reuses_its_controller_revision() -> None:
    from shipshape.emulator.resources import CONTROLLERREVISIONS

    cluster, _ = make_cluster(nodes=("n1",))
    create(cluster, DAEMONSETS, daemonset())
    run(cluster, 10)
    update(cluster, DAEMONSETS, "agent", set_image("nginx:1.28"))
    run(cluster, 30)
    update(cluster, DAEMONSETS, "agent", set_image("nginx:1.27"))
    run(cluster, 30)
    revisions = sorted(
        (r["revision"], r["metadata"]["name"]) for r in cluster.store.list(CONTROLLERREVISIONS, "default")
    )
    assert [number for number, _ in revisions] == [2, 3]
    (pod,) = cluster.store.list(PODS, "default")
    assert revisions[-1][1] == f"agent-{pod['metadata']['labels']['controller-revision-hash']}"
    assert pod["spec"]["containers"][0]["image"] == "nginx:1.27"
