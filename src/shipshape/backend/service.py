"""Putting the backend together: database (migrated), queue, API, workers; and serving it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import uvicorn
from prometheus_client import CollectorRegistry

from shipshape.backend.app import Backend, Metrics, RateLimiter, create_app
from shipshape.backend.queue import MemoryQueue, open_queue
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import engine as store_engine
from shipshape.backend.workers import Workers

LOG = logging.getLogger("shipshape.backend")


def now() -> datetime:
    return datetime.now(UTC)


async def build(settings: BackendSettings) -> Backend:
    """The backend's parts, with the database migrated to the newest schema."""
    engine = store_engine.create(settings.db)
    await asyncio.to_thread(store_engine.migrate, engine)
    queue = await open_queue(settings.queue)
    return Backend(
        settings=settings,
        engine=engine,
        sessions=store_engine.sessions(engine),
        queue=queue,
        metrics=Metrics(CollectorRegistry()),
        limiter=RateLimiter(settings.rate_limit_per_minute),
        now=now,
    )


def workers_for(backend: Backend) -> Workers:
    return Workers(
        backend.sessions,
        backend.queue,
        backend.now,
        sweep_seconds=backend.settings.sweep_seconds,
        retention=timedelta(hours=backend.settings.retention_hours),
    )


async def serve_api(settings: BackendSettings, ready: asyncio.Event | None = None) -> None:
    """The API under uvicorn; with the in-process queue, the workers run in this process too."""
    backend = await build(settings)
    in_process = isinstance(backend.queue, MemoryQueue)

    @contextlib.asynccontextmanager
    async def run_workers() -> AsyncIterator[None]:
        async with workers_for(backend).running(settings.workers):
            yield

    app = create_app(backend, run_workers=run_workers if in_process else None)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    try:
        await server.serve()
    finally:
        await backend.queue.close()
        backend.engine.dispose()


async def run_workers(settings: BackendSettings, stop: asyncio.Event) -> None:
    """`shipshape worker`: consumers of a shared queue (NATS), until `stop` is set."""
    backend = await build(settings)
    try:
        async with workers_for(backend).running(settings.workers):
            await stop.wait()
    finally:
        await backend.queue.close()
        backend.engine.dispose()
