"""The cyclic garbage collector in processes that hold large, long-lived, acyclic data.

The controller's webhook process (the cluster state), the backend's workers (their copy of the
clusters' objects) and the start-up analyzers (millions of small records) hold or build many objects
that live long and form no reference cycles: reference counting frees them. The collector still walks
them: a young collection walks every object created since the last one that is still alive, and a
full collection walks everything. For parsed Kubernetes objects that was half of a worker's CPU at
times. The tools here keep such objects out of its sight:

- `paused()`: no collection while a bounded piece of work allocates;
- `long_lived()`: the same, and, while the process runs `age`, what is alive at its end moves to the
  permanent generation (`gc.freeze`), so no later collection walks it;
- `age()`: a task that freezes what is alive every few seconds and, now and then, hands everything
  back for one full collection: a frozen object that later becomes cyclic garbage (rare here) is
  collected only by that. When the last one stops, everything goes back to the collector. Without
  it nothing is frozen (`long_lived` only pauses), so nothing can be kept from collection for ever.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

# `age`'s defaults: what is alive is frozen this often (seconds), and everything is collected this often.
FREEZE_SECONDS, FULL_SECONDS = 1.0, 600.0
# `age` tasks running in this process.
_aging = 0


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside the block (reference counting still frees everything acyclic);
    the collector's earlier state afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def long_lived() -> Iterator[None]:
    """`paused`, then, while `age` runs, everything alive is frozen: for a block that builds objects
    meant to be kept (without it, the next young collection walks all of them, and the next older
    ones again)."""
    with paused():
        try:
            yield
        finally:
            if _aging:
                # Before the collector is back on: its next allocation would walk all of it first.
                gc.freeze()


async def age(freeze_seconds: float = FREEZE_SECONDS, full_seconds: float = FULL_SECONDS) -> None:
    """Every `freeze_seconds`, collect the young generations and move what is alive to the permanent
    generation (a constant-time splice), so that automatic collections walk only what is younger;
    every `full_seconds`, unfreeze and
    collect everything once (cyclic garbage among frozen objects waits for that). Runs until
    cancelled; then, if no other `age` runs, everything frozen goes back to the collector."""
    global _aging
    _aging += 1
    try:
        last_full = time.monotonic()
        while True:
            await asyncio.sleep(freeze_seconds)
            if time.monotonic() - last_full >= full_seconds:
                gc.unfreeze()
                gc.collect()
                last_full = time.monotonic()
            else:
                # The young generations' cyclic garbage first (a worker's sessions and transactions
                # are cycles): frozen, it would wait for the full collection, minutes away.
                gc.collect(1)
            gc.freeze()
    finally:
        _aging -= 1
        if not _aging:
            gc.unfreeze()
