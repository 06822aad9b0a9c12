"""The workers' copy of clusters' objects (`store.objects.ObjectsCache`): what it keeps when the
clusters do not all fit, and which notes of the process's applies it takes. (Its answers against full
reads: the differential test in tests/integration/backend/test_ingest.py.)"""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import orjson

from shipshape.backend.store import engine as store_engine
from shipshape.backend.store import repository as repo
from shipshape.backend.store.objects import ObjectsCache

KINDS = ("nodes", "pods")


def _clusters(tmp_path: Path, pods: int, count: int) -> tuple[object, list[str]]:
    """`count` clusters of `pods` pods each, applied from a snapshot, in a SQLite database."""
    engine = store_engine.create(f"sqlite:///{tmp_path / 'backend.db'}")
    store_engine.migrate(engine)
    sessions = store_engine.sessions(engine)
    now = datetime.now(UTC)
    ids = []
    with sessions.begin() as session:
        org, _ = repo.create_organization(session, "acme", now)
        for i in range(count):
            cluster, _ = repo.create_cluster(session, org.id, f"c{i}", now)
            body = {
                "schema": "shipshape.dev/snapshot/v1",
                "sequence": 1,
                "taken_at": now.isoformat(),
                "objects": {
                    "nodes": [],
                    "pods": [
                        {"kind": "Pod", "metadata": {"name": f"p{n}", "namespace": "shop"}}
                        for n in range(pods)
                    ],
                },
            }
            pushed = repo.record_push(
                session, cluster.id, "k1", str(body["schema"]), 1, gzip.compress(orjson.dumps(body)), now
            )
            assert repo.apply_cluster(session, cluster.id, [pushed.push_id], now) == {
                pushed.push_id: "applied"
            }
            ids.append(cluster.id)
    return sessions, ids


def test_a_cluster_that_does_not_fit_is_not_kept_until_an_idle_one_makes_room(tmp_path: Path) -> None:
    sessions, (a, b, c) = _clusters(tmp_path, pods=10, count=3)
    now = [0.0]
    kept = ObjectsCache(max_objects=25, idle_seconds=60, clock=lambda: now[0])
    with sessions.begin() as session:  # type: ignore[attr-defined]
        for cluster in (a, b, c):
            assert len(kept.read(session, cluster, KINDS)["pods"]) == 10
        # Room for two: the third read is answered but not kept (dropping `a` would make the next
        # read of `a`, in the analyses' round, miss in turn).
        assert kept.clusters == [a, b]
        read = kept.bodies_read
        kept.read(session, a, KINDS)
        kept.read(session, b, KINDS)
        assert kept.bodies_read == read  # both answered from the copy
        now[0] = 30.0
        kept.read(session, a, KINDS)
        now[0] = 100.0  # b idle for 100 s, a for 70 s: the one read least lately makes room
        kept.read(session, c, KINDS)
        assert kept.clusters == [a, c]
        now[0] = 105.0
        kept.read(session, a, KINDS)
        now[0] = 110.0  # neither idle long enough to make room for b
        kept.read(session, b, KINDS)
        assert kept.clusters == [c, a]


def _delta(sessions: object, cluster_id: str, sequence: int, names: list[str]) -> repo.Written:
    """A delta of the cluster that gives pods `names` a new body, applied: what it wrote."""
    now = datetime.now(UTC)
    body = {
        "schema": "shipshape.dev/delta/v1",
        "sequence": sequence,
        "base_sequence": sequence - 1,
        "taken_at": now.isoformat(),
        "changes": [
            {
                "type": "MODIFIED",
                "kind": "pods",
                "object": {"kind": "Pod", "metadata": {"name": n, "namespace": "shop"}, "v": sequence},
            }
            for n in names
        ],
    }
    written = repo.Written()
    with sessions.begin() as session:  # type: ignore[attr-defined]
        pushed = repo.record_push(
            session,
            cluster_id,
            f"k{sequence}",
            str(body["schema"]),
            sequence,
            gzip.compress(orjson.dumps(body)),
            now,
        )
        outcome = repo.apply_cluster(session, cluster_id, [pushed.push_id], now, written=written)
        assert outcome == {pushed.push_id: "applied"}
    return written


