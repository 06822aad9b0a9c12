"""NATS JetStream as the work queue, with PostgreSQL: workers share the durable consumers, and a push
taken by a worker that dies before acking is delivered again and applied once."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from shipshape.backend import service
from shipshape.backend.queue import Job, NatsQueue, Verdict, open_queue
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import repository as repo
from shipshape.backend.worker_health import WorkerMetrics
from tests.integration.backend.conftest import delta, harness, nats_stream, pod, postgres_database, snapshot


@pytest.mark.integration
async def test_pushes_through_nats_and_postgresql() -> None:
    with postgres_database() as db:
        async with nats_stream() as queue_url, harness(BackendSettings(db=db, queue=queue_url)) as h:
            assert isinstance(h.backend.queue, NatsQueue)
            t = h.tenant("acme")
            assert (await h.push(t.agent_token, snapshot(1, 5, 20))).status_code == 202
            for seq in range(2, 32):
                change = [("ADDED", "pods", pod(f"extra-{seq}", "n0"))]
                assert (await h.push(t.agent_token, delta(seq, seq - 1, change))).status_code == 202
            await h.settled(t.cluster_id, 31)
            with h.backend.transaction() as session:
                cluster = repo.get_cluster(session, t.org_id, t.cluster_id)
                assert (cluster.node_count, cluster.pod_count) == (5, 50)
                outcomes = [p.outcome for p in session.query(repo.Push).all()]
            assert outcomes == ["applied"] * 31


@pytest.mark.integration
async def test_a_worker_killed_mid_message_is_redelivered_and_applied_once() -> None:
    with postgres_database() as db:
        async with nats_stream() as queue_url:
            backend = await service.build(BackendSettings(db=db, queue=queue_url))
            await backend.queue.close()
            # Short ack wait so the redelivery comes quickly.
            backend.queue = await open_queue(queue_url, ack_wait=1.0)
            try:
                with backend.transaction() as session:
                    org, _ = repo.create_organization(session, "acme", backend.now())
                    cluster, _ = repo.create_cluster(session, org.id, "prod", backend.now())
                    body = __import__("gzip").compress(__import__("orjson").dumps(snapshot(1, 1, 2)))
                    recorded = repo.record_push(
                        session, cluster.id, "k1", "shipshape.dev/snapshot/v1", 1, body, backend.now()
                    )
                taken = asyncio.Event()

                async def dies_holding_it(jobs: list[Job]) -> list[Verdict]:
                    taken.set()
                    await asyncio.Event().wait()  # never acks: killed below
                    return [Verdict.DONE for _ in jobs]

                await backend.queue.publish(Job(recorded.push_id, cluster.id, "m1"))
                doomed = asyncio.create_task(backend.queue.consume_batches(dies_holding_it))
                await asyncio.wait_for(taken.wait(), 10)
                doomed.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await doomed

                workers = service.workers_for(backend)
                async with workers.running(2):
                    for _ in range(200):
                        with backend.transaction() as session:
                            push = session.get(repo.Push, recorded.push_id)
                            if push is not None and push.processed_at is not None:
                                break
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(1.5)  # longer than the ack wait: no second delivery applies it
                assert workers.processed == 1
                with backend.transaction() as session:
                    push = session.get(repo.Push, recorded.push_id)
                    assert push is not None and push.outcome == "applied"
                    assert repo.get_cluster(session, org.id, cluster.id).pod_count == 2
            finally:
                await backend.queue.close()
                backend.engine.dispose()


@pytest.mark.integration
async def test_a_worker_killed_after_committing_a_batch_before_acking_it_applies_nothing_twice() -> None:
    """A fetched batch (two clusters, a snapshot and deltas) applied in one transaction per cluster by
    a worker that dies before its acks: every message comes again, each push is found processed, and
    the state is that of one application."""
    import gzip

    import orjson

    with postgres_database() as db:
        async with nats_stream() as queue_url:
            backend = await service.build(BackendSettings(db=db, queue=queue_url))
            await backend.queue.close()
            backend.queue = await open_queue(queue_url, ack_wait=1.0)
            try:
                jobs = []
                with backend.transaction() as session:
                    org, _ = repo.create_organization(session, "acme", backend.now())
                    clusters = [repo.create_cluster(session, org.id, n, backend.now())[0] for n in ("a", "b")]
                    for cluster in clusters:
                        bodies = [snapshot(1, 1, 2)] + [
                            delta(s, s - 1, [("ADDED", "pods", pod(f"x{s}", "n0"))]) for s in range(2, 6)
                        ]
                        for body in bodies:
                            recorded = repo.record_push(
                                session,
                                cluster.id,
                                f"k{body['sequence']}",
                                body["schema"],
                                body["sequence"],
                                gzip.compress(orjson.dumps(body)),
                                backend.now(),
                            )
                            jobs.append(Job(recorded.push_id, cluster.id, f"m{recorded.push_id}"))
                for job in jobs:
                    await backend.queue.publish(job)
                doomed_workers = service.workers_for(backend, WorkerMetrics())
                committed = asyncio.Event()
                taken: list[Job] = []

                async def dies_after_commit(batch: list[Job]) -> list[Verdict]:
                    # A batch per partition: the two clusters' may come apart.
                    taken.extend(batch)
                    for cluster in clusters:
                        mine = [job for job in batch if job.cluster_id == cluster.id]
                        if mine:
                            await asyncio.to_thread(doomed_workers.apply_cluster, mine)
                    if doomed_workers.processed == len(jobs):
                        committed.set()
                    await asyncio.Event().wait()  # never acks: killed below
                    return []

                doomed = asyncio.create_task(backend.queue.consume_batches(dies_after_commit))
                await asyncio.wait_for(committed.wait(), 20)
                doomed.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await doomed
                assert len(taken) == len(jobs)  # one fetch of each partition took them all
                assert doomed_workers.processed == len(jobs)

                workers = service.workers_for(backend)
                async with workers.running(2):
                    for _ in range(200):
                        if workers.metrics.messages.labels("duplicate")._value.get() >= len(jobs):
                            break
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(1.5)  # longer than the ack wait: each came once more, no more
                assert workers.processed == 0
                assert workers.metrics.messages.labels("duplicate")._value.get() == len(jobs)
                assert await backend.queue.pending() == 0
                with backend.transaction() as session:
                    outcomes = [p.outcome for p in session.query(repo.Push).all()]
                    counts = [repo.get_cluster(session, org.id, c.id).pod_count for c in clusters]
                assert outcomes == ["applied"] * len(jobs)
                assert counts == [6, 6]
            finally:
                await backend.queue.close()
                backend.engine.dispose()


@pytest.mark.integration
async def test_a_push_named_twice_in_one_batch_is_applied_once() -> None:
    """Its own job and the sweep's in one batch: one transaction applies the push, the other job
    counts as a duplicate, and both are done."""
    import gzip

    import orjson

    with postgres_database() as db:
        backend = await service.build(BackendSettings(db=db))
        try:
            with backend.transaction() as session:
                org, _ = repo.create_organization(session, "acme", backend.now())
                cluster, _ = repo.create_cluster(session, org.id, "prod", backend.now())
                body = gzip.compress(orjson.dumps(snapshot(1, 1, 2)))
                recorded = repo.record_push(
                    session, cluster.id, "k1", "shipshape.dev/snapshot/v1", 1, body, backend.now()
                )
            workers = service.workers_for(backend, WorkerMetrics())
            jobs = [Job(recorded.push_id, cluster.id, "m1"), Job(recorded.push_id, cluster.id, "sweep:1")]
            assert await workers.handle_batch(jobs) == [Verdict.DONE, Verdict.DONE]
            assert workers.processed == 1
            assert workers.metrics.messages.labels("duplicate")._value.get() == 1
        finally:
            await backend.queue.close()
            backend.engine.dispose()
