"""The agent's copy of the cluster: objects by kind, namespace and name, fed by informers, plus the
changes not pushed yet. Pure (no I/O); thread-safe, since every informer delivers from its thread.

A full snapshot is the mirror as it is; a delta is the last change of each object since the previous
take. A re-list after a watch gap (410 Gone, an outage) is turned into the changes it implies, so
the deltas stay exact across gaps.

Objects are kept as their stripped JSON (bytes), not as dicts: a 30,000-pod cluster then fits in
tens of megabytes instead of gigabytes, and a push is written by joining them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from shipshape.contracts.push import DELTA_SCHEMA, SNAPSHOT_SCHEMA, ObjectKey, object_key, strip_object

Obj = dict[str, Any]
# The informer kinds (Kubernetes `kind`) and the plural the contract names them by.
KIND_PLURALS: dict[str, str] = {
    "Node": "nodes",
    "Pod": "pods",
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "PriorityClass": "priorityclasses",
    "Event": "events",
}


@dataclass(frozen=True, slots=True)
class Stored:
    version: str
    body: bytes  # the stripped object as JSON


@dataclass(frozen=True, slots=True)
class Pending:
    type: str  # ADDED | MODIFIED | DELETED
    body: bytes


class Mirror:
    """Informer sink keeping the stripped objects and the pending changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[ObjectKey, Stored] = {}
        self._pending: dict[ObjectKey, Pending] = {}
        self.version = 0  # bumped on every change (tests and metrics)

    # ---- informer sink -----------------------------------------------------------------------

    def replace(self, kind: str, items: list[Obj]) -> None:
        plural = KIND_PLURALS[kind]
        fresh: dict[ObjectKey, tuple[str, Obj]] = {}
        for item in items:
            stripped = _with_kind(strip_object(item), kind)
            fresh[object_key(plural, stripped)] = (_version(stripped), stripped)
        with self._lock:
            for key in [k for k in self._objects if k.kind == plural and k not in fresh]:
                self._record("DELETED", key, self._objects.pop(key).body)
            for key, (version, obj) in fresh.items():
                old = self._objects.get(key)
                if old is not None and old.version == version and version:
                    continue
                body = _kept(obj)
                self._record("ADDED" if old is None else "MODIFIED", key, body)
                self._objects[key] = Stored(version, body)

    def apply(self, event: Mapping[str, Any], kind: str) -> None:
        change = event.get("type")
        obj = event.get("object")
        if change not in ("ADDED", "MODIFIED", "DELETED") or not isinstance(obj, Mapping):
            return
        stripped = _with_kind(strip_object(obj), kind)
        key = object_key(KIND_PLURALS[kind], stripped)
        body = _kept(stripped)
        with self._lock:
            if change == "DELETED":
                self._objects.pop(key, None)
            else:
                change = "MODIFIED" if key in self._objects else "ADDED"
                self._objects[key] = Stored(_version(stripped), body)
            self._record(str(change), key, body)

    def _record(self, change: str, key: ObjectKey, body: bytes) -> None:
        previous = self._pending.get(key)
        if previous is not None and previous.type == "ADDED" and change == "DELETED":
            # Came and went between two pushes: nothing to tell.
            del self._pending[key]
        else:
            kept = "ADDED" if previous is not None and previous.type == "ADDED" else change
            self._pending[key] = Pending(kept, body)
        self.version += 1

    # ---- pushes ------------------------------------------------------------------------------

    def snapshot(self, sequence: int, taken_at: datetime, agent_version: str = "") -> bytes:
        """Every object now, as a `shipshape.dev/snapshot/v1` body; the pending changes are part of it,
        so they are dropped."""
        with self._lock:
            by_kind: dict[str, list[bytes]] = {}
            for key, stored in self._objects.items():
                by_kind.setdefault(key.kind, []).append(stored.body)
            self._pending.clear()
        head = orjson.dumps(
            {
                "schema": SNAPSHOT_SCHEMA,
                "sequence": sequence,
                "taken_at": taken_at,
                "agent_version": agent_version,
            }
        )
        kinds = b",".join(
            orjson.dumps(kind) + b":[" + b",".join(items) + b"]" for kind, items in by_kind.items()
        )
        return head[:-1] + b',"objects":{' + kinds + b"}}"

    def take_delta(
        self, sequence: int, base_sequence: int, taken_at: datetime, agent_version: str = ""
    ) -> bytes | None:
        """The pending changes as a `shipshape.dev/delta/v1` body following `base_sequence`, or None
        when nothing changed."""
        with self._lock:
            if not self._pending:
                return None
            pending = list(self._pending.items())
            self._pending.clear()
        head = orjson.dumps(
            {
                "schema": DELTA_SCHEMA,
                "sequence": sequence,
                "base_sequence": base_sequence,
                "taken_at": taken_at,
                "agent_version": agent_version,
            }
        )
        changes = b",".join(
            b'{"type":'
            + orjson.dumps(p.type)
            + b',"kind":'
            + orjson.dumps(key.kind)
            + b',"object":'
            + p.body
            + b"}"
            for key, p in pending
        )
        return head[:-1] + b',"changes":[' + changes + b"]}"

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The stored (stripped) object of `kind` (API plural), parsed; None when unknown."""
        key = ObjectKey(kind=kind, namespace=namespace, name=name)
        with self._lock:
            stored = self._objects.get(key)
        return None if stored is None else dict(orjson.loads(stored.body))

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def counts(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for key in self._objects:
                out[key.kind] = out.get(key.kind, 0) + 1
            return out


def _kept(obj: Obj) -> bytes:
    """The object's JSON in a bytes object of its own size: an orjson answer holds a buffer of a few
    kilobytes whatever its length, which for 30,000 pods kept for good is tens of megabytes."""
    return memoryview(orjson.dumps(obj)).tobytes()


def _with_kind(obj: Obj, kind: str) -> Obj:
    # List items carry no `kind`; the backend and the analyzers want it on every object.
    if obj.get("kind") != kind:
        obj = {**obj, "kind": kind}
    return obj


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
