"""The object store keeps Kubernetes' storage semantics."""

from __future__ import annotations

import pytest

from shipshape.emulator.resources import CONFIGMAPS, DEPLOYMENTS, NAMESPACES, PODS
from shipshape.emulator.store import Store, WatchEvent, clone
from shipshape.kube import errors
from shipshape.kube.clock import VirtualClock
from shipshape.kube.labels import parse


@pytest.fixture
def store() -> Store:
    s = Store(VirtualClock(), history=50)
    s.create(NAMESPACES, {"metadata": {"name": "default"}})
    return s


def pod(name: str, node: str = "", **labels: str) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "c", "image": "nginx"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": spec}


def test_create_fills_server_fields_and_rejects_duplicates(store: Store) -> None:
    created = store.create(PODS, pod("a"))
    md = created["metadata"]
    assert md["uid"] and md["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert int(md["resourceVersion"]) == store.resource_version
    assert created["kind"] == "Pod" and created["apiVersion"] == "v1"
    with pytest.raises(errors.AlreadyExists) as exc:
        store.create(PODS, pod("a"))
    assert exc.value.status()["code"] == 409
    assert exc.value.status()["message"] == 'pods "a" already exists'


def test_generate_name_and_missing_name(store: Store) -> None:
    created = store.create(CONFIGMAPS, {"metadata": {"generateName": "cfg-", "namespace": "default"}})
    assert created["metadata"]["name"].startswith("cfg-") and len(created["metadata"]["name"]) == 9
    with pytest.raises(errors.Invalid):
        store.create(CONFIGMAPS, {"metadata": {"namespace": "default"}})


def test_stored_objects_are_isolated_from_callers(store: Store) -> None:
    body = pod("a")
    created = store.create(PODS, body)
    body["metadata"]["labels"]["x"] = "changed"  # type: ignore[index]
    assert "x" not in store.must_get(PODS, "default", "a")["metadata"]["labels"]
    copy = clone(created)
    copy["metadata"]["labels"]["y"] = "1"
    assert "y" not in store.must_get(PODS, "default", "a")["metadata"]["labels"]


def test_optimistic_concurrency(store: Store) -> None:
    created = store.create(
        CONFIGMAPS, {"metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1"}}
    )
    first = clone(created)
    first["data"] = {"a": "2"}
    store.update(CONFIGMAPS, first)
    stale = clone(created)
    stale["data"] = {"a": "3"}
    with pytest.raises(errors.Conflict):
        store.update(CONFIGMAPS, stale)
    assert store.must_get(CONFIGMAPS, "default", "c")["data"] == {"a": "2"}


def test_generation_bumps_on_spec_change_only_and_status_is_separate(store: Store) -> None:
    dep = {"metadata": {"name": "d", "namespace": "default"}, "spec": {"replicas": 1}}
    created = store.create(DEPLOYMENTS, dep)
    assert created["metadata"]["generation"] == 1
    labelled = clone(created)
    labelled["metadata"]["labels"] = {"a": "b"}
    assert store.update(DEPLOYMENTS, labelled)["metadata"]["generation"] == 1
    scaled = clone(store.must_get(DEPLOYMENTS, "default", "d"))
    scaled["spec"]["replicas"] = 3
    scaled["status"] = {"replicas": 99}  # ignored: status has its own subresource
    after = store.update(DEPLOYMENTS, scaled)
    assert after["metadata"]["generation"] == 2 and "status" not in after
    with_status = clone(after)
    with_status["status"] = {"replicas": 3}
    with_status["spec"]["replicas"] = 7  # ignored on the status subresource
    final = store.update(DEPLOYMENTS, with_status, subresource="status")
    assert final["status"] == {"replicas": 3} and final["spec"]["replicas"] == 3


def test_noop_update_keeps_resource_version(store: Store) -> None:
    created = store.create(CONFIGMAPS, {"metadata": {"name": "c", "namespace": "default"}})
    again = store.update(CONFIGMAPS, clone(created))
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_finalizers_hold_deletion_until_removed(store: Store) -> None:
    store.create(CONFIGMAPS, {"metadata": {"name": "c", "namespace": "default", "finalizers": ["x/y"]}})
    obj, removed = store.delete(CONFIGMAPS, "default", "c")
    assert not removed and obj["metadata"]["deletionTimestamp"]
    with pytest.raises(errors.Forbidden):
        store.mutate(CONFIGMAPS, "default", "c", lambda o: o["metadata"]["finalizers"].append("new/one"))
    store.mutate(CONFIGMAPS, "default", "c", lambda o: o["metadata"].pop("finalizers"))
    assert store.get(CONFIGMAPS, "default", "c") is None


