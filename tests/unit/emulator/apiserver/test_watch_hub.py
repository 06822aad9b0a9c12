"""Watch fan-out: selector transitions, shared encoding, slow watchers."""

from __future__ import annotations

import orjson

from shipshape.emulator.apiserver.watch import Watcher, WatchHub, bookmark_line
from shipshape.emulator.resources import CONFIGMAPS, NAMESPACES, PODS
from shipshape.emulator.store import Store, clone
from shipshape.kube import labels
from shipshape.kube.clock import VirtualClock


def _events(watcher: Watcher) -> list[tuple[str, str]]:
    out = []
    for line in watcher.drain().splitlines():
        event = orjson.loads(line)
        out.append((event["type"], event["object"]["metadata"]["name"]))
    return out


def _store() -> Store:
    store = Store(VirtualClock())
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
    return store


def _relabel(store: Store, name: str, **new_labels: str) -> None:
    obj = clone(store.must_get(PODS, "default", name))
    obj["metadata"]["labels"] = new_labels
    store.update(PODS, obj)


def test_selector_transitions_become_added_and_deleted() -> None:
    store = _store()
    hub = WatchHub(store, store.clock)
    selected = Watcher(PODS, "default", labels.parse("app=web"))
    everything = Watcher(PODS)
    hub.add(selected)
    hub.add(everything)
    store.create(PODS, {"metadata": {"name": "a", "namespace": "default", "labels": {"app": "web"}}})
    store.create(PODS, {"metadata": {"name": "b", "namespace": "default", "labels": {"app": "db"}}})
    _relabel(store, "a", app="other")  # leaves the selection
    _relabel(store, "b", app="web")  # enters it
    store.remove(PODS, "default", "b")
    store.create(CONFIGMAPS, {"metadata": {"name": "c", "namespace": "default"}})  # another type
    assert _events(selected) == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b"), ("DELETED", "b")]
    assert _events(everything) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("MODIFIED", "b"),
        ("DELETED", "b"),
    ]


def test_each_change_is_encoded_once_for_all_watchers() -> None:
    store = _store()
    hub = WatchHub(store, store.clock)
    watchers = [Watcher(PODS) for _ in range(3)]
    for w in watchers:
        hub.add(w)
    store.create(PODS, {"metadata": {"name": "a", "namespace": "default"}})
    lines = [w.buffer[0] for w in watchers]
    assert lines[0] is lines[1] is lines[2]
    table_watcher = Watcher(PODS, representation="Table:None")
    hub.add(table_watcher)
    store.create(PODS, {"metadata": {"name": "b", "namespace": "default"}})
    event = orjson.loads(table_watcher.drain())
    assert event["object"]["kind"] == "Table" and event["object"]["rows"][0]["cells"][0] == "b"
    assert "object" not in event["object"]["rows"][0]
    metadata_watcher = Watcher(PODS, representation="PartialObjectMetadata")
    hub.add(metadata_watcher)
    store.create(PODS, {"metadata": {"name": "c", "namespace": "default"}, "spec": {"nodeName": "n1"}})
    partial = orjson.loads(metadata_watcher.drain())["object"]
    assert partial["kind"] == "PartialObjectMetadata" and "spec" not in partial


def test_removed_and_slow_watchers() -> None:
    store = _store()
    hub = WatchHub(store, store.clock)
    gone = Watcher(PODS)
    slow = Watcher(PODS, max_buffered=2)
    hub.add(gone)
    hub.add(slow)
    hub.remove(gone)
    for i in range(3):
        store.create(PODS, {"metadata": {"name": f"p{i}", "namespace": "default"}})
    assert not gone.buffer
    assert slow.closed
    assert hub.dispatched_rv == store.resource_version


def test_bookmark_line() -> None:
    event = orjson.loads(bookmark_line(PODS, 42, initial_events_end=True))
    assert event == {
        "type": "BOOKMARK",
        "object": {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "42", "annotations": {"k8s.io/initial-events-end": "true"}},
        },
    }
