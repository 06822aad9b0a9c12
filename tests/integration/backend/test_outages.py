"""The backend while its services are away. NATS down while agents push (a NATS server of the test's
own, stopped and started again): the API keeps accepting pushes — they are committed to PostgreSQL
before any queueing — and once NATS is back the workers' sweep queues what was never queued, and every
push is applied once. PostgreSQL refusing connections: every request gets 503 with Retry-After, the
API is not ready but alive, and all is well again once the database is back."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import repository as repo
from tests.integration.backend.conftest import (
    POSTGRES_ADMIN,
    delta,
    harness,
    pod,
    postgres_database,
    snapshot,
)
from tests.integration.backend.processes import free_port

NATS = shutil.which("nats-server")
pytestmark = pytest.mark.integration


@contextlib.contextmanager
def nats_server(port: int, store: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A JetStream server on 127.0.0.1:port with its files in `store` (they survive a restart)."""
    assert NATS is not None
    process = subprocess.Popen(
        [NATS, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


async def listening(port: int, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            assert asyncio.get_running_loop().time() < deadline, f"nothing listens on {port}"
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return


@pytest.mark.skipif(NATS is None, reason="nats-server is not installed (make test installs it)")
async def test_pushes_are_accepted_while_nats_is_down_and_applied_when_it_is_back(tmp_path: Path) -> None:
    port = free_port()
    queue = f"nats://127.0.0.1:{port}?stream=OUTAGE"
    settings = BackendSettings(queue=queue, sweep_seconds=0.5)
    with postgres_database() as db, nats_server(port, tmp_path / "nats") as first:
        await listening(port)
        async with harness(settings.model_copy(update={"db": db})) as h:
            t = h.tenant("acme")
            assert (await h.push(t.agent_token, snapshot(1, 2, 4))).status_code == 202
            await h.settled(t.cluster_id, 1)

            first.terminate()
            first.wait(timeout=30)
            # Down: still 202 (the push is in the database); nothing can be applied.
            for seq in range(2, 6):
                change = [("ADDED", "pods", pod(f"while-down-{seq}", "n0"))]
                response = await h.push(t.agent_token, delta(seq, seq - 1, change), key=f"k{seq}")
                assert response.status_code == 202, response.text
            with h.backend.transaction() as session:
                assert repo.get_cluster(session, t.org_id, t.cluster_id).applied_sequence == 1

            with nats_server(port, tmp_path / "nats"):
                await h.settled(t.cluster_id, 5, within=60)
                with h.backend.transaction() as session:
                    cluster = repo.get_cluster(session, t.org_id, t.cluster_id)
                    outcomes = [p.outcome for p in session.query(repo.Push).order_by(repo.Push.sequence)]
                assert cluster.pod_count == 8
                assert outcomes == ["applied"] * 5


def database_connections(url: str, allowed: bool) -> None:
    """Let the database take connections, or refuse new ones and end those it has (as a failover)."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
            )


async def test_while_postgresql_is_away_requests_get_503_and_the_api_is_alive_not_ready() -> None:
    with postgres_database() as db:
        async with harness(BackendSettings(db=db)) as h:
            t = h.tenant("acme")
            user = {"Authorization": f"Bearer {t.api_key}"}
            assert (await h.push(t.agent_token, snapshot(1, 1, 2))).status_code == 202
            await h.settled(t.cluster_id, 1)

            database_connections(db, allowed=False)
            try:
                pushed = await h.push(t.agent_token, snapshot(2, 1, 3), key="while-away")
                listed = await h.client.get("/api/v1/clusters", headers=user)
                for response in (pushed, listed):
                    assert response.status_code == 503, response.text
                    assert response.headers["Retry-After"] == "5"
                    assert response.json() == {"detail": "database unavailable, retry later"}
                assert (await h.client.get("/readyz")).status_code == 503
                assert (await h.client.get("/healthz")).status_code == 200
            finally:
                database_connections(db, allowed=True)

            # Back: the agent's retry (same key) is accepted and applied, once.
            assert (await h.push(t.agent_token, snapshot(2, 1, 3), key="while-away")).status_code == 202
            await h.settled(t.cluster_id, 2)
            assert (await h.client.get("/readyz")).status_code == 200
            listed = await h.client.get("/api/v1/clusters", headers=user)
            assert listed.json()[0]["pod_count"] == 3
