"""Pushes through the API into the stored state: snapshots, deltas, idempotency, order, bad input,
on SQLite and PostgreSQL with the in-process queue."""

from __future__ import annotations

import asyncio
import gzip
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import repository as repo
from shipshape.contracts import compression
from tests.integration.backend.conftest import (
    POSTGRES_ADMIN,
    delta,
    harness,
    node,
    pod,
    postgres_database,
    snapshot,
)


def _stored(h: object, org_id: str, cluster_id: str) -> dict[tuple[str, str, str], dict[str, object]]:
    backend = h.backend  # type: ignore[attr-defined]
    with backend.transaction() as session:
        objects = repo.cluster_objects(session, org_id, cluster_id)
    kinds = {"Node": "nodes", "Pod": "pods"}
    return {(kinds[o["kind"]], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


@pytest.mark.integration
async def test_snapshot_then_deltas_give_the_state_of_a_fresh_snapshot(database_url: str) -> None:
    async with harness(BackendSettings(db=database_url)) as h:
        t = h.tenant("acme")
        assert (await h.push(t.agent_token, snapshot(1, nodes=3, pods=10))).status_code == 202
        await h.settled(t.cluster_id, 1)
        changes = [
            ("ADDED", "pods", pod("p10", "n1")),
            ("DELETED", "pods", pod("p0", "n0")),
            ("MODIFIED", "nodes", {**node("n2"), "spec": {"unschedulable": True}}),
            ("ADDED", "nodes", node("n3")),
        ]
        assert (await h.push(t.agent_token, delta(2, 1, changes))).status_code == 202
        await h.settled(t.cluster_id, 2)

        expected = snapshot(3, nodes=4, pods=11)
        expected["objects"]["pods"] = [
            p for p in expected["objects"]["pods"] if p["metadata"]["name"] != "p0"
        ]
        expected["objects"]["nodes"][2]["spec"] = {"unschedulable": True}
        stored = _stored(h, t.org_id, t.cluster_id)
        fresh = {
            (kind, o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for kind, items in expected["objects"].items()
            for o in items
        }
        assert set(stored) == set(fresh)
        assert stored[("nodes", "", "n2")]["spec"] == {"unschedulable": True}
        # What must not leave the cluster was removed even though this sender did not strip it.
        p1 = stored[("pods", "shop", "p1")]
        assert "managedFields" not in p1["metadata"]
        env = {e["name"]: e["value"] for e in p1["spec"]["containers"][0]["env"]}
        assert env == {"DB_PASSWORD": "<redacted>", "MODE": "prod"}

        listed = await h.client.get("/api/v1/clusters", headers={"Authorization": f"Bearer {t.api_key}"})
        assert listed.status_code == 200
        (cluster,) = listed.json()
        assert (cluster["id"], cluster["node_count"], cluster["pod_count"]) == (t.cluster_id, 4, 10)
        assert cluster["last_seen"] is not None


@pytest.mark.integration
async def test_every_encoding_is_accepted_and_a_clean_compressed_push_is_stored_as_received(
    database_url: str,
) -> None:
    """zstd (what the agent sends), gzip and identity: each push applied; one that needs no stripping
    and came compressed is stored byte for byte as sent; the rest is stored compressed once more."""

    def stripped_pod(name: str, node_name: str) -> dict[str, Any]:
        body = pod(name, node_name)
        body["metadata"].pop("managedFields")
        body["spec"]["containers"][0]["env"][0]["value"] = "<redacted>"
        return body

    async with harness(BackendSettings(db=database_url)) as h:
        t = h.tenant("acme")
        first = snapshot(1, nodes=2, pods=4)
        for p in first["objects"]["pods"]:
            p["metadata"].pop("managedFields")
            p["spec"]["containers"][0]["env"][0]["value"] = "<redacted>"
        sent = [
            (first, compression.ZSTD),
            (delta(2, 1, [("ADDED", "pods", stripped_pod("z", "n0"))]), compression.ZSTD),
            (delta(3, 2, [("ADDED", "pods", stripped_pod("g", "n1"))]), compression.GZIP),
            (delta(4, 3, [("ADDED", "pods", stripped_pod("i", "n1"))]), compression.IDENTITY),
            (delta(5, 4, [("ADDED", "pods", pod("leaky", "n1"))]), compression.ZSTD),
        ]
        for sequence, (body, encoding) in enumerate(sent, start=1):
            answer = await h.push(t.agent_token, body, key=f"k{sequence}", encoding=encoding)
            assert answer.status_code == 202, (encoding, answer.text)
        await h.settled(t.cluster_id, len(sent))

        names = {name for kind, _, name in _stored(h, t.org_id, t.cluster_id) if kind == "pods"}
        assert names == {"p0", "p1", "p2", "p3", "z", "g", "i", "leaky"}
        leaky = _stored(h, t.org_id, t.cluster_id)[("pods", "shop", "leaky")]
        assert "managedFields" not in leaky["metadata"]
        assert leaky["spec"]["containers"][0]["env"][0]["value"] == "<redacted>"
        with h.backend.transaction() as session:
            stored = {p.idempotency_key: p.body_gzip for p in session.query(repo.Push)}
        assert compression.inflate(stored["k1"]) == orjson.dumps(first, default=str)
        assert stored["k1"] == compression.compress(orjson.dumps(first, default=str))  # as sent
        assert compression.encoding_of(stored["k3"]) == compression.GZIP  # as sent
        assert compression.encoding_of(stored["k4"]) == compression.ZSTD  # compressed here
        assert b"hunter2" not in compression.inflate(stored["k5"])  # stripped, then compressed


@pytest.mark.integration
async def test_a_delta_of_more_objects_than_one_statement_takes(database_url: str) -> None:
    """Changed rows go in batches of keys: every batch lands, and the last change of an object wins."""
    count = repo._KEYS_PER_STATEMENT * 2 + 100
    async with harness(BackendSettings(db=database_url)) as h:
        t = h.tenant("acme")
        assert (await h.push(t.agent_token, snapshot(1, nodes=2, pods=count))).status_code == 202
        await h.settled(t.cluster_id, 1)
        changes = [
            ("MODIFIED", "pods", {**pod(f"p{i}", "n1"), "status": {"phase": "Failed"}}) for i in range(count)
        ]
        changes += [("DELETED", "pods", pod(f"p{i}", "n0")) for i in range(0, count, 3)]
        changes += [("ADDED", "pods", pod(f"q{i}", "n0")) for i in range(count)]
        changes += [("MODIFIED", "pods", pod("p1", "n0"))]
        assert (await h.push(t.agent_token, delta(2, 1, changes))).status_code == 202
        await h.settled(t.cluster_id, 2)

        stored = _stored(h, t.org_id, t.cluster_id)
        pods = {name: o for kind, _, name in stored if kind == "pods" for o in [stored[(kind, "shop", name)]]}
        deleted = {f"p{i}" for i in range(0, count, 3)}
        assert set(pods) == {f"p{i}" for i in range(count)} - deleted | {f"q{i}" for i in range(count)}
        assert pods["p1"]["status"] == {"phase": "Running"} and pods["p1"]["spec"]["nodeName"] == "n0"
        assert pods["p2"]["status"] == {"phase": "Failed"}
        assert pods["q0"]["status"] == {"phase": "Running"}


@pytest.mark.integration
def test_pushes_before_the_newest_waiting_snapshot_are_superseded(database_url: str) -> None:
    """A backlog of one cluster's pushes costs one replacement: those older than its newest snapshot
    are marked superseded without being applied, and the state is that snapshot's (then what follows)."""
    from datetime import UTC, datetime

    from shipshape.backend.store import engine as store_engine

    engine = store_engine.create(database_url)
    store_engine.migrate(engine)
    sessions = store_engine.sessions(engine)
    now = datetime.now(UTC)
    try:
        with sessions.begin() as session:
            org, _ = repo.create_organization(session, "acme", now)
            cluster, _ = repo.create_cluster(session, org.id, "prod", now)
            org_id, cluster_id = org.id, cluster.id
        bodies = [
            snapshot(1, nodes=1, pods=2),
            delta(2, 1, [("ADDED", "pods", pod("d2", "n0"))]),
            snapshot(3, nodes=1, pods=3),
            snapshot(4, nodes=2, pods=1),
            delta(5, 4, [("ADDED", "pods", pod("d5", "n0"))]),
        ]
        ids = []
        with sessions.begin() as session:
            for body in bodies:
                raw = gzip.compress(orjson.dumps(body, default=str))
                recorded = repo.record_push(
                    session, cluster_id, f"k{body['sequence']}", body["schema"], body["sequence"], raw, now
                )
                ids.append(recorded.push_id)
        with sessions.begin() as session:
            assert repo.apply_pushes(session, ids[0], now) == "superseded"
        with sessions.begin() as session:
            outcomes = {p.sequence: p.outcome for p in session.query(repo.Push)}
            names = {o["metadata"]["name"] for o in repo.cluster_objects(session, org_id, cluster_id, "pods")}
            stored = session.get(repo.Cluster, cluster_id)
            assert stored is not None
            assert (stored.applied_sequence, stored.node_count, stored.pod_count) == (5, 2, 2)
        assert outcomes == {1: "superseded", 2: "superseded", 3: "superseded", 4: "applied", 5: "applied"}
        assert names == {"p0", "d5"}
        with sessions.begin() as session:
            assert repo.apply_pushes(session, ids[3], now) == "duplicate"
    finally:
        engine.dispose()


@pytest.mark.integration
async def test_a_replayed_push_is_stored_and_applied_once(sqlite_url: str) -> None:
    async with harness(BackendSettings(db=sqlite_url)) as h:
        t = h.tenant("acme")
        first = await h.push(t.agent_token, snapshot(1, 1, 2), key="push-1")
        again = await h.push(t.agent_token, snapshot(1, 1, 2), key="push-1")
        assert first.status_code == again.status_code == 202
        assert first.json() == {"push_id": first.json()["push_id"], "duplicate": False}
        assert again.json() == {"push_id": first.json()["push_id"], "duplicate": True}
        await h.settled(t.cluster_id, 1)
        with h.backend.transaction() as session:
            assert len(session.query(repo.Push).all()) == 1


@pytest.mark.integration
async def test_a_delta_before_its_base_waits_for_it(sqlite_url: str) -> None:
    async with harness(BackendSettings(db=sqlite_url)) as h:
        t = h.tenant("acme")
        assert (
            await h.push(t.agent_token, delta(2, 1, [("ADDED", "pods", pod("late", "n0"))]))
        ).status_code == 202
        assert (await h.push(t.agent_token, snapshot(1, 1, 1))).status_code == 202
        await h.settled(t.cluster_id, 2)
        assert ("pods", "shop", "late") in _stored(h, t.org_id, t.cluster_id)


@pytest.mark.integration
async def test_an_object_too_deep_to_store_sets_its_push_aside_and_the_cluster_goes_on(
    database_url: str,
) -> None:
    """An object nested deeper than the store's encoder goes (255 levels; the API's parse takes 1,024):
    a push the API re-encodes (to strip a secret) gets 422; one it stores as received is set aside as
    invalid by the workers, not an apply that fails for ever: the cluster's next pushes are applied."""
    deep: dict[str, Any] = {}
    for _ in range(300):
        deep = {"a": deep}
    # As JSON the standard library's encoder writes: it goes deeper than the store's.
    clean = {"kind": "Pod", "metadata": {"name": "deep", "namespace": "shop"}, "status": {"deep": deep}}
    secret = {**pod("deep", "n0"), "status": {"deep": deep}}
    async with harness(BackendSettings(db=database_url)) as h:
        t = h.tenant("acme")
        assert (await h.push(t.agent_token, snapshot(1, nodes=1, pods=1))).status_code == 202
        await h.settled(t.cluster_id, 1)
        refused = await h.push(
            t.agent_token, json.dumps(delta(2, 1, [("ADDED", "pods", secret)]), default=str).encode()
        )
        assert refused.status_code == 422 and "cannot be stored" in refused.json()["detail"]

        async def outcome(sequence: int) -> str:
            """The push's outcome once the workers processed it."""
            for _ in range(1000):
                with h.backend.transaction() as session:
                    done = session.query(repo.Push).filter_by(sequence=sequence).one().outcome
                if done is not None:
                    return str(done)
                await asyncio.sleep(0.02)
            raise AssertionError(f"push {sequence} not processed")

        deep_delta = json.dumps(delta(2, 1, [("ADDED", "pods", clean)]), default=str).encode()
        assert (await h.push(t.agent_token, deep_delta)).status_code == 202
        assert (await outcome(2)).startswith("invalid: an object cannot be stored")
        deep_snapshot = snapshot(3, nodes=1, pods=1)
        deep_snapshot["objects"]["pods"] = [clean]
        deep_snapshot["objects"]["nodes"][0].pop("status", None)
        deep_body = json.dumps(deep_snapshot, default=str).encode()
        assert (await h.push(t.agent_token, deep_body)).status_code == 202
        assert (await outcome(3)).startswith("invalid: an object cannot be stored")
        assert (await h.push(t.agent_token, snapshot(4, nodes=2, pods=2))).status_code == 202
        assert await outcome(4) == "applied"
        assert set(_stored(h, t.org_id, t.cluster_id)) == {
            ("nodes", "", "n0"), ("nodes", "", "n1"), ("pods", "shop", "p0"), ("pods", "shop", "p1")
        }  # fmt: skip


@pytest.mark.integration
async def test_bad_pushes_get_4xx_and_store_nothing(sqlite_url: str, tmp_path: Path) -> None:
    settings = BackendSettings(db=sqlite_url, max_push_bytes=64 * 1024, max_inflated_bytes=256 * 1024)
    async with harness(settings) as h:
        t = h.tenant("acme")
        auth = {"Authorization": f"Bearer {t.agent_token}"}
        post = h.client.post

        async def status(body: bytes, **headers: str) -> int:
            response = await post("/api/v1/pushes", content=body, headers={**auth, **headers})
            assert "Traceback" not in response.text
            return response.status_code

        good = orjson.dumps(snapshot(1, 1, 1))
        assert await status(good) == 422  # no Idempotency-Key
        assert await status(b"{not json", **{"Idempotency-Key": "k1"}) == 400
        assert await status(orjson.dumps({"schema": "v0"}), **{"Idempotency-Key": "k2"}) == 422
        wrong = snapshot(1, 1, 1)
        wrong["objects"]["pods"][0]["metadata"].pop("namespace")
        assert await status(orjson.dumps(wrong), **{"Idempotency-Key": "k3"}) == 422
        unknown = snapshot(1, 1, 1)
        unknown["objects"]["secrets"] = [{"metadata": {"name": "s", "namespace": "a"}}]
        assert await status(orjson.dumps(unknown), **{"Idempotency-Key": "k4"}) == 422
        big = orjson.dumps(snapshot(1, 1, 400))
        assert len(big) > 64 * 1024
        assert await status(big, **{"Idempotency-Key": "k5"}) == 413
        bomb = gzip.compress(b"[" + b" " * (1024 * 1024) + b"]")
        assert await status(bomb, **{"Idempotency-Key": "k6", "Content-Encoding": "gzip"}) == 413
        assert await status(b"garbage", **{"Idempotency-Key": "k7", "Content-Encoding": "gzip"}) == 400
        # Stored as received, a body must read back as what was checked: one whole gzip stream.
        zipped = gzip.compress(good)
        assert await status(zipped[:-4], **{"Idempotency-Key": "k9", "Content-Encoding": "gzip"}) == 400
        two = zipped + gzip.compress(b"{}")
        assert await status(two, **{"Idempotency-Key": "k10", "Content-Encoding": "gzip"}) == 400
        assert await status(good, **{"Idempotency-Key": "k8", "Content-Encoding": "br"}) == 415
        # zstd, as the agent sends: one whole frame, and refused past the limit however it is framed.
        packed = compression.compress(good)
        for broken in (packed[:-3], packed + b"x", packed + packed, b"garbage"):
            assert await status(broken, **{"Idempotency-Key": "k11", "Content-Encoding": "zstd"}) == 400
        zstd_bomb = compression.compress(b"[" + b" " * (1024 * 1024) + b"]")
        assert await status(zstd_bomb, **{"Idempotency-Key": "k12", "Content-Encoding": "zstd"}) == 413
        assert await status(b"{not json", **{"Idempotency-Key": "k13", "Content-Encoding": "identity"}) == 400
        wrong_zstd = compression.compress(orjson.dumps(wrong))
        assert await status(wrong_zstd, **{"Idempotency-Key": "k14", "Content-Encoding": "zstd"}) == 422
        assert await status(good, **{"Idempotency-Key": "bad key!"}) == 400
        with h.backend.transaction() as session:
            assert session.query(repo.Push).count() == 0
            assert session.query(repo.ClusterObject).count() == 0


async def test_a_push_is_accepted_while_a_worker_holds_its_cluster() -> None:
    """A worker applying or analysing a cluster holds its row for up to a second; the API's insert of
    the next push (whose foreign key check locks the same row for key share) goes on meanwhile."""
    with postgres_database() as url:
        async with harness(BackendSettings(db=url)) as h:
            t = h.tenant("acme")
            assert (await h.push(t.agent_token, snapshot(1, 1, 1))).status_code == 202
            await h.settled(t.cluster_id, 1)
            with h.backend.transaction() as session:
                repo.lock_cluster(session, t.cluster_id)  # as the workers lock it
                accepted = await asyncio.wait_for(h.push(t.agent_token, snapshot(2, 1, 2)), 10)
                assert accepted.status_code == 202
            await h.settled(t.cluster_id, 2)


def _obj(kind: str, name: str, version: int) -> dict[str, object]:
    metadata: dict[str, object] = {"name": name, "resourceVersion": str(version)}
    if kind == "pods":
        metadata["namespace"] = "shop"
    # Text beyond ASCII, an escape and a NUL: what the PostgreSQL upsert sends as UTF-8 bytes reads back.
    return {
        "kind": kind,
        "metadata": metadata,
        "status": {"version": version, "note": 'caf\u00e9 \U0001f680 "\x00'},
    }


KINDS = ("nodes", "pods", "deployments")


def _record(session: Any, cluster_id: str, body: dict[str, Any], now: datetime) -> int:
    """Store `body` as its agent would have pushed it (gzip, keyed by its sequence): the push's id."""
    return repo.record_push(
        session,
        cluster_id,
        f"k{body['sequence']}",
        str(body["schema"]),
        int(body["sequence"]),
        gzip.compress(orjson.dumps(body)),
        now,
    ).push_id


@pytest.mark.integration
@pytest.mark.parametrize("seed", [1, 2])
def test_batched_applies_and_snapshot_diffs_match_a_fresh_replacement(database_url: str, seed: int) -> None:
    """Differential: pushes applied in batches of any size (deltas folded, snapshots written as a
    diff against the stored digests, node and pod counts kept by the writes) leave the state that
    applying each push on its own to a model of the cluster gives, after every batch. The workers'
    copies of the objects (`ObjectsCache`), one read after every batch, one now and then, one too
    small to keep the cluster, and two told what some of the batches wrote (as the process that
    applied them tells its own copy: `note`), one read after every batch and one now and then, read
    what a full read reads; the first reads only what changed, and the third only what changed in
    the batches it was not told of."""
    import random
    from datetime import UTC, datetime

    from sqlalchemy import func, select

    from shipshape.backend.store import engine as store_engine
    from shipshape.backend.store.models import Cluster, ClusterObject
    from shipshape.backend.store.objects import ObjectsCache

    rng = random.Random(seed)
    engine = store_engine.create(database_url)
    store_engine.migrate(engine)
    sessions = store_engine.sessions(engine)
    now = datetime.now(UTC)
    model: dict[tuple[str, str, str], dict[str, object]] = {}
    version = 0
    every, sometimes, tiny = ObjectsCache(), ObjectsCache(), ObjectsCache(max_objects=5)
    noting, noting_sometimes = ObjectsCache(), ObjectsCache()
    seen_revision = -1

    def key(kind: str, name: str) -> tuple[str, str, str]:
        return (kind, "shop" if kind == "pods" else "", name)

    touched: set[tuple[str, str, str]] = set()  # objects given a new body since the last read

    def changed(kind: str, name: str) -> dict[str, object]:
        nonlocal version
        version += 1
        touched.add(key(kind, name))
        return _obj(kind, name, version)

    try:
        with sessions.begin() as session:
            org, _ = repo.create_organization(session, "acme", now)
            cluster, _ = repo.create_cluster(session, org.id, "prod", now)
            org_id, cluster_id = org.id, cluster.id
        sequence = 0
        for _batch in range(12):
            bodies = []
            for _ in range(rng.randint(1, 6)):
                sequence += 1
                if sequence == 1 or rng.random() < 0.25:
                    # A snapshot: most objects as they are, some changed, some gone, some new.
                    for k in list(model):
                        if rng.random() < 0.2:
                            del model[k]
                        elif rng.random() < 0.2:
                            model[k] = changed(k[0], k[2])
                    for _ in range(rng.randint(0, 8)):
                        kind = rng.choice(["nodes", "pods"])
                        name = f"{kind[0]}{rng.randint(0, 40)}"
                        model[key(kind, name)] = changed(kind, name)
                    objects: dict[str, list[dict[str, object]]] = {"nodes": [], "pods": []}
                    for (kind, _, _), obj in sorted(model.items()):
                        objects[kind].append(obj)
                    body = {
                        "schema": "shipshape.dev/snapshot/v1",
                        "sequence": sequence,
                        "taken_at": now.isoformat(),
                        "objects": objects,
                    }
                else:
                    changes = []
                    for _ in range(rng.randint(1, 10)):
                        kind = rng.choice(["nodes", "pods"])
                        name = f"{kind[0]}{rng.randint(0, 40)}"
                        k = key(kind, name)
                        if k in model and rng.random() < 0.3:
                            changes.append(("DELETED", kind, model.pop(k)))
                        else:
                            kind_of = "MODIFIED" if k in model else "ADDED"
                            model[k] = changed(kind, name)
                            changes.append((kind_of, kind, model[k]))
                    body = delta(sequence, sequence - 1, changes)
                bodies.append(body)
            with sessions.begin() as session:
                ids = [_record(session, cluster_id, b, now) for b in bodies]
            named = rng.sample(ids, rng.randint(1, len(ids)))
            written = repo.Written()
            with sessions.begin() as session:
                outcomes = repo.apply_cluster(session, cluster_id, named, now, written=written)
            told = rng.random() < 0.6  # applied by the process of the noting copies
            if told:
                noting.note(cluster_id, written.revision, written.bodies)
                noting_sometimes.note(cluster_id, written.revision, written.bodies)
            assert set(outcomes) == set(named)
            assert set(outcomes.values()) <= {"applied", "superseded"}
            with sessions.begin() as session:
                stored = {
                    (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
                    for o in repo.cluster_objects(session, org_id, cluster_id)
                }
                row = session.get(repo.Cluster, cluster_id)
                assert row is not None
                counts = (row.applied_sequence, row.node_count, row.pod_count)
                unprocessed = repo.unprocessed_pushes(session, datetime.now(UTC))
            assert stored == model
            with sessions.begin() as session:
                full = {kind: repo.cluster_objects(session, org_id, cluster_id, kind) for kind in KINDS}
                before = every.bodies_read
                assert every.read(session, cluster_id, KINDS) == full
                # Read: the rows the batch wrote (at least every object it gave a new body; a
                # snapshot also rewrites what deltas wrote), not the others.
                rewritten = session.scalar(
                    select(func.count())
                    .select_from(ClusterObject)
                    .where(ClusterObject.cluster_id == cluster_id, ClusterObject.revision > seen_revision)
                )
                assert len(touched & set(model)) <= every.bodies_read - before == rewritten
                touched.clear()
                # Told of the batch: nothing read (its first read too: a copy with room takes notes
                # for a cluster it does not keep yet); not told: what it rewrote.
                before, noted_before = noting.bodies_read, noting.objects_noted
                assert noting.read(session, cluster_id, KINDS) == full
                if told:
                    taken = (noting.bodies_read - before, noting.objects_noted - noted_before)
                    assert taken == (0, rewritten)
                else:
                    assert noting.bodies_read - before == rewritten
                if rng.random() < 0.3:
                    assert noting_sometimes.read(session, cluster_id, KINDS) == full
                seen_revision = session.scalar(
                    select(Cluster.objects_revision).where(Cluster.id == cluster_id)
                )
                if rng.random() < 0.3:
                    assert sometimes.read(session, cluster_id, KINDS) == full
                tiny.read(session, "another-cluster", KINDS)
                assert tiny.read(session, cluster_id, KINDS) == full
            nodes = sum(1 for k in model if k[0] == "nodes")
            assert counts == (sequence, nodes, len(model) - nodes)
            assert unprocessed == []
        assert noting.objects_noted > 0 and noting_sometimes.objects_noted > 0
    finally:
        engine.dispose()


@pytest.mark.integration
def test_a_snapshot_that_changes_nothing_keeps_the_analysis_of_the_state_before(database_url: str) -> None:
    """A periodic snapshot of a cluster the deltas kept current writes no row, and the spot analysis
    of the same objects is not due again; one that changes an object is."""
    from datetime import UTC, datetime

    from shipshape.backend.store import engine as store_engine

    engine = store_engine.create(database_url)
    store_engine.migrate(engine)
    sessions = store_engine.sessions(engine)
    now = datetime.now(UTC)

    def push(session: object, cluster_id: str, body: dict[str, object]) -> int:
        return _record(session, cluster_id, body, now)

    def analysis_state(cluster_id: str) -> tuple[int | None, int | None]:
        with sessions.begin() as session:
            state = repo.lock_for_analysis(session, cluster_id)
            return state.applied_sequence, state.analyzed_sequence

    try:
        with sessions.begin() as session:
            org, _ = repo.create_organization(session, "acme", now)
            cluster_id = repo.create_cluster(session, org.id, "prod", now)[0].id
            first = snapshot(1, nodes=2, pods=3)
            pushed = push(session, cluster_id, first)
        with sessions.begin() as session:
            assert repo.apply_cluster(session, cluster_id, [pushed], now) == {pushed: "applied"}
            repo.mark_analyzed(session, cluster_id, now, 1)
        with sessions.begin() as session:
            pushed = push(session, cluster_id, {**first, "sequence": 2})
        with sessions.begin() as session:
            assert repo.apply_cluster(session, cluster_id, [pushed], now) == {pushed: "applied"}
        assert analysis_state(cluster_id) == (2, 2)
        changed = snapshot(3, nodes=2, pods=3)
        changed["objects"]["pods"][0]["status"] = {"phase": "Failed"}
        with sessions.begin() as session:
            pushed = push(session, cluster_id, changed)
        with sessions.begin() as session:
            assert repo.apply_cluster(session, cluster_id, [pushed], now) == {pushed: "applied"}
        assert analysis_state(cluster_id) == (3, 2)
    finally:
        engine.dispose()


@pytest.mark.integration
def test_an_apply_sets_the_last_seen_an_accept_left_to_it(database_url: str) -> None:
    """An accept that found the cluster's row locked leaves `last_seen` to the worker holding it
    (`repository._seen`): the apply sets it to its newest push's arrival, never back to an older one,
    and an apply that moves nothing on leaves the counts and the analysed sequence as they were."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import select, update

    from shipshape.backend.store import engine as store_engine
    from shipshape.backend.store.models import Cluster

    engine = store_engine.create(database_url)
    store_engine.migrate(engine)
    sessions = store_engine.sessions(engine)
    now = datetime.now(UTC).replace(microsecond=0)

    def row(cluster_id: str) -> tuple[Any, ...]:
        with sessions.begin() as session:
            found = session.execute(
                select(
                    Cluster.last_seen,
                    Cluster.applied_sequence,
                    Cluster.node_count,
                    Cluster.pod_count,
                    Cluster.analyzed_sequence,
                ).where(Cluster.id == cluster_id)
            ).one()
        return (repo.as_utc(found[0]), *found[1:])

    try:
        with sessions.begin() as session:
            org, _ = repo.create_organization(session, "acme", now)
            cluster_id = repo.create_cluster(session, org.id, "prod", now)[0].id
            first = _record(session, cluster_id, snapshot(1, nodes=2, pods=3), now)
            # As if the accept had found the row locked: `last_seen` not set.
            session.execute(update(Cluster).where(Cluster.id == cluster_id).values(last_seen=None))
        with sessions.begin() as session:
            applied = repo.apply_cluster(session, cluster_id, [first], now + timedelta(seconds=5))
            assert applied == {first: "applied"}
            repo.mark_analyzed(session, cluster_id, now, 1)
        assert row(cluster_id) == (now, 1, 2, 3, 1)
        later = now + timedelta(seconds=30)
        with sessions.begin() as session:
            stale = _record(session, cluster_id, {**snapshot(0, nodes=1, pods=1), "sequence": 0}, later)
            session.execute(update(Cluster).where(Cluster.id == cluster_id).values(last_seen=now))
        with sessions.begin() as session:
            assert repo.apply_cluster(session, cluster_id, [stale], later) == {stale: "stale"}
        assert row(cluster_id) == (later, 1, 2, 3, 1)
        with sessions.begin() as session:
            same = _record(session, cluster_id, snapshot(2, nodes=2, pods=3), now)
            session.execute(update(Cluster).where(Cluster.id == cluster_id).values(last_seen=later))
        with sessions.begin() as session:
            assert repo.apply_cluster(session, cluster_id, [same], later) == {same: "applied"}
        # Nothing written (the same objects): the analysis stands; `last_seen` is not moved back.
        assert row(cluster_id) == (later, 2, 2, 3, 2)
    finally:
        engine.dispose()


async def test_a_push_is_accepted_after_the_database_dropped_the_pooled_connections() -> None:
    """The accept's connections are not pinged when taken: one found dropped (PostgreSQL restarted,
    or ended it) is replaced and the push accepted all the same, once."""
    import psycopg

    with postgres_database() as url:
        async with harness(BackendSettings(db=url)) as h:
            t = h.tenant("acme")
            assert (await h.push(t.agent_token, snapshot(1, 1, 1))).status_code == 202
            # The second push of a token the process knows goes through the asyncio connections.
            assert (await h.push(t.agent_token, snapshot(2, 1, 1))).status_code == 202
            assert h.backend.accepting_async is not None and h.backend.accepting_async.idle == 1
            await h.settled(t.cluster_id, 2)
            with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
                    (url.rsplit("/", 1)[1],),
                ).fetchone()
            assert ended is not None and ended[0] >= 2
            assert (await h.push(t.agent_token, snapshot(3, 1, 2), key="after")).status_code == 202
            await h.settled(t.cluster_id, 3)
            with h.backend.transaction() as session:
                assert session.query(repo.Push).filter(repo.Push.idempotency_key == "after").count() == 1


@pytest.mark.integration
async def test_a_small_push_that_inflates_large_is_checked_off_the_event_loop_or_refused(
    database_url: str,
) -> None:
    """A push of a few KiB as sent from an agent the process knows is checked on the event loop only
    while it inflates to at most `INLINE_INFLATED_BYTES`: one that inflates to more is still accepted
    (checked in the thread pool) up to `max_inflated_bytes`, and refused with 413 past it."""
    from shipshape.backend.app import INLINE_INFLATED_BYTES, INLINE_PUSH_BYTES

    big = snapshot(2, 1, 5000)  # identical pods: megabytes of JSON, a few KiB in zstd
    raw = orjson.dumps(big)
    assert len(raw) > INLINE_INFLATED_BYTES and len(compression.compress(raw)) <= INLINE_PUSH_BYTES
    for limit, expected in ((64 * 1024 * 1024, 202), (INLINE_INFLATED_BYTES // 2, 413)):
        async with harness(BackendSettings(db=database_url, max_inflated_bytes=limit)) as h:
            t = h.tenant(f"acme-{expected}")
            assert (
                await h.push(t.agent_token, snapshot(1, 1, 1), encoding=compression.ZSTD)
            ).status_code == 202
            answer = await h.push(t.agent_token, big, encoding=compression.ZSTD)
            assert answer.status_code == expected, answer.text
            if expected == 202:
                await h.settled(t.cluster_id, 2)
                with h.backend.transaction() as session:
                    assert session.get(repo.Cluster, t.cluster_id).pod_count == 5000  # type: ignore[union-attr]
            else:
                with h.backend.transaction() as session:
                    assert session.query(repo.Push).filter(repo.Push.cluster_id == t.cluster_id).count() == 1


@pytest.mark.integration
def test_an_apply_and_the_sweep_find_waiting_pushes_without_reading_the_processed_ones() -> None:
    """With 20,000 processed pushes of a cluster kept for retention and 5 waiting, PostgreSQL finds
    the waiting ones through the partial index of pending pushes (migration 0009), not by reading
    every push (5.8 ms a query for one such cluster without it, 0.03 ms with it)."""
    from datetime import UTC, datetime

    from sqlalchemy import text

    from shipshape.backend.store import engine as store_engine
    from tests.integration.backend.conftest import postgres_database

    with postgres_database() as url:
        engine = store_engine.create(url)
        try:
            store_engine.migrate(engine)
            with store_engine.sessions(engine).begin() as session:
                org, _ = repo.create_organization(session, "acme", datetime.now(UTC))
                cluster, _ = repo.create_cluster(session, org.id, "prod", datetime.now(UTC))
                cluster_id = cluster.id
            with engine.begin() as connection:
                insert = (
                    "INSERT INTO pushes (cluster_id, idempotency_key, schema_name, sequence, received_at,"
                    " body_gzip, processed_at, outcome) SELECT :c, :prefix || g, 'shipshape.dev/delta/v1', g,"
                    " now(), decode(repeat('ab', 1000), 'hex'), {processed}"
                    " FROM generate_series(CAST(:a AS bigint), CAST(:b AS bigint)) g"
                )
                connection.execute(
                    text(insert.format(processed="now(), 'applied'")),
                    {"c": cluster_id, "prefix": "done-", "a": 1, "b": 20000},
                )
                connection.execute(
                    text(insert.format(processed="NULL, NULL")),
                    {"c": cluster_id, "prefix": "new-", "a": 20001, "b": 20005},
                )
                connection.execute(text("ANALYZE pushes"))
            with engine.connect() as connection:
                pending = connection.execute(repo._PENDING, {"cluster": cluster_id}).all()
                assert [row.sequence for row in pending] == list(range(20001, 20006))
                # What `repository._PENDING` and `unprocessed_pushes` ask.
                for query in (
                    "SELECT id FROM pushes WHERE cluster_id = :c AND processed_at IS NULL ORDER BY sequence",
                    "SELECT id FROM pushes WHERE processed_at IS NULL AND received_at < now() ORDER BY id",
                ):
                    plan = "\n".join(
                        row[0] for row in connection.execute(text(f"EXPLAIN {query}"), {"c": cluster_id})
                    )
                    assert "ix_pushes_pending" in plan and "Seq Scan" not in plan, plan
            with store_engine.sessions(engine).begin() as session:
                assert len(repo.unprocessed_pushes(session, datetime.now(UTC))) == 5
        finally:
            engine.dispose()
