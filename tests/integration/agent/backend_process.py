"""`shipshape backend` in a subprocess for tests of the agent (the agent speaks HTTP to it)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx

from shipshape.agent.instructions import Executor, InstructionClient, InstructionLoop
from shipshape.agent.mirror import Mirror
from shipshape.agent.pusher import Pusher
from shipshape.agent.runner import Agent, AgentSettings, sources
from shipshape.agent.spool import Spool
from shipshape.agent.usage import GpuReader, MetricsApi, UsageLoop, UsageSettings, owners_from
from shipshape.backend.store import engine as store_engine
from shipshape.backend.store import repository as repo
from shipshape.emulator.scenario import Scenario
from shipshape.kube import informers as kit
from tests.integration.emulator.served_cluster import ServedCluster, scenario, scenario_doc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bootstrap(db: str) -> tuple[str, str, str]:
    """(user API key, cluster id, agent token) of a new organisation with one cluster."""
    engine = store_engine.create(db)
    store_engine.migrate(engine)
    try:
        with store_engine.sessions(engine).begin() as session:
            org, key = repo.create_organization(session, "acme", datetime.now(UTC))
            cluster, token = repo.create_cluster(session, org.id, "prod", datetime.now(UTC))
            return key, cluster.id, token
    finally:
        engine.dispose()


@contextlib.contextmanager
def backend_process(port: int, db: str, workdir: Path, **settings: str) -> Iterator[str]:
    """`shipshape backend` on 127.0.0.1:port until the block ends (then terminated, as in an outage);
    `settings` become SHIPSHAPE_BACKEND_* variables."""
    env = {**os.environ, **{f"SHIPSHAPE_BACKEND_{k.upper()}": v for k, v in settings.items()}}
    # Its log goes to a file: a pipe read only at the end would fill with request lines and stall it.
    log = workdir / f"backend-{port}.log"
    output = log.open("a", encoding="utf-8")
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from shipshape.cli.main import app; app()",
            "backend",
            "--port",
            str(port),
            "--db",
            db,
        ],
        cwd=workdir,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, log.read_text(encoding="utf-8")
            assert time.monotonic() < deadline, "the backend did not become ready"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        output.close()
        out = log.read_text(encoding="utf-8")
        assert "Traceback" not in out, out


# A backend that analyses usage at once, on one-minute steps, after three minutes of history, and
# the agent's usage settings to feed it: what the usage end-to-end tests run, in seconds not hours.
FAST_USAGE = UsageSettings(interval=30, bucket_seconds=60, grace=15)


def fast_usage_backend(db: str, workdir: Path) -> contextlib.AbstractContextManager[str]:
    return backend_process(
        free_port(),
        db,
        workdir,
        analysis_seconds="0",
        usage_analysis_seconds="0",
        usage_step_seconds="60",
        usage_min_history_hours="0.05",  # 3 slots of a minute
    )


def on_demand_only_unless_tolerated() -> Scenario:
    """The test cluster with its spot nodes tainted: pods that do not tolerate spot run on-demand."""
    taint = {"key": "node.kubernetes.io/capacity", "value": "spot", "effect": "NoSchedule"}
    pools = [
        {**pool, "taints": [taint]} if pool["capacityType"] == "spot" else pool
        for pool in scenario_doc()["pools"]
    ]
    return scenario(pools=pools)


@contextlib.contextmanager
def running_agent(
    cluster: ServedCluster,
    url: str,
    token: str,
    spool: Path,
    usage: UsageSettings | None = None,
    gpu: GpuReader | None = None,
) -> Iterator[Agent]:
    """The agent on the served cluster pushing to `url` (deltas every 5 emulated s), executing approved
    instructions, and with `usage` reading metrics.k8s.io (and GPU activity from `gpu`), until the
    block ends."""
    mirror = Mirror()
    pusher = Pusher(url, token)
    collector = (
        None
        if usage is None
        else UsageLoop(
            MetricsApi(cluster.api_client),
            owners_from(mirror.get),
            pusher,
            Spool(spool / "usage"),
            cluster.clock,
            usage,
            gpu=gpu,
        )
    )
    agent = Agent(
        kit.Informers(sources(cluster.api_client), mirror, backoff_max=1.0),
        mirror,
        pusher,
        Spool(spool),
        cluster.clock,
        AgentSettings(snapshot_interval=3600, delta_interval=5),
        usage=collector,
    )
    loop = InstructionLoop(InstructionClient(pusher.client), Executor(cluster.api_client), wait=2.0)
    agent.start()
    loop.start()
    try:
        yield agent
    finally:
        loop.stop()
        agent.stop()
