"""One of two API processes killed (SIGKILL) during pushes, on PostgreSQL and NATS JetStream: every
push that got 202 is applied, the client's retries of the others (same idempotency key, to the
surviving process) are applied once, and the stored state is what the client sent — nothing lost,
nothing twice."""

from __future__ import annotations

import asyncio
import gzip
import itertools
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from tests.integration.backend.conftest import delta, nats_stream, pod, postgres_database, snapshot
from tests.integration.backend.processes import GRACEFUL, Process, admin, start, start_backend

pytestmark = pytest.mark.integration
PUSHES = 120
IN_FLIGHT = 6


class Client:
    """An agent behind a load balancer over two API processes: pushes alternate between them; a push
    that gets no 202 (connection refused or reset, 5xx) goes again, same key, to the other one."""

    def __init__(self, apis: list[Process], token: str) -> None:
        self.clients = [httpx.AsyncClient(base_url=api.url or "", timeout=10) for api in apis]
        self.alive = [True] * len(apis)
        self.in_flight = [0] * len(apis)
        self.token = token
        self.turn = itertools.count()
        self.accepted: dict[str, tuple[int, bool]] = {}  # key → (API index, duplicate)
        self.failed: list[tuple[str, int, str]] = []  # (key, API index, why)

    def target(self) -> int:
        live = [i for i, up in enumerate(self.alive) if up]
        return live[next(self.turn) % len(live)]

    async def push(self, body: dict[str, Any], key: str) -> None:
        raw = gzip.compress(orjson.dumps(body))
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Encoding": "gzip",
            "Idempotency-Key": key,
        }
        for _ in range(10):
            index = self.target()
            self.in_flight[index] += 1
            try:
                response = await self.clients[index].post("/api/v1/pushes", content=raw, headers=headers)
            except httpx.TransportError as error:
                self.failed.append((key, index, type(error).__name__))
                self.alive[index] = False  # the balancer's health check takes it out
                continue
            finally:
                self.in_flight[index] -= 1
            if response.status_code == 202:
                self.accepted[key] = (index, bool(response.json()["duplicate"]))
                return
            self.failed.append((key, index, str(response.status_code)))
        raise AssertionError(f"push {key} was never accepted")

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()


def pushes() -> list[tuple[str, dict[str, Any]]]:
    """A snapshot of 4 nodes and 20 pods, then deltas: one pod added each, every fifth one removed."""
    out: list[tuple[str, dict[str, Any]]] = [("push-1", snapshot(1, 4, 20))]
    for seq in range(2, PUSHES + 1):
        changes = [("ADDED", "pods", pod(f"extra-{seq}", f"n{seq % 4}"))]
        if seq % 5 == 0:
            changes.append(("DELETED", "pods", pod(f"p{seq // 5}", "n0")))
        out.append((f"push-{seq}", delta(seq, seq - 1, changes)))
    return out


def expected_pods() -> set[str]:
    names = {f"p{i}" for i in range(20)} | {f"extra-{seq}" for seq in range(2, PUSHES + 1)}
    return names - {f"p{seq // 5}" for seq in range(2, PUSHES + 1) if seq % 5 == 0}


async def test_an_api_process_killed_during_pushes_loses_nothing_accepted(tmp_path: Path) -> None:
    with postgres_database() as db:
        async with nats_stream() as queue:
            org = admin(tmp_path, "create-org", "acme", "--db", db)
            cluster = admin(tmp_path, "create-cluster", "--org", org["org_id"], "prod", "--db", db)
            env = {"SHIPSHAPE_BACKEND_QUEUE": queue, "SHIPSHAPE_BACKEND_SWEEP_SECONDS": "1"}
            apis = [start_backend(f"api-{i}", tmp_path, "--db", db, env=env) for i in range(2)]
            worker = start("worker", tmp_path, "worker", "--db", db, env=env)
            client = Client(apis, cluster["agent_token"])
            try:
                todo = pushes()
                sent = asyncio.Semaphore(IN_FLIGHT)

                async def one(key: str, body: dict[str, Any]) -> None:
                    async with sent:
                        await client.push(body, key)

                tasks = [asyncio.create_task(one(key, body)) for key, body in todo]
                # Mid-stream, while pushes to it are on the wire: SIGKILL the first API process.
                while len(client.accepted) < PUSHES // 3 or client.in_flight[0] < 2:
                    assert not all(t.done() for t in tasks), "the pushes ended before the kill"
                    await asyncio.sleep(0.001)
                apis[0].kill()
                await asyncio.gather(*tasks)

                # Every push was accepted at last; some only through a retry to the survivor.
                assert set(client.accepted) == {key for key, _ in todo}
                retried = {key for key, index, _ in client.failed if index == 0}
                assert retried, "no push was cut off by the kill"
                assert all(client.accepted[key][0] == 1 for key in retried)
                # A retry of a push the killed process had committed is recognised, not stored again.
                assert {key for key, (_, duplicate) in client.accepted.items() if duplicate} <= retried

                user = {"Authorization": f"Bearer {org['api_key']}"}
                survivor = client.clients[1]
                path = f"/api/v1/clusters/{cluster['cluster_id']}"
                for _ in range(600):
                    state = (await survivor.get(path, headers=user)).json()
                    if state["applied_sequence"] == PUSHES:
                        break
                    await asyncio.sleep(0.1)
                assert state["applied_sequence"] == PUSHES, state
                objects = (await survivor.get(f"{path}/objects", headers=user)).json()
            finally:
                await client.close()
                stopped = [api.stop() for api in apis[1:]] + [worker.stop()]
            assert all(code in GRACEFUL for code in stopped)
            assert "Traceback" not in apis[1].output() + worker.output()

            # The stored state is what the client sent, each object once.
            names = [o["metadata"]["name"] for o in objects if o["kind"] == "Pod"]
            assert sorted(names) == sorted(expected_pods())
            assert len([o for o in objects if o["kind"] == "Node"]) == 4
            with psycopg.connect(db) as connection:
                rows = connection.execute(
                    "SELECT idempotency_key, outcome FROM pushes WHERE cluster_id = %s",
                    (cluster["cluster_id"],),
                ).fetchall()
            assert sorted(key for key, _ in rows) == sorted(key for key, _ in todo)  # each key once
            assert {outcome for _, outcome in rows} == {"applied"}  # each applied, none twice
