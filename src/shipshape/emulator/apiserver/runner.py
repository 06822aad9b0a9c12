"""Serve an emulated cluster: HTTPS API server, instance-metadata endpoint and engine on one loop.

    async with serve(cluster, port=0) as served:
        print(served.url, served.kubeconfig)

The same code backs `shipshape emulator up`, the demo and the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Coroutine, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import uvicorn

from shipshape.emulator.apiserver import tls
from shipshape.emulator.apiserver.app import ApiServer, ServerSettings
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import random_token

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Served:
    url: str
    port: int
    kubeconfig: Path
    token: str
    ca_path: Path
    server: ApiServer
    metadata_url: str | None = None


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the owner of the loop decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Clients that keep idle TLS connections never answer close_notify: drop those at once
        # (in-flight responses, watches included, still finish).
        for connection in list(self.server_state.connections):
            cycle = getattr(connection, "cycle", None)
            transport = getattr(connection, "transport", None)
            if transport is not None and (cycle is None or cycle.response_complete):
                transport.abort()
        await super().shutdown(sockets)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def _start(app: Any, sock: socket.socket, **config: Any) -> tuple[_Server, asyncio.Task[None]]:
    server = _Server(
        uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=1,
            backlog=2048,
            **config,
        )
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()  # raises the start-up error
            raise RuntimeError("the HTTP server stopped while starting")
        await asyncio.sleep(0.005)
    return server, task


async def _stop(server: _Server, task: asyncio.Task[None]) -> None:
    server.should_exit = True
    with contextlib.suppress(asyncio.CancelledError):
        await task


@contextlib.asynccontextmanager
async def serve(
    cluster: Cluster,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    kubeconfig: Path | None = None,
    token: str | None = None,
    context_name: str | None = None,
    metadata_port: int | None = None,
    run_engine: bool = True,
    settings: ServerSettings | None = None,
    workdir: Path | None = None,
) -> AsyncIterator[Served]:
    """Serve `cluster` until the block exits.

    Certificates go under `workdir` (a temporary directory, removed at exit, when not given), the
    kubeconfig to `kubeconfig` (default: `<workdir>/kubeconfig`). `port=0` picks a free port. The
    cluster's `metadata_app` service, when present, is served over plain HTTP on `metadata_port`
    (0 or None: a free port) and its base URL published as `metadata_url`.
    """
    own_dir = workdir is None
    directory = Path(tempfile.mkdtemp(prefix="shipshape-emulator-")) if workdir is None else workdir
    servers: list[tuple[_Server, asyncio.Task[None]]] = []
    engine_task: asyncio.Task[None] | None = None
    api_server = ApiServer(cluster, settings)
    try:
        creds = tls.generate(directory / "pki")
        token = token or random_token()
        metadata_url = None
        metadata_app = cluster.services.get("metadata_app")
        if metadata_app is not None:
            meta_sock = _bind(host, metadata_port or 0)
            meta_port = meta_sock.getsockname()[1]
            metadata_url = f"http://{host}:{meta_port}"
            cluster.services["metadata_url"] = metadata_url
            servers.append(await _start(metadata_app, meta_sock))
        api_server.hub.attach(asyncio.get_running_loop())
        sock = _bind(host, port)
        bound_port = sock.getsockname()[1]
        servers.append(
            await _start(
                api_server.app(token),
                sock,
                ssl_certfile=str(creds.cert_path),
                ssl_keyfile=str(creds.key_path),
                timeout_keep_alive=120,
            )
        )
        url_host = f"[{host}]" if ":" in host else host
        url = f"https://{url_host}:{bound_port}"
        name = context_name or (cluster.scenario.name if cluster.scenario else "emulator")
        config_path = kubeconfig or directory / "kubeconfig"
        tls.write_kubeconfig(config_path, tls.kubeconfig(url, creds.ca_pem, token, name))
        if run_engine:
            engine_task = asyncio.create_task(cluster.engine.run_forever())
        yield Served(url, bound_port, config_path, token, creds.ca_path, api_server, metadata_url)
    finally:
        api_server.hub.close()
        if engine_task is not None:
            engine_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await engine_task
        for server, task in reversed(servers):
            await _stop(server, task)
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a fresh event loop (uvloop when installed: HTTPS serving is much cheaper)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
