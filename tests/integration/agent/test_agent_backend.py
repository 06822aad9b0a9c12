"""The agent against the emulator (the real client) and the backend (`shipshape backend` in a
subprocess): the stored state follows the cluster, and a backend outage loses nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from shipshape.agent.mirror import Mirror
from shipshape.agent.pusher import Pusher
from shipshape.agent.runner import Agent, AgentSettings, sources
from shipshape.agent.spool import Spool
from shipshape.backend.store import engine as store_engine
from shipshape.backend.store import repository as repo
from shipshape.emulator.resources import DEPLOYMENTS, NODES, PODS
from shipshape.kube import informers as kit
from tests.integration.agent.backend_process import backend_process, bootstrap, free_port
from tests.integration.controller.harness import managed_deployment
from tests.integration.emulator.served_cluster import ServedCluster, serve_cluster


def _stored(url: str, key: str, cluster_id: str, kind: str) -> dict[str, str]:
    response = httpx.get(
        f"{url}/api/v1/clusters/{cluster_id}/objects",
        params={"kind": kind},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.text
    return {
        f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in response.json()
    }


def _live(cluster: ServedCluster, rt: Any) -> dict[str, str]:
    return {
        f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in cluster.objects(rt)
    }


def _unprocessed(db: str) -> int:
    engine = store_engine.create(db)
    try:
        with store_engine.sessions(engine).begin() as session:
            return sum(p.processed_at is None for p in session.query(repo.Push).all())
    finally:
        engine.dispose()


@pytest.mark.integration
def test_agent_follows_the_cluster_and_rides_out_a_backend_outage(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'backend.db'}"
    key, cluster_id, token = bootstrap(db)
    port = free_port()

    with serve_cluster(tmp_path) as cluster:
        mirror = Mirror()
        settings = AgentSettings(
            snapshot_interval=3600, delta_interval=15, backoff_start=0.2, backoff_max=1.0
        )
        backend_url = f"http://127.0.0.1:{port}"
        agent = Agent(
            kit.Informers(sources(cluster.api_client), mirror, backoff_max=1.0),
            mirror,
            Pusher(backend_url, token),
            Spool(tmp_path / "spool"),
            cluster.clock,
            settings,
        )
        with backend_process(port, db, tmp_path) as url:
            agent.start()
            try:
                cluster.kubectl("apply", "-f", "-", stdin=managed_deployment("web", 3))
                cluster.wait(
                    "web's 3 pods stored", lambda: len(_stored(url, key, cluster_id, "pods")) == 3, 120
                )
                stored_nodes = _stored(url, key, cluster_id, "nodes")
                assert set(stored_nodes) == set(_live(cluster, NODES))
            except BaseException:
                agent.stop()
                raise

        # The backend is down: the cluster changes, the agent spools.
        try:
            cluster.kubectl("scale", "deployment/web", "--replicas=5")
            cluster.kubectl("apply", "-f", "-", stdin=managed_deployment("api", 2))
            cluster.wait(
                "7 pods running", lambda: len([p for p in cluster.objects(PODS, "default")]) == 7, 120
            )
            cluster.wait(
                "the agent spooled what it could not send",
                lambda: agent.spool.items() and agent.last_error,
                60,
            )

            with backend_process(port, db, tmp_path) as url:
                cluster.wait("the spool drained", lambda: not agent.spool.items(), 120)

                def caught_up() -> bool:
                    return _stored(url, key, cluster_id, "pods") == _live(cluster, PODS) and _stored(
                        url, key, cluster_id, "deployments"
                    ) == _live(cluster, DEPLOYMENTS)

                cluster.wait("stored pods and Deployments equal the cluster's", caught_up, 600)
                clusters = httpx.get(
                    f"{url}/api/v1/clusters", headers={"Authorization": f"Bearer {key}"}
                ).json()
                assert clusters[0]["pod_count"] == len(_live(cluster, PODS))
                # The agent stops; the backend finishes what it accepted before it stops too (a push
                # accepted in its last moments would otherwise wait for its next start's sweep).
                agent.stop()
                cluster.wait("every accepted push processed", lambda: _unprocessed(db) == 0, 120)
        finally:
            agent.stop()

    # Every push was stored once and applied (or found stale) exactly once.
    engine = store_engine.create(db)
    with store_engine.sessions(engine).begin() as session:
        pushes = session.query(repo.Push).all()
        assert pushes and all(p.processed_at is not None for p in pushes)
        assert len({p.idempotency_key for p in pushes}) == len(pushes)
        assert len({p.sequence for p in pushes}) == len(pushes)
    engine.dispose()
