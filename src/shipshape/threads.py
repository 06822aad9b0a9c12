"""Thread priorities: background work that gives way when the CPUs are busy (Linux schedules threads
alone, so a thread's nice value is its own). The controller's planning loops give way to its webhook,
a backend worker's analyses to its applies and to the API beside it."""

from __future__ import annotations

import logging
import os
import threading

LOG = logging.getLogger("shipshape.threads")


def lower_priority(thread: threading.Thread, nice: int) -> None:
    """Give `thread` (started) the nice value `nice`; elsewhere than on Linux, nothing."""
    if thread.native_id is None or not hasattr(os, "setpriority"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, thread.native_id, nice)
    except OSError as error:  # raising a priority needs a capability; lowering one never fails
        LOG.warning("cannot set the nice value of thread %s to %d: %s", thread.name, nice, error)
