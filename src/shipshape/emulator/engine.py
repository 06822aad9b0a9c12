"""Timers on an injected clock: the one way the emulator's models schedule work.

Models call `call_at`/`call_later`/`call_soon`. In server mode `run_forever` sleeps (on the
asyncio loop) until the next timer is due on the clock, scaled by the clock's speed. In
discrete-event mode `run_until` pops timers in order and moves a `VirtualClock` to each.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from shipshape.kube.clock import Clock, VirtualClock

log = logging.getLogger(__name__)


@dataclass(order=True, slots=True)
class Timer:
    when: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class Engine:
    """A heap of timers keyed by emulated time."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        # (when, seq, timer): the heap compares the tuples' numbers in C (seq is unique, so the
        # timers themselves are never compared), in the order (when, seq) of the timers.
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._wakeup: asyncio.Event | None = None
        self.errors: list[BaseException] = []

    def now(self) -> float:
        return self.clock.now()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(when, next(self._seq), callback)
        heapq.heappush(self._heap, (timer.when, timer.seq, timer))
        if self._wakeup is not None and self._heap[0][2] is timer:
            self._wakeup.set()
        return timer

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return self.call_at(self.clock.now() + max(0.0, delay), callback)

    def call_soon(self, callback: Callable[[], None]) -> Timer:
        return self.call_at(self.clock.now(), callback)

    def next_due(self) -> float | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def pending(self) -> int:
        return sum(1 for _, _, t in self._heap if not t.cancelled)

    def _run(self, timer: Timer) -> None:
        try:
            timer.callback()
        except Exception as exc:  # a model bug must not stop the cluster; it is logged and kept
            log.exception("emulator timer callback failed")
            self.errors.append(exc)

    def run_due(self, limit: int = 100_000, *, slice_seconds: float | None = None) -> int:
        """Run every timer due at the clock's current time (including ones they schedule now).

        With `slice_seconds`, stop once that much real time has gone (after at least one timer),
        leaving the rest due, so that a server can answer requests between batches.
        """
        ran = 0
        now = self.clock.now()
        deadline = None if slice_seconds is None else time.perf_counter() + slice_seconds
        while ran < limit:
            due = self.next_due()
            if due is None or due > now:
                break
            timer = heapq.heappop(self._heap)[2]
            self._run(timer)
            ran += 1
            if deadline is not None and time.perf_counter() >= deadline:
                break
        return ran

    def run_until(self, until: float) -> int:
        """Discrete-event mode: run every timer up to `until`, moving the virtual clock to each."""
        if not isinstance(self.clock, VirtualClock):
            raise TypeError("run_until needs a VirtualClock")
        ran = 0
        while True:
            due = self.next_due()
            if due is None or due > until:
                break
            if due > self.clock.now():
                self.clock.set(due)
            ran += self.run_due()
        if until > self.clock.now():
            self.clock.set(until)
        return ran

    def settle(self, max_rounds: int = 1000) -> int:
        """Run timers due now until none are left (no time passes)."""
        total = 0
        for _ in range(max_rounds):
            ran = self.run_due()
            total += ran
            if not ran:
                break
        return total

    async def run_forever(self, slice_seconds: float = 0.02) -> None:
        """Server mode: run timers as the clock reaches them, until cancelled.

        Timers run in batches of at most about `slice_seconds` of real time; between batches
        the event loop serves HTTP handlers and watches.
        """
        self._wakeup = asyncio.Event()
        try:
            while True:
                self.run_due(slice_seconds=slice_seconds)
                due = self.next_due()
                self._wakeup.clear()
                if due is None:
                    await self._wakeup.wait()
                    continue
                delay = self.clock.real_seconds(due - self.clock.now())
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), timeout=delay)
                    # Python 3.11's wait_for swallows a cancellation that arrives together with
                    # the wakeup; honour it, or the engine runs on after its server has stopped.
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise asyncio.CancelledError
                else:
                    await asyncio.sleep(0)  # let HTTP handlers run between bursts
        finally:
            self._wakeup = None
