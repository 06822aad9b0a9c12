"""A worker process's copy of clusters' stored objects, read again only where rows changed.

The spot analysis and the minute's series point read a cluster's whole state: for 3,000 pods that
was 0.1-0.25 s of a worker's CPU each time (and as much of PostgreSQL's), per cluster every 10 s
under a stream of deltas, while a delta changes ten objects. Every apply that writes rows counts up
the cluster's `objects_revision` and stamps the rows it writes with the new count
(`repository.apply_cluster`), so a reader that kept a kind's objects as of revision R needs only the
keys of the rows (to see what went) and the bodies of the rows stamped after R.

Each read is one statement per kind, so it is consistent with itself: it returns the cluster's
revision with the rows, in one snapshot of the database. The bodies handed out are the kept ones:
callers read them and must not change them.

The process's own applies also hand the copy what they wrote (`note`): a row stamped with the revision
of such an apply is then taken from the note, and the read neither fetches nor parses its body. Under a
stream of deltas that is most of what changed, when one process applies a cluster's pushes, and its
share when several do.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Text, and_, bindparam, case, cast, select
from sqlalchemy.orm import Session

from shipshape import heap
from shipshape.backend.store.models import Cluster, ClusterObject

Obj = dict[str, Any]

_CLUSTERS = Cluster.metadata.tables[Cluster.__tablename__]
_OBJECTS = ClusterObject.metadata.tables[ClusterObject.__tablename__]
# The rows of one kind, with the bodies of those written after `since` only; the cluster's revision
# in every row (and in a row of NULLs when the kind has no object), in the stored order.
_LISTING = (
    select(
        _CLUSTERS.c.objects_revision,
        _OBJECTS.c.namespace,
        _OBJECTS.c.name,
        _OBJECTS.c.revision,
        # As text, parsed here: psycopg's loader for json took half again as long as orjson on the text.
        # ... and not of an apply whose bodies this process noted (`ObjectsCache.note`).
        case(
            (
                and_(
                    _OBJECTS.c.revision > bindparam("since"),
                    _OBJECTS.c.revision.not_in(bindparam("noted", expanding=True)),
                ),
                cast(_OBJECTS.c.body, Text),
            ),
            else_=None,
        ),
    )
    .select_from(
        _CLUSTERS.outerjoin(
            _OBJECTS, and_(_OBJECTS.c.cluster_id == _CLUSTERS.c.id, _OBJECTS.c.kind == bindparam("kind"))
        )
    )
    .where(_CLUSTERS.c.id == bindparam("cluster"))
    .order_by(_OBJECTS.c.namespace, _OBJECTS.c.name)
)
_REVISION = select(_CLUSTERS.c.objects_revision).where(_CLUSTERS.c.id == bindparam("cluster"))


# One kind's objects that the process's applies wrote since the kind was last read: each one's newest
# (row revision, body). Every row a noted apply wrote is there unless a newer noted apply wrote it
# again, so the revisions found in it are the noted applies whose rows a listing may show.
_Noted = dict[tuple[str, str], tuple[int, Obj]]


@dataclass(slots=True)
class _Kind:
    """One kind of one cluster as of `revision`: each object's (row revision, body), in stored order."""

    revision: int
    rows: dict[tuple[str, str], tuple[int, Obj]]


