"""Worker processes share the NATS stream's partitions through PostgreSQL advisory locks: alone, a
process takes every partition; with a second, each keeps its half and a cluster's pushes are applied
by one of them only; when one stops, the other takes its partitions and their jobs."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import psycopg
import pytest

from shipshape.backend import service
from shipshape.backend.app import Backend
from shipshape.backend.partitions import AdvisoryLocks, namespace_of
from shipshape.backend.queue import DURABLE, PARTITIONS, Job, NatsQueue, open_queue, partition_of
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import engine as store_engine
from shipshape.backend.store import repository as repo
from shipshape.backend.store.models import Push
from shipshape.backend.worker_health import WorkerMetrics
from shipshape.backend.workers import Workers
from tests.integration.backend.conftest import (
    NATS_SERVER,
    delta,
    nats_stream,
    pod,
    postgres_database,
    snapshot,
)

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def worker_process(settings: BackendSettings) -> AsyncIterator[tuple[Backend, Workers]]:
    """What `shipshape worker` builds: its own engine, queue connection and partition locks."""
    backend = await service.build(settings)
    workers = service.workers_for(backend, WorkerMetrics())
    workers.rebalance_seconds = 0.1
    try:
        yield backend, workers
    finally:
        await backend.queue.close()
        backend.engine.dispose()


async def until(condition: Callable[[], bool], limit: float = 20.0) -> None:
    for _ in range(int(limit / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not within the limit")


def applied_by(workers: Workers, seen: dict[str, set[str]], name: str) -> None:
    """Record the clusters whose pushes `workers` applies, under `name`."""
    apply = workers.apply_cluster

    def recording(jobs: list[Job]) -> Any:
        seen.setdefault(jobs[0].cluster_id, set()).add(name)
        return apply(jobs)

    workers.apply_cluster = recording  # type: ignore[method-assign]


async def push(backend: Backend, cluster_id: str, body: dict[str, Any]) -> int:
    with backend.transaction() as session:
        recorded = repo.record_push(
            session,
            cluster_id,
            f"k{body['sequence']}",
            body["schema"],
            body["sequence"],
            gzip.compress(orjson.dumps(body)),
            backend.now(),
        )
    await backend.queue.publish(Job(recorded.push_id, cluster_id, f"m-{cluster_id}-{body['sequence']}"))
    return recorded.push_id


def processed(backend: Backend, push_ids: list[int]) -> bool:
    with backend.transaction() as session:
        return all(getattr(session.get(Push, p), "processed_at", None) is not None for p in push_ids)


def owned(workers: Workers) -> set[int]:
    """The partitions the workers consume now."""
    return set() if workers.partitions is None else workers.partitions.owned


async def test_two_processes_split_the_partitions_and_each_cluster_goes_to_one_of_them() -> None:
    with postgres_database() as db:
        async with nats_stream() as queue_url:
            settings = BackendSettings(db=db, queue=queue_url)
            async with worker_process(settings) as (a, first), worker_process(settings) as (_, second):
                assert isinstance(a.queue, NatsQueue)
                partitions = a.queue.partitions
                with a.transaction() as session:
                    org, _ = repo.create_organization(session, "acme", a.now())
                    made = [repo.create_cluster(session, org.id, f"c{i}", a.now())[0] for i in range(12)]
                    clusters = [cluster.id for cluster in made]
                seen: dict[str, set[str]] = {}
                applied_by(first, seen, "first")
                applied_by(second, seen, "second")
                async with first.running(1):
                    await until(lambda: len(owned(first)) == partitions)
                    ids = [await push(a, c, snapshot(1, 1, 2)) for c in clusters]
                    await until(lambda: processed(a, ids))
                    assert set().union(*seen.values()) == {"first"}

                    async with second.running(1):

                        def balanced() -> bool:
                            mine, theirs = owned(first), owned(second)
                            return len(mine) == len(theirs) == partitions // 2 and not mine & theirs

                        await until(balanced)
                        for workers in (first, second):
                            assert workers.metrics.partitions_owned._value.get() == partitions // 2
                        seen.clear()
                        ids = []
                        for sequence in range(2, 6):
                            for c in clusters:
                                change = [("ADDED", "pods", pod(f"x{sequence}", "n0"))]
                                ids.append(await push(a, c, delta(sequence, sequence - 1, change)))
                        await until(lambda: processed(a, ids))
                        # Each cluster's pushes went to the process owning its partition, and only there.
                        assert all(len(names) == 1 for names in seen.values()), seen
                        assert {next(iter(names)) for names in seen.values()} == {"first", "second"}
                        for c, names in seen.items():
                            owner = first if names == {"first"} else second
                            assert partition_of(c, partitions) in owned(owner)
                    # The second stopped: its locks went with its connection, and the first takes all.
                    await until(lambda: len(owned(first)) == partitions)
                    seen.clear()
                    last = [("ADDED", "pods", pod("x6", "n0"))]
                    ids = [await push(a, c, delta(6, 5, last)) for c in clusters]
                    await until(lambda: processed(a, ids))
                    assert set().union(*seen.values()) == {"first"}
                with a.transaction() as session:
                    assert {repo.get_cluster(session, org.id, c).pod_count for c in clusters} == {7}


async def test_a_lost_lock_connection_is_made_again_and_the_partitions_taken_again() -> None:
    with postgres_database() as db:
        async with (
            nats_stream() as queue_url,
            worker_process(BackendSettings(db=db, queue=queue_url)) as (_, workers),
            workers.running(1),
        ):
            locks = workers.partition_locks
            assert locks is not None and workers.partitions is not None
            await until(lambda: len(owned(workers)) == PARTITIONS)
            partitions = workers.partitions
            rounds = partitions.rounds
            with psycopg.connect(store_engine.libpq_url(db) or "", autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks"
                    " WHERE locktype = 'advisory' AND classid::bigint = %s",
                    (locks.namespace,),
                )
                await until(lambda: partitions.rounds > rounds + 3)
                held = admin.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND classid::bigint = %s AND objid::bigint < %s",
                    (locks.namespace, PARTITIONS),
                ).fetchone()
            assert held is not None and held[0] == PARTITIONS
            assert workers.stalled() is None


async def test_the_unpartitioned_consumer_of_earlier_versions_is_removed_with_its_jobs() -> None:
    """A stream made before partitions holds one consumer of every subject (a work-queue stream takes
    no overlapping ones): it goes, with the jobs on its subjects (the sweep queues their pushes again)."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StreamConfig
    from nats.js.errors import NotFoundError

    async with nats_stream() as queue_url:
        stream = queue_url.split("stream=")[1]
        subject = stream.lower().replace("_", "-")
        connection = await nats.connect(NATS_SERVER)
        try:
            js = connection.jetstream()
            await js.add_stream(
                StreamConfig(name=stream, subjects=[f"{subject}.>"], retention=RetentionPolicy.WORK_QUEUE)
            )
            await js.add_consumer(stream, ConsumerConfig(durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT))
            await js.publish(f"{subject}.cluster-1", Job(1, "cluster-1", "m1").encode())
            queue = await open_queue(queue_url)
            try:
                with pytest.raises(NotFoundError):
                    await js.consumer_info(stream, DURABLE)
                assert await queue.pending() == 0
                assert queue.partitions == PARTITIONS
                info = await js.consumer_info(stream, f"{DURABLE}-p3")
                assert info.config.filter_subject == f"{subject}.p3.>"
                await queue.publish(Job(2, "cluster-1", "m2"))
                assert await queue.pending() == 1
            finally:
                await queue.close()
        finally:
            await connection.close()


def test_partition_locks_are_per_stream() -> None:
    assert namespace_of("SHIPSHAPE_PUSHES") != namespace_of("OTHER")
    assert 0 <= namespace_of("SHIPSHAPE_PUSHES") < 2**31
    assert AdvisoryLocks("postgresql://x", 5).connected is False
