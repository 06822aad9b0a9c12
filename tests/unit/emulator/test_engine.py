"""The engine runs timers in emulated-time order, in discrete-event and server mode."""

from __future__ import annotations

import asyncio

import pytest

from shipshape.emulator.engine import Engine
from shipshape.kube.clock import ScaledClock, VirtualClock


def test_discrete_mode_runs_in_time_order_and_moves_the_clock() -> None:
    clock = VirtualClock(start=100.0)
    engine = Engine(clock)
    seen: list[tuple[str, float]] = []
    engine.call_later(30, lambda: seen.append(("b", clock.now())))
    engine.call_later(10, lambda: seen.append(("a", clock.now())))
    cancelled = engine.call_later(20, lambda: seen.append(("x", clock.now())))
    cancelled.cancel()
    engine.call_later(10, lambda: engine.call_later(5, lambda: seen.append(("nested", clock.now()))))
    engine.run_until(200.0)
    assert seen == [("a", 110.0), ("nested", 115.0), ("b", 130.0)]
    assert clock.now() == 200.0


def test_a_failing_callback_is_recorded_and_does_not_stop_the_engine() -> None:
    engine = Engine(VirtualClock())
    seen: list[int] = []

    def boom() -> None:
        raise RuntimeError("model bug")

    engine.call_soon(boom)
    engine.call_soon(lambda: seen.append(1))
    engine.settle()
    assert seen == [1] and isinstance(engine.errors[0], RuntimeError)


def test_run_until_needs_a_virtual_clock() -> None:
    with pytest.raises(TypeError):
        Engine(ScaledClock(10)).run_until(1.0)


async def test_server_mode_follows_the_speed_up() -> None:
    clock = ScaledClock(speed=600.0)  # 60 emulated seconds in 0.1 real seconds
    engine = Engine(clock)
    fired = asyncio.Event()
    start = clock.now()
    engine.call_later(60, fired.set)
    task = asyncio.create_task(engine.run_forever())
    await asyncio.wait_for(fired.wait(), timeout=5)
    assert clock.now() - start >= 60
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_server_mode_stops_when_cancelled_as_a_timer_wakes_it() -> None:
    engine = Engine(ScaledClock(speed=1.0))
    engine.call_later(1000, lambda: None)
    task = asyncio.create_task(engine.run_forever())
    await asyncio.sleep(0.01)  # the engine now waits for the far timer
    engine.call_later(500, lambda: None)  # an earlier timer wakes it ...
    task.cancel()  # ... in the same loop turn as the cancellation
    done, _ = await asyncio.wait({task}, timeout=2)
    assert task in done and task.cancelled()
