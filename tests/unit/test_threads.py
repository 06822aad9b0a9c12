"""A background thread gives way (the controller's loops to its webhook, a worker's analyses to its
applies): a nice value of its own, the rest of the process untouched (Linux schedules threads alone)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import pytest

from shipshape.threads import lower_priority

pytestmark = pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no per-thread nice values here")


@contextlib.contextmanager
def idle_thread() -> Iterator[threading.Thread]:
    """A started thread that waits until the block ends."""
    started, done = threading.Event(), threading.Event()

    def idle() -> None:
        started.set()
        done.wait(10)

    thread = threading.Thread(target=idle)
    thread.start()
    try:
        started.wait(10)
        assert thread.native_id is not None
        yield thread
    finally:
        done.set()
        thread.join(10)


def test_lower_priority_changes_that_thread_only() -> None:
    before = os.getpriority(os.PRIO_PROCESS, 0)
    target = min(19, before + 3)
    with idle_thread() as thread:
        assert thread.native_id is not None
        lower_priority(thread, target)
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == target
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_a_priority_it_may_not_raise_is_left_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    if os.geteuid() == 0:
        pytest.skip("root may raise priorities")
    with idle_thread() as thread:
        assert thread.native_id is not None
        before = os.getpriority(os.PRIO_PROCESS, thread.native_id)
        lower_priority(thread, -5)
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == before
        assert f"cannot set the nice value of thread {thread.name} to -5" in caplog.text
