"""Tenancy and credentials on every endpoint: another tenant's objects do not exist for you; revoked,
malformed and forged credentials get 401; each kind of credential only does its own job."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import repository as repo
from tests.integration.backend.conftest import harness, snapshot


@pytest.mark.integration
async def test_tenants_are_isolated_and_credentials_do_only_their_job(database_url: str) -> None:
    async with harness(BackendSettings(db=database_url)) as h:
        a, b = h.tenant("acme"), h.tenant("globex")
        get, post = h.client.get, h.client.post

        def as_(token: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}"}

        assert (await h.push(b.agent_token, snapshot(1, 2, 3))).status_code == 202
        await h.settled(b.cluster_id, 1)

        # A's key sees A's cluster only; B's cluster answers as if it did not exist.
        listed = await get("/api/v1/clusters", headers=as_(a.api_key))
        assert [c["id"] for c in listed.json()] == [a.cluster_id]
        for path in (f"/api/v1/clusters/{b.cluster_id}", f"/api/v1/clusters/{b.cluster_id}/objects"):
            assert (await get(path, headers=as_(a.api_key))).status_code == 404
        assert (
            await post(f"/api/v1/clusters/{b.cluster_id}/agent-token", headers=as_(a.api_key))
        ).status_code == 404
        assert (
            await get(f"/api/v1/clusters/{b.cluster_id}/objects", headers=as_(b.api_key))
        ).status_code == 200

        # An agent token cannot act as a user, a user key cannot push.
        assert (await get("/api/v1/clusters", headers=as_(a.agent_token))).status_code == 403
        assert (await h.push(a.api_key, snapshot(1, 1, 1))).status_code == 403

        # Missing, malformed and forged credentials.
        assert (await get("/api/v1/clusters")).status_code == 401
        assert (await get("/api/v1/clusters", headers={"Authorization": "Basic abc"})).status_code == 401
        assert (await get("/api/v1/clusters", headers=as_("ssk_nothex_x"))).status_code == 401
        kind, key_id, secret = a.api_key.split("_", 2)  # the secret may hold "_" itself
        forged = f"{kind}_{key_id}_" + "A" * 43
        assert (await get("/api/v1/clusters", headers=as_(forged))).status_code == 401
        unknown_id = "ssk_000000000000_" + secret
        assert (await get("/api/v1/clusters", headers=as_(unknown_id))).status_code == 401

        # Rotation: the old agent token stops at once, the new one pushes.
        rotated = await post(f"/api/v1/clusters/{a.cluster_id}/agent-token", headers=as_(a.api_key))
        assert rotated.status_code == 200
        assert (await h.push(a.agent_token, snapshot(1, 1, 1))).status_code == 401
        assert (await h.push(rotated.json()["agent_token"], snapshot(1, 1, 1))).status_code == 202

        # Revocation of a user key.
        with h.backend.transaction() as session:
            repo.revoke_api_key(session, a.org_id, key_id, datetime.now(UTC))
        assert (await get("/api/v1/clusters", headers=as_(a.api_key))).status_code == 401

        # Nothing that failed stored anything for A beyond its one accepted push.
        with h.backend.transaction() as session:
            assert session.query(repo.Push).filter(repo.Push.cluster_id == a.cluster_id).count() == 1


@pytest.mark.integration
async def test_an_agent_token_that_pushed_before_gets_401_at_once_when_revoked(database_url: str) -> None:
    """The push route knows an agent token it verified lately without looking it up again; a token
    revoked since (rotated through the API, or revoked in the database by another process) still gets
    401 on its next push and stores nothing."""
    async with harness(BackendSettings(db=database_url)) as h:
        a, b = h.tenant("acme"), h.tenant("globex")
        user = {"Authorization": f"Bearer {a.api_key}"}
        assert (await h.push(a.agent_token, snapshot(1, 1, 1))).status_code == 202
        assert (await h.push(b.agent_token, snapshot(1, 1, 1))).status_code == 202

        rotated = await h.client.post(f"/api/v1/clusters/{a.cluster_id}/agent-token", headers=user)
        assert rotated.status_code == 200
        assert (await h.push(a.agent_token, snapshot(2, 1, 1))).status_code == 401
        assert (await h.push(rotated.json()["agent_token"], snapshot(2, 1, 1))).status_code == 202

        # Revoked by another process: this one's memory of the token does not outlive the database.
        with h.backend.transaction() as session:
            session.query(repo.AgentToken).filter(repo.AgentToken.cluster_id == b.cluster_id).update(
                {repo.AgentToken.revoked_at: datetime.now(UTC)}
            )
        assert (await h.push(b.agent_token, snapshot(2, 1, 1))).status_code == 401
        assert (await h.push(b.agent_token, snapshot(3, 1, 1))).status_code == 401
        if database_url.startswith("postgresql"):
            # Those small pushes of verified tokens went through the asyncio connections, not a thread.
            assert h.backend.accepting_async is not None
            assert h.backend.accepting_async.idle >= 1

        with h.backend.transaction() as session:
            sequences = {
                cluster: sorted(
                    p.sequence for p in session.query(repo.Push).filter(repo.Push.cluster_id == cluster)
                )
                for cluster in (a.cluster_id, b.cluster_id)
            }
        assert sequences == {a.cluster_id: [1, 2], b.cluster_id: [1]}


@pytest.mark.integration
async def test_rate_limit_per_credential(sqlite_url: str) -> None:
    async with harness(BackendSettings(db=sqlite_url, rate_limit_per_minute=5)) as h:
        a, b = h.tenant("acme"), h.tenant("globex")
        codes = [
            (
                await h.client.get("/api/v1/clusters", headers={"Authorization": f"Bearer {a.api_key}"})
            ).status_code
            for _ in range(7)
        ]
        assert codes[:5] == [200] * 5 and codes[5:] == [429, 429]
        other = await h.client.get("/api/v1/clusters", headers={"Authorization": f"Bearer {b.api_key}"})
        assert other.status_code == 200


@pytest.mark.integration
async def test_health_readiness_metrics_and_openapi(sqlite_url: str) -> None:
    async with harness(BackendSettings(db=sqlite_url)) as h:
        assert (await h.client.get("/healthz")).json() == {"status": "ok"}
        assert (await h.client.get("/readyz")).json() == {"status": "ready"}
        t = h.tenant("acme")
        await h.push(t.agent_token, snapshot(1, 1, 1))
        metrics = (await h.client.get("/metrics")).text
        assert (
            'shipshape_backend_pushes_total{result="accepted",schema="shipshape.dev/snapshot/v1"} 1.0'
            in metrics
        )
        user = {"Authorization": f"Bearer {t.api_key}"}
        await h.settled(t.cluster_id, 1)
        full = (await h.client.get(f"/api/v1/clusters/{t.cluster_id}/summary", headers=user)).json()
        overview = (
            await h.client.get(f"/api/v1/clusters/{t.cluster_id}/summary?startup=false", headers=user)
        ).json()
        assert "pod_startup" in full and "pod_startup" not in overview
        assert {k: v for k, v in full.items() if k not in ("pod_startup", "node_startup")} == overview
        paths = (await h.client.get("/openapi.json")).json()["paths"]
        assert {"/api/v1/pushes", "/api/v1/clusters", "/api/v1/clusters/{cluster_id}"} <= set(paths)
