"""How the controller process's threads share the state without the webhook waiting behind a pass.

A `ClusterState` is single-threaded. The process keeps one `Replica` of it per reader: one for the
webhook, one for the loops. Informer threads `offer` every list and event to every replica through
`Fanout`; an offer never waits: it is queued, and applied at once only if the replica is free. A
reader takes `view(now)`: the replica's lock, the queued changes applied in order, assumptions past
their TTL dropped, and the state to read for as long as the block lasts. The webhook's lock is held
for one review at a time; a planning pass holds only the loops' replica, so an admission never
waits behind it (and the loops never see half of a burst of webhook assumptions: those are the
webhook's own).

Both replicas see the same events in the same order, so they hold the same objects; what differs is
only when each has caught up (at its next view) and the webhook's assumptions.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from shipshape.controller.state.cluster import ClusterState

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Change:
    """One informer delivery: a relist of a kind (`items`) or a watch event (`event`)."""

    what: Literal["replace", "apply"]
    kind: str
    items: tuple[Obj, ...] = ()
    event: Obj | None = None


class Replica:
    """One reader's `ClusterState`, fed without waiting and read under its own short lock.

    Also a context manager (the lock, with what is queued applied), for code that takes a lock."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._lock = threading.RLock()
        self._pending: deque[Change] = deque()
        # Views open on the owning thread: changes are applied only when the outermost one opens
        # (a nested view must not change what an enclosing one is reading).
        self._depth = 0

    def offer(self, change: Change) -> None:
        """Queue a change; apply it now if no reader holds the replica (never waits)."""
        self._pending.append(change)
        if self._lock.acquire(blocking=False):
            try:
                if self._depth == 0:
                    self._catch_up()
            finally:
                self._lock.release()

    def pending(self) -> int:
        return len(self._pending)

    def _catch_up(self) -> None:
        pending = self._pending
        while pending:
            change = pending.popleft()
            if change.what == "replace":
                self.state.replace(change.kind, list(change.items))
            elif change.event is not None:
                self.state.apply(change.event, change.kind)

    @contextmanager
    def view(self, now: float | None = None) -> Iterator[ClusterState]:
        """The state, caught up with every change offered so far and (with `now`) its expired
        assumptions dropped, for the duration of the block; read-only for everything but the
        webhook's assumptions."""
        with self:
            if now is not None:
                self.state.expire(now)
            yield self.state

    def __enter__(self) -> ClusterState:
        self._lock.acquire()
        try:
            if self._depth == 0:
                self._catch_up()
        except BaseException:
            self._lock.release()
            raise
        self._depth += 1
        return self.state

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._depth -= 1
        self._lock.release()


class Fanout:
    """The informer sink (`kube.informers.Sink`) feeding every replica the same changes, in order."""

    def __init__(self, *replicas: Replica) -> None:
        self.replicas = replicas
        # Informers deliver from one thread per kind: offers to all replicas go in one order.
        self._order = threading.Lock()

    def replace(self, kind: str, items: list[Obj]) -> None:
        self._offer(Change("replace", kind, items=tuple(items)))

    def apply(self, event: Obj, kind: str) -> None:
        self._offer(Change("apply", kind, event=event))

    def _offer(self, change: Change) -> None:
        with self._order:
            for replica in self.replicas:
                replica.offer(change)
