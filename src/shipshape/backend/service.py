"""Putting the backend together: database (migrated), queue, API, workers; and serving it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry

from shipshape.backend import analysis, series, worker_health
from shipshape.backend.app import ACCEPT_POOL, Backend, Metrics, RateLimiter, create_app
from shipshape.backend.partitions import AdvisoryLocks, namespace_of
from shipshape.backend.queue import MemoryQueue, NatsQueue, open_queue
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import engine as store_engine
from shipshape.backend.store.objects import ObjectsCache
from shipshape.backend.worker_health import WorkerMetrics
from shipshape.backend.workers import Workers

LOG = logging.getLogger("shipshape.backend")
# Allocations between two young collections of the cyclic garbage collector in the API and worker
# processes (Python's default is 700).
GC_THRESHOLD = 50_000


def now() -> datetime:
    return datetime.now(UTC)


async def build(settings: BackendSettings) -> Backend:
    """The backend's parts, with the database migrated to the newest schema (unless `settings.migrate`
    is off: a migrations Job does it, and `/readyz` tells when it is done)."""
    engine = store_engine.create(settings.db)
    if settings.migrate:
        await asyncio.to_thread(store_engine.migrate, engine)
        LOG.info("database schema at %s", await asyncio.to_thread(store_engine.revision, engine))
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


def workers_for(backend: Backend, metrics: WorkerMetrics | None = None) -> Workers:
    """The workers over `backend`'s database and queue; their metrics on `metrics` (by default on the
    API's registry, which the in-process workers share with it)."""
    # The notes of the process's own applies take up to a quarter of the copy's room on top of it (more
    # while the copy leaves room unused).
    kept = ObjectsCache(backend.settings.kept_objects, max_noted=backend.settings.kept_objects // 4)
    return Workers(
        backend.sessions,
        backend.queue,
        backend.now,
        sweep_seconds=backend.settings.sweep_seconds,
        retention=timedelta(hours=backend.settings.retention_hours),
        analysis_seconds=backend.settings.analysis_seconds,
        analysis_nice=backend.settings.analysis_nice,
        series=series.Recorder(
            backend.sessions,
            backend.now,
            minute_window=timedelta(days=backend.settings.series_minute_days),
            retention=timedelta(days=backend.settings.series_retention_days),
            usage_fresh=backend.settings.usage_fresh,
            kept=kept,
        ),
        efficiency=analysis.EfficiencySettings(
            step_seconds=backend.settings.usage_step_seconds,
            window_hours=backend.settings.usage_window_hours,
            min_history_hours=backend.settings.usage_min_history_hours,
            strategy=backend.settings.usage_strategy,
        ),
        usage_retention=timedelta(hours=backend.settings.usage_retention_hours),
        usage_analysis_seconds=backend.settings.usage_analysis_seconds,
        metrics=metrics or WorkerMetrics(backend.metrics.registry),
        kept=kept,
        partition_locks=_partition_locks(backend),
    )


def _partition_locks(backend: Backend) -> AdvisoryLocks | None:
    """The locks by which worker processes share the NATS stream's partitions: on PostgreSQL only
    (without them each process takes every partition)."""
    libpq = store_engine.libpq_url(backend.settings.db)
    if libpq is None or not isinstance(backend.queue, NatsQueue):
        return None
    return AdvisoryLocks(libpq, namespace_of(backend.queue.stream))


def uvicorn_options(settings: BackendSettings) -> dict[str, Any]:
    """How uvicorn serves the API: address, TLS when configured, logging left to the process's own
    handlers (`cli/logs.py`; the API logs each request itself)."""
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": "warning",
        "access_log": False,
        "log_config": None,
    }
    if settings.ssl_certfile is not None:
        options.update(ssl_certfile=str(settings.ssl_certfile), ssl_keyfile=str(settings.ssl_keyfile))
    return options


