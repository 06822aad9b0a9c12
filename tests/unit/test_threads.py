"""A background thread gives way (the controller's loops to its webhook, a worker's analyses to its
applies): a nice value of its own, the rest of the process untouched (Linux schedules threads alone)."""

from __future__ import annotations

import os
import threading

import pytest

from shipshape.threads import lower_priority

pytestmark = pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no per-thread nice values here")


def idle(started: threading.Event, done: threading.Event) -> None:
    started.set()
    done.wait(10)


def test_lower_priority_changes_that_thread_only() -> None:
    before = os.getpriority(os.PRIO_PROCESS, 0)
    target = min(19, before + 3)
    started, done = threading.Event(), threading.Event()
    thread = threading.Thread(target=idle, args=(started, done))
    thread.start()
    try:
        started.wait(10)
        assert thread.native_id is not None
        lower_priority(thread, target)
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == target
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
    finally:
        done.set()
        thread.join(10)


def test_a_priority_it_may_not_raise_is_left_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    if os.geteuid() == 0:
        pytest.skip("root may raise priorities")
    started, done = threading.Event(), threading.Event()
    thread = threading.Thread(target=idle, args=(started, done))
    thread.start()
    try:
        started.wait(10)
        assert thread.native_id is not None
        before = os.getpriority(os.PRIO_PROCESS, thread.native_id)
        lower_priority(thread, -5)
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == before
        assert f"cannot set the nice value of thread {thread.name} to -5" in caplog.text
    finally:
        done.set()
        thread.join(10)