def test_graceful_pod_deletion(store: Store) -> None:
    store.create(PODS, pod("bound", node="n1"))
    store.create(PODS, pod("pending"))
    obj, removed = store.delete(PODS, "default", "bound")
    assert not removed and obj["metadata"]["deletionGracePeriodSeconds"] == 30
    assert store.pods_on_node("n1")[0]["metadata"]["deletionTimestamp"]
    _, removed = store.delete(PODS, "default", "pending")
    assert removed
    _, removed = store.delete(PODS, "default", "bound", grace_seconds=0)
    assert removed and store.get(PODS, "default", "bound") is None
    assert store.pods_on_node("n1") == []


def test_foreground_and_orphan_propagation_add_finalizers(store: Store) -> None:
    owner = store.create(DEPLOYMENTS, {"metadata": {"name": "d", "namespace": "default"}, "spec": {}})
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": owner["metadata"]["uid"]}
    child = pod("child")
    child["metadata"]["ownerReferences"] = [ref]  # type: ignore[index]
    store.create(PODS, child)
    assert [o["metadata"]["name"] for _, o in store.dependents(owner["metadata"]["uid"])] == ["child"]
    obj, removed = store.delete(DEPLOYMENTS, "default", "d", propagation="Foreground")
    assert not removed and obj["metadata"]["finalizers"] == ["foregroundDeletion"]


def test_selectors_and_sorting(store: Store) -> None:
    store.create(PODS, pod("b", app="web"))
    store.create(PODS, pod("a", app="web"))
    store.create(PODS, pod("c", app="db"))
    names = [p["metadata"]["name"] for p in store.list(PODS, "default", parse("app=web"))]
    assert names == ["a", "b"]


def test_watch_history_and_gone(store: Store) -> None:
    seen: list[WatchEvent] = []
    unsubscribe = store.subscribe(seen.append)
    start = store.resource_version
    store.create(PODS, pod("a"))
    store.delete(PODS, "default", "a")
    assert [e.type for e in seen] == ["ADDED", "DELETED"]
    assert [e.type for e in store.events_since(start)] == ["ADDED", "DELETED"]
    unsubscribe()
    for i in range(60):
        store.create(CONFIGMAPS, {"metadata": {"name": f"c{i}", "namespace": "default"}})
    assert len(seen) == 2
    with pytest.raises(errors.Gone):
        store.events_since(start)


def test_list_order_and_namespace_runs_follow_creations_and_removals(store: Store) -> None:
    """Lists come from a kept key order: it must always be what sorting every object gives."""
    for ns in ("kube-system", "default", "b", "default-2"):
        if store.get(NAMESPACES, "", ns) is None:
            store.create(NAMESPACES, {"metadata": {"name": ns}})

    def named(namespace: str | None) -> list[tuple[str, str]]:
        return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in store.list(PODS, namespace)]

    def scanned(namespace: str | None) -> list[tuple[str, str]]:
        keys = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in store.iter(PODS)]
        return sorted(k for k in keys if not namespace or k[0] == namespace)

    for i, (ns, name) in enumerate(
        [("default", "m"), ("b", "z"), ("default-2", "a"), ("default", "a"), ("kube-system", "x")]
    ):
        store.create(PODS, pod(name) | {"metadata": {"name": name, "namespace": ns, "labels": {"i": str(i)}}})
        for namespace in (None, "default", "b", "default-2", "kube-system", "absent"):
            assert named(namespace) == scanned(namespace)
    store.update(
        PODS,
        {
            **store.must_get(PODS, "default", "m"),
            "metadata": {"name": "m", "namespace": "default", "labels": {"i": "9"}},
        },
    )
    store.delete(PODS, "default", "a")
    store.create(PODS, pod("b"))
    for namespace in (None, "default", "b", "default-2", "kube-system"):
        assert named(namespace) == scanned(namespace)
    assert [p["metadata"]["labels"]["i"] for p in store.list(PODS, "default", selector=parse("i=9"))] == ["9"]
