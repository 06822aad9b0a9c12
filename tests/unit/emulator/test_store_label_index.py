"""The store's label index answers `list` with a selector exactly as a scan of every object would."""

from __future__ import annotations

import random

import pytest

from shipshape.emulator.resources import NAMESPACES, NODES, PODS
from shipshape.emulator.store import Obj, Store
from shipshape.kube.clock import VirtualClock
from shipshape.kube.labels import EVERYTHING, NOTHING, Selector, from_label_selector, parse


@pytest.fixture
def store() -> Store:
    s = Store(VirtualClock(), history=10_000)
    for ns in ("default", "other", "zz"):
        s.create(NAMESPACES, {"metadata": {"name": ns}})
    return s


def pod(name: str, ns: str = "default", **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }


def scanned(store: Store, selector: Selector, namespace: str | None = None) -> list[Obj]:
    """What `list` returned before the index: every object in list order, filtered."""
    return [o for o in store.list(PODS, namespace) if selector.matches(o["metadata"].get("labels"))]


SELECTORS = [
    parse("app=web"),
    parse("app=web,tier=front"),
    parse("app=api,tier!=front"),
    parse("app in (web,api)"),
    parse("tier"),
    parse("!tier"),
    from_label_selector(
        {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]}
    ),
    from_label_selector({"matchLabels": {"app": "missing"}}),
    EVERYTHING,
    NOTHING,
]


def assert_same_as_scan(store: Store) -> None:
    for selector in SELECTORS:
        for namespace in (None, "default", "other", "absent"):
            assert store.list(PODS, namespace, selector=selector) == scanned(store, selector, namespace)


def test_selector_lists_follow_creates_label_changes_and_deletes(store: Store) -> None:
    store.create(PODS, pod("b", app="web", tier="front"))
    store.create(PODS, pod("a", app="web"))
    store.create(PODS, pod("c", "other", app="web", tier="back"))
    store.create(PODS, pod("d", app="api", tier="back"))
    assert [p["metadata"]["name"] for p in store.list(PODS, selector=parse("app=web"))] == ["a", "b", "c"]
    assert_same_as_scan(store)

    store.mutate(PODS, "default", "a", lambda p: p["metadata"]["labels"].update(app="api", tier="front"))
    assert [p["metadata"]["name"] for p in store.list(PODS, selector=parse("app=web"))] == ["b", "c"]
    assert [p["metadata"]["name"] for p in store.list(PODS, selector=parse("app=api"))] == ["a", "d"]
    assert_same_as_scan(store)

    store.mutate(PODS, "default", "b", lambda p: p["metadata"].pop("labels"))
    assert_same_as_scan(store)
    store.delete(PODS, "other", "c")  # unbound: removed at once
    assert store.list(PODS, selector=parse("app=web")) == []
    assert_same_as_scan(store)

    store.create(PODS, pod("c", "other", app="web"))  # the same name again
    assert [p["metadata"]["name"] for p in store.list(PODS, selector=parse("app=web"))] == ["c"]
    assert_same_as_scan(store)


def test_cluster_scoped_types_and_predicates(store: Store) -> None:
    for name, zone in (("n2", "a"), ("n1", "a"), ("n3", "b")):
        store.create(NODES, {"metadata": {"name": name, "labels": {"zone": zone}}})
    names = [n["metadata"]["name"] for n in store.list(NODES, selector=parse("zone=a"))]
    assert names == ["n1", "n2"]
    odd = [
        n["metadata"]["name"]
        for n in store.list(
            NODES, selector=parse("zone=a"), predicate=lambda n: n["metadata"]["name"] != "n1"
        )
    ]
    assert odd == ["n2"]


def test_random_writes_keep_the_index_consistent(store: Store) -> None:
    rng = random.Random(7)
    values = {"app": ["web", "api", "db"], "tier": ["front", "back"]}
    names = [f"p{i}" for i in range(30)]
    for _ in range(400):
        ns, name = rng.choice(["default", "other", "zz"]), rng.choice(names)
        labels = {k: rng.choice(v) for k, v in values.items() if rng.random() < 0.7}
        current = store.get(PODS, ns, name)
        action = rng.random()
        if current is None:
            store.create(PODS, pod(name, ns, **labels))
        elif action < 0.6:
            store.mutate(PODS, ns, name, lambda p, labels=labels: p["metadata"].__setitem__("labels", labels))
        else:
            store.delete(PODS, ns, name)
    assert_same_as_scan(store)
