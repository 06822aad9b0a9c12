"""`shipshape worker --metrics-port`: Prometheus metrics of what the worker applied, and the probes'
endpoints, scraped from a real worker process on PostgreSQL and NATS JetStream."""

from __future__ import annotations

import asyncio
import gzip
import time
from pathlib import Path

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.backend.conftest import delta, nats_stream, pod, postgres_database, snapshot
from tests.integration.backend.processes import GRACEFUL, admin, free_port, start, start_backend

pytestmark = pytest.mark.integration


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape by name and labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def wait_ok(client: httpx.AsyncClient, url: str, seconds: float = 60) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while True:
        try:
            answer = await client.get(url)
            if answer.status_code == 200:
                return answer
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer 200"
        await asyncio.sleep(0.1)


async def test_the_worker_serves_its_metrics_and_probes(tmp_path: Path) -> None:
    with postgres_database() as db:
        async with nats_stream() as queue:
            org = admin(tmp_path, "create-org", "acme", "--db", db)
            cluster = admin(tmp_path, "create-cluster", "--org", org["org_id"], "prod", "--db", db)
            env = {"SHIPSHAPE_BACKEND_QUEUE": queue}
            api = start_backend("api", tmp_path, "--db", db, env=env)
            port = free_port()
            worker = start("worker", tmp_path, "worker", "--db", db, "--metrics-port", str(port), env=env)
            base = f"http://127.0.0.1:{port}"
            agent = {"Authorization": f"Bearer {cluster['agent_token']}", "Content-Encoding": "gzip"}
            try:
                async with httpx.AsyncClient(timeout=10) as client:
                    assert (await wait_ok(client, f"{base}/healthz")).json() == {"status": "ok"}
                    assert (await wait_ok(client, f"{base}/readyz")).json() == {"status": "ready"}
                    added = delta(2, 1, [("ADDED", "pods", pod("extra", "n0"))])
                    for key, body in (("s1", snapshot(1, 2, 3)), ("d2", added)):
                        pushed = await client.post(
                            f"{api.url}/api/v1/pushes",
                            content=gzip.compress(orjson.dumps(body)),
                            headers={**agent, "Idempotency-Key": key},
                        )
                        assert pushed.status_code == 202, pushed.text
                    deadline = time.monotonic() + 60
                    while True:
                        scraped = await client.get(f"{base}/metrics")
                        assert scraped.status_code == 200
                        assert scraped.headers["content-type"].startswith("text/plain")
                        found = samples(scraped.text)
                        # Both messages handled: the first of them applies both pushes when the
                        # delta's was handled at the same time (the other is then a duplicate).
                        handled = {
                            result: found.get(("shipshape_worker_messages_total", (("result", result),)), 0)
                            for result in ("applied", "duplicate")
                        }
                        if handled["applied"] >= 1 and sum(handled.values()) >= 2:
                            break
                        assert time.monotonic() < deadline, scraped.text
                        await asyncio.sleep(0.1)
            finally:
                assert (api.stop(), worker.stop()) in ((a, w) for a in GRACEFUL for w in GRACEFUL), (
                    worker.output()
                )
    assert found[("shipshape_worker_apply_seconds_count", ())] >= 1
    assert found[("shipshape_worker_redelivered_total", ())] == 0
    assert ("shipshape_worker_queue_wait_seconds_count", ()) in found
    assert ("shipshape_worker_queue_pending", ()) in found
