"""The backend's HTTP API (FastAPI): `/api/v1`, health, metrics.

Endpoints are thin: authenticate, validate, call the repository in one transaction, answer. A push is
answered 202 once it is committed and queued; the workers apply it. Domain errors become HTTP in one
place (`_domain_errors`); no handler leaks a database or queue exception.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import orjson
import psycopg
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import Connection, Engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shipshape.backend import auth, dashboard, series, series_api, summary
from shipshape.backend.queue import Job, MemoryQueue, NatsQueue, QueueError
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import engine as store_engine
from shipshape.backend.store import repository as repo
from shipshape.contracts import compression
from shipshape.contracts import push as push_contract
from shipshape.contracts import usage as usage_contract
from shipshape.contracts.instructions import InstructionEnvelope, InstructionOutcome, Recommendation

LOG = logging.getLogger("shipshape.backend.api")
_IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# The push route's headers, as FastAPI documents header parameters (the route reads them itself).
_PUSH_HEADERS: list[dict[str, Any]] = [
    {
        "name": "Idempotency-Key",
        "in": "header",
        "required": True,
        "schema": {"type": "string", "title": "Idempotency-Key"},
    },
    {
        "name": "authorization",
        "in": "header",
        "required": False,
        "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Authorization"},
    },
    {
        "name": "content-encoding",
        "in": "header",
        "required": False,
        "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Content-Encoding"},
        "description": "zstd (what the agent sends), gzip, or identity",
    },
]
_VALIDATION_ERROR: dict[str, Any] = {
    "description": "Validation Error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}},
}
# Jobs an API process publishes after answering their pushes, at most (`Backend.publish_later`).
PUBLISHING = 256
# Connections an API process keeps for accepting pushes (PostgreSQL), beside the engine's pool: one
# is held for a statement of about a millisecond.
ACCEPT_POOL = 8
# A push at most this large as sent, from an agent whose token this process verified lately, is
# checked on the event loop (a delta takes tens of microseconds) and stored through the asyncio pool
# (`Backend.accepting_async`): the hop to the thread pool and back was a fifth of the API's CPU per
# delta. Larger ones (a snapshot takes milliseconds to check) go to the thread pool.
INLINE_PUSH_BYTES = 64 * 1024
# ... and inflates to at most this much: a small body that inflates to more (up to
# `max_inflated_bytes`) would hold the event loop, so it goes to the thread pool after all.
INLINE_INFLATED_BYTES = 1024 * 1024


class _NotInline(Exception):
    """A push too large once inflated to be checked on the event loop."""


# ---- wire schemas of the API (the push itself is a contract: shipshape.contracts.push) -------------


class ClusterOut(BaseModel):
    id: str
    name: str
    node_count: int
    pod_count: int
    last_seen: datetime | None
    created_at: datetime
    applied_sequence: int | None


class ClusterCreate(BaseModel):
    name: str = Field(pattern=_NAME.pattern)


class ClusterCreated(BaseModel):
    cluster_id: str
    agent_token: str


class AgentTokenOut(BaseModel):
    agent_token: str


class PushAccepted(BaseModel):
    push_id: int
    duplicate: bool


class ErrorOut(BaseModel):
    detail: str


class RecommendationOut(BaseModel):
    id: str
    cluster_id: str
    kind: str
    title: str
    status: str
    monthly_savings_usd: float | None
    seconds_saved: float | None
    confidence: float
    detail: str | None
    recommendation: Recommendation
    created_at: datetime
    updated_at: datetime


class UsageOut(BaseModel):
    namespace: str
    workload_kind: str
    workload_name: str
    container: str
    first_sample_at: datetime
    last_sample_at: datetime
    samples: int
    buckets: int
    pods_last: int
    cpu_max_cores: float
    memory_max_bytes: float
    memory_max_at: datetime


class Approved(BaseModel):
    recommendation_id: str
    instruction_id: str
    status: str


@dataclass
class Metrics:
    registry: CollectorRegistry

    def __post_init__(self) -> None:
        self.requests = Counter(
            "shipshape_backend_requests_total",
            "API requests by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.pushes = Counter(
            "shipshape_backend_pushes_total",
            "Pushes by schema and result",
            ["schema", "result"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "shipshape_backend_request_seconds",
            "API request latency by route",
            ["route"],
            registry=self.registry,
        )


class RateLimiter:
    """A token bucket per credential id, in this process (each API replica limits on its own)."""

    def __init__(self, per_minute: int, clock: Any = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                return False
            self._buckets[key] = (tokens - 1.0, now)
            return True


@dataclass
class Backend:
    """What the API's handlers share: settings, database, queue, metrics, limiter."""

    settings: BackendSettings
    engine: Engine
    sessions: sessionmaker[Session]
    queue: MemoryQueue | NatsQueue
    metrics: Metrics
    limiter: RateLimiter
    # Wall-clock time for stored timestamps (injected: tests pass their own).
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # Set when the server begins to stop: long polls answer at once instead of holding it up.
    stopping: threading.Event = field(default_factory=threading.Event)
    # Agent tokens this process verified lately (the push route's; see `_pushing_agent`).
    verified: auth.Verified[repo.AgentPrincipal] = field(default_factory=auth.Verified)
    # Jobs of accepted pushes being published after their 202 (`publish_later`).
    publishing: set[asyncio.Task[None]] = field(default_factory=set)
    # The asyncio connections small pushes are stored through (PostgreSQL, set by the server that runs
    # the API: `service.serve_api`; None: every push is stored from the thread pool).
    accepting_async: store_engine.AcceptConnections | None = None

    async def publish_later(self, job: Job) -> None:
        """Queue the job of a committed push without holding its answer: a push is accepted once it
        is committed, and one never queued (the process stopped first, or the queue refused it) is
        queued by the workers' sweep. Beyond `PUBLISHING` jobs in flight the caller waits for this
        one (the queue is slower than the pushes: no unbounded backlog in memory)."""
        if len(self.publishing) >= PUBLISHING:
            await _publish(self.queue, job)
            return
        task = asyncio.create_task(_publish(self.queue, job))
        self.publishing.add(task)
        task.add_done_callback(self.publishing.discard)

    async def close(self) -> None:
        """Publish the jobs in flight, then close the queue and the database engines."""
        await self.published()
        await self.queue.close()
        if self.accepting_async is not None:
            await self.accepting_async.close()
        self.engine.dispose()

    async def published(self) -> None:
        """Wait for the jobs being published (before the queue is closed)."""
        while self.publishing:
            await asyncio.gather(*self.publishing, return_exceptions=True)

    @functools.cached_property
    def accepting(self) -> Engine:
        """The engine for accepting pushes. On PostgreSQL a pool of its own, in autocommit
        (`repo.accept_push` is one statement: no round trips to begin and commit it), whose connections
        are not pinged when taken (a round trip per push, an eighth of a delta's CPU): `_accept` tries
        once more on a connection found dropped. Disposed with `engine`."""
        if self.engine.dialect.name != "postgresql":
            return self.engine
        accepting = store_engine.create(
            self.settings.db, pre_ping=False, pool_size=ACCEPT_POOL, max_overflow=0, autocommit=True
        )
        event.listen(self.engine, "engine_disposed", lambda _: accepting.dispose())
        return accepting

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with self.sessions.begin() as session:
            yield session


