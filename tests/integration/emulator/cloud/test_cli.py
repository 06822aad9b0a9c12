"""`shipshape emulator interrupt|shortage` against the control routes served over real HTTP."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send
from typer.testing import CliRunner

from shipshape.cli.main import app
from shipshape.emulator.cloud.client import ControlError, load_target
from shipshape.kube.clock import rfc3339
from tests.unit.emulator.cloud.builders import Env, scenario, start

TOKEN = "s3cret-token"


class _RequireToken:
    """Bearer-token check in front of the routes, as the API server mounts them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            if request.headers.get("authorization") != f"Bearer {TOKEN}":
                body = {"kind": "Status", "code": 401, "message": "Unauthorized"}
                response: Response = JSONResponse(body, 401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _kubeconfig(path: Path, server: str, token: str = TOKEN) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emu", "cluster": {"server": server}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "admin"}}],
        "current-context": "emu",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Env, Path]]:
    env = start(scenario(interruptions={"enabled": False}, autoscaler={"enabled": False}))
    web = _RequireToken(Starlette(routes=env.cluster.services["http_routes"]))
    server = uvicorn.Server(uvicorn.Config(web, host="127.0.0.1", port=0, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not server.started:
        assert time.monotonic() < deadline, "test server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield env, _kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(5)


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["emulator", *args])
    return result.exit_code, result.output


def test_interrupt_a_pool(served: tuple[Env, Path]) -> None:
    env, kubeconfig = served
    code, out = _run("interrupt", "--pool", "spot-a", "--notice", "90s", "--kubeconfig", str(kubeconfig))
    assert code == 0, out
    assert "interruption notice sent to 2 node(s) of pool spot-a" in out
    assert rfc3339(env.clock.now() + 90) in out
    for name in env.nodes_of("spot-a"):
        assert name in out
        assert env.cloud.instance_action(name) is not None
    code, out = _run("interrupt", "--pool", "spot-a", "--kubeconfig", str(kubeconfig))
    assert code == 0 and "no new notice" in out


def test_shortage(served: tuple[Env, Path]) -> None:
    env, kubeconfig = served
    code, out = _run("shortage", "--pool", "spot-b", "--for", "10m", "--kubeconfig", str(kubeconfig))
    assert code == 0, out
    assert f"pool spot-b has no capacity until {rfc3339(env.clock.now() + 600)}" in out
    assert env.cloud.in_shortage("spot-b")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["interrupt", "--pool", "nope"], "unknown pool 'nope'"),
        (["interrupt", "--node", "od-node"], "is not a running instance"),
        (["interrupt", "--pool", "od-b"], "on-demand"),
        (["shortage", "--pool", "nope", "--for", "1m"], "unknown pool 'nope'"),
    ],
)
def test_refusals_from_the_emulator_exit_1_and_change_nothing(
    served: tuple[Env, Path], args: list[str], message: str
) -> None:
    env, kubeconfig = served
    code, out = _run(*args, "--kubeconfig", str(kubeconfig))
    assert code == 1
    assert message in out
    assert all(i.notice is None for i in env.cloud.instances.values())
    assert not any(env.cloud.in_shortage(p) for p in env.cloud.pools)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["interrupt"], "exactly one of --node, --pool or --zone"),
        (["interrupt", "--pool", "a", "--zone", "b"], "exactly one of --node, --pool or --zone"),
        (["interrupt", "--pool", "a", "--notice", "soon"], "invalid duration"),
        (["shortage", "--pool", "a", "--for", "0s"], "longer than 0s"),
        (["shortage", "--pool", "a"], "--for"),
    ],
)
def test_bad_flags_exit_2_before_any_request(tmp_path: Path, args: list[str], message: str) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")
    code, out = _run(*args, "--kubeconfig", str(kubeconfig))
    assert code == 2
    assert message in " ".join(out.split())


def test_no_emulator_running(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = _kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    code, out = _run("interrupt", "--pool", "spot-a", "--kubeconfig", str(kubeconfig))
    assert code == 1
    assert "no emulator answers at" in out and "shipshape emulator up" in out


def test_a_wrong_token_is_reported(served: tuple[Env, Path], tmp_path: Path) -> None:
    env, kubeconfig = served
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    wrong = _kubeconfig(tmp_path / "wrong", server, token="nope")
    code, out = _run("shortage", "--pool", "spot-a", "--for", "1m", "--kubeconfig", str(wrong))
    assert code == 1 and "refused the token" in out
    assert not env.cloud.in_shortage("spot-a")


def test_kubeconfig_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ControlError, match="cannot read kubeconfig"):
        load_target(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text("current-context: x\ncontexts: []\n")
    with pytest.raises(ControlError, match="no context named 'x'"):
        load_target(bad)
