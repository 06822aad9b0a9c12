from __future__ import annotations

from shipshape.emulator.resources import CONTROLLERREVISIONS, PODS, STATEFULSETS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj, WatchEvent

from .helpers import create, events, make_cluster, pod_template, run, update
from .test_deployment import set_image


def statefulset(name: str = "web", replicas: int = 3, **spec: object) -> Obj:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": pod_template(labels),
            **spec,
        },
    }


def created_at(cluster: Cluster) -> dict[str, float]:
    times: dict[str, float] = {}

    def record(event: WatchEvent) -> None:
        if event.resource is PODS and event.type == "ADDED":
            times[event.object["metadata"]["name"]] = cluster.clock.now()

    cluster.store.subscribe(record)
    return times


def pod_names(cluster: Cluster) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in cluster.store.list(PODS, "default")
        if not p["metadata"].get("deletionTimestamp")
    )


def status(cluster: Cluster) -> Obj:
    return cluster.store.must_get(STATEFULSETS, "default", "web")["status"]


def test_ordered_ready_creates_each_pod_after_its_predecessors_are_ready() -> None:
    cluster, _ = make_cluster()
    start = cluster.clock.now()
    times = created_at(cluster)
    sts = create(cluster, STATEFULSETS, statefulset())
    run(cluster, 30)
    assert [times[f"web-{i}"] - start for i in range(3)] == [0.0, 2.0, 4.0]
    pod = cluster.store.must_get(PODS, "default", "web-1")
    revision = status(cluster)["updateRevision"]
    assert revision.startswith("web-")
    assert pod["metadata"]["labels"] == {
        "app": "web",
        "statefulset.kubernetes.io/pod-name": "web-1",
        "apps.kubernetes.io/pod-index": "1",
        "controller-revision-hash": revision,
    }
    assert pod["spec"]["hostname"] == "web-1" and pod["spec"]["subdomain"] == "web"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == sts["metadata"]["uid"]
    assert [e["message"] for e in events(cluster, "SuccessfulCreate", "web")] == [
        f"create Pod web-{i} in StatefulSet web successful" for i in range(3)
    ]
    st = status(cluster)
    assert (st["replicas"], st["readyReplicas"], st["currentReplicas"], st["updatedReplicas"]) == (3, 3, 3, 3)
    assert st["currentRevision"] == st["updateRevision"] == revision
    (rev,) = cluster.store.list(CONTROLLERREVISIONS, "default")
    assert rev["metadata"]["name"] == revision and rev["revision"] == 1
    assert rev["metadata"]["labels"]["controller.kubernetes.io/hash"] == revision.removeprefix("web-")


def test_parallel_creates_all_pods_at_once_and_scales_down_together() -> None:
    cluster, _ = make_cluster()
    start = cluster.clock.now()
    times = created_at(cluster)
    create(cluster, STATEFULSETS, statefulset(podManagementPolicy="Parallel"))
    run(cluster, 0)
    assert {name: t - start for name, t in times.items()} == {"web-0": 0.0, "web-1": 0.0, "web-2": 0.0}
    run(cluster, 10)
    update(cluster, STATEFULSETS, "web", lambda s: s["spec"].update(replicas=1))
    run(cluster, 0)
    assert pod_names(cluster) == ["web-0"]


def test_ordered_scale_down_goes_from_the_highest_ordinal_one_at_a_time() -> None:
    cluster, fake = make_cluster()
    fake.terminate_after = 5.0
    create(cluster, STATEFULSETS, statefulset(replicas=3))
    run(cluster, 30)
    update(cluster, STATEFULSETS, "web", lambda s: s["spec"].update(replicas=1))
    run(cluster, 0)
    assert pod_names(cluster) == ["web-0", "web-1"]  # web-2 terminating, web-1 waits for it
    run(cluster, 4)
    assert pod_names(cluster) == ["web-0", "web-1"]
    run(cluster, 2)
    assert pod_names(cluster) == ["web-0"]


def test_rolling_update_respects_the_partition_and_goes_from_the_highest_ordinal() -> None:
    cluster, _ = make_cluster()
    create(
        cluster,
        STATEFULSETS,
        statefulset(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}),
    )
    run(cluster, 30)
    old = status(cluster)["currentRevision"]
    deleted: list[str] = []

    def record(event: WatchEvent) -> None:
        md = event.object["metadata"]
        if event.resource is PODS and md.get("deletionTimestamp") and md["name"] not in deleted:
            deleted.append(md["name"])

    cluster.store.subscribe(record)
    update(cluster, STATEFULSETS, "web", set_image("nginx:1.28"))
    run(cluster, 60)
    new = status(cluster)["updateRevision"]
    assert new != old
    assert deleted == ["web-2", "web-1"]

    def image(i: int) -> str:
        return str(cluster.store.must_get(PODS, "default", f"web-{i}")["spec"]["containers"][0]["image"])

    assert [image(i) for i in range(3)] == ["nginx:1.27", "nginx:1.28", "nginx:1.28"]
    st = status(cluster)
    assert (st["currentRevision"], st["currentReplicas"], st["updatedReplicas"]) == (old, 1, 2)

    update(
        cluster,
        STATEFULSETS,
        "web",
        lambda s: s["spec"]["updateStrategy"]["rollingUpdate"].update(partition=0),
    )
    run(cluster, 30)
    assert [image(i) for i in range(3)] == ["nginx:1.28"] * 3
    st = status(cluster)
    assert st["currentRevision"] == st["updateRevision"] == new
    assert st["currentReplicas"] == st["updatedReplicas"] == 3


def test_on_delete_replaces_pods_only_when_deleted_and_rollback_reuses_the_revision() -> None:
    cluster, _ = make_cluster()
    create(cluster, STATEFULSETS, statefulset(replicas=2, updateStrategy={"type": "OnDelete"}))
    run(cluster, 30)
    first = status(cluster)["updateRevision"]
    update(cluster, STATEFULSETS, "web", set_image("nginx:1.28"))
    run(cluster, 30)
    images = [
        cluster.store.must_get(PODS, "default", f"web-{i}")["spec"]["containers"][0]["image"]
        for i in range(2)
    ]
    assert images == ["nginx:1.27", "nginx:1.27"]
    cluster.store.delete(PODS, "default", "web-1")
    run(cluster, 30)
    replaced = cluster.store.must_get(PODS, "default", "web-1")
    assert replaced["spec"]["containers"][0]["image"] == "nginx:1.28"
    assert replaced["metadata"]["labels"]["controller-revision-hash"] == status(cluster)["updateRevision"]

    update(cluster, STATEFULSETS, "web", set_image("nginx:1.27"))
    run(cluster, 1)
    revisions = {
        r["metadata"]["name"]: r["revision"] for r in cluster.store.list(CONTROLLERREVISIONS, "default")
    }
    assert len(revisions) == 2
    assert status(cluster)["updateRevision"] == first and revisions[first] == 3
