"""Two agents on one cluster (the emulator, through the real client) and one backend (`shipshape
backend` on its embedded defaults, in a subprocess): the holder of the Lease `shipshape-agent` pushes,
the other only follows the cluster; when the leader stops (its Lease released) the follower takes over
at once, when it is killed (its Lease left to expire) within the lease duration, and each new leader
starts with a full snapshot whose sequence follows every push before it. The backend's state then
equals the cluster's, every push stored and applied once."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
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
from shipshape.emulator.resources import DEPLOYMENTS, LEASES, NODES, PODS, REPLICASETS
from shipshape.kube import client
from shipshape.kube import informers as kit
from shipshape.kube.clock import parse_time, rfc3339_micro
from shipshape.kube.leader import LeaseElector, LeaseSettings
from tests.integration.agent.backend_process import backend_process, bootstrap, free_port
from tests.integration.controller.harness import managed_deployment
from tests.integration.emulator.served_cluster import ServedCluster, serve_cluster

pytestmark = pytest.mark.integration
NAMESPACE = "shipshape-system"
# Emulated seconds (40x: 0.75 s real), long enough that a loaded machine does not lose the Lease.
LEASE = LeaseSettings("shipshape-agent", NAMESPACE, duration_seconds=30, retry_seconds=2.0)
SETTINGS = AgentSettings(snapshot_interval=3600, delta_interval=5, backoff_start=0.2, backoff_max=1.0)


class Replicas:
    """Agent replicas by identity, each as `shipshape agent` builds it, with an API client of its own."""

    def __init__(self, cluster: ServedCluster, url: str, token: str, workdir: Path) -> None:
        self.cluster, self.url, self.token, self.workdir = cluster, url, token, workdir
        self.running: dict[str, Agent] = {}
        self.clients: list[Any] = []

    def start(self, identity: str) -> Agent:
        api_client = client.load_api_client(self.cluster.served.kubeconfig)
        self.clients.append(api_client)
        mirror = Mirror()
        agent = Agent(
            kit.Informers(sources(api_client), mirror, backoff_max=1.0),
            mirror,
            Pusher(self.url, self.token),
            Spool(self.workdir / identity),
            self.cluster.clock,
            SETTINGS,
            elector=LeaseElector(api_client, identity, self.cluster.clock, LEASE),
        )
        agent.start()
        self.running[identity] = agent
        return agent

    def stop(self, identity: str, release_lease: bool = True) -> Agent:
        agent = self.running.pop(identity)
        agent.stop(release_lease=release_lease)
        return agent


@contextlib.contextmanager
def replicas(cluster: ServedCluster, url: str, token: str, workdir: Path) -> Iterator[Replicas]:
    started = Replicas(cluster, url, token, workdir)
    try:
        yield started
    finally:
        for agent in started.running.values():
            agent.stop()
        for api_client in started.clients:
            api_client.close()


def stored(url: str, key: str, cluster_id: str, kind: str) -> dict[str, str]:
    response = httpx.get(
        f"{url}/api/v1/clusters/{cluster_id}/objects",
        params={"kind": kind},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.text
    objects = response.json()
    found = {f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o for o in objects}
    assert len(found) == len(objects), f"{kind} stored twice"
    return {name: o["metadata"]["resourceVersion"] for name, o in found.items()}


def live(cluster: ServedCluster, rt: Any) -> dict[str, str]:
    return {
        f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in cluster.objects(rt)
    }


def holder(cluster: ServedCluster) -> str | None:
    lease = cluster.get(LEASES, NAMESPACE, LEASE.name)
    return None if lease is None else lease["spec"].get("holderIdentity")


def pushes(db: str) -> list[tuple[int, str, str | None]]:
    """(sequence, schema, outcome) of every stored push, by sequence."""
    engine = store_engine.create(db)
    try:
        with store_engine.sessions(engine).begin() as session:
            rows = session.query(repo.Push).order_by(repo.Push.sequence).all()
            assert len({p.idempotency_key for p in rows}) == len(rows)
            return [(p.sequence, p.schema_name, p.outcome) for p in rows]
    finally:
        engine.dispose()


@pytest.mark.integration
def test_two_agents_push_once_and_hand_over_on_stop_and_on_kill(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'backend.db'}"
    key, cluster_id, token = bootstrap(db)
    with (
        serve_cluster(tmp_path) as cluster,
        backend_process(free_port(), db, tmp_path) as url,
        replicas(cluster, url, token, tmp_path) as agents,
    ):
        cluster.kubectl("create", "namespace", NAMESPACE)
        for name in ("agent-a", "agent-b"):
            agents.start(name)
        leader_name = cluster.wait("one agent holds the Lease", lambda: holder(cluster), 30)
        leader = agents.running[leader_name]
        follower_name = next(n for n in agents.running if n != leader_name)
        follower = agents.running[follower_name]
        cluster.kubectl("apply", "-f", "-", stdin=managed_deployment("web", 3))
        cluster.wait("web's 3 pods stored", lambda: len(stored(url, key, cluster_id, "pods")) == 3, 120)

        # Exactly one pushes; the other follows the cluster all the same (it takes over warm).
        assert leader.leading and not follower.leading
        assert leader.sent > 0 and follower.sent == 0 and not follower.spool.items()
        cluster.wait(
            "the follower's mirror holds every pod",
            lambda: follower.mirror.counts().get("pods") == len(cluster.objects(PODS)),
            60,
        )

        # A graceful stop releases the Lease: the follower takes over before the lease could expire.
        stopped_at = cluster.now()
        agents.stop(leader_name)
        before = leader.last_sequence
        cluster.wait("the follower took over", lambda: follower.leading, LEASE.duration_seconds)
        assert cluster.now() - stopped_at < LEASE.duration_seconds / 2
        assert holder(cluster) == follower_name
        cluster.wait("the new leader pushed", lambda: follower.sent > 0, 60)
        # Its first push is a full snapshot, after every push of the leader before it.
        after = [p for p in pushes(db) if p[0] > before]
        assert after and after[0][1] == "shipshape.dev/snapshot/v1", after

        # A third replica follows; the leader is killed (no release): taken over within the lease.
        third = agents.start("agent-c")
        assert not third.leading
        cluster.kubectl("scale", "deployment/web", "--replicas=5")
        cluster.kubectl("apply", "-f", "-", stdin=managed_deployment("api", 2))
        cluster.wait("7 pods", lambda: len(cluster.objects(PODS, "default")) == 7, 120)
        agents.stop(follower_name, release_lease=False)
        before = follower.last_sequence
        lease = cluster.get(LEASES, NAMESPACE, LEASE.name)
        assert lease is not None and lease["spec"]["holderIdentity"] == follower_name
        renewed = parse_time(lease["spec"]["renewTime"])  # its last renewal
        cluster.wait("agent-c took over", lambda: third.leading, LEASE.duration_seconds + 10)
        # Not before the killed leader's lease ran out, and soon after (a step every 2 s).
        taken = cluster.get(LEASES, NAMESPACE, LEASE.name)
        assert taken is not None and taken["spec"]["holderIdentity"] == "agent-c"
        took = parse_time(taken["spec"]["acquireTime"])
        assert renewed + LEASE.duration_seconds <= took <= renewed + LEASE.duration_seconds + 10
        cluster.kubectl("scale", "deployment/api", "--replicas=1")

        def caught_up() -> bool:
            return all(
                stored(url, key, cluster_id, kind) == live(cluster, rt)
                for kind, rt in (("pods", PODS), ("deployments", DEPLOYMENTS), ("replicasets", REPLICASETS))
            ) and set(stored(url, key, cluster_id, "nodes")) == set(live(cluster, NODES))

        cluster.wait("the stored state equals the cluster's", caught_up, 300)
        after = [p for p in pushes(db) if p[0] > before]
        assert after and after[0][1] == "shipshape.dev/snapshot/v1", after
        assert third.sent > 0
        # No more pushes; what was stored is processed before the backend stops (the state caught up
        # says nothing of a last push that changed nothing it compares).
        agents.stop("agent-c")
        cluster.wait("every stored push processed", lambda: all(o is not None for _, _, o in pushes(db)), 60)

    # Every push stored once, under its own sequence, and processed: applied, or stale when a newer
    # snapshot had replaced what it followed, or superseded when that snapshot was waiting beside it
    # (a stopping leader's last deltas and its successor's first snapshot, on a loaded machine).
    final = pushes(db)
    processed = ("applied", "stale", "superseded")
    assert len({sequence for sequence, _, _ in final}) == len(final)
    assert all(outcome in processed for _, _, outcome in final), [p for p in final if p[2] not in processed]


@pytest.mark.integration
def test_a_leader_whose_lease_is_taken_stops_pushing_and_resumes_with_a_snapshot(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'backend.db'}"
    key, cluster_id, token = bootstrap(db)
    with (
        serve_cluster(tmp_path) as cluster,
        backend_process(free_port(), db, tmp_path) as url,
        replicas(cluster, url, token, tmp_path) as agents,
    ):
        cluster.kubectl("create", "namespace", NAMESPACE)
        agent = agents.start("agent-a")
        assert agent.leading
        cluster.kubectl("apply", "-f", "-", stdin=managed_deployment("web", 2))
        cluster.wait("web's 2 pods stored", lambda: len(stored(url, key, cluster_id, "pods")) == 2, 120)

        # Someone else holds the Lease now (another replica that saw it expire, say): at its next step
        # the agent sees it and stops pushing, spooling nothing either.
        # One update of the Lease in place (a delete and re-create would race the agent, which
        # creates a missing Lease at its next step).
        stolen = {
            "spec": {
                "holderIdentity": "elsewhere",
                "leaseDurationSeconds": 3600,
                "renewTime": rfc3339_micro(cluster.now()),
            }
        }
        cluster.kubectl(
            "patch", "lease", LEASE.name, "-n", NAMESPACE, "--type=merge", "-p", json.dumps(stolen)
        )
        cluster.wait("the agent stopped leading", lambda: not agent.leading, LEASE.retry_seconds * 3)
        sent, spooled, last = agent.sent, len(agent.spool.items()), agent.last_sequence
        cluster.kubectl("scale", "deployment/web", "--replicas=4")
        cluster.wait("4 pods", lambda: len(cluster.objects(PODS, "default")) == 4, 120)
        since = cluster.now()
        cluster.wait("several delta periods", lambda: cluster.now() > since + 4 * SETTINGS.delta_interval, 60)
        assert (agent.sent, len(agent.spool.items()), agent.last_sequence) == (sent, spooled, last)
        assert len(stored(url, key, cluster_id, "pods")) == 2

        # The Lease is free again: the agent takes it, starts with a snapshot, and catches up.
        cluster.kubectl("delete", "lease", LEASE.name, "-n", NAMESPACE)
        cluster.wait("the agent leads again", lambda: agent.leading, LEASE.retry_seconds * 3)
        cluster.wait(
            "the stored pods equal the cluster's",
            lambda: stored(url, key, cluster_id, "pods") == live(cluster, PODS),
            120,
        )
        after = [p for p in pushes(db) if p[0] > last]
        assert after and after[0][1] == "shipshape.dev/snapshot/v1", after
