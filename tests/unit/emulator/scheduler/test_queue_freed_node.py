"""A pod that lacked resources on some nodes comes back only when an assigned pod leaves one of them."""

from __future__ import annotations

from shipshape.emulator.scheduler import pod_info
from shipshape.emulator.scheduler.queue import SchedulingQueue
from tests.unit.emulator.scheduler.builders import pod

ON_DELETE = {"NodeResourcesFit", "PodTopologySpread", "InterPodAffinity"}


def parked(plugins: set[str], short: list[str] | None) -> SchedulingQueue:
    queue = SchedulingQueue()
    queue.add(pod_info(pod("p")), now=0.0)
    entry = queue.pop()
    assert entry is not None
    queue.failed(entry, 0.0, plugins, short)
    return queue


def test_a_deletion_on_another_node_leaves_the_pod_parked() -> None:
    queue = parked({"NodeAffinity", "NodeResourcesFit"}, ["full-1", "full-2"])
    queue.move(5.0, ON_DELETE, freed_node="elsewhere")
    assert queue.where(("default", "p")) == "unschedulable"
    queue.move(6.0, ON_DELETE, freed_node="full-2")
    assert queue.where(("default", "p")) == "active"


def test_unknown_nodes_or_spreading_still_move_on_any_deletion() -> None:
    unknown = parked({"NodeResourcesFit"}, None)
    unknown.move(5.0, ON_DELETE, freed_node="elsewhere")
    assert unknown.where(("default", "p")) == "active"
    spread = parked({"NodeResourcesFit", "PodTopologySpread"}, ["full-1"])
    spread.move(5.0, ON_DELETE, freed_node="elsewhere")
    assert spread.where(("default", "p")) == "active"


def test_node_events_move_it_whatever_the_freed_node() -> None:
    queue = parked({"NodeResourcesFit"}, ["full-1"])
    queue.move(5.0, {"NodeResourcesFit"})
    assert queue.where(("default", "p")) == "active"
