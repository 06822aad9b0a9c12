"""NATS JetStream as the work queue, with PostgreSQL: workers share one durable consumer, and a push
taken by a worker that dies before acking is delivered again and applied once."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from shipshape.backend import service
from shipshape.backend.queue import Job, NatsQueue, Verdict, open_queue
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import repository as repo
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

                async def dies_holding_it(job: Job) -> Verdict:
                    taken.set()
                    await asyncio.Event().wait()  # never acks: killed below
                    return Verdict.DONE

                await backend.queue.publish(Job(recorded.push_id, cluster.id, "m1"))
                doomed = asyncio.create_task(backend.queue.consume(dies_holding_it))
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