def _backend(request: Request) -> Backend:
    backend: Backend = request.app.state.backend
    return backend


def _principal(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> repo.UserPrincipal | repo.AgentPrincipal:
    presented = _presented(authorization)
    backend = _backend(request)
    with backend.transaction() as session:
        return _admitted(request, backend, session, presented)


def _presented(authorization: str | None) -> auth.PresentedCredential:
    presented = auth.bearer(authorization)
    if presented is None:
        raise HTTPException(
            401, "missing or malformed bearer credential", headers={"WWW-Authenticate": "Bearer"}
        )
    return presented


def _admitted(
    request: Request, backend: Backend, session: Session, presented: auth.PresentedCredential
) -> repo.UserPrincipal | repo.AgentPrincipal:
    """The credential's principal, if it is live and within its rate limit (401 or 429 otherwise)."""
    principal = repo.authenticate(session, presented)
    if principal is None:
        raise HTTPException(401, "invalid or revoked credential", headers={"WWW-Authenticate": "Bearer"})
    _limited(request, backend, presented, principal)
    return principal


def _limited(
    request: Request,
    backend: Backend,
    presented: auth.PresentedCredential,
    principal: repo.UserPrincipal | repo.AgentPrincipal,
) -> None:
    """429 past the credential's rate limit."""
    request.state.principal = principal  # for the request log
    if not backend.limiter.allow(presented.id):
        raise HTTPException(429, "rate limit exceeded", headers={"Retry-After": "1"})


def _user(principal: Annotated[Any, Depends(_principal)]) -> repo.UserPrincipal:
    if not isinstance(principal, repo.UserPrincipal):
        raise HTTPException(403, "this endpoint needs a user API key")
    return principal


def _agent(principal: Annotated[Any, Depends(_principal)]) -> repo.AgentPrincipal:
    if not isinstance(principal, repo.AgentPrincipal):
        raise HTTPException(403, "this endpoint needs an agent token")
    return principal


def _recommendation_out(row: Any) -> RecommendationOut:
    return RecommendationOut(
        id=row.id,
        cluster_id=row.cluster_id,
        kind=row.kind,
        title=row.title,
        status=row.status,
        monthly_savings_usd=row.monthly_savings_usd,
        seconds_saved=row.seconds_saved,
        confidence=row.confidence,
        detail=row.detail,
        recommendation=Recommendation.model_validate(row.body),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _usage_out(row: Any) -> UsageOut:
    return UsageOut(
        namespace=row.namespace,
        workload_kind=row.workload_kind,
        workload_name=row.workload_name,
        container=row.container,
        first_sample_at=repo.as_utc(row.first_sample_at),
        last_sample_at=repo.as_utc(row.last_sample_at),
        samples=row.samples,
        buckets=row.buckets,
        pods_last=row.pods_last,
        cpu_max_cores=row.cpu_max,
        memory_max_bytes=row.memory_max,
        memory_max_at=repo.as_utc(row.memory_max_at),
    )


def _cluster_out(cluster: Any) -> ClusterOut:
    return ClusterOut(
        id=cluster.id,
        name=cluster.name,
        node_count=cluster.node_count,
        pod_count=cluster.pod_count,
        last_seen=cluster.last_seen,
        created_at=cluster.created_at,
        applied_sequence=cluster.applied_sequence,
    )


async def _read_limited(request: Request, limit: int) -> bytes:
    """The body, refusing (413) as soon as it passes `limit` bytes (a declared length is checked first)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"push larger than {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"push larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _publish(queue: MemoryQueue | NatsQueue, job: Job) -> None:
    try:
        await queue.publish(job)
    except QueueError as error:
        # Committed, so accepted: the workers' sweep queues it once the queue is back.
        LOG.warning("push %s stored but not queued: %s", job.push_id, error)


def _pushing_agent(
    request: Request, backend: Backend, presented: auth.PresentedCredential
) -> repo.AgentPrincipal:
    """The agent of a push (401, 429 or 403 as `_admitted` and `_agent` answer). An agent token this
    process verified lately is not looked up again: the accept's statement checks that it is still
    live (`repo.accept_push`), so a revoked one stores nothing and gets 401 all the same."""
    principal: repo.UserPrincipal | repo.AgentPrincipal | None = None
    if presented.kind is auth.CredentialKind.AGENT_TOKEN:
        principal = backend.verified.get(presented)
    if principal is None:
        with backend.transaction() as session:
            principal = _admitted(request, backend, session, presented)
        if isinstance(principal, repo.AgentPrincipal):
            backend.verified.put(presented, principal)
    else:
        _limited(request, backend, presented, principal)
    if not isinstance(principal, repo.AgentPrincipal):
        raise HTTPException(403, "this endpoint needs an agent token")
    return principal


def _store(
    connection: Connection,
    backend: Backend,
    agent: repo.AgentPrincipal,
    idempotency_key: str,
    schema: str,
    sequence: int,
    stored: bytes,
) -> repo.Recorded | None:
    """`repo.accept_push` of the agent's push in `connection`, committed."""
    recorded = repo.accept_push(
        connection, agent.token_id, agent.cluster_id, idempotency_key, schema, sequence, stored, backend.now()
    )
    connection.commit()
    return recorded


def _accept(
    backend: Backend,
    agent: repo.AgentPrincipal,
    idempotency_key: str,
    schema: str,
    sequence: int,
    stored: bytes,
) -> repo.Recorded | None:
    """`_store` on `backend.accepting`, once more when the connection it took was found dropped (the
    database restarted, or closed it idle): those connections are not pinged first. The statement
    stores a key once, so a second try after a first that committed unseen answers `duplicate` (that
    push is then queued by the workers' sweep, as one stored but not queued)."""

    def once() -> repo.Recorded | None:
        with backend.accepting.connect() as connection:
            return _store(connection, backend, agent, idempotency_key, schema, sequence, stored)

    try:
        return once()
    except sa_exc.DBAPIError as error:
        if not error.connection_invalidated:
            raise
    return once()


async def _accept_async(
    connections: store_engine.AcceptConnections,
    backend: Backend,
    agent: repo.AgentPrincipal,
    idempotency_key: str,
    schema: str,
    sequence: int,
    stored: bytes,
) -> repo.Recorded | None:
    """`_accept` on the asyncio connections: the same statement, once more on a connection found
    broken (those connections are not pinged when taken); psycopg's OperationalError (503) when the
    second fails too, or the first for another reason."""
    for last in (False, True):
        async with connections.connection() as connection:
            try:
                return await repo.accept_push_async(
                    connection,
                    agent.token_id,
                    agent.cluster_id,
                    idempotency_key,
                    schema,
                    sequence,
                    stored,
                    backend.now(),
                )
            except psycopg.OperationalError:
                if last or not connection.broken:
                    raise
    raise AssertionError("unreachable")


def _checked_push(
    backend: Backend, raw: bytes, content_encoding: str | None, idempotency_key: str, inline: bool = False
) -> tuple[str, int, bytes]:
    """`_validated_push` after the Idempotency-Key's form (400)."""
    if not _IDEMPOTENCY_KEY.match(idempotency_key):
        raise HTTPException(400, "Idempotency-Key must be 1-128 characters of [A-Za-z0-9._:-]")
    return _validated_push(backend, raw, content_encoding, idempotency_key, inline)


def _validated_push(
    backend: Backend, raw: bytes, content_encoding: str | None, idempotency_key: str, inline: bool = False
) -> tuple[str, int, bytes]:
    """(schema, sequence, body to store) of a push as received: 415, 413, 400 or 422 when it cannot
    be accepted. A compressed push that needs no stripping is stored as received (`compression.inflate`
    reads it back); anything else the backend re-encodes. `inline` (on the event loop): _NotInline
    when it inflates to more than `INLINE_INFLATED_BYTES`."""
    encoding = (content_encoding or compression.IDENTITY).lower()
    if encoding not in compression.ENCODINGS:
        raise HTTPException(415, f"unsupported Content-Encoding {content_encoding!r} (zstd, gzip or none)")
    limit = backend.settings.max_inflated_bytes
    try:
        body = compression.inflate_received(
            raw, encoding, min(limit, INLINE_INFLATED_BYTES) if inline else limit
        )
    except compression.BodyTooLarge:
        if inline and limit > INLINE_INFLATED_BYTES:
            raise _NotInline from None
        raise HTTPException(413, f"push larger than {limit} bytes once inflated") from None
    except compression.BodyError as error:
        raise HTTPException(400, f"body is {error}") from None

    def as_received() -> bytes:
        return raw if encoding != compression.IDENTITY else compression.compress(body)

    # A snapshot or delta that needs no stripping is checked without building its objects; anything
    # else is parsed whole (which also says what is wrong).
    head = push_contract.clean_push(body)
    if head is not None:
        return head.schema_, head.sequence, as_received()
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        backend.metrics.pushes.labels("unknown", "malformed").inc()
        raise HTTPException(400, f"body is not JSON: {error}") from None
    try:
        if isinstance(data, dict) and data.get("schema") == usage_contract.USAGE_SCHEMA:
            return _usage_push(data, idempotency_key, backend.settings.usage_step_seconds)
        parsed = push_contract.parse_push(data)
        message = push_contract.stripped(parsed)
        if message is parsed:  # valid, and nothing in it needed stripping
            return message.schema_, message.sequence, as_received()
        return message.schema_, message.sequence, compression.compress(push_contract.dump(message))
    except (ValidationError, ValueError) as error:
        backend.metrics.pushes.labels("unknown", "invalid").inc()
        raise HTTPException(422, _validation_message(error)) from None


def create_app(backend: Backend, *, run_workers: Any = None) -> FastAPI:
    """The API over `backend`; `run_workers` (an async context manager factory) runs in its lifespan."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if run_workers is None:
            yield
            return
        async with run_workers():
            yield

    app = FastAPI(
        title="Shipshape backend",
        version="1",
        lifespan=lifespan,
        responses={401: {"model": ErrorOut}, 429: {"model": ErrorOut}, 503: {"model": ErrorOut}},
    )
    app.state.backend = backend

    @app.exception_handler(repo.NotFound)
    async def _not_found(_: Request, error: repo.NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=404)

    @app.exception_handler(repo.InvalidTransition)
    async def _invalid_transition(_: Request, error: repo.InvalidTransition) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=409)

    @app.exception_handler(repo.Conflict)
    async def _conflict(_: Request, error: repo.Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=409)

    async def _database_unavailable(request: Request, error: Exception) -> JSONResponse:
        # The database is away (restarting, failing over, out of connections): nothing was stored,
        # the caller may retry. Its type only: a driver's message may name hosts and users.
        LOG.warning(
            "database unavailable during %s %s: %s", request.method, request.url.path, type(error).__name__
        )
        return JSONResponse(
            {"detail": "database unavailable, retry later"}, status_code=503, headers={"Retry-After": "5"}
        )

    unavailable: type[Exception]
    for unavailable in (
        sa_exc.OperationalError,
        sa_exc.InterfaceError,
        sa_exc.TimeoutError,
        # The asyncio accept's own connections (`store_engine.AcceptConnections`).
        psycopg.OperationalError,
        psycopg.InterfaceError,
    ):
        app.add_exception_handler(unavailable, _database_unavailable)

    app.add_middleware(_Observe, metrics=backend.metrics)

    app.mount("/dashboard", StaticFiles(directory=dashboard.STATIC, html=True), name="dashboard")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/dashboard/")

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> JSONResponse:
        try:
            with backend.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            current = store_engine.is_current(backend.engine)
        except Exception as error:  # any database failure means "not ready", with the reason
            return JSONResponse({"status": "unavailable", "reason": type(error).__name__}, status_code=503)
        if not current:
            return JSONResponse({"status": "unavailable", "reason": "schema not migrated"}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(backend.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/api/v1/pushes",
        status_code=202,
        response_model=PushAccepted,
        responses={413: {"model": ErrorOut}, 422: _VALIDATION_ERROR},
        openapi_extra={"parameters": _PUSH_HEADERS},
    )
    async def push(request: Request) -> Response:
        """A snapshot, delta or usage report from the cluster's agent; stored once per idempotency key,
        then queued. A usage report's key must be its bucket's (`usage-<bucket start>`)."""
        # The headers are read here rather than declared as parameters (they are documented as the
        # same parameters, `_PUSH_HEADERS`): FastAPI's parameter solving was a few percent of a
        # delta's CPU.
        headers = request.headers
        idempotency_key = headers.get("idempotency-key")
        if idempotency_key is None:
            raise RequestValidationError(
                [
                    {
                        "type": "missing",
                        "loc": ("header", "Idempotency-Key"),
                        "msg": "Field required",
                        "input": None,
                    }
                ]
            )
        authorization = headers.get("authorization")
        content_encoding = headers.get("content-encoding")
        presented = _presented(authorization)
        raw = await _read_limited(request, backend.settings.max_push_bytes)

        def revoked() -> HTTPException:
            # Revoked since this process verified it.
            backend.verified.forget(presented.id)
            return HTTPException(401, "invalid or revoked credential", headers={"WWW-Authenticate": "Bearer"})

        def accept() -> tuple[repo.AgentPrincipal, str, repo.Recorded]:
            # Off the event loop, in one hop to the thread pool: the credential is checked first
            # (nothing is parsed for a caller without one), then the push is validated (a few
            # milliseconds of CPU for a full snapshot) and stored in one statement, whose commit waits
            # for the database's disk; other requests (and other commits) go on meanwhile.
            agent = _pushing_agent(request, backend, presented)
            schema, sequence, stored = _checked_push(backend, raw, content_encoding, idempotency_key)
            recorded = _accept(backend, agent, idempotency_key, schema, sequence, stored)
            if recorded is None:
                raise revoked()
            return agent, schema, recorded

        known = (
            backend.verified.get(presented)
            if presented.kind is auth.CredentialKind.AGENT_TOKEN
            and backend.accepting_async is not None
            and len(raw) <= INLINE_PUSH_BYTES
            else None
        )
        if known is not None and backend.accepting_async is not None:
            # A small push of an agent verified lately: checked here (in the thread pool when it
            # inflates to more than `INLINE_INFLATED_BYTES`), stored without a thread.
            _limited(request, backend, presented, known)
            try:
                checked = _checked_push(backend, raw, content_encoding, idempotency_key, inline=True)
            except _NotInline:
                checked = await run_in_threadpool(
                    _checked_push, backend, raw, content_encoding, idempotency_key
                )
            agent, (schema, sequence, stored) = known, checked
            found = await _accept_async(
                backend.accepting_async, backend, agent, idempotency_key, schema, sequence, stored
            )
            if found is None:
                raise revoked()
            recorded = found
        else:
            agent, schema, recorded = await run_in_threadpool(accept)
        if not recorded.duplicate:
            await backend.publish_later(
                Job(recorded.push_id, agent.cluster_id, f"{agent.cluster_id}:{idempotency_key}")
            )
        backend.metrics.pushes.labels(schema, "duplicate" if recorded.duplicate else "accepted").inc()
        # PushAccepted, written directly: two fields of known types need no response model's
        # validation and encoding on the hottest route.
        answer = {"push_id": recorded.push_id, "duplicate": recorded.duplicate}
        return Response(orjson.dumps(answer), status_code=202, media_type="application/json")

    @app.get("/api/v1/clusters", response_model=list[ClusterOut])
    def list_clusters(user: Annotated[repo.UserPrincipal, Depends(_user)]) -> list[ClusterOut]:
        with backend.transaction() as session:
            return [_cluster_out(c) for c in repo.list_clusters(session, user.org_id)]

    @app.post(
        "/api/v1/clusters",
        status_code=201,
        response_model=ClusterCreated,
        responses={409: {"model": ErrorOut}},
    )
    def create_cluster(
        body: ClusterCreate, user: Annotated[repo.UserPrincipal, Depends(_user)]
    ) -> ClusterCreated:
        with backend.transaction() as session:
            cluster, token = repo.create_cluster(session, user.org_id, body.name, backend.now())
        return ClusterCreated(cluster_id=cluster.id, agent_token=token)

    @app.get("/api/v1/clusters/{cluster_id}", response_model=ClusterOut, responses={404: {"model": ErrorOut}})
    def get_cluster(cluster_id: str, user: Annotated[repo.UserPrincipal, Depends(_user)]) -> ClusterOut:
        with backend.transaction() as session:
            return _cluster_out(repo.get_cluster(session, user.org_id, cluster_id))

    @app.get("/api/v1/clusters/{cluster_id}/objects", responses={404: {"model": ErrorOut}})
    def cluster_objects(
        cluster_id: str, user: Annotated[repo.UserPrincipal, Depends(_user)], kind: str | None = None
    ) -> list[dict[str, Any]]:
        with backend.transaction() as session:
            return repo.cluster_objects(session, user.org_id, cluster_id, kind)

    @app.post(
        "/api/v1/clusters/{cluster_id}/agent-token",
        response_model=AgentTokenOut,
        responses={404: {"model": ErrorOut}},
    )
    def rotate_agent_token(
        cluster_id: str, user: Annotated[repo.UserPrincipal, Depends(_user)]
    ) -> AgentTokenOut:
        """A new agent token for the cluster; the previous ones stop working at once."""
        with backend.transaction() as session:
            return AgentTokenOut(
                agent_token=repo.rotate_agent_token(session, user.org_id, cluster_id, backend.now())
            )

    @app.get("/api/v1/clusters/{cluster_id}/summary", responses={404: {"model": ErrorOut}})
    def cluster_summary(
        cluster_id: str,
        user: Annotated[repo.UserPrincipal, Depends(_user)],
        startup: Annotated[bool, Query(description="include the pod and node start-up analyses")] = True,
    ) -> dict[str, Any]:
        """What the dashboard draws: nodes by pool, cost beside on-demand, spot share per workload,
        and (unless `startup=false`, as the clusters overview asks) pod and node start-up."""
        kinds = summary.KINDS if startup else summary.COST_KINDS
        with backend.transaction() as session:
            objects = {kind: repo.cluster_objects(session, user.org_id, cluster_id, kind) for kind in kinds}
            used = series.node_usage_now(
                session, user.org_id, cluster_id, backend.now(), backend.settings.usage_fresh
            )
        return summary.summarize(objects, startup=startup, used=used)

    app.include_router(series_api.router(backend, _user))

    @app.get(
        "/api/v1/clusters/{cluster_id}/usage",
        response_model=list[UsageOut],
        responses={404: {"model": ErrorOut}},
    )
    def cluster_usage(cluster_id: str, user: Annotated[repo.UserPrincipal, Depends(_user)]) -> list[UsageOut]:
        """What the agent's usage reports hold per workload container (the series themselves feed
        the efficiency analysis)."""
        with backend.transaction() as session:
            return [_usage_out(r) for r in repo.usage_summaries(session, user.org_id, cluster_id)]

    @app.get(
        "/api/v1/clusters/{cluster_id}/recommendations",
        response_model=list[RecommendationOut],
        responses={404: {"model": ErrorOut}},
    )
    def list_recommendations(
        cluster_id: str, user: Annotated[repo.UserPrincipal, Depends(_user)], status: str | None = None
    ) -> list[RecommendationOut]:
        with backend.transaction() as session:
            rows = repo.list_recommendations(session, user.org_id, cluster_id, status)
            return [_recommendation_out(r) for r in rows]

    @app.post(
        "/api/v1/recommendations/{recommendation_id}/approve",
        response_model=Approved,
        responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut}},
    )
    def approve(recommendation_id: str, user: Annotated[repo.UserPrincipal, Depends(_user)]) -> Approved:
        """Approve an open recommendation: its instruction goes to the cluster's agent."""
        with backend.transaction() as session:
            sent = repo.approve(session, user.org_id, recommendation_id, backend.now())
            return Approved(recommendation_id=recommendation_id, instruction_id=sent.id, status="approved")

    @app.post(
        "/api/v1/recommendations/{recommendation_id}/dismiss",
        response_model=RecommendationOut,
        responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut}},
    )
    def dismiss(
        recommendation_id: str, user: Annotated[repo.UserPrincipal, Depends(_user)]
    ) -> RecommendationOut:
        with backend.transaction() as session:
            return _recommendation_out(repo.dismiss(session, user.org_id, recommendation_id, backend.now()))

    @app.get("/api/v1/agent/instructions", response_model=list[InstructionEnvelope])
    async def agent_instructions(
        request: Request,
        agent: Annotated[repo.AgentPrincipal, Depends(_agent)],
        wait: Annotated[float, Query(ge=0, le=60, description="long-poll: seconds to wait for one")] = 0,
    ) -> list[InstructionEnvelope]:
        """Approved instructions for the agent's own cluster, each leased to the caller; waits up to
        `wait` seconds for one to arrive. A poll whose agent went away, or that is in flight when the
        server stops, ends without leasing anything (nothing is handed to a caller that cannot take it)."""
        lease = timedelta(seconds=backend.settings.instruction_lease_seconds)
        deadline = time.monotonic() + wait

        def lease_due() -> list[InstructionEnvelope]:
            with backend.transaction() as session:
                rows = repo.lease_instructions(session, agent.cluster_id, backend.now(), lease)
                return [
                    InstructionEnvelope.model_validate(
                        {
                            "schema": "shipshape.dev/instruction/v1",
                            "id": r.id,
                            "recommendation_id": r.recommendation_id,
                            "instruction": r.body,
                        }
                    )
                    for r in rows
                ]

        while True:
            envelopes = await asyncio.to_thread(lease_due)
            if envelopes or time.monotonic() >= deadline:
                return envelopes
            await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            if backend.stopping.is_set() or await request.is_disconnected():
                return []

    @app.post(
        "/api/v1/agent/instructions/{instruction_id}/outcome",
        status_code=204,
        responses={404: {"model": ErrorOut}},
    )
    def instruction_outcome(
        instruction_id: str,
        outcome: InstructionOutcome,
        agent: Annotated[repo.AgentPrincipal, Depends(_agent)],
    ) -> Response:
        """The agent's report of what became of an instruction (idempotent)."""
        with backend.transaction() as session:
            repo.record_outcome(session, agent.cluster_id, instruction_id, outcome, backend.now())
        return Response(status_code=204)

    return app


