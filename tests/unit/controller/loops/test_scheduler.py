"""The loops' scheduler in virtual time: which lane rounds run, and when each lane is next due.

A process runs every lane at its interval (`Cadence()`); the simulator's cadence skips rounds nothing
asked for, keeps busy lanes close and quiet lanes slow, and wakes a lane for an urgent change. The
tests drive `LoopScheduler.round` as the drivers do, with the time passed in."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from shipshape.controller.loops import lanes
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.loops.scheduler import Cadence, Lane, LoopScheduler, LoopThread
from shipshape.controller.ops import RecordingOps
from shipshape.kube.clock import VirtualClock

from ..builders import Harness

SIMULATION = Cadence(idle_seconds=300.0, busy_seconds=10.0, quiet_seconds=60.0)


class Probe:
    """A loop that records its rounds; `fail` makes the next rounds raise."""

    def __init__(self, name: str, interval: float = 10.0) -> None:
        self.name = name
        self.interval = interval
        self.observed: list[float] = []
        self.reconciled: list[float] = []
        self.fail = False

    def observe(self, now: float) -> None:
        self.observed.append(now)

    def reconcile(self, now: float) -> None:
        if self.fail:
            raise RuntimeError("boom")
        self.reconciled.append(now)


def lane_of(probe: Probe, busy: bool | None = None) -> Lane:
    return Lane(probe.name, (probe,), probe.interval, busy=None if busy is None else (lambda: busy))


def test_a_process_runs_every_lane_at_its_interval_and_reconciles_only_while_leading() -> None:
    probe = Probe("p", 10.0)
    leading = [True]
    scheduler = LoopScheduler([lane_of(probe, busy=True)], is_leader=lambda: leading[0])
    scheduler.start(0.0)
    (lane,) = scheduler.lanes
    assert scheduler.due(lane) == 0.0
    assert scheduler.round(lane, 0.0) == 10.0 and scheduler.due(lane) == 10.0
    leading[0] = False
    scheduler.round(lane, 10.0)  # nothing changed, busy: a process runs it anyway
    assert probe.observed == [0.0, 10.0] and probe.reconciled == [0.0]
    assert scheduler.rounds == 2


def test_the_simulation_skips_a_round_nothing_asked_for_until_the_idle_bound() -> None:
    probe = Probe("p", 60.0)
    scheduler = LoopScheduler([lane_of(probe)], SIMULATION)
    scheduler.start(0.0, lambda lane: lane.interval)
    (lane,) = scheduler.lanes
    assert scheduler.due(lane) == 60.0
    for now in (60.0, 120.0, 180.0):
        assert scheduler.round(lane, now) == 60.0
    assert probe.observed == [60.0]  # dirty at start; nothing changed since
    scheduler.changed("Pod", "MODIFIED", {})
    scheduler.round(lane, 240.0)
    scheduler.round(lane, 300.0)
    assert probe.observed == [60.0, 240.0]
    scheduler.round(lane, 540.0)  # 300 s since its last round: the idle round
    assert probe.observed == [60.0, 240.0, 540.0]


def test_a_lane_watching_other_kinds_is_not_made_dirty() -> None:
    pods, nodes = Probe("pods", 10.0), Probe("nodes", 10.0)
    scheduler = LoopScheduler(
        [
            Lane("pods", (pods,), 10.0, watches=lambda kind: kind == "Pod"),
            Lane("nodes", (nodes,), 10.0, watches=lambda kind: kind == "Node"),
        ],
        SIMULATION,
    )
    scheduler.start(0.0)
    for lane in scheduler.lanes:
        scheduler.round(lane, 0.0)
    scheduler.changed("Node", "MODIFIED", {})
    for lane in scheduler.lanes:
        scheduler.round(lane, 10.0)
    assert pods.observed == [0.0] and nodes.observed == [0.0, 10.0]


def test_a_busy_lane_runs_at_least_every_busy_seconds_and_a_quiet_one_waits_a_minute() -> None:
    busy = [True]
    probe = Probe("responder", 1.0)
    lane = Lane("responder", (probe,), 1.0, busy=lambda: busy[0])
    scheduler = LoopScheduler([lane], SIMULATION)
    scheduler.start(0.0)
    assert scheduler.round(lane, 0.0) == 1.0  # busy: at its interval
    for now in range(1, 11):
        scheduler.round(lane, float(now))
    assert probe.observed == [0.0, 10.0]  # nothing changed: only the busy bound runs it
    busy[0] = False
    assert scheduler.round(lane, 11.0) == 60.0  # quiet: a minute
    assert scheduler.due(lane) == 71.0


def test_an_urgent_change_wakes_its_lane_within_one_interval() -> None:
    seen: list[tuple[str, str]] = []

    def urgent(kind: str, event_type: str, obj: Mapping[str, Any]) -> bool:
        seen.append((kind, event_type))
        return kind == "Node" and bool(obj.get("noticed"))

    responder, other = Probe("responder", 1.0), Probe("other", 60.0)
    scheduler = LoopScheduler(
        [Lane("responder", (responder,), 1.0, urgent=urgent, busy=lambda: False), lane_of(other)], SIMULATION
    )
    scheduler.start(0.0)
    lane = scheduler.lanes[0]
    assert scheduler.round(lane, 0.0) == 60.0
    assert scheduler.changed("Pod", "ADDED", {}) == []
    assert scheduler.changed("Node", "MODIFIED", {"noticed": True}) == [lane]
    assert scheduler.wake(lane, 5.0) and scheduler.due(lane) == 6.0
    assert not scheduler.wake(lane, 5.5)  # already due sooner
    assert seen == [("Pod", "ADDED"), ("Node", "MODIFIED")]


def test_a_failing_loop_backs_off_its_lane_while_the_others_of_the_lane_still_run() -> None:
    failing, after = Probe("failing", 1.0), Probe("after", 1.0)
    lane = Lane("pair", (failing, after), 1.0)
    scheduler = LoopScheduler([lane])
    scheduler.start(0.0)
    failing.fail = True
    delays = [scheduler.round(lane, float(t)) for t in range(4)]
    assert delays == [1.0, 2.0, 4.0, 8.0]
    assert after.reconciled == [0.0, 1.0, 2.0, 3.0]
    failing.fail = False
    assert scheduler.round(lane, 4.0) == 1.0
    assert scheduler.queue.failures("pair") == 0


def test_lane_names_are_unique() -> None:
    with pytest.raises(ValueError):
        LoopScheduler([lane_of(Probe("a")), lane_of(Probe("a"))])


# --- lanes of the loops ------------------------------------------------------------------------------


class Watcher(Reconciler):
    name = "watcher"
    lane = "interruptions"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state: bool | None = False

    @property
    def interval(self) -> float:
        return 1.0

    def changed(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> bool:
        return kind == "Node"

    def busy(self) -> bool | None:
        return self.state


class Follower(Reconciler):
    name = "follower"
    lane = "interruptions"

    @property
    def interval(self) -> float:
        return 10.0


class Alone(Reconciler):
    name = "alone"
    watches: ClassVar[frozenset[str] | None] = frozenset({"Pod"})

    @property
    def interval(self) -> float:
        return 30.0


def test_loops_naming_one_lane_share_it_and_the_others_get_one_each() -> None:
    h = Harness()

    def make(cls: type[Reconciler]) -> Reconciler:
        return cls(h.clock, h.cache, RecordingOps(), h.config, h.metrics)

    watcher, follower, alone = make(Watcher), make(Follower), make(Alone)
    assert isinstance(watcher, Watcher)
    shared, single = lanes([watcher, follower, alone])
    assert shared.name == "interruptions" and shared.loops == (watcher, follower)
    assert shared.interval == 1.0  # the shortest of its loops'
    assert single.name == "alone" and single.interval == 30.0 and single.urgent is None
    assert shared.urgent is not None and shared.urgent("Node", "ADDED", {})
    assert not shared.urgent("Pod", "ADDED", {})
    assert shared.watches("Anything") and single.watches("Pod") and not single.watches("Node")
    assert shared.busy is not None and shared.busy() is False
    watcher.state = True
    assert shared.busy() is True
    assert single.busy is not None and single.busy() is None


def test_the_thread_driver_runs_due_lanes_on_the_injected_clock_and_stops() -> None:
    clock = VirtualClock(0.0)
    ran = threading.Event()

    class Signal(Probe):
        def reconcile(self, now: float) -> None:
            super().reconcile(now)
            ran.set()

    probe = Signal("p", 10.0)
    driver = LoopThread(LoopScheduler([lane_of(probe)]), clock)
    driver.start()
    try:
        assert ran.wait(5.0)
    finally:
        driver.stop()
    assert probe.reconciled[0] == 0.0 and not driver.thread.is_alive()
