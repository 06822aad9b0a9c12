"""A stored push's body as the workers read it back, and a snapshot's objects with their digests.

`inflate` is the one place that turns the bytes stored for a push into its JSON: a change to how the
API stores pushes changes this function only.

A snapshot is applied as a diff against the stored objects (`repository.apply_cluster`): each object
row keeps the digest of the JSON it was written from (a snapshot writes it; a delta leaves it empty,
as "unknown"), so a snapshot rewrites only the rows whose object changed. `read_snapshot` splits a
snapshot into its objects' raw JSON without building them (msgspec), checks the keys as the contract
does, and digests each object's bytes; only the changed objects are parsed. Anything it is not sure
of (a shape the contract would refuse, a duplicate key) gives None, and the full parse decides.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from shipshape.contracts import compression
from shipshape.contracts.push import (
    SNAPSHOT_SCHEMA,
    ClusterSnapshot,
    checked_key,
    snapshot_head,
)

# (kind, namespace, name): a stored object's primary key within its cluster.
Key = tuple[str, str, str]


def inflate(stored: bytes) -> bytes:
    """The JSON of a push from the bytes stored for it (zstd or gzip, as accepted)."""
    return compression.inflate(stored)


def digest(raw: bytes) -> bytes:
    """The digest stored beside an object written from the JSON `raw` (16 bytes of BLAKE2b)."""
    return hashlib.blake2b(raw, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class SnapshotObject:
    digest: bytes
    raw: bytes

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = orjson.loads(self.raw)
        return body


@dataclass(frozen=True, slots=True)
class SnapshotObjects:
    """A snapshot's sequence and its objects by key, each as raw JSON with its digest."""

    sequence: int
    objects: dict[Key, SnapshotObject]


class _Metadata(msgspec.Struct, gc=False):
    name: Any = None
    namespace: Any = None


class _Keyed(msgspec.Struct, gc=False):
    metadata: _Metadata | None = None


class _RawSnapshot(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    schema: str
    sequence: int
    taken_at: str
    objects: dict[str, list[msgspec.Raw]]
    agent_version: str = ""


_RAW_SNAPSHOT = msgspec.json.Decoder(_RawSnapshot)
_KEYED = msgspec.json.Decoder(_Keyed)


def read_snapshot(body: bytes) -> SnapshotObjects | None:
    """The objects of the snapshot `body` (JSON) by key, without building them; None when `body` is
    not surely a valid snapshot (the full parse, `contracts.push.parse_push`, then says why)."""
    try:
        view = _RAW_SNAPSHOT.decode(body)
    except msgspec.DecodeError:
        return None
    if view.schema != SNAPSHOT_SCHEMA:
        return None
    count = sum(len(items) for items in view.objects.values())
    if snapshot_head(view.schema, view.sequence, view.taken_at, view.agent_version, count) is None:
        return None
    objects: dict[Key, SnapshotObject] = {}
    for kind, items in view.objects.items():
        for item in items:
            raw = bytes(item)
            try:
                metadata = _KEYED.decode(raw).metadata  # an object, or DecodeError
            except msgspec.DecodeError:
                return None
            if metadata is None:
                return None
            try:
                namespace, name = checked_key(kind, metadata.name, metadata.namespace)
            except ValueError:
                return None
            key = (kind, namespace, name)
            if key in objects:
                return None
            objects[key] = SnapshotObject(digest(raw), raw)
    return SnapshotObjects(view.sequence, objects)


def snapshot_objects(snapshot: ClusterSnapshot) -> SnapshotObjects:
    """The same from a parsed snapshot (the full path: each object dumped again for its digest)."""
    objects: dict[Key, SnapshotObject] = {}
    for kind, items in snapshot.objects.items():
        for obj in items:
            metadata: Mapping[str, Any] = obj["metadata"]
            namespace, name = checked_key(kind, metadata.get("name"), metadata.get("namespace"))
            raw = orjson.dumps(obj)
            objects[(kind, namespace, name)] = SnapshotObject(digest(raw), raw)
    return SnapshotObjects(snapshot.sequence, objects)
