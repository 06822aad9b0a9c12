"""The scheduling queue: priority order, backoff, and which events bring pods back."""

from __future__ import annotations

from shipshape.emulator.scheduler import pod_info
from shipshape.emulator.scheduler.queue import SchedulingQueue
from tests.unit.emulator.scheduler.builders import pod


def test_pops_by_priority_then_arrival() -> None:
    queue = SchedulingQueue()
    queue.add(pod_info(pod("first", priority=0)), now=0.0)
    queue.add(pod_info(pod("second", priority=0)), now=1.0)
    queue.add(pod_info(pod("urgent", priority=100)), now=2.0)
    order = []
    while (entry := queue.pop()) is not None:
        order.append(entry.info.key[1])
    assert order == ["urgent", "first", "second"]


def test_backoff_doubles_from_one_second_up_to_ten() -> None:
    queue = SchedulingQueue()
    queue.add(pod_info(pod("p")), now=0.0)
    durations = []
    now = 0.0
    for _ in range(6):
        entry = queue.pop()
        assert entry is not None
        durations.append(queue.backoff_duration(entry))
        queue.failed(entry, now, {"NodeResourcesFit"})
        now += 100.0
        queue.move(now, None)
    assert durations == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_moves_only_pods_a_relevant_plugin_rejected() -> None:
    queue = SchedulingQueue()
    queue.add(pod_info(pod("tainted")), now=0.0)
    queue.add(pod_info(pod("hungry")), now=0.0)
    first, second = queue.pop(), queue.pop()
    assert first is not None and second is not None
    queue.failed(first, 0.0, {"TaintToleration"})
    queue.failed(second, 0.0, {"NodeResourcesFit"})
    backing_off = queue.move(0.5, {"NodeResourcesFit"})
    assert [e.info.key[1] for e in backing_off] == ["hungry"]
    assert queue.where(("default", "hungry")) == "backoff"
    assert queue.where(("default", "tainted")) == "unschedulable"
    queue.expire(("default", "hungry"), 1.0)
    assert queue.where(("default", "hungry")) == "active"
    queue.move(20.0, None)
    assert queue.where(("default", "tainted")) == "active"


def test_long_unschedulable_pods_are_retried_after_five_minutes() -> None:
    queue = SchedulingQueue()
    queue.add(pod_info(pod("p")), now=0.0)
    entry = queue.pop()
    assert entry is not None
    queue.failed(entry, 0.0, {"TaintToleration"})
    queue.expire(("default", "p"), 299.0)
    assert queue.where(("default", "p")) == "unschedulable"
    queue.expire(("default", "p"), 300.0)
    assert queue.where(("default", "p")) == "active"


def test_deleted_pods_are_never_popped() -> None:
    queue = SchedulingQueue()
    queue.add(pod_info(pod("gone")), now=0.0)
    queue.delete(("default", "gone"))
    assert queue.pop() is None
    assert len(queue) == 0
