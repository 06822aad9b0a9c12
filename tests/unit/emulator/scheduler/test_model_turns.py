"""In server mode the scheduler works through a burst of pending pods in short engine turns."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator.api import Api
from shipshape.emulator.resources import EVENTS, NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scheduler import SchedulerModel
from shipshape.emulator.scheduler import model as scheduler_model
from tests.unit.emulator.scheduler.builders import node, pod

Obj = dict[str, Any]


class StoppedClock:
    """A server-mode clock (not a VirtualClock) whose time stands still."""

    def now(self) -> float:
        return 1_767_225_600.0

    def real_seconds(self, emulated: float) -> float:
        return emulated


class SteppingTime:
    """perf_counter moving 8 ms per reading: the scheduler's 20 ms turn holds two pods."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 0.008
        return self.now


def _bound(c: Cluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in c.store.list(PODS) if p["spec"].get("nodeName"))


def test_a_burst_is_scheduled_over_several_turns_in_priority_then_arrival_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduler_model, "time", SteppingTime())
    c = Cluster(StoppedClock())
    Api(c)
    c.add(SchedulerModel())
    c.store.create(NODES, node("n1", cpu="64", pods=100))
    priorities = {"low-a": 0, "high-a": 100, "low-b": 0, "high-b": 100, "mid": 50}
    for name, priority in priorities.items():
        c.store.create(PODS, pod(name, priority=priority))
    turns = []
    while c.engine.run_due(limit=1):
        turns.append(_bound(c))
    assert turns[-1] == sorted(priorities)  # everyone bound in the end
    sizes = [len(b) for b in turns]
    assert max(b - a for a, b in zip([0, *sizes], sizes, strict=False)) <= 2  # never more than 2 a turn
    assert len({len(b) for b in turns}) >= 3  # bound over several turns
    events = sorted(
        (e for e in c.store.list(EVENTS) if e["reason"] == "Scheduled"),
        key=lambda e: int(e["metadata"]["resourceVersion"]),
    )
    scheduled = [e["involvedObject"]["name"] for e in events]
    assert scheduled == ["high-a", "high-b", "mid", "low-a", "low-b"]