def tune_gc() -> None:
    """Set the garbage collector for a process that parses and stores pushes (called once started).

    A full snapshot of 3,000 pods parses into about a million small objects, almost none of them in
    reference cycles; with the default thresholds the collector ran several full collections, each
    walking every live object, per snapshot: about half of a worker's time storing one, and of the
    API's accepting one (bench/ingest.py). Young collections are spaced by `GC_THRESHOLD`
    allocations, and what is alive once the process started (modules, the app, the engine) is
    moved out of the collector's sight.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


async def serve_api(settings: BackendSettings, ready: asyncio.Event | None = None) -> None:
    """The API under uvicorn; with the in-process queue, the workers run in this process too."""
    backend = await build(settings)
    backend.accepting_async = store_engine.accept_connections(settings.db, size=ACCEPT_POOL)
    tune_gc()
    in_process = isinstance(backend.queue, MemoryQueue)

    @contextlib.asynccontextmanager
    async def run_workers() -> AsyncIterator[None]:
        async with workers_for(backend).running(settings.workers):
            yield

    app = create_app(backend, run_workers=run_workers if in_process else None)
    config = uvicorn.Config(app, **uvicorn_options(settings))
    server = _Server(config, backend)
    try:
        await server.serve()
    finally:
        await backend.close()


async def run_workers(settings: BackendSettings, stop: asyncio.Event) -> None:
    """`shipshape worker`: consumers of a shared queue (NATS), until `stop` is set. Without
    `settings.migrate` they start once the schema is current (the migrations Job may still run)."""
    backend = await build(settings)
    tune_gc()
    workers = workers_for(backend, WorkerMetrics())
    health = None
    if settings.metrics_port is not None:
        app = worker_health.health_app(
            workers.metrics, _alive(workers, backend), _worker_ready(workers, backend, stop)
        )
        health = worker_health.health_server(app, settings.host, settings.metrics_port)
    serving = asyncio.create_task(health.serve()) if health is not None else None
    try:
        if not settings.migrate and not await _schema_current(backend, stop):
            return
        async with workers.running(settings.workers):
            await stop.wait()
    finally:
        if health is not None and serving is not None:
            health.should_exit = True
            await serving
        await backend.queue.close()
        backend.engine.dispose()


def _alive(workers: Workers, backend: Backend) -> worker_health.Check:
    """Liveness: every task of the workers still runs (a consumer that ended takes no more messages)."""

    async def check() -> str | None:
        return workers.stalled()

    return check


def _worker_ready(workers: Workers, backend: Backend, stop: asyncio.Event) -> worker_health.Check:
    """Readiness: not stopping, consuming, the database answers at the newest schema, and the queue
    is connected."""

    async def check() -> str | None:
        if stop.is_set():
            return "stopping"
        if not workers.consuming:
            return "not consuming yet (waiting for the schema)"
        try:
            if not await asyncio.to_thread(store_engine.is_current, backend.engine):
                return "schema not migrated"
        except Exception as error:  # any database failure means "not ready", with its type only
            return f"database: {type(error).__name__}"
        if isinstance(backend.queue, NatsQueue) and not backend.queue.connected:
            return "queue not connected"
        return None

    return check


async def _schema_current(backend: Backend, stop: asyncio.Event, every: float = 2.0) -> bool:
    """Wait until the database is at the newest migration; False if `stop` came first."""
    while not stop.is_set():
        try:
            if await asyncio.to_thread(store_engine.is_current, backend.engine):
                return True
            LOG.info("waiting for the database schema to be migrated (shipshape admin migrate)")
        except Exception as error:  # the database is not reachable yet
            LOG.warning("database not reachable: %s", type(error).__name__)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
    return False


class _Server(uvicorn.Server):
    """uvicorn's server that tells the handlers when it begins to stop (a signal), so that long polls
    end at once instead of holding the graceful shutdown for their whole wait."""

    def __init__(self, config: uvicorn.Config, backend: Backend) -> None:
        super().__init__(config)
        self.backend = backend

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.backend.stopping.set()
        super().handle_exit(sig, frame)


class EmbeddedBackend:
    """The backend (API and in-process workers) on its own thread and event loop, inside another
    program (the demo). uvicorn installs no signal handlers off the main thread, so the host keeps
    its own; `stop()` ends it gracefully."""

    def __init__(self, settings: BackendSettings) -> None:
        self.settings = settings
        self.url = f"http://{settings.host}:{settings.port}"
        self._server: uvicorn.Server | None = None
        self._backend: Backend | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="shipshape-backend", daemon=True)

    def start(self, timeout: float = 60.0) -> str:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"the backend did not start within {timeout:.0f} s")
        if self._failure is not None:
            raise RuntimeError(f"the backend did not start: {self._failure}")
        return self.url

    def stop(self) -> None:
        if self._backend is not None:
            self._backend.stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(30)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported to start(); the thread ends
            self._failure = error
            self._ready.set()

    async def _main(self) -> None:
        backend = await build(self.settings)

        @contextlib.asynccontextmanager
        async def run_workers() -> AsyncIterator[None]:
            async with workers_for(backend).running(self.settings.workers):
                yield

        in_process = isinstance(backend.queue, MemoryQueue)
        app = create_app(backend, run_workers=run_workers if in_process else None)
        config = uvicorn.Config(app, **uvicorn_options(self.settings))
        self._backend = backend
        self._server = _Server(config, backend)
        serving = asyncio.create_task(self._server.serve())
        while not self._server.started and not serving.done():  # noqa: ASYNC110 (uvicorn has only a flag)
            await asyncio.sleep(0.02)
        self._ready.set()
        try:
            await serving
        finally:
            await backend.published()
            await backend.queue.close()
            backend.engine.dispose()
