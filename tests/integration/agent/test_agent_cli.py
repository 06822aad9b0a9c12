"""`shipshape agent` as a process (the installed command line) against the emulator and `shipshape
backend`: structured logs (`--log-format json`) at debug level never carry the agent token, the Lease
is taken in the default namespace, and a Lease namespace that does not exist is a one-line error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from shipshape.emulator.resources import LEASES
from tests.integration.agent.backend_process import backend_process, bootstrap, free_port
from tests.integration.emulator.served_cluster import serve_cluster

pytestmark = pytest.mark.integration


def agent_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "from shipshape.cli.main import app; app()", "agent", *args]


def test_the_agent_logs_json_and_never_its_token(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'backend.db'}"
    key, cluster_id, token = bootstrap(db)
    secret = token.split("_", 2)[2]  # <kind>_<id>_<secret>: the part only the agent knows
    assert len(secret) >= 32
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    with serve_cluster(tmp_path) as cluster, backend_process(free_port(), db, tmp_path) as url:
        cluster.kubectl("create", "namespace", "shipshape-system")
        base = [
            "--backend",
            url,
            "--token-file",
            str(token_file),
            "--kubeconfig",
            str(cluster.served.kubeconfig),
            "--spool",
            str(tmp_path / "spool"),
            "--delta-every",
            "1s",
        ]
        env = {**os.environ, "COLUMNS": "200"}

        # No such Lease namespace: a one-line error naming the ways out, exit status 1.
        missing = subprocess.run(
            agent_command(*base, "--lease-namespace", "nowhere", "--no-instructions"),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert missing.returncode == 1, missing.stderr
        error = missing.stderr.strip().splitlines()[-1]
        assert error.startswith("error: cannot hold the Lease nowhere/shipshape-agent")
        assert "--no-leader-election" in error

        # (Without instructions: the backend keeps an abandoned long poll open for its whole wait,
        # which would hold up its own shutdown at the end of the test.)
        process = subprocess.Popen(
            agent_command(
                *base,
                "--identity",
                "agent-0",
                "--log-level",
                "debug",
                "--log-format",
                "json",
                "--no-instructions",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:

            def stored_nodes() -> bool:
                answer = httpx.get(
                    f"{url}/api/v1/clusters/{cluster_id}/objects",
                    params={"kind": "nodes"},
                    headers={"Authorization": f"Bearer {key}"},
                )
                return answer.status_code == 200 and bool(answer.json())

            cluster.wait("the agent's snapshot stored", stored_nodes, 120)
            lease = cluster.get(LEASES, "shipshape-system", "shipshape-agent")
            assert lease is not None and lease["spec"]["holderIdentity"] == "agent-0"
        finally:
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err[-2000:]
        # Stopped gracefully: the Lease is given up for the other replica.
        released = cluster.get(LEASES, "shipshape-system", "shipshape-agent")
        assert released is not None and not released["spec"].get("holderIdentity")

    assert secret not in out and secret not in err
    assert "agent-0" in out and "leader election on Lease shipshape-system/shipshape-agent" in out
    records = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert records and all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(r["level"] == "DEBUG" for r in records)  # debug really was on
    assert any(r.get("leader") is True and r["logger"] == "shipshape.kube.leader" for r in records)
