"""The store's per-type owner index answers `dependents_of` exactly as a walk of every dependent would."""

from __future__ import annotations

import random

from shipshape.emulator.resources import CONFIGMAPS, NAMESPACES, PODS, ResourceType
from shipshape.emulator.store import Obj, Store
from shipshape.kube.clock import VirtualClock

OWNERS = ["u1", "u2", "u3"]
TYPES = (PODS, CONFIGMAPS)


def body(rt: ResourceType, name: str, ns: str, owners: list[str]) -> Obj:
    obj: Obj = {
        "metadata": {
            "name": name,
            "namespace": ns,
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": u, "uid": u} for u in owners],
        }
    }
    if rt is PODS:
        obj["spec"] = {"containers": [{"name": "c", "image": "nginx"}]}
    return obj


def walked(store: Store, uid: str, rt: ResourceType) -> list[Obj]:
    """What `dependents_of` returned before the index: the owner's dependents of every type, filtered."""
    return [obj for kind, obj in store.dependents(uid) if kind is rt]


def scanned(store: Store, uid: str, rt: ResourceType) -> set[tuple[str, str]]:
    """Every stored object of the type that names `uid` among its owners (a full recomputation)."""
    return {
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in store.list(rt)
        if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
    }


def assert_consistent(store: Store) -> None:
    for uid in [*OWNERS, "absent"]:
        for rt in TYPES:
            got = store.dependents_of(uid, rt)
            assert got == walked(store, uid, rt)
            assert {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in got} == scanned(
                store, uid, rt
            )
            assert all(o is store.get(rt, o["metadata"]["namespace"], o["metadata"]["name"]) for o in got)


def test_dependents_of_follows_creates_owner_changes_and_deletes() -> None:
    store = Store(VirtualClock(), history=10_000)
    for ns in ("default", "other"):
        store.create(NAMESPACES, {"metadata": {"name": ns}})
    store.create(PODS, body(PODS, "b", "default", ["u1"]))
    store.create(CONFIGMAPS, body(CONFIGMAPS, "cm", "default", ["u1"]))
    store.create(PODS, body(PODS, "a", "other", ["u1", "u2"]))
    assert [p["metadata"]["name"] for p in store.dependents_of("u1", PODS)] == ["b", "a"]
    assert [c["metadata"]["name"] for c in store.dependents_of("u1", CONFIGMAPS)] == ["cm"]
    store.mutate(PODS, "default", "b", lambda p: p["metadata"].__setitem__("ownerReferences", []))
    assert [p["metadata"]["name"] for p in store.dependents_of("u1", PODS)] == ["a"]
    store.delete(PODS, "other", "a")
    assert store.dependents_of("u1", PODS) == []
    assert store.dependents_of("u2", PODS) == []
    assert_consistent(store)


def test_random_writes_keep_the_owner_index_consistent() -> None:
    store = Store(VirtualClock(), history=10_000)
    for ns in ("default", "other"):
        store.create(NAMESPACES, {"metadata": {"name": ns}})
    rng = random.Random(11)
    names = [f"o{i}" for i in range(25)]
    for step in range(600):
        rt, ns, name = rng.choice(TYPES), rng.choice(["default", "other"]), rng.choice(names)
        owners = [u for u in OWNERS if rng.random() < 0.4]
        current = store.get(rt, ns, name)
        if current is None:
            store.create(rt, body(rt, name, ns, owners))
        elif rng.random() < 0.5:
            refs = body(rt, name, ns, owners)["metadata"]["ownerReferences"]
            store.mutate(
                rt, ns, name, lambda o, refs=refs: o["metadata"].__setitem__("ownerReferences", refs)
            )
        elif rng.random() < 0.5:
            store.mutate(
                rt, ns, name, lambda o, step=step: o["metadata"].__setitem__("labels", {"n": str(step)})
            )
        elif rng.random() < 0.3:
            # A new version that shares the owners list with the stored one (as status writes and
            # metadata patches do): the index must hold the new version.
            md = {**current["metadata"], "labels": {"n": str(step)}}
            store.update(rt, {**current, "metadata": md}, copy=False)
        elif rng.random() < 0.3:
            store.write_status(rt, ns, name, {"step": step})
        else:
            store.delete(rt, ns, name)
        if step % 50 == 0:
            assert_consistent(store)
    assert_consistent(store)


def test_indexes_keep_no_entry_for_an_owner_or_node_without_objects() -> None:
    store = Store(VirtualClock(), history=10_000)
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
    for i in range(20):  # a long simulation: owners and nodes come and go
        pod = body(PODS, f"p{i}", "default", [f"owner-{i}"])
        pod["spec"]["nodeName"] = f"node-{i}"
        store.create(PODS, pod)
        store.delete(PODS, "default", f"p{i}", grace_seconds=0)
    assert store._by_owner == {} and store._by_owner_kind == {} and store._pods_by_node == {}
    assert store.dependents_of("owner-3", PODS) == [] and store.pods_on_node("node-3") == []
