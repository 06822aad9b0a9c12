"""The workers' copy of clusters' objects (`store.objects.ObjectsCache`): what it keeps when the
clusters do not all fit. (Its answers against full reads: the differential test in
tests/integration/backend/test_ingest.py.)"""

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
