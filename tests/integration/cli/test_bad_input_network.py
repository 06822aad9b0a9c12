"""The mistakes that meet the network: an API server that is not there, a port already in use, a
controller stopped before it could list anything. One `error:` line, the right exit code, nothing left
running (see tests/unit/cli/test_bad_input.py for the rest)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.cli.test_bad_input import DEMO, _cli, _one_error_line, _run


@pytest.fixture
def dead_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig of an API server that is not there (a port nobody listens on)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tmp_path / "dead.kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
    )
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


@pytest.mark.parametrize(
    "command",
    [
        ["startup", "pods"],
        ["startup", "nodes"],
        ["startup", "serve", "--port", "0"],
        ["controller"],
        ["controller", "uninstall"],
        ["agent", "--backend", "http://127.0.0.1:9", "--token-file", __file__],
    ],
)
def test_an_unreachable_api_server_is_one_line(command: list[str], dead_kubeconfig: Path) -> None:
    code, out, err = _run(*command, "--kubeconfig", str(dead_kubeconfig))
    assert code in (1, 2) and out == ""
    line = _one_error_line(err)  # and no "Retrying (Retry(total=2 ...)" warnings from urllib3
    assert line.startswith("error: cannot reach the API server at https://127.0.0.1:")
    assert line.endswith(": connection refused")


# ---- ports in use --------------------------------------------------------------------------------------


def test_startup_serve_on_a_busy_port(busy_port: int, dead_kubeconfig: Path) -> None:
    code, _, err = _cli("startup", "serve", "--kubeconfig", str(dead_kubeconfig), "--port", str(busy_port))
    assert code == 1
    assert _one_error_line(err).startswith(
        f"error: cannot serve metrics on port {busy_port}: the port is in use"
    )


@pytest.mark.parametrize(
    "command", [["emulator", "up", "--scenario", str(DEMO)], ["demo"]], ids=["up", "demo"]
)
def test_emulator_on_a_busy_port(command: list[str], busy_port: int, tmp_path: Path) -> None:
    code, _, err = _cli(*command, "--port", str(busy_port))
    assert code == 1
    assert _one_error_line(err).startswith(f"error: cannot serve on port {busy_port}: the port is in use")
    assert not Path(".emulator", "up", f"demo-{busy_port}").exists()


# ---- the controller stopped before it synced -------------------------------------------------------------


def test_a_controller_stopped_before_it_started_or_synced_stops_cleanly(dead_kubeconfig: Path) -> None:
    from shipshape.controller.policy import ControllerConfig
    from shipshape.controller.process import ControllerProcess, ProcessSettings
    from shipshape.kube.client import load_api_client
    from shipshape.kube.clock import RealClock

    settings = ProcessSettings(identity="t", sync_timeout_seconds=0.2, informer_backoff_max_seconds=0.05)
    never_started = ControllerProcess(
        load_api_client(dead_kubeconfig), ControllerConfig(), settings, RealClock()
    )
    never_started.stop()  # RuntimeError: cannot join thread before it is started, before the fix

    unsynced = ControllerProcess(load_api_client(dead_kubeconfig), ControllerConfig(), settings, RealClock())
    with pytest.raises(RuntimeError, match="did not list every kind in time"):
        unsynced.start()
    unsynced.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("informer") and t.is_alive()]
