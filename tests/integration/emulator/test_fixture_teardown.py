"""The served-emulator fixture stops its thread at exit and fails loudly when it cannot."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from shipshape.emulator import assembly
from shipshape.kube.clock import RealClock
from tests.emulator_fixtures import EmulatorTeardownError, live_emulator_threads, running

pytestmark = pytest.mark.integration


def _wait_for_no_emulator_thread(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for thread in live_emulator_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not live_emulator_threads()


def test_clean_exit_leaves_no_thread(tmp_path: Path) -> None:
    cluster = assembly.build(None, RealClock(), models=False)
    with running(cluster, tmp_path) as served:
        (thread,) = live_emulator_threads()
        assert served.call(threading.current_thread).name == thread.name
    assert not thread.is_alive()
    assert not live_emulator_threads()


def test_a_task_left_behind_fails_the_exit(tmp_path: Path) -> None:
    cluster = assembly.build(None, RealClock(), models=False)
    left_behind = "asyncio tasks left running by the emulator: forgotten"
    with (
        pytest.raises(EmulatorTeardownError, match=left_behind),
        running(cluster, tmp_path, task_grace_seconds=0.1) as served,
    ):

        async def never_ends() -> None:
            await asyncio.Event().wait()

        task = served.call(lambda: served.loop.create_task(never_ends(), name="forgotten"))
    assert task.cancelled() or task.cancelling()
    assert not live_emulator_threads()


def test_a_thread_that_will_not_stop_fails_the_exit(tmp_path: Path) -> None:
    cluster = assembly.build(None, RealClock(), models=False)
    with (
        pytest.raises(EmulatorTeardownError, match="thread is still running"),
        running(cluster, tmp_path, stop_seconds=0.2, cancel_seconds=0.2) as served,
    ):
        # The loop is blocked past both limits, so neither the stop nor the cancellation gets through.
        served.loop.call_soon_threadsafe(time.sleep, 1.5)
    _wait_for_no_emulator_thread(15)
