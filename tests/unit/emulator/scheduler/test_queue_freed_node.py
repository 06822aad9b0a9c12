"""Re-queueing of unschedulable pods only on events that can make them fit."""

from __future__ import annotations

from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scheduler import SchedulerModel, pod_info
from shipshape.emulator.scheduler.queue import SchedulingQueue
from shipshape.kube.clock import VirtualClock
from tests.unit.emulator.scheduler.builders import node, pod

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


def test_a_node_event_moves_a_node_locally_rejected_pod_only_if_it_fits_there() -> None:
    queue = parked({"NodeAffinity", "TaintToleration"}, [])
    asked: list[str] = []

    def fits(entry: object) -> bool:
        asked.append("asked")
        return False

    queue.move(5.0, None, fits_changed_node=fits)
    assert asked and queue.where(("default", "p")) == "unschedulable"
    queue.move(6.0, None, fits_changed_node=lambda entry: True)
    assert queue.where(("default", "p")) == "active"


def test_a_pod_rejected_by_spreading_moves_without_asking_the_node() -> None:
    queue = parked({"NodeAffinity", "PodTopologySpread"}, [])
    queue.move(5.0, None, fits_changed_node=lambda entry: False)
    assert queue.where(("default", "p")) == "active"


def test_in_a_cluster_only_events_that_can_help_bring_a_pinned_pod_back() -> None:
    c = Cluster(VirtualClock())
    scheduler = SchedulerModel()
    c.add(scheduler)
    c.store.create(NODES, node("pool-a", cpu="1", labels={"pool": "a"}))
    c.store.create(NODES, node("pool-b", cpu="4", labels={"pool": "b"}))
    c.store.create(PODS, pod("filler", cpu="800m", node_name="pool-a"))
    c.store.create(PODS, pod("other", cpu="1", node_name="pool-b"))
    c.store.create(PODS, pod("pinned", cpu="500m", spec={"nodeSelector": {"pool": "a"}}))
    c.engine.run_until(c.clock.now() + 30)
    assert scheduler.queue.where(("default", "pinned")) == "unschedulable"
    attempts = scheduler.attempts
    c.store.create(NODES, node("pool-b-2", cpu="4", labels={"pool": "b"}))  # not a node it may use
    c.store.delete(PODS, "default", "other", grace_seconds=0)  # frees room on a node it may not use
    c.engine.run_until(c.clock.now() + 30)
    assert scheduler.attempts == attempts
    c.store.delete(PODS, "default", "filler", grace_seconds=0)  # frees room where it fits
    c.engine.run_until(c.clock.now() + 30)
    found = c.store.get(PODS, "default", "pinned")
    assert found is not None and found["spec"].get("nodeName") == "pool-a"