class ObjectsCache:
    """Clusters' objects by kind as `repository.cluster_objects` returns them (ordered by namespace and
    name), kept between reads; at most `max_objects` objects in all. When a cluster does not fit,
    clusters not read for `idle_seconds` make room; if that is not enough it is not kept. (Dropping the
    least recently read instead would keep none: the analyses visit the clusters in turn, so with more
    clusters than room each read would drop the very cluster read next.)"""

    def __init__(
        self,
        max_objects: int = 60_000,
        idle_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        max_noted: int = 15_000,
    ) -> None:
        self.max_objects = max_objects
        self.idle_seconds = idle_seconds
        # Bodies noted and not yet read, in all, at most (or as many as the copy has room left for, if
        # that is more: a noted body replaces a kept one at the next read): a note that would pass it
        # drops the notes of its cluster (whose next read reads them instead).
        self.max_noted = max_noted
        self._clock = clock
        self._clusters: OrderedDict[str, dict[str, _Kind]] = OrderedDict()
        self._read_at: dict[str, float] = {}
        self._noted: dict[str, dict[str, _Noted]] = {}
        self._lock = threading.Lock()
        # Bodies read from the database, objects handed out from the copy and objects taken from notes
        # (for tests and metrics).
        self.bodies_read = 0
        self.objects_kept = 0
        self.objects_noted = 0

    def takes_notes(self, cluster_id: str) -> bool:
        """Whether `note` would take what an apply of the cluster wrote: the copy keeps the cluster,
        or has room left for one it does not keep yet (whose first read then takes from the notes what
        the applies since the process started wrote: a new cluster's first snapshot, all of it)."""
        with self._lock:
            return cluster_id in self._read_at or self._room(self._kept_total()) > 0

    def note(self, cluster_id: str, revision: int, bodies: Mapping[tuple[str, str, str], Obj]) -> None:
        """An apply of this process committed: these objects' rows (every row it wrote) carry
        `revision` (`repository.Written`). Kept until the cluster's kinds are next read, within
        `max_noted` or the room the copy leaves (for a cluster the copy does not keep yet, within that
        room alone); the bodies must not change afterwards."""
        with self._lock:
            kept_total = self._kept_total()
            if cluster_id not in self._read_at and self._room(kept_total) < len(bodies):
                return
            noted = self._noted.setdefault(cluster_id, {})
            for (kind, namespace, name), body in bodies.items():
                rows = noted.setdefault(kind, {})
                before = rows.get((namespace, name))
                if before is None or before[0] < revision:  # two applies' notes may come crosswise
                    rows[(namespace, name)] = (revision, body)
            noted_total = self._noted_total()
            if noted_total > self.max_noted and noted_total > self.max_objects - kept_total:
                del self._noted[cluster_id]

    def read(self, session: Session, cluster_id: str, kinds: Iterable[str]) -> dict[str, list[Obj]]:
        """The cluster's objects of each of `kinds`, as stored now (the caller's transaction). The
        bodies parsed are kept, and acyclic: the collector is kept off them (`heap.long_lived`; the
        workers run `heap.age`)."""
        with heap.long_lived():
            return self._read(session, cluster_id, kinds)

    def _read(self, session: Session, cluster_id: str, kinds: Iterable[str]) -> dict[str, list[Obj]]:
        with self._lock:
            kept = self._clusters.pop(cluster_id, {})
        current = session.scalar(_REVISION, {"cluster": cluster_id})
        out: dict[str, list[Obj]] = {}
        for kind in kinds:
            known = kept.get(kind)
            if current is not None and known is not None and known.revision == current:
                out[kind] = [body for _, body in known.rows.values()]
                self.objects_kept += len(known.rows)
                continue
            fresh = self._read_kind(session, cluster_id, kind, known, self._taken_notes(cluster_id, kind))
            if fresh is None:
                out[kind] = []
                kept.pop(kind, None)
                continue
            kept[kind] = fresh
            out[kind] = [body for _, body in fresh.rows.values()]
        with self._lock:
            self._keep(cluster_id, kept)
            self._prune_notes(cluster_id, kept)
        return out

    def _taken_notes(self, cluster_id: str, kind: str) -> _Noted | None:
        """A copy of the kind's notes as they are before its rows are listed: an apply noted later
        committed before the listing or after it, and the listing tells which by the rows' revisions."""
        with self._lock:
            noted = self._noted.get(cluster_id, {}).get(kind)
            return None if noted is None else dict(noted)

    def _read_kind(
        self, session: Session, cluster_id: str, kind: str, known: _Kind | None, noted: _Noted | None
    ) -> _Kind | None:
        since = -1 if known is None else known.revision
        revisions = sorted({r for r, _ in noted.values() if r > since}) if noted is not None else []
        rows: dict[tuple[str, str], tuple[int, Obj]] = {}
        revision: int | None = None
        missing = False
        listing = session.execute(
            _LISTING, {"cluster": cluster_id, "kind": kind, "since": since, "noted": revisions}
        ).all()
        for cluster_revision, namespace, name, row_revision, body in listing:
            revision = cluster_revision
            if name is None:
                continue  # the kind has no object
            key = (namespace, name)
            if body is not None:
                rows[key] = (row_revision, orjson.loads(body))
                self.bodies_read += 1
                continue
            if row_revision > since and noted is not None:
                found = noted.get(key)
                if found is None or found[0] != row_revision:
                    missing = True  # not noted as stored (cannot be: every row of a noted apply is)
                    break
                rows[key] = found
                self.objects_noted += 1
                continue
            previous = None if known is None else known.rows.get(key)
            if previous is None or previous[0] != row_revision:
                missing = True  # not kept as stored (a row stamped before a revision we never read)
                break
            rows[key] = previous
            self.objects_kept += 1
        if revision is None:
            return None  # no such cluster
        if missing:
            return self._read_kind(session, cluster_id, kind, None, None)
        return _Kind(revision, rows)

    def _prune_notes(self, cluster_id: str, kept: dict[str, _Kind]) -> None:
        """Drop the notes the copy now holds (or that a kind it does not keep collected)."""
        noted = self._noted.get(cluster_id)
        if noted is None:
            return
        if cluster_id not in self._read_at:
            del self._noted[cluster_id]
            return
        for kind in list(noted):
            held = kept.get(kind)
            if held is None:
                del noted[kind]
                continue
            newer = {k: v for k, v in noted[kind].items() if v[0] > held.revision}
            if newer:
                noted[kind] = newer
            else:
                del noted[kind]

    def forget(self, cluster_id: str) -> None:
        with self._lock:
            self._clusters.pop(cluster_id, None)
            self._read_at.pop(cluster_id, None)
            self._noted.pop(cluster_id, None)

    @property
    def clusters(self) -> list[str]:
        """The clusters kept, read least lately first."""
        with self._lock:
            return list(self._clusters)

    def _kept_total(self) -> int:
        return sum(_size(kinds) for kinds in self._clusters.values())

    def _noted_total(self) -> int:
        return sum(len(rows) for kinds in self._noted.values() for rows in kinds.values())

    def _room(self, kept_total: int) -> int:
        """Objects the copy has room for beyond what it keeps (`kept_total`) and what is noted."""
        return self.max_objects - kept_total - self._noted_total()

    def _keep(self, cluster_id: str, kept: dict[str, _Kind]) -> None:
        now = self._clock()
        size = _size(kept)
        total = self._kept_total()
        for other in list(self._clusters):
            if total + size <= self.max_objects:
                break
            if now - self._read_at[other] >= self.idle_seconds:
                total -= _size(self._clusters.pop(other))
                del self._read_at[other]
                self._noted.pop(other, None)
        if total + size > self.max_objects:
            self._read_at.pop(cluster_id, None)
            return
        self._clusters[cluster_id] = kept
        self._read_at[cluster_id] = now


def _size(kinds: dict[str, _Kind]) -> int:
    return sum(len(k.rows) for k in kinds.values())
