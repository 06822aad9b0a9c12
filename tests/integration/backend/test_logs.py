"""The backend's processes log JSON lines (or key=value text) with a line per request — method, path,
status, duration, organisation and cluster — and no secret: not the API key or agent token (valid
or forged), not an Authorization header, not the password in the database or queue URL."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.backend.conftest import POSTGRES_ADMIN, nats_stream, postgres_database, snapshot
from tests.integration.backend.processes import GRACEFUL, admin, start, start_backend

pytestmark = pytest.mark.integration
DB_PASSWORD = "db-pw-" + uuid.uuid4().hex[:8]
NATS_PASSWORD = "nats-pw-" + uuid.uuid4().hex[:8]


def with_password(url: str, user: str, password: str) -> str:
    """`url` with `user:password@` (the test servers trust local connections and ignore it)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}:{password}@{rest.split('@', 1)[-1]}"


def json_lines(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    parsed = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(isinstance(p, dict) and {"time", "level", "logger", "message"} <= set(p) for p in parsed)
    return parsed


async def test_json_request_logs_without_secrets(tmp_path: Path) -> None:
    with postgres_database() as plain_db:
        async with nats_stream() as plain_queue:
            db = with_password(plain_db, POSTGRES_ADMIN.split("://")[1].split("@")[0], DB_PASSWORD)
            queue = with_password(plain_queue, "shipshape", NATS_PASSWORD)
            logs = ("--log-format", "json", "--log-level", "info")
            org = admin(tmp_path, *logs, "create-org", "acme", "--db", db)
            cluster = admin(tmp_path, *logs, "create-cluster", "--org", org["org_id"], "prod", "--db", db)
            migrated = admin(tmp_path, *logs, "migrate", "--db", db)
            assert migrated["revision"] == migrated["previous"] is not None  # create-org migrated it
            env = {"SHIPSHAPE_BACKEND_QUEUE": queue}  # the queue URL from the environment, as in a pod
            api = start_backend("api", tmp_path, "--db", db, *logs, env=env)
            worker = start("worker", tmp_path, "worker", "--db", db, *logs, env=env)
            key, token = org["api_key"], cluster["agent_token"]
            forged = key[: key.rindex("_") + 1] + "Z" * 43
            try:
                async with httpx.AsyncClient(base_url=api.url or "", timeout=10) as client:
                    user = {"Authorization": f"Bearer {key}"}
                    pushed = await client.post(
                        "/api/v1/pushes",
                        content=gzip.compress(orjson.dumps(snapshot(1, 2, 3))),
                        headers={
                            "Authorization": f"Bearer {token}",
                            "Content-Encoding": "gzip",
                            "Idempotency-Key": "first",
                        },
                    )
                    assert pushed.status_code == 202
                    refused_push = await client.post(
                        "/api/v1/pushes",
                        content=b"{not json",
                        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "second"},
                    )
                    assert refused_push.status_code == 400
                    cluster_path = f"/api/v1/clusters/{cluster['cluster_id']}"
                    for _ in range(600):  # the worker process applies it
                        found = (await client.get(cluster_path, headers=user)).json()
                        if found["applied_sequence"] == 1:
                            break
                        await asyncio.sleep(0.1)
                    assert found["pod_count"] == 3, found
                    assert (await client.get(f"{cluster_path}/series", headers=user)).status_code == 200
                    refused = await client.get(
                        "/api/v1/clusters", headers={"Authorization": f"Bearer {forged}"}
                    )
                    assert refused.status_code == 401
                    # A credential in the query string is never used, and never logged either.
                    assert (await client.get(f"/api/v1/clusters?api_key={key}")).status_code == 401
                    assert (await client.get("/readyz")).status_code == 200
            finally:
                assert (api.stop(), worker.stop()) in itertools.product(GRACEFUL, GRACEFUL)
            outputs = {
                "api": api.output(),
                "worker": worker.output(),
                "admin": (tmp_path / "admin.log").read_text(),
            }

    secrets = (
        key,
        key.split("_", 2)[2],  # kind_id_secret: the secret may hold "_" itself
        token,
        token.split("_", 2)[2],
        forged[-43:],
        DB_PASSWORD,
        NATS_PASSWORD,
    )
    for name, text in outputs.items():
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{name} logged a secret:\n{text}"
        assert "Traceback" not in text, text

    requests = [line for line in json_lines(outputs["api"]) if line["logger"] == "shipshape.backend.access"]
    # Accepted pushes (hundreds a second from a fleet) are logged at debug only; refused ones at info.
    (push,) = [line for line in requests if line["path"] == "/api/v1/pushes"]
    assert push["method"] == "POST" and push["status"] == 400 and push["duration_ms"] >= 0
    assert (push["org_id"], push["cluster_id"]) == (org["org_id"], cluster["cluster_id"])
    assert push["credential"] == token.split("_")[1]  # the id names the token; the secret stays out
    read = next(line for line in requests if line["route"] == "/api/v1/clusters/{cluster_id}/series")
    assert (read["status"], read["org_id"], read["cluster_id"]) == (200, org["org_id"], cluster["cluster_id"])
    assert {line["status"] for line in requests if line["path"] == "/api/v1/clusters"} == {401}
    # Probes are logged at debug only.
    assert not any(line["path"] == "/readyz" for line in requests)
    json_lines(outputs["worker"])
    migration = [line for line in json_lines(outputs["admin"]) if line["message"] == "schema migrated"]
    assert migration and migration[0]["to_revision"]


def test_text_logs_are_key_value_lines_without_secrets(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'backend.db'}"
    org = admin(tmp_path, "create-org", "acme", "--db", db)
    api = start_backend("api", tmp_path, "--db", db, "--log-level", "debug")
    try:
        key = org["api_key"]
        assert (
            httpx.get(f"{api.url}/api/v1/clusters", headers={"Authorization": f"Bearer {key}"}).status_code
            == 200
        )
        assert httpx.get(f"{api.url}/healthz").status_code == 200
    finally:
        assert api.stop() in GRACEFUL
    text = api.output()
    assert key.split("_", 2)[2] not in text  # kind_id_secret: the secret may hold "_" itself
    lines = [line for line in text.splitlines() if "shipshape.backend.access" in line]
    assert any("GET /api/v1/clusters 200" in line and f"org_id={org['org_id']}" in line for line in lines)
    assert any("path=/healthz" in line for line in lines)  # debug: probes too
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[0])