def test_notes_are_taken_only_for_a_cluster_it_keeps_and_only_up_to_their_bound(tmp_path: Path) -> None:
    sessions, (a, b) = _clusters(tmp_path, pods=10, count=2)
    kept = ObjectsCache(max_noted=3)
    with sessions.begin() as session:  # type: ignore[attr-defined]
        size = sum(len(objects) for objects in kept.read(session, a, KINDS).values())
    assert a in kept.clusters and b not in kept.clusters
    kept.max_objects = size  # no room left in the copy: the notes' own bound holds
    for cluster, sequence, names in ((a, 2, ["p0", "p1"]), (b, 2, ["p0"]), (a, 3, ["p2", "p3"])):
        written = _delta(sessions, cluster, sequence, names)
        assert set(written.bodies) == {("pods", "shop", n) for n in names}
        kept.note(cluster, written.revision, written.bodies)
    # Four pods noted for `a`: past the bound, so its notes went; `b` is not kept.
    with sessions.begin() as session:  # type: ignore[attr-defined]
        read, noted = kept.bodies_read, kept.objects_noted
        pods = kept.read(session, a, KINDS)["pods"]
        assert (kept.bodies_read - read, kept.objects_noted - noted) == (4, 0)
        assert sorted((p["metadata"]["name"], p.get("v")) for p in pods)[:4] == [
            ("p0", 2),
            ("p1", 2),
            ("p2", 3),
            ("p3", 3),
        ]
    # Within the bound, the next read takes them from the note.
    written = _delta(sessions, a, 4, ["p4", "p5"])
    kept.note(a, written.revision, written.bodies)
    with sessions.begin() as session:  # type: ignore[attr-defined]
        read, noted = kept.bodies_read, kept.objects_noted
        pods = kept.read(session, a, KINDS)["pods"]
        assert (kept.bodies_read - read, kept.objects_noted - noted) == (0, 2)
        assert {p["metadata"]["name"]: p.get("v") for p in pods}["p5"] == 4


def test_an_older_applys_note_that_comes_late_does_not_replace_a_newer_one(tmp_path: Path) -> None:
    sessions, (a,) = _clusters(tmp_path, pods=3, count=1)
    kept = ObjectsCache()
    with sessions.begin() as session:  # type: ignore[attr-defined]
        kept.read(session, a, KINDS)
    first = _delta(sessions, a, 2, ["p0", "p1"])
    second = _delta(sessions, a, 3, ["p0"])
    kept.note(a, second.revision, second.bodies)
    kept.note(a, first.revision, first.bodies)  # its thread was slower
    with sessions.begin() as session:  # type: ignore[attr-defined]
        read, noted = kept.bodies_read, kept.objects_noted
        pods = {p["metadata"]["name"]: p.get("v") for p in kept.read(session, a, KINDS)["pods"]}
        assert pods == {"p0": 3, "p1": 2, "p2": None}
        assert (kept.bodies_read - read, kept.objects_noted - noted) == (0, 2)


def test_notes_may_pass_their_bound_while_the_copy_has_room_for_them(tmp_path: Path) -> None:
    sessions, (a,) = _clusters(tmp_path, pods=10, count=1)
    kept = ObjectsCache(max_noted=1)
    with sessions.begin() as session:  # type: ignore[attr-defined]
        size = sum(len(objects) for objects in kept.read(session, a, KINDS).values())
    kept.max_objects = size + 3
    written = _delta(sessions, a, 2, ["p0", "p1", "p2"])
    kept.note(a, written.revision, written.bodies)
    with sessions.begin() as session:  # type: ignore[attr-defined]
        read, noted = kept.bodies_read, kept.objects_noted
        kept.read(session, a, KINDS)
        assert (kept.bodies_read - read, kept.objects_noted - noted) == (0, 3)
    written = _delta(sessions, a, 3, ["p0", "p1", "p2", "p3"])
    kept.note(a, written.revision, written.bodies)  # four: past the room left
    with sessions.begin() as session:  # type: ignore[attr-defined]
        read, noted = kept.bodies_read, kept.objects_noted
        kept.read(session, a, KINDS)
        assert (kept.bodies_read - read, kept.objects_noted - noted) == (4, 0)


def test_the_first_read_of_a_cluster_takes_what_its_applies_wrote_from_the_notes(tmp_path: Path) -> None:
    """A cluster the copy does not keep yet: its applies' notes are taken while the copy has room for
    them, and its first read parses only the rows no note holds (here the snapshot's, applied before
    the notes began), answering what a read without notes answers."""
    sessions, (a,) = _clusters(tmp_path, pods=10, count=1)
    kept = ObjectsCache()
    assert a not in kept.clusters and kept.takes_notes(a)
    written = _delta(sessions, a, 2, ["p0", "p1", "p2"])
    kept.note(a, written.revision, written.bodies)
    with sessions.begin() as session:  # type: ignore[attr-defined]
        pods = kept.read(session, a, KINDS)["pods"]
        fresh = ObjectsCache().read(session, a, KINDS)["pods"]
    assert (kept.bodies_read, kept.objects_noted) == (7, 3)
    assert pods == fresh
    assert {p["metadata"]["name"]: p.get("v") for p in pods}["p2"] == 2
    # No room left for a cluster it does not keep: nothing noted, the read parses everything.
    sessions, (b,) = _clusters(tmp_path / "other", pods=10, count=1)
    small = ObjectsCache(max_objects=2)
    written = _delta(sessions, b, 2, ["p0", "p1", "p2"])
    small.note(b, written.revision, written.bodies)
    with sessions.begin() as session:  # type: ignore[attr-defined]
        small.read(session, b, KINDS)
    assert (small.bodies_read, small.objects_noted) == (10, 0)
