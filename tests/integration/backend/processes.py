"""`shipshape backend`, `shipshape worker` and `shipshape admin` as real processes, for tests that
need processes (their logs, their deaths). Output goes to a file per process, so a process that logs
a lot never stalls on a full pipe."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

COMMAND = [sys.executable, "-c", "from shipshape.cli.main import app; app()"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def admin(workdir: Path, *args: str) -> dict[str, Any]:
    """`shipshape admin … --json`, its JSON answer (stderr kept in `admin.log` of `workdir`)."""
    done = subprocess.run(
        [*COMMAND, "admin", *args, "--json"], capture_output=True, text=True, timeout=60, cwd=workdir
    )
    with (workdir / "admin.log").open("a", encoding="utf-8") as log:
        log.write(done.stderr)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    url: str | None = None

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown of any kind, as when a node dies or the OOM killer strikes."""
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, and its exit code once it ended (uvicorn shuts down gracefully, then ends by the
        signal it caught: -15)."""
        if self.alive():
            self.popen.terminate()
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=30)
            raise AssertionError(f"{self.name} did not stop on SIGTERM within {timeout:.0f} s") from None


def start(name: str, workdir: Path, *args: str, env: dict[str, str] | None = None) -> Process:
    log = workdir / f"{name}.log"
    with log.open("ab") as output:
        popen = subprocess.Popen(
            [*COMMAND, *args],
            cwd=workdir,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    return Process(name, popen, log)


GRACEFUL = (0, -signal.SIGTERM)


def start_backend(
    name: str, workdir: Path, *args: str, env: dict[str, str] | None = None, ca: Path | None = None
) -> Process:
    """`shipshape backend --port <free> …`, once `/readyz` answers 200 (over HTTPS, trusting `ca`,
    when `ca` is given)."""
    port = free_port()
    process = start(name, workdir, "backend", "--port", str(port), *args, env=env)
    process.url = f"{'https' if ca else 'http'}://127.0.0.1:{port}"
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else True
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{process.url}/readyz", timeout=1, verify=verify).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        assert process.alive(), process.output()
        assert time.monotonic() < deadline, f"{name} did not become ready:\n{process.output()}"
        time.sleep(0.1)
