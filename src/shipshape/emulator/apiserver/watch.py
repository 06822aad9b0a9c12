"""Watch fan-out: one store subscription, each change serialised once and shared by every watcher.

A `Watcher` holds its filter (namespace, label and field selectors) and a buffer of encoded
event lines; the HTTP layer streams that buffer. Selector transitions follow the API server: an
object that stops matching is sent as DELETED, one that starts matching as ADDED. A watcher that
falls too far behind is closed, as kube-apiserver does with slow watchers.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from shipshape.emulator.apiserver import tables
from shipshape.emulator.resources import STORED, ResourceType
from shipshape.emulator.store import ADDED, DELETED, MODIFIED, Obj, Store, WatchEvent
from shipshape.kube.clock import Clock
from shipshape.kube.labels import Selector

Predicate = Callable[[Obj], bool]
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
PARTIAL = "PartialObjectMetadata"
TABLE = "Table:"


@dataclass(eq=False, slots=True)
class Watcher:
    rt: ResourceType
    namespace: str = ""
    label: Selector | None = None
    fields: Predicate | None = None
    # "" for the objects, PARTIAL for PartialObjectMetadata, "Table:<includeObject policy>" for tables
    representation: str = ""
    max_buffered: int = 100_000
    buffer: deque[bytes] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    last_rv: int = 0

    def matches(self, obj: Obj) -> bool:
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return False
        if self.label is not None and not self.label.matches(obj["metadata"].get("labels")):
            return False
        return self.fields is None or self.fields(obj)

    @property
    def filtered(self) -> bool:
        return bool(self.namespace) or self.label is not None or self.fields is not None

    def push(self, line: bytes, rv: int) -> None:
        if self.closed:
            return
        self.buffer.append(line)
        self.last_rv = max(self.last_rv, rv)
        if len(self.buffer) > self.max_buffered:
            self.closed = True  # too slow: the client re-lists and watches again
        self.ready.set()

    def drain(self) -> bytes:
        out = b"".join(self.buffer)
        self.buffer.clear()
        self.ready.clear()
        return out


class LineCache:
    """Encoded event lines for one change, built once per (type, representation)."""

    def __init__(self, rt: ResourceType, obj: Obj, now: float) -> None:
        self.rt = rt
        self.obj = obj
        self.now = now
        self._lines: dict[tuple[str, str], bytes] = {}

    def line(self, event_type: str, representation: str) -> bytes:
        key = (event_type, representation)
        cached = self._lines.get(key)
        if cached is None:
            cached = encode_event(event_type, self.rt, self.obj, self.now, representation)
            self._lines[key] = cached
        return cached


def table_representation(include_object: str) -> str:
    return f"{TABLE}{include_object}"


def encode_event(event_type: str, rt: ResourceType, obj: Obj, now: float, representation: str = "") -> bytes:
    payload: Obj
    if representation.startswith(TABLE):
        payload = tables.table(
            rt.key,
            [obj],
            now,
            include_object=representation.removeprefix(TABLE),
            list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
        )
    elif representation == PARTIAL:
        payload = tables.partial_metadata(obj)
    else:
        payload = obj
    return b'{"type":"' + event_type.encode() + b'","object":' + orjson.dumps(payload) + b"}\n"


def bookmark_line(rt: ResourceType, resource_version: int, initial_events_end: bool = False) -> bytes:
    md: Obj = {"resourceVersion": str(resource_version)}
    if initial_events_end:
        md["annotations"] = {INITIAL_EVENTS_END: "true"}
    obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": md}
    return b'{"type":"BOOKMARK","object":' + orjson.dumps(obj) + b"}\n"


def error_line(status: dict[str, Any]) -> bytes:
    return b'{"type":"ERROR","object":' + orjson.dumps(status) + b"}\n"


class WatchHub:
    """Routes store changes to watchers of the changed type."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._watchers: dict[str, set[Watcher]] = {}
        # The latest version of every object, to tell selector transitions (old matched, new not).
        self._last: dict[tuple[str, str, str], Obj] = {}
        for rt in STORED:
            for obj in store.iter(rt):
                self._last[self._key(rt, obj)] = obj
        self.dispatched_rv = store.resource_version
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._unsubscribe = store.subscribe(self._on_event)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver on this loop; changes made from other threads are handed over to it."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def close(self) -> None:
        self._unsubscribe()
        for watchers in self._watchers.values():
            for watcher in watchers:
                watcher.closed = True
                watcher.ready.set()
        self._watchers.clear()

    @staticmethod
    def _key(rt: ResourceType, obj: Obj) -> tuple[str, str, str]:
        md = obj["metadata"]
        return (rt.key, md.get("namespace", ""), md["name"])

    def count(self) -> int:
        return sum(len(ws) for ws in self._watchers.values())

    def add(self, watcher: Watcher) -> None:
        self._watchers.setdefault(watcher.rt.key, set()).add(watcher)

    def remove(self, watcher: Watcher) -> None:
        watchers = self._watchers.get(watcher.rt.key)
        if watchers is not None:
            watchers.discard(watcher)

    def _on_event(self, event: WatchEvent) -> None:
        key = self._key(event.resource, event.object)
        previous = self._last.get(key)
        if event.type == DELETED:
            self._last.pop(key, None)
        else:
            self._last[key] = event.object
        if self._loop is not None and threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self._dispatch, event, previous)
        else:
            self._dispatch(event, previous)

    def _dispatch(self, event: WatchEvent, previous: Obj | None) -> None:
        self.dispatched_rv = max(self.dispatched_rv, event.resource_version)
        watchers = self._watchers.get(event.resource.key)
        if not watchers:
            return
        cache = LineCache(event.resource, event.object, self.clock.now())
        for watcher in list(watchers):
            event_type = self.translate(watcher, event.type, event.object, previous)
            if event_type is not None:
                watcher.push(cache.line(event_type, watcher.representation), event.resource_version)

    @staticmethod
    def translate(watcher: Watcher, event_type: str, obj: Obj, previous: Obj | None) -> str | None:
        """The event a watcher sees for a change, given its filter (None: nothing)."""
        if not watcher.filtered:
            return event_type
        now_matches = watcher.matches(obj)
        if event_type == ADDED:
            return ADDED if now_matches else None
        was_matching = previous is not None and watcher.matches(previous)
        if event_type == DELETED:
            return DELETED if now_matches or was_matching else None
        if now_matches and was_matching:
            return MODIFIED
        if now_matches:
            return ADDED
        return DELETED if was_matching else None


async def stream(
    hub: WatchHub,
    watcher: Watcher,
    initial: Iterable[bytes],
    *,
    duration: float,
    bookmark_interval: float | None,
) -> AsyncIterator[bytes]:
    """The body of a watch response: initial lines, then changes, bookmarks, until the timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration
    try:
        first = b"".join(initial)
        if first:
            yield first
        while not watcher.closed or watcher.buffer:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            wait = remaining if bookmark_interval is None else min(remaining, bookmark_interval)
            if not watcher.buffer:
                try:
                    async with asyncio.timeout(wait):
                        await watcher.ready.wait()
                except TimeoutError:
                    if bookmark_interval is not None and loop.time() < deadline:
                        rv = max(watcher.last_rv, hub.dispatched_rv)
                        yield bookmark_line(watcher.rt, rv)
                    continue
            chunk = watcher.drain()
            if chunk:
                yield chunk
    finally:
        hub.remove(watcher)
