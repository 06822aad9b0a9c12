"""`shipshape admin`, `shipshape backend` as documented: bootstrap a tenant, serve, list its cluster."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest


def _shipshape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from shipshape.cli.main import app; app()", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_backend(cwd: Path) -> tuple[subprocess.Popen[str], str]:
    """`shipshape backend` on embedded defaults in `cwd`, once it answers ready; and its base URL."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", "from shipshape.cli.main import app; app()", "backend", "--port", str(port)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    return server, base


@pytest.mark.integration
def test_admin_bootstrap_then_the_api_lists_the_cluster(tmp_path: Path) -> None:
    # Embedded defaults: the database lands in the working folder.
    org = _shipshape("admin", "create-org", "acme", "--json", cwd=tmp_path)
    assert org.returncode == 0, org.stderr
    created = json.loads(org.stdout)
    assert set(created) == {"org_id", "api_key"} and created["api_key"].startswith("ssk_")
    cluster = _shipshape(
        "admin", "create-cluster", "--org", created["org_id"], "prod", "--json", cwd=tmp_path
    )
    assert cluster.returncode == 0, cluster.stderr
    cluster_created = json.loads(cluster.stdout)
    assert cluster_created["agent_token"].startswith("sst_")
    assert (tmp_path / ".shipshape" / "backend.db").is_file()

    # Bad input: one line, non-zero, nothing created.
    taken = _shipshape("admin", "create-org", "acme", "--json", cwd=tmp_path)
    assert taken.returncode == 1 and taken.stderr.strip() == "error: an organisation named 'acme' exists"
    nowhere = _shipshape("admin", "create-cluster", "--org", "nope", "x", cwd=tmp_path)
    assert nowhere.returncode == 1 and "organisation nope not found" in nowhere.stderr
    bad_db = _shipshape("admin", "create-org", "x", "--db", "mysql://h/db", cwd=tmp_path)
    assert bad_db.returncode == 1 and "unsupported database" in bad_db.stderr
    assert "Traceback" not in taken.stderr + nowhere.stderr + bad_db.stderr

    server, base = _start_backend(tmp_path)
    try:
        listed = httpx.get(
            f"{base}/api/v1/clusters", headers={"Authorization": f"Bearer {created['api_key']}"}
        )
        assert listed.status_code == 200
        (row,) = listed.json()
        assert row["id"] == cluster_created["cluster_id"]
        assert {"id", "name", "node_count", "pod_count", "last_seen"} <= set(row)
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=20)
    assert "Traceback" not in out, out


@pytest.mark.integration
def test_a_long_poll_in_flight_does_not_hold_up_a_graceful_stop(tmp_path: Path) -> None:
    org = json.loads(_shipshape("admin", "create-org", "acme", "--json", cwd=tmp_path).stdout)
    cluster = json.loads(
        _shipshape("admin", "create-cluster", "--org", org["org_id"], "prod", "--json", cwd=tmp_path).stdout
    )
    server, base = _start_backend(tmp_path)
    try:
        with httpx.Client(base_url=base, timeout=70) as agent:
            headers = {"Authorization": f"Bearer {cluster['agent_token']}"}
            answers: list[httpx.Response | Exception] = []

            def poll() -> None:
                try:
                    answers.append(agent.get("/api/v1/agent/instructions?wait=60", headers=headers))
                except Exception as error:  # the connection may close under it: also an answer
                    answers.append(error)

            poller = threading.Thread(target=poll)
            poller.start()
            time.sleep(1.0)  # the poll is waiting on the server
            assert not answers
            stop_asked = time.monotonic()
            server.terminate()
            server.wait(timeout=30)
            stopped_after = time.monotonic() - stop_asked
            poller.join(10)
    finally:
        if server.poll() is None:
            server.kill()
        out, _ = server.communicate(timeout=20)
    # Without the stop reaching the handler, uvicorn would wait out the whole 60 s poll.
    assert stopped_after < 5.0, f"the backend took {stopped_after:.1f} s to stop"
    assert answers and isinstance(answers[0], httpx.Response) and answers[0].json() == []
    # uvicorn re-raises the signal once it has shut down gracefully.
    assert server.returncode in (0, -15) and "Traceback" not in out, out
