"""Core/v1 Events reduced to what start-up analysis needs, indexed by the object they are about.

Kubelet events carry `firstTimestamp`/`lastTimestamp` at second resolution; events written
through events.k8s.io (the scheduler's `Scheduled`, `FailedScheduling`) carry `eventTime` with
microseconds and no `firstTimestamp`. The event's time is the first of those that is set.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from shipshape.kube.duration import DurationError, parse_duration

Obj = Mapping[str, Any]

# Reasons that matter to start-up, for pods and for the controllers that create them.
POD_REASONS = frozenset(
    {
        "Scheduled",
        "FailedScheduling",
        "Pulling",
        "Pulled",
        "Created",
        "Started",
        "FailedCreatePodSandBox",
        "NetworkNotReady",
    }
)
OWNER_REASONS = frozenset({"SuccessfulCreate", "FailedCreate", "ScalingReplicaSet"})
NODE_REASONS = frozenset({"NodeReady", "NodeNotReady", "RegisteredNode", "Starting"})
_ALL_REASONS = POD_REASONS | OWNER_REASONS | NODE_REASONS

_PULLED = re.compile(
    r'^Successfully pulled image "(?P<image>[^"]*)" in (?P<pull>[0-9.]+[a-zµ]+(?:[0-9.]+[a-zµ]+)*)'
    r"(?: \((?P<total>[0-9.]+[a-zµ]+(?:[0-9.]+[a-zµ]+)*) including waiting\))?"
    r"(?:\. Image size: (?P<size>\d+) bytes)?"
)
_PRESENT = re.compile(r'^Container image "(?P<image>[^"]*)" already present on machine')
_GO_SMALL_UNITS = {"µs": 1e-6, "us": 1e-6, "ns": 1e-9}


class PulledMessage(NamedTuple):
    image: str
    present: bool
    pull: float  # seconds spent pulling
    total: float  # seconds including the wait in the kubelet's pull queue
    size: int | None


class Event(NamedTuple):
    """One event, compacted: what it says and when."""

    time: float  # first occurrence
    last: float  # last occurrence
    reason: str
    container: str  # "" when the event is about the whole object
    init: bool
    message: str
    occurrences: int
    uid: str


def go_duration(text: str) -> float:
    """Seconds in a Go `time.Duration` string ("1.5s", "2m3.1s", "850ms", "12µs")."""
    if text.endswith("s") and text[-2:-1].isdigit():
        try:
            return float(text[:-1])  # the common "1.234s"
        except ValueError:
            pass
    for unit, scale in _GO_SMALL_UNITS.items():
        if text.endswith(unit) and text[: -len(unit)].replace(".", "", 1).isdigit():
            return float(text[: -len(unit)]) * scale
    try:
        return parse_duration(text)
    except DurationError as error:
        raise ValueError(f"not a Go duration: {text!r}") from error


def parse_pulled(message: str) -> PulledMessage | None:
    """The facts in a kubelet `Pulled` event's message; None when it is not one of its forms."""
    if message.startswith("Container image "):
        present = _PRESENT.match(message)
        return PulledMessage(present.group("image"), True, 0.0, 0.0, None) if present else None
    pulled = _PULLED.match(message)
    if not pulled:
        return None
    try:
        pull = go_duration(pulled.group("pull"))
        total = go_duration(pulled.group("total")) if pulled.group("total") else pull
    except ValueError:
        return None
    size = int(pulled.group("size")) if pulled.group("size") else None
    return PulledMessage(pulled.group("image"), False, pull, max(total, pull), size)


_new_event = tuple.__new__


class TimeParser:
    """RFC 3339 to POSIX seconds, remembering recent strings (timestamps repeat a lot)."""

    def __init__(self) -> None:
        self._cache: dict[str, float] = {}

    def __call__(self, text: str) -> float:
        value = self._cache.get(text)
        if value is not None:
            return value
        # "2026-01-01T00:00:00.123456Z" (MicroTime): the second is cached, the fraction added
        if len(text) > 21 and text[19] == "." and text[-1] == "Z" and text[20:-1].isdigit():
            return self(text[:19] + "Z") + float("0" + text[19:-1])
        cleaned = text[:-1] + "+00:00" if text.endswith("Z") else text
        value = datetime.fromisoformat(cleaned).timestamp()
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[text] = value
        return value

    def optional(self, text: object) -> float | None:
        if not text or not isinstance(text, str):
            return None
        value = self._cache.get(text)
        return value if value is not None else self(text)


