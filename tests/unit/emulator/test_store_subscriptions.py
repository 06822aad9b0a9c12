"""Store subscriptions by resource type: each listener gets only its kinds, in subscription order."""

from __future__ import annotations

from collections.abc import Callable

from shipshape.emulator.resources import CONFIGMAPS, NODES, PODS
from shipshape.emulator.store import Listener, Store, WatchEvent
from shipshape.kube.clock import VirtualClock


def configmap(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}


def node(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def test_listeners_get_their_kinds_in_subscription_order() -> None:
    store = Store(VirtualClock())
    calls: list[tuple[str, str, str]] = []

    def listener(tag: str) -> Listener:
        def on_event(event: WatchEvent) -> None:
            calls.append((tag, event.resource.key, event.object["metadata"]["name"]))

        return on_event

    store.subscribe(listener("all"))
    store.subscribe(listener("nodes"), kinds=(NODES,))
    store.subscribe(listener("cm+nodes"), kinds=(CONFIGMAPS, NODES))
    store.subscribe(listener("none"), kinds=())
    store.create(CONFIGMAPS, configmap("a"))
    store.create(NODES, node("n1"))
    store.delete(CONFIGMAPS, "default", "a")
    assert calls == [
        ("all", "configmaps", "a"),
        ("cm+nodes", "configmaps", "a"),
        ("all", "nodes", "n1"),
        ("nodes", "nodes", "n1"),
        ("cm+nodes", "nodes", "n1"),
        ("all", "configmaps", "a"),
        ("cm+nodes", "configmaps", "a"),
    ]
    assert not any(tag == "none" or kind == PODS.key for tag, kind, _ in calls)


def test_unsubscribe_stops_one_subscription_only() -> None:
    store = Store(VirtualClock())
    seen: list[str] = []

    def first(event: WatchEvent) -> None:
        seen.append("first")

    def second(event: WatchEvent) -> None:
        seen.append("second")

    stop_first = store.subscribe(first, kinds=(NODES,))
    store.subscribe(second, kinds=(NODES,))
    store.create(NODES, node("n1"))
    stop_first()
    stop_first()  # a second call is harmless
    store.create(NODES, node("n2"))
    later: list[str] = []
    store.subscribe(lambda event: later.append(event.object["metadata"]["name"]), kinds=(NODES,))
    store.create(NODES, node("n3"))
    assert seen == ["first", "second", "second", "second"]
    assert later == ["n3"]


def test_a_listener_that_unsubscribes_while_called_still_lets_the_others_have_the_event() -> None:
    store = Store(VirtualClock())
    seen: list[str] = []
    stops: list[Callable[[], None]] = []

    def quitter(event: WatchEvent) -> None:
        seen.append("quitter")
        stops[0]()

    def stayer(event: WatchEvent) -> None:
        seen.append("stayer")

    stops.append(store.subscribe(quitter))
    store.subscribe(stayer)
    store.create(CONFIGMAPS, configmap("a"))
    store.create(CONFIGMAPS, configmap("b"))
    assert seen == ["quitter", "stayer", "stayer"]
