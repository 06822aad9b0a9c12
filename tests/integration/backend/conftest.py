"""The backend against real databases and queues: SQLite and PostgreSQL, the in-process queue and
NATS JetStream (`make test` starts PostgreSQL and NATS when they are not running).

Each test gets a database of its own (created and dropped on the machine's PostgreSQL) and a
JetStream stream of its own, so tests on two workers never see each other's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from shipshape.backend import service
from shipshape.backend.app import ACCEPT_POOL, Backend, create_app
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import engine as store_engine
from shipshape.backend.store import repository as repo
from shipshape.backend.workers import Workers
from shipshape.contracts import compression

POSTGRES_ADMIN = os.environ.get("SHIPSHAPE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
NATS_SERVER = os.environ.get("SHIPSHAPE_TEST_NATS", "nats://127.0.0.1:4222")


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    name = f"shipshape_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(POSTGRES_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        pytest.fail(f"PostgreSQL is not reachable at {POSTGRES_ADMIN} (make test starts it): {error}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.asynccontextmanager
async def nats_stream() -> AsyncIterator[str]:
    import nats

    stream = f"T_{uuid.uuid4().hex[:12].upper()}"
    yield f"{NATS_SERVER}?stream={stream}"
    with contextlib.suppress(Exception):
        connection = await nats.connect(NATS_SERVER, connect_timeout=2)
        with contextlib.suppress(Exception):
            await connection.jetstream().delete_stream(stream)
        await connection.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'backend.db'}"
    else:
        with postgres_database() as url:
            yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'backend.db'}"


@dataclass
class Tenant:
    org_id: str
    api_key: str
    cluster_id: str
    agent_token: str


@dataclass
class Harness:
    """A backend built as `shipshape backend` builds it, its workers running, an HTTP client on its app."""

    backend: Backend
    workers: Workers
    client: httpx.AsyncClient

    def tenant(self, name: str) -> Tenant:
        with self.backend.transaction() as session:
            org, key = repo.create_organization(session, name, datetime.now(UTC))
            cluster, token = repo.create_cluster(session, org.id, f"{name}-prod", datetime.now(UTC))
            return Tenant(org.id, key, cluster.id, token)

    async def push(
        self, token: str, body: Any, key: str | None = None, *, encoding: str = compression.GZIP
    ) -> httpx.Response:
        """POST `body` as JSON (bytes: JSON already) compressed with `encoding` (zstd as the agent
        sends, gzip, identity)."""
        raw = body if isinstance(body, bytes) else orjson.dumps(body, default=str)
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key or uuid.uuid4().hex}
        if encoding != compression.IDENTITY:
            raw = compression.compress(raw) if encoding == compression.ZSTD else gzip.compress(raw)
            headers["Content-Encoding"] = encoding
        return await self.client.post("/api/v1/pushes", content=raw, headers=headers)

    async def settled(self, cluster_id: str, sequence: int, within: float = 20.0) -> None:
        """Wait until the workers applied the push numbered `sequence` (or a later one)."""
        deadline = asyncio.get_running_loop().time() + within
        while asyncio.get_running_loop().time() < deadline:
            with self.backend.transaction() as session:
                cluster = session.get(repo.Cluster, cluster_id)
                if cluster is not None and (cluster.applied_sequence or -1) >= sequence:
                    return
            await asyncio.sleep(0.02)
        raise AssertionError(f"push {sequence} of cluster {cluster_id} not applied within {within} s")


@contextlib.asynccontextmanager
async def harness(settings: BackendSettings, consumers: int = 2) -> AsyncIterator[Harness]:
    backend = await service.build(settings)
    # As `shipshape backend` serves it: small pushes stored through the asyncio engine on PostgreSQL.
    backend.accepting_async = store_engine.accept_connections(settings.db, size=ACCEPT_POOL)
    workers = service.workers_for(backend)
    app = create_app(backend)
    try:
        async with (
            workers.running(consumers),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://backend") as client,
        ):
            yield Harness(backend, workers, client)
    finally:
        await backend.close()


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "m5.large"}},
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi"}},
    }


def pod(name: str, node_name: str, namespace: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "managedFields": [{"manager": "kubectl"}]},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": "app",
                    "image": "nginx",
                    "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "MODE", "value": "prod"}],
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def snapshot(sequence: int, nodes: int, pods: int) -> dict[str, Any]:
    return {
        "schema": "shipshape.dev/snapshot/v1",
        "sequence": sequence,
        "taken_at": datetime.now(UTC).isoformat(),
        "objects": {
            "nodes": [node(f"n{i}") for i in range(nodes)],
            "pods": [pod(f"p{i}", f"n{i % max(1, nodes)}") for i in range(pods)],
        },
    }


def delta(sequence: int, base: int, changes: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    return {
        "schema": "shipshape.dev/delta/v1",
        "sequence": sequence,
        "base_sequence": base,
        "taken_at": datetime.now(UTC).isoformat(),
        "changes": [{"type": t, "kind": k, "object": o} for t, k, o in changes],
    }
