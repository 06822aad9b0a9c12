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

    def rejected_by(entry: object) -> str | None:
        asked.append("asked")
        return "NodeAffinity"

    queue.move(5.0, None, rejected_on_changed_node=rejected_by, changed_node="n")
    assert asked and queue.where(("default", "p")) == "unschedulable"
    queue.move(6.0, None, rejected_on_changed_node=lambda entry: None, changed_node="n")
    assert queue.where(("default", "p")) == "active"


def test_a_pod_spared_an_attempt_takes_what_rejected_it_on_the_changed_node() -> None:
    # Rejected for resources; a new node joins with the not-ready taint: it stays parked, but the
    # taint's removal from that node (an event for TaintToleration only) must move it.
    queue = parked({"NodeResourcesFit"}, ["full-1"])
    queue.move(5.0, None, rejected_on_changed_node=lambda entry: "TaintToleration", changed_node="new-1")
    assert queue.where(("default", "p")) == "unschedulable"
    queue.move(6.0, {"TaintToleration"})
    assert queue.where(("default", "p")) == "active"


def test_a_pod_rejected_by_spreading_moves_without_asking_the_node() -> None:
    queue = parked({"NodeAffinity", "PodTopologySpread"}, [])
    queue.move(5.0, None, rejected_on_changed_node=lambda entry: "NodeAffinity", changed_node="n")
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


def bound_to(c: Cluster, name: str) -> str | None:
    found = c.store.get(PODS, "default", name)
    assert found is not None
    name_of_node: str | None = found["spec"].get("nodeName")
    return name_of_node


def test_a_pod_waiting_for_room_lands_on_a_new_node_once_its_not_ready_taint_goes() -> None:
    c = Cluster(VirtualClock())
    scheduler = SchedulerModel()
    c.add(scheduler)
    c.store.create(NODES, node("full", cpu="1"))
    c.store.create(PODS, pod("filler", cpu="800m", node_name="full"))
    c.store.create(PODS, pod("waiting", cpu="500m"))
    c.engine.run_until(c.clock.now() + 30)
    assert scheduler.queue.where(("default", "waiting")) == "unschedulable"
    booting = node("new", cpu="2")
    booting["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    c.store.create(NODES, booting)
    c.engine.run_until(c.clock.now() + 30)
    assert bound_to(c, "waiting") is None

    def ready(obj: dict[str, object]) -> None:
        obj["spec"] = {**obj["spec"], "taints": []}  # type: ignore[dict-item]

    c.store.mutate(NODES, "", "new", ready)
    c.engine.run_until(c.clock.now() + 15)  # well before the 5-minute flush of unschedulable pods
    assert bound_to(c, "waiting") == "new"
