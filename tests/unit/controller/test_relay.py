"""The fan-out's relay to a webhook process: the whole state when a process starts, then every change
after it in order, never a stale version, nothing queued while no process is attached."""

from __future__ import annotations

from typing import Any

from shipshape.controller.policy import ControllerConfig
from shipshape.controller.state import ClusterState
from shipshape.controller.state.views import Change, Fanout, Relay, Replica

Obj = dict[str, Any]


def pod(name: str, version: int, phase: str = "Running") -> Obj:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "resourceVersion": str(version)},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase},
    }


def event(kind: str, obj: Obj) -> Obj:
    return {"type": kind, "object": obj}


def rebuilt(changes: tuple[Change, ...]) -> ClusterState:
    """A webhook process's replica fed what the relay sent."""
    replica = Replica(ClusterState(ControllerConfig()))
    for change in changes:
        replica.offer(change)
    with replica.view() as state:
        return state


def names(state: ClusterState) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in state.objects("Pod")}


def test_a_process_attached_late_gets_the_whole_state_then_what_follows_in_order() -> None:
    relay = Relay()
    loops = Replica(ClusterState(ControllerConfig()))
    fanout = Fanout(relay, loops)
    fanout.replace("Pod", [pod("a", 1), pod("b", 2)])
    fanout.apply(event("MODIFIED", pod("a", 3)), "Pod")
    fanout.apply(event("DELETED", pod("b", 4)), "Pod")
    assert relay.take(0) == ()  # nothing queued while no process is attached

    snapshot = relay.attach()
    fanout.apply(event("ADDED", pod("c", 5)), "Pod")
    fanout.apply(event("MODIFIED", pod("a", 6)), "Pod")
    following = relay.take(0)

    assert [c.what for c in snapshot] == ["replace"]
    assert [c.event["object"]["metadata"]["name"] for c in following if c.event] == ["c", "a"]
    with loops.view() as state:
        assert names(rebuilt(snapshot + following)) == names(state) == {"a": "6", "c": "5"}


def test_a_stale_event_after_a_relist_does_not_win_in_the_snapshot() -> None:
    relay = Relay()
    relay.offer(Change("replace", "Pod", items=(pod("a", 10),)))
    relay.offer(Change("apply", "Pod", event=event("MODIFIED", pod("a", 9))))
    (snapshot,) = relay.attach()
    assert [p["metadata"]["resourceVersion"] for p in snapshot.items] == ["10"]


def test_detach_drops_what_was_queued_and_a_new_attach_starts_from_the_state() -> None:
    relay = Relay()
    relay.attach()
    relay.offer(Change("apply", "Pod", event=event("ADDED", pod("a", 1))))
    relay.detach()
    relay.offer(Change("apply", "Pod", event=event("ADDED", pod("b", 2))))
    assert relay.take(0) == ()
    (snapshot,) = relay.attach()
    assert sorted(p["metadata"]["name"] for p in snapshot.items) == ["a", "b"]
    assert relay.take(0) == ()
    assert relay.held() == 2
