from __future__ import annotations

from shipshape.emulator.resources import CONFIGMAPS, DEPLOYMENTS, PODS, REPLICASETS
from shipshape.emulator.store import Obj, WatchEvent

from .helpers import create, make_cluster, pod_template, run
from .test_deployment import deployment
from .test_replicaset import replicaset


def names(cluster, rt) -> list[str]:  # type: ignore[no-untyped-def]
    return [o["metadata"]["name"] for o in cluster.store.list(rt, "default")]


def test_background_deletion_removes_replicasets_then_pods() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=2))
    run(cluster, 10)
    assert len(names(cluster, PODS)) == 2
    cluster.store.delete(DEPLOYMENTS, "default", "web")
    run(cluster, 0)
    assert names(cluster, DEPLOYMENTS) == [] and names(cluster, REPLICASETS) == []
    assert all(p["metadata"].get("deletionTimestamp") for p in cluster.store.list(PODS, "default"))
    run(cluster, 5)
    assert names(cluster, PODS) == []


def test_foreground_deletion_keeps_the_owner_until_blocking_dependents_are_gone() -> None:
    cluster, fake = make_cluster()
    fake.terminate_after = 10.0
    create(cluster, DEPLOYMENTS, deployment(replicas=2))
    run(cluster, 10)
    order: list[str] = []

    def record(event: WatchEvent) -> None:
        if event.type == "DELETED" and event.resource in (DEPLOYMENTS, REPLICASETS, PODS):
            order.append(event.resource.kind)

    cluster.store.subscribe(record)
    cluster.store.delete(DEPLOYMENTS, "default", "web", propagation="Foreground")
    run(cluster, 5)
    d = cluster.store.must_get(DEPLOYMENTS, "default", "web")
    assert d["metadata"]["deletionTimestamp"] and d["metadata"]["finalizers"] == ["foregroundDeletion"]
    (rs,) = cluster.store.list(REPLICASETS, "default")
    assert rs["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert len(names(cluster, PODS)) == 2  # still terminating
    run(cluster, 10)
    assert names(cluster, DEPLOYMENTS) == names(cluster, REPLICASETS) == names(cluster, PODS) == []
    assert order == ["Pod", "Pod", "ReplicaSet", "Deployment"]


def test_orphan_deletion_keeps_dependents_without_the_reference() -> None:
    cluster, _ = make_cluster()
    create(cluster, REPLICASETS, replicaset(replicas=2))
    run(cluster, 10)
    cluster.store.delete(REPLICASETS, "default", "web", propagation="Orphan")
    run(cluster, 10)
    assert names(cluster, REPLICASETS) == []
    pods = cluster.store.list(PODS, "default")
    assert len(pods) == 2
    assert all(
        "ownerReferences" not in p["metadata"] and not p["metadata"].get("deletionTimestamp") for p in pods
    )


def test_dependent_of_a_missing_owner_is_collected_and_solid_owners_keep_it() -> None:
    cluster, _ = make_cluster()
    cm = create(cluster, CONFIGMAPS, {"metadata": {"name": "keeper"}})
    ghost_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "0000-gone"}
    keeper_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keeper", "uid": cm["metadata"]["uid"]}

    def pod(name: str, refs: list[Obj]) -> Obj:
        return {"metadata": {"name": name, "ownerReferences": refs}, "spec": pod_template({})["spec"]}

    rollout_ref = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "canary", "uid": "1234"}
    create(cluster, PODS, pod("orphaned", [ghost_ref]))
    create(cluster, PODS, pod("shared", [ghost_ref, keeper_ref]))
    create(cluster, PODS, pod("foreign", [rollout_ref]))  # a kind the emulator does not serve
    run(cluster, 5)
    assert names(cluster, PODS) == ["foreign", "shared"]
    shared = cluster.store.must_get(PODS, "default", "shared")
    assert shared["metadata"]["ownerReferences"] == [keeper_ref]
