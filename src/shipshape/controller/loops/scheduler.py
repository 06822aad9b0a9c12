"""One scheduler for the loops, whether a controller process or the what-if simulator runs them.

The loops are grouped in **lanes**: the loops of one lane run back to back in one round, on one
timer (the notice watcher, the interruption responder and the guards: a notice read is acted on in
the same round). `LoopScheduler` decides, for a lane whose time has come, whether its round runs and
when the next one is due; what drives the time is the caller's:

- a controller process runs `LoopThread` (one thread, sleeping on the injected clock until the next
  lane is due);
- the simulator gives each lane a timer on its discrete-event engine and calls `round` from it.

`Cadence` says how much a round may wait for. A process uses the defaults: every lane runs at its
interval. The simulator skips the round of a lane when nothing it watches changed since its last
round and less than `idle_seconds` passed (the loops are functions of the cache and of time;
time-driven changes such as cool-downs and back-offs are caught by that idle round); a lane with work
in progress (`busy`) runs at least every `busy_seconds`; and a lane that can be woken by the changes
it watches (a new notice taint) waits up to `quiet_seconds` between rounds while it is not busy.

A round that raises is logged; the lane stays dirty and its next round waits a back-off (doubling
from one second, at most a minute, never less than its interval) until a round succeeds.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from shipshape.controller.loops.kit import DirtyQueue
from shipshape.kube.clock import Clock

LOG = logging.getLogger("shipshape.controller.loops")
# The thread never sleeps less than this (real seconds), whatever the clock's speed.
MIN_REAL_WAIT = 0.02
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0


class Loop(Protocol):
    """What a lane runs: the loops of `loops/`, and the webhook's owner in a process."""

    @property
    def name(self) -> str: ...

    @property
    def interval(self) -> float: ...

    def observe(self, now: float) -> None: ...

    def reconcile(self, now: float) -> None: ...


def everything(kind: str) -> bool:
    return True


def _nothing(kind: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Lane:
    """Loops run back to back in one round, every `interval` (emulated seconds).

    `watches(kind)`: a change of that kind in the cache makes the lane dirty. `urgent(kind, type, obj)`:
    that change needs a round within one interval. `busy()`: work in progress (None: the lane has no
    such notion and always runs at its interval).
    """

    name: str
    loops: tuple[Loop, ...]
    interval: float
    watches: Callable[[str], bool] = everything
    urgent: Callable[[str, str, Mapping[str, Any]], bool] | None = None
    busy: Callable[[], bool | None] | None = None

    @classmethod
    def polling(cls, loop: Loop) -> Lane:
        """A loop that reads nothing from the cache (it asks the API server itself)."""
        return cls(loop.name, (loop,), loop.interval, watches=_nothing)


@dataclass(frozen=True, slots=True)
class Cadence:
    """How long a lane's round may wait; the defaults run every lane at its interval (a process)."""

    # > 0: skip a round when nothing the lane watches changed and less than this passed since its last.
    idle_seconds: float = 0.0
    # The longest wait between two rounds of a busy lane, changes or not (with idle_seconds > 0).
    busy_seconds: float = 10.0
    # > 0: a lane that is not busy waits at least this long between rounds.
    quiet_seconds: float = 0.0


class LoopScheduler:
    """Which lane rounds run and when the next ones are due; `observe` always, `reconcile` when leading."""

    def __init__(
        self,
        lanes: Sequence[Lane],
        cadence: Cadence | None = None,
        is_leader: Callable[[], bool] | None = None,
    ) -> None:
        names = [lane.name for lane in lanes]
        if len(set(names)) != len(names):
            raise ValueError(f"lane names must be unique: {names}")
        self.lanes = tuple(lanes)
        self.cadence = cadence or Cadence()
        self.is_leader = is_leader or (lambda: True)
        self.queue: DirtyQueue[str] = DirtyQueue(BACKOFF_BASE_SECONDS, BACKOFF_MAX_SECONDS)
        self._last: dict[str, float] = {}
        self._listening = tuple((lane, lane.urgent) for lane in self.lanes if lane.urgent is not None)
        self._watch_everything = all(lane.watches is everything for lane in self.lanes)
        self.rounds = 0  # lane rounds that ran (not skipped)

    def start(self, now: float, first: Callable[[Lane], float] | None = None) -> None:
        """Every lane dirty, first due at `first(lane)` seconds from `now` (default: at once)."""
        for lane in self.lanes:
            self.queue.add(lane.name, now + (first(lane) if first is not None else 0.0))

    def changed(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> list[Lane]:
        """A change of the cache: the lanes watching it become dirty; the lanes it is urgent for are
        returned (the caller wakes them with `wake`)."""
        urgent = [lane for lane, hears in self._listening if hears(kind, event_type, obj)]
        if self._watch_everything:
            self.queue.mark_all()
        else:
            for lane in self.lanes:
                if lane.watches(kind):
                    self.queue.mark(lane.name)
        return urgent

    def wake(self, lane: Lane, now: float) -> bool:
        """Due within one interval; True when that is sooner than it was due."""
        return self.queue.wake(lane.name, now + lane.interval)

    def due(self, lane: Lane) -> float:
        return self.queue.due(lane.name)

    def next_due(self) -> float | None:
        return self.queue.next_due()

    def _busy(self, lane: Lane) -> bool | None:
        return lane.busy() if lane.busy is not None else None

    def round(self, lane: Lane, now: float) -> float:
        """The lane's time has come: run its round unless it may be skipped; the delay to its next."""
        cadence = self.cadence
        skip = False
        if cadence.idle_seconds > 0:
            bound = cadence.busy_seconds if self._busy(lane) else cadence.idle_seconds
            recent = now - self._last.get(lane.name, -math.inf) < bound
            skip = recent and not self.queue.dirty(lane.name)
        backoff = 0.0
        if not skip:
            self.queue.take(lane.name)
            self._last[lane.name] = now
            self.rounds += 1
            if self._run(lane, now):
                self.queue.succeeded(lane.name)
            else:
                backoff = self.queue.failed(lane.name)
        delay = max(lane.interval, backoff)
        if cadence.quiet_seconds > 0 and self._busy(lane) is False:
            delay = max(delay, cadence.quiet_seconds)
        self.queue.schedule(lane.name, now + delay)
        return delay

    def _run(self, lane: Lane, now: float) -> bool:
        ok = True
        for loop in lane.loops:
            try:
                loop.observe(now)
                if self.is_leader():
                    loop.reconcile(now)
            except Exception:
                LOG.exception("loop %s failed; its lane runs again after a back-off", loop.name)
                ok = False
        return ok


class LoopThread:
    """A controller process's driver: one thread running the lanes that are due, in their order."""

    def __init__(self, scheduler: LoopScheduler, clock: Clock) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.stop_event = threading.Event()
        self.rounds = 0  # passes over the lanes
        self.thread = threading.Thread(target=self._run, name="loops", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        scheduler = self.scheduler
        scheduler.start(self.clock.now())
        while not self.stop_event.is_set():
            now = self.clock.now()
            for lane in scheduler.lanes:
                if now < scheduler.due(lane) or self.stop_event.is_set():
                    continue
                scheduler.round(lane, now)
            self.rounds += 1
            wait = (scheduler.next_due() or now) - self.clock.now()
            self.stop_event.wait(max(MIN_REAL_WAIT, self.clock.real_seconds(max(0.0, wait))))

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread.ident is not None:  # stopping a process that failed before its loops started
            self.thread.join(30)