class EventIndex:
    """Events by the pod, controller or node they are about.

    With `track_updates` (a watch feeding it), an Event object seen again (its count went up) or
    deleted replaces or drops its earlier record, found by the Event's uid; a list or snapshot
    needs no such bookkeeping.
    """

    def __init__(self, parse_time: TimeParser | None = None, *, track_updates: bool = False) -> None:
        self.time = parse_time or TimeParser()
        # (kind, namespace, name) -> events, unsorted until first read
        self._pods: dict[tuple[str, str, str], list[Event]] = {}
        self._owners: dict[tuple[str, str, str], list[Event]] = {}
        self._nodes: dict[tuple[str, str, str], list[Event]] = {}
        self._sorted = True
        self._tracked: dict[str, tuple[list[Event], Event]] | None = {} if track_updates else None
        self._event_uids: dict[tuple[str, str, str], list[str]] = {}  # what forget_pod drops

    @classmethod
    def of(cls, events: Iterable[Obj], parse_time: TimeParser | None = None) -> EventIndex:
        index = cls(parse_time)
        for event in events:
            index.add(event)
        return index

    def add(self, event: Obj) -> None:
        # Most events of a busy cluster (probe failures, pulls of other objects...) are not about
        # start-up: the reason alone rules them out before anything else is read.
        reason = event.get("reason")
        if reason not in _ALL_REASONS:
            return
        involved = event.get("involvedObject") or event.get("regarding") or {}
        kind = involved.get("kind") or ""
        if kind == "Pod":
            if reason not in POD_REASONS:
                return
            target = self._pods
        elif kind == "Node":
            if reason not in NODE_REASONS:
                return
            target = self._nodes
        elif reason in OWNER_REASONS:
            target = self._owners
        else:
            return
        parse = self.time
        first = event.get("eventTime") or event.get("firstTimestamp")
        last_text = event.get("lastTimestamp")
        if first and isinstance(first, str):
            when = parse(first)
        elif last_text and isinstance(last_text, str):
            when = parse(last_text)
        else:
            created = (event.get("metadata") or {}).get("creationTimestamp")
            if not created or not isinstance(created, str):
                return
            when = parse(created)
        last = when
        if last_text and last_text != first and isinstance(last_text, str):
            last = max(when, parse(last_text))
        container, init = "", False
        field_path = involved.get("fieldPath")
        if field_path:
            if field_path.startswith("spec.containers{"):
                container = field_path[16:-1]
            elif field_path.startswith("spec.initContainers{"):
                container, init = field_path[20:-1], True
            elif field_path.startswith("spec.ephemeralContainers{"):
                container = field_path[25:-1]
        key = (kind, involved.get("namespace") or "", involved.get("name") or "")
        # tuple.__new__ skips the NamedTuple's Python-level constructor (a million calls here)
        record = _new_event(
            Event,
            (
                when,
                last,
                reason,
                container,
                init,
                event.get("message") or event.get("note") or "",
                event.get("count") or 1,
                involved.get("uid") or "",
            ),
        )
        records = target.setdefault(key, [])
        records.append(record)
        self._sorted = False
        if self._tracked is not None:
            self.remove(event)
            event_uid = (event.get("metadata") or {}).get("uid")
            if event_uid:
                self._tracked[event_uid] = (records, record)
                self._event_uids.setdefault(key, []).append(event_uid)

    def remove(self, event: Obj) -> None:
        """Drop the record of an Event object (by its uid) added earlier; only with `track_updates`."""
        if self._tracked is None:
            raise ValueError("this index does not track Event objects (track_updates=False)")
        event_uid = (event.get("metadata") or {}).get("uid")
        known = self._tracked.pop(event_uid, None) if event_uid else None
        if known is not None:
            records, record = known
            records.remove(record)

    def forget_pod(self, namespace: str, name: str) -> None:
        """Drop a pod's events (its start-up has been recorded, or it is gone)."""
        key = ("Pod", namespace, name)
        self._pods.pop(key, None)
        if self._tracked is not None:
            for event_uid in self._event_uids.pop(key, ()):
                self._tracked.pop(event_uid, None)

    def _sort(self) -> None:
        if not self._sorted:
            for table in (self._pods, self._owners, self._nodes):
                for records in table.values():
                    records.sort()
            self._sorted = True

    def for_pod(self, namespace: str, name: str, uid: str = "") -> list[Event]:
        """The pod's events, oldest first; events about an earlier pod of the same name are left out."""
        self._sort()
        records = self._pods.get(("Pod", namespace, name), [])
        if uid:
            for record in records:
                if record.uid and record.uid != uid:
                    return [other for other in records if not other.uid or other.uid == uid]
        return records

    def for_owner(self, kind: str, namespace: str, name: str) -> list[Event]:
        self._sort()
        return self._owners.get((kind, namespace, name), [])

    def for_node(self, name: str) -> list[Event]:
        self._sort()
        return self._nodes.get(("Node", "", name), [])
