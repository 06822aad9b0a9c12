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

When the webhook runs in a process of its own (`webhook.child`), its replica lives there, and the
fan-out feeds a `Relay` instead: the changes queued for a sender thread to pipe over, and a mirror of
every object held (references to the informers' own objects) for the whole state a webhook process
starts from.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Protocol

from shipshape.controller.state.cluster import ClusterState, resource_version

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


class Reader(Protocol):
    """What the fan-out feeds: a `Replica`, or a `Relay` to a replica in another process."""

    def offer(self, change: Change) -> None: ...


class Relay:
    """A reader in another process, as the fan-out sees it: `offer` never waits (it queues); a sender
    `attach`es when a process starts, sends the whole state it gets back, then what `take` returns,
    in order. While none is attached, nothing queues: the next `attach` returns all there is.

    The mirror keeps the newest version of each object by `metadata.resourceVersion`, as
    `ClusterState.apply` does, so that a stale event after a relist never wins."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._pending: deque[Change] = deque()
        self._attached = False
        self._cond = threading.Condition()

    def offer(self, change: Change) -> None:
        with self._cond:
            self._remember(change)
            if self._attached:
                self._pending.append(change)
                self._cond.notify()

    def _remember(self, change: Change) -> None:
        if change.what == "replace":
            self._objects[change.kind] = {_key(item): item for item in change.items}
            return
        event = change.event or {}
        obj = event.get("object") or {}
        held = self._objects.setdefault(change.kind, {})
        key = _key(obj)
        old = held.get(key)
        version, old_version = resource_version(obj), resource_version(old) if old is not None else None
        if version is not None and old_version is not None and version < old_version:
            return
        if event.get("type") == "DELETED":
            held.pop(key, None)
        elif event.get("type") in ("ADDED", "MODIFIED"):
            held[key] = obj

    def attach(self) -> tuple[Change, ...]:
        """Start queueing; returns the whole state now, one `replace` per kind."""
        with self._cond:
            self._pending.clear()
            self._attached = True
            return tuple(
                Change("replace", kind, items=tuple(objects.values()))
                for kind, objects in self._objects.items()
            )

    def detach(self) -> None:
        """Stop queueing (the process is gone); wakes a sender waiting in `take`."""
        with self._cond:
            self._attached = False
            self._pending.clear()
            self._cond.notify_all()

    def take(self, timeout: float) -> tuple[Change, ...]:
        """What was offered since the last take, waiting up to `timeout` seconds for something."""
        with self._cond:
            if not self._pending and self._attached:
                self._cond.wait(timeout)
            taken = tuple(self._pending)
            self._pending.clear()
            return taken

    def held(self) -> int:
        return sum(len(objects) for objects in self._objects.values())


def _key(obj: Obj) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class Fanout:
    """The informer sink (`kube.informers.Sink`) feeding every replica the same changes, in order."""

    def __init__(self, *replicas: Reader) -> None:
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
