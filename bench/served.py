"""A served emulator for the benchmarks: `shipshape emulator up` in a child process on a free port, and
a keep-alive client to it (shared by `emulator.py` and `ingest.py`)."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

CLI = [sys.executable, "-c", "from shipshape.cli.main import app; app()"]


@dataclass
class Served:
    url: str
    kubeconfig: Path
    token: str
    verify: ssl.SSLContext
    pid: int

    def client(self, connections: int) -> aiohttp.ClientSession:
        """A keep-alive client with at most `connections` connections (aiohttp: its per-request CPU cost
        is a fifth of httpx's, so that on two cores the client does not limit what is measured)."""
        return aiohttp.ClientSession(
            self.url,
            connector=aiohttp.TCPConnector(ssl=self.verify, limit=connections),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def served_cluster(
    spec: dict[str, Any], *, speed: float = 1.0, workdir: Path | None = None
) -> Iterator[Served]:
    """`shipshape emulator up` on `spec` until the block exits; in `workdir` (its stderr in
    `emulator.log` there) or a temporary folder."""
    with contextlib.ExitStack() as stack:
        folder = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-emulator-")))
        scenario_path = folder / "scenario.yaml"
        scenario_path.write_text(yaml.safe_dump(spec))
        kubeconfig = folder / "kubeconfig"
        errors = stack.enter_context(open(folder / "emulator.log", "wb")) if workdir else None
        command = [
            *CLI,
            "emulator",
            "up",
            "--scenario",
            str(scenario_path),
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "--speed",
            str(speed),
        ]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, cwd=folder)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            while line and not line.startswith("ready"):
                line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"the emulator did not start (exit {process.wait()})")
            config = yaml.safe_load(kubeconfig.read_text())
            cluster = config["clusters"][0]["cluster"]
            ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
            yield Served(
                url=cluster["server"],
                kubeconfig=kubeconfig,
                token=config["users"][0]["user"]["token"],
                verify=ssl.create_default_context(cadata=ca),
                pid=process.pid,
            )
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
