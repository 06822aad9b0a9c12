"""Status writes change only the status (and resourceVersion); earlier versions stay as they were."""

from __future__ import annotations

from typing import Any

from shipshape.emulator.resources import PODS
from shipshape.emulator.store import Store, WatchEvent
from shipshape.kube.clock import VirtualClock


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
        "status": {"phase": "Pending"},
    }


def test_status_write_through_mutate_keeps_spec_and_metadata_and_the_old_version() -> None:
    store = Store(VirtualClock())
    events: list[WatchEvent] = []
    store.subscribe(events.append)
    created = store.create(PODS, pod())

    def change(body: dict[str, Any]) -> None:
        body["status"]["phase"] = "Running"
        body["spec"]["nodeName"] = "n1"  # ignored: a status write changes only the status
        body["metadata"]["labels"]["app"] = "other"

    updated = store.mutate(PODS, "default", "web", change, subresource="status")
    assert updated is not None
    assert updated["status"] == {"phase": "Running"}
    assert updated["spec"] == created["spec"] and "nodeName" not in updated["spec"]
    assert updated["metadata"]["labels"] == {"app": "web"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert list(updated) == list(created)  # same fields, same order
    # The version delivered before is untouched by the write.
    assert created["status"] == {"phase": "Pending"}
    assert created["metadata"]["resourceVersion"] != updated["metadata"]["resourceVersion"]
    assert [e.object["status"]["phase"] for e in events] == ["Pending", "Running"]
    assert store.get(PODS, "default", "web") is updated


def test_status_write_through_update_ignores_the_rest_of_the_body() -> None:
    store = Store(VirtualClock())
    created = store.create(PODS, pod())
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"changed": "yes"}},
        "spec": {"containers": []},
        "status": {"phase": "Succeeded"},
    }
    updated = store.update(PODS, body, subresource="status")
    assert updated["status"] == {"phase": "Succeeded"}
    assert updated["spec"] == created["spec"]
    assert updated["metadata"]["labels"] == {"app": "web"}
    body["status"]["phase"] = "Failed"  # the caller's body is not the stored one
    assert store.must_get(PODS, "default", "web")["status"] == {"phase": "Succeeded"}
    same = store.update(PODS, {**body, "status": {"phase": "Succeeded"}}, subresource="status")
    assert same is updated  # a no-op status write stores nothing new


def test_write_status_replaces_the_status_without_copying_the_object() -> None:
    store = Store(VirtualClock())
    events: list[WatchEvent] = []
    store.subscribe(events.append)
    created = store.create(PODS, pod())
    status = {"phase": "Running"}
    updated = store.write_status(PODS, "default", "web", status)
    assert updated is not None and updated["status"] is status
    assert updated["spec"] is created["spec"]  # shared: stored objects are never changed
    assert list(updated) == list(created)
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert created["status"] == {"phase": "Pending"}
    assert [e.object["status"]["phase"] for e in events] == ["Pending", "Running"]
    # The same status again is no write; an absent object is None.
    assert store.write_status(PODS, "default", "web", {"phase": "Running"}) is updated
    assert len(events) == 2
    assert store.write_status(PODS, "default", "gone", {"phase": "Running"}) is None


def test_an_update_without_copy_stores_the_built_object_and_keeps_what_the_store_owns() -> None:
    store = Store(VirtualClock())
    created = store.create(PODS, pod())
    built = {**created, "metadata": {**created["metadata"]}, "spec": {**created["spec"], "nodeName": "n1"}}
    built["status"] = {"phase": "Running"}  # ignored: a main-resource write keeps the stored status
    updated = store.update(PODS, built, copy=False)
    assert updated is built
    assert updated["spec"]["nodeName"] == "n1" and "nodeName" not in created["spec"]
    assert updated["status"] == {"phase": "Pending"}
    assert updated["metadata"]["generation"] == 2
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert store.get(PODS, "default", "web") is updated
