"""What a worker process tells the outside: Prometheus metrics, liveness and readiness.

`shipshape worker --metrics-port N` serves `/metrics`, `/healthz` and `/readyz` on that port (the
deployment's probes and the Prometheus scrape use them). With the in-process queue the workers run
in the API process and their metrics join the API's own `/metrics`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field

import uvicorn
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

# Applying one push: milliseconds for a delta, up to seconds for a large snapshot.
_APPLY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# From the queue taking a job (or an analysis falling due) until a worker starts on it.
_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class WorkerMetrics:
    """The workers' Prometheus series, on `registry` (a fresh one unless given)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.messages = Counter(
            "shipshape_worker_messages_total",
            "Queue messages handled, by result (applied, superseded, stale, duplicate, invalid, gone, "
            "retry: the push it follows has not been applied yet, failed: an error, delivered again)",
            ["result"],
            registry=self.registry,
        )
        self.redelivered = Counter(
            "shipshape_worker_redelivered_total",
            "Queue messages delivered more than once (a worker died or failed before its ack, or a retry)",
            registry=self.registry,
        )
        self.apply_seconds = Histogram(
            "shipshape_worker_apply_seconds",
            "Applying a push (and what was ready after it) in one transaction",
            buckets=_APPLY_BUCKETS,
            registry=self.registry,
        )
        self.analysis_seconds = Histogram(
            "shipshape_worker_analysis_seconds",
            "One analysis of a cluster, by analysis (spot, efficiency)",
            ["analysis"],
            buckets=_APPLY_BUCKETS,
            registry=self.registry,
        )
        self.analyses = Counter(
            "shipshape_worker_analyses_total",
            "Analyses by analysis and result (done, skipped: another worker analysed the same state, failed)",
            ["analysis", "result"],
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "shipshape_worker_queue_wait_seconds",
            "From the queue taking a message until a worker starts on it",
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.queue_pending = Gauge(
            "shipshape_worker_queue_pending",
            "Messages waiting in the queue or delivered and not acknowledged yet",
            registry=self.registry,
        )
        self.partitions_owned = Gauge(
            "shipshape_worker_partitions_owned",
            "Partitions of the NATS stream this process consumes (its share: the partitions over the "
            "worker processes, rounded up; every partition without PostgreSQL)",
            registry=self.registry,
        )
        self.analyses_waiting = Gauge(
            "shipshape_worker_analyses_waiting",
            "Clusters whose state changed and whose analysis has not run yet in this process",
            registry=self.registry,
        )


Check = Callable[[], Awaitable[str | None]]


def health_app(metrics: WorkerMetrics, alive: Check, ready: Check) -> Starlette:
    """`/metrics`, `/healthz` (`alive()`: None when the process does its work, else why not) and
    `/readyz` (`ready()`: None when the database and the queue answer, else why not)."""

    async def metrics_endpoint(_: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_: Request) -> JSONResponse:
        return _answer(await alive(), "ok")

    async def readyz(_: Request) -> JSONResponse:
        return _answer(await ready(), "ready")

    return Starlette(
        routes=[
            Route("/metrics", metrics_endpoint),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
        ]
    )


def _answer(problem: str | None, good: str) -> JSONResponse:
    if problem is None:
        return JSONResponse({"status": good})
    return JSONResponse({"status": "unavailable", "reason": problem}, status_code=503)


class HealthServer(uvicorn.Server):
    """uvicorn serving the health app beside the workers, in their event loop. The process's own
    signal handlers stay in place (the worker stops on SIGTERM after finishing its messages; this
    server is stopped by it)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def health_server(app: Starlette, host: str, port: int) -> HealthServer:
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, log_config=None)
    return HealthServer(config)
