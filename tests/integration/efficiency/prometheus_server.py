"""A real Prometheus server over a TSDB backfilled by promtool from OpenMetrics text."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

READY_SECONDS = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def backfill(openmetrics: str, directory: Path) -> Path:
    """Blocks made by `promtool tsdb create-blocks-from openmetrics` in directory/data."""
    if shutil.which("promtool") is None:
        pytest.fail(
            "promtool is not installed (scripts/ensure-test-services.sh installs the prometheus package)"
        )
    source = directory / "history.om"
    source.write_text(openmetrics)
    data = directory / "data"
    result = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return data


@contextlib.contextmanager
def serving(data: Path, directory: Path) -> Iterator[str]:
    """Prometheus on a free loopback port over `data` (no scraping); yields its URL."""
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is not installed (scripts/ensure-test-services.sh installs it)")
    config = directory / "prometheus.yml"
    config.write_text("global: {}\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (directory / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"prometheus exited: {(directory / 'prometheus.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/-/ready", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus did not become ready")
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