class _Observe:
    """Each request counted, timed and logged (`_log_request`) by its route, as a plain ASGI
    middleware: Starlette's `BaseHTTPMiddleware` runs the rest of the app in a task of its own with
    streams between the two, a good part of the API's CPU per small push."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # unless the app answers: an exception that escapes it is answered 500 outside

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            elapsed = time.perf_counter() - started
            # The router sets the matched route in the scope it shares with this middleware.
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(elapsed)
            _log_request(Request(scope), route, status, elapsed)


# Probes and scrapes: logged at debug only (the kubelet and Prometheus call them every few seconds).
_QUIET_ROUTES = frozenset(("/healthz", "/readyz", "/metrics"))
# Accepted pushes too: a fleet's agents send hundreds a second, the line was a tenth of the API's CPU
# per delta, and `shipshape_backend_pushes_total` counts them; a refused push is logged at info.
_PUSHES_ROUTE = "/api/v1/pushes"
ACCESS_LOG = logging.getLogger("shipshape.backend.access")


def _log_request(request: Request, route: str, status: int, elapsed: float) -> None:
    """One line per request: method, path (no query), route, status, duration, and who asked (the
    credential's id, never its secret; the organisation and the cluster where known)."""
    quiet = route in _QUIET_ROUTES or (route == _PUSHES_ROUTE and status == 202)
    level = logging.DEBUG if quiet else logging.INFO
    if not ACCESS_LOG.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "method": request.method,
        "path": request.url.path,
        "route": route,
        "status": status,
        "duration_ms": round(elapsed * 1000, 1),
    }
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, repo.AgentPrincipal):
        fields.update(org_id=principal.org_id, cluster_id=principal.cluster_id, credential=principal.token_id)
    elif isinstance(principal, repo.UserPrincipal):
        fields.update(org_id=principal.org_id, credential=principal.key_id)
        if "cluster_id" in request.path_params:
            fields["cluster_id"] = request.path_params["cluster_id"]
    if request.client is not None:
        fields["client"] = request.client.host
    ACCESS_LOG.log(level, "%s %s %d", request.method, request.url.path, status, extra=fields)


def _usage_push(data: dict[str, Any], idempotency_key: str, step: int) -> tuple[str, int, bytes]:
    """(schema, sequence, stored body) of a usage report; ValueError when it cannot be stored."""
    report = usage_contract.parse_usage(data)
    if idempotency_key != report.idempotency_key():
        raise ValueError(
            f"a usage report is pushed with the Idempotency-Key of its bucket, {report.idempotency_key()}"
        )
    if step % report.bucket_seconds:
        raise ValueError(
            f"bucket_seconds {report.bucket_seconds} does not divide this backend's usage step of {step} s"
        )
    return usage_contract.USAGE_SCHEMA, report.start, compression.compress(usage_contract.dump(report))


def _validation_message(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[:5]
        return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in first)
    return str(error)
