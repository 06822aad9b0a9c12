"""Server mode runs timers in bounded slices of real time, so other coroutines run during a burst."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from shipshape.emulator import engine as engine_module
from shipshape.emulator.engine import Engine
from shipshape.kube.clock import ScaledClock, VirtualClock


class SteppingTime:
    """A perf_counter that moves `step` seconds each time a timer callback calls `work()`."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def work(self) -> None:
        self.now += self.step

    def job(self, ran: list[int], index: int) -> Callable[[], None]:
        def run() -> None:
            self.work()
            ran.append(index)

        return run


def test_run_due_stops_after_its_slice_and_leaves_the_rest_due(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = SteppingTime(step=0.01)
    monkeypatch.setattr(engine_module, "time", fake)
    engine = Engine(VirtualClock())
    ran: list[int] = []
    for i in range(10):
        engine.call_soon(fake.job(ran, i))
    assert engine.run_due(slice_seconds=0.025) == 3  # 0.01, 0.02, then 0.03 >= 0.025: stop
    assert ran == [0, 1, 2]
    assert engine.run_due() == 7  # without a slice: everything due
    assert ran == list(range(10))


def test_a_slice_runs_at_least_one_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = SteppingTime(step=1.0)
    monkeypatch.setattr(engine_module, "time", fake)
    engine = Engine(VirtualClock())
    for _ in range(3):
        engine.call_soon(fake.work)
    assert engine.run_due(slice_seconds=0.0) == 1
    assert engine.settle() == 2


async def test_run_forever_lets_other_coroutines_run_during_a_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = SteppingTime(step=0.01)
    monkeypatch.setattr(engine_module, "time", fake)
    engine = Engine(ScaledClock(speed=1.0))
    ran: list[int] = []
    seen_by_other: list[int] = []
    for i in range(50):
        engine.call_soon(fake.job(ran, i))

    async def other() -> None:
        while len(ran) < 50:
            seen_by_other.append(len(ran))
            await asyncio.sleep(0)

    task = asyncio.create_task(engine.run_forever(slice_seconds=0.02))
    await asyncio.wait_for(other(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == list(range(50))  # every timer ran, in order
    assert any(0 < n < 50 for n in seen_by_other)  # ... and the other coroutine ran in between
