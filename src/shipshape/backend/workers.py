"""Workers: take a queued push, apply it to the cluster's stored state in one transaction, ack.

A push is applied exactly once whatever the queue does (the push row records that it was processed,
in the same transaction as its effect), so redelivery after a crash is harmless. A delta that arrives
before the push it follows is handed back for later. The sweep re-queues pushes that were stored but
never queued (the API process died between its commit and its publish), and retention removes raw
pushes once processed and old.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from shipshape.backend.queue import Job, MemoryQueue, NatsQueue, Verdict
from shipshape.backend.store import repository as repo

LOG = logging.getLogger("shipshape.backend.workers")


@dataclass
class Workers:
    sessions: sessionmaker[Session]
    queue: MemoryQueue | NatsQueue
    now: Callable[[], datetime]
    sweep_seconds: float = 10.0
    retention: timedelta = timedelta(hours=72)
    processed: int = 0

    def apply(self, job: Job) -> Verdict:
        """Apply one push (blocking: runs in a thread)."""
        try:
            with self.sessions.begin() as session:
                outcome = repo.apply_pushes(session, job.push_id, self.now())
        except repo.NotYet as waiting:
            LOG.debug("push %s: %s", job.push_id, waiting)
            return Verdict.RETRY
        self.processed += outcome == "applied"
        LOG.debug("push %s of cluster %s: %s", job.push_id, job.cluster_id, outcome)
        return Verdict.DONE

    async def handle(self, job: Job) -> Verdict:
        return await asyncio.to_thread(self.apply, job)

    def sweep_once(self) -> list[Job]:
        """Jobs for pushes stored but not processed; removes expired raw pushes."""
        with self.sessions.begin() as session:
            now = self.now()
            repo.expire_pushes(session, now - self.retention)
            pending = repo.unprocessed_pushes(session, now - timedelta(seconds=self.sweep_seconds))
            clusters = repo.push_clusters(session, pending)
        return [Job(push_id, clusters[push_id], f"sweep:{push_id}") for push_id in pending]

    async def sweep(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_seconds)
            try:
                jobs = await asyncio.to_thread(self.sweep_once)
                for job in jobs:
                    await self.queue.publish(job)
            except Exception:  # the database or queue is away: try again next round
                LOG.warning("sweep failed; retrying in %.0f s", self.sweep_seconds, exc_info=True)

    @contextlib.asynccontextmanager
    async def running(self, consumers: int) -> AsyncIterator[Workers]:
        """`consumers` tasks taking jobs, plus the sweep, until the context ends."""
        tasks = [asyncio.create_task(self.queue.consume(self.handle)) for _ in range(consumers)]
        tasks.append(asyncio.create_task(self.sweep()))
        try:
            yield self
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
