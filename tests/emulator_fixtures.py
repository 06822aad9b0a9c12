"""A served emulator for tests: the real HTTPS API server on an ephemeral port, in a background thread.

Use the `served_emulator` fixture (the API alone: system namespaces, no models) or
`running(cluster)` for a cluster you built yourself (e.g. `assembly.build(scenario, clock)`):

    from tests.emulator_fixtures import served_emulator  # noqa: F401  (makes the fixture available)

    def test_something(served_emulator: ServedEmulator) -> None:
        kubeconfig, cluster = served_emulator          # it unpacks like (kubeconfig path, Cluster)
        ...                                            # kubectl --kubeconfig / kubernetes client
        pods = served_emulator.call(lambda: cluster.store.list(PODS))   # read state on the loop

The server, the engine and the models run on the background thread's event loop, so touch the
cluster from a test only through `call(fn)`, which runs `fn` on that loop and returns its result.
The engine runs in server mode, so give the cluster a `RealClock` or a `ScaledClock` (a
`VirtualClock` never advances on its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest

from shipshape.emulator import assembly
from shipshape.emulator.apiserver import Served, ServerSettings, serve
from shipshape.emulator.apiserver.runner import run_loop
from shipshape.emulator.runtime import Cluster
from shipshape.kube.clock import RealClock

T = TypeVar("T")


class ServedEmulator(NamedTuple):
    kubeconfig: Path
    cluster: Cluster
    url: str
    token: str
    ca_path: Path
    loop: asyncio.AbstractEventLoop

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run `fn` on the emulator's event loop (where the store and models live)."""

        async def invoke() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(invoke(), self.loop).result(timeout)


@contextlib.contextmanager
def running(cluster: Cluster, workdir: Path | None = None, **serve_options: Any) -> Iterator[ServedEmulator]:
    """Serve `cluster` from a background thread until the block exits."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        stop = asyncio.Event()
        box["stop"] = stop
        box["loop"] = asyncio.get_running_loop()
        try:
            async with serve(cluster, workdir=workdir, **serve_options) as served:
                box["served"] = served
                ready.set()
                await stop.wait()
        except BaseException as exc:
            box["error"] = exc
            ready.set()
            raise

    def target() -> None:
        with contextlib.suppress(BaseException):
            run_loop(main())

    thread = threading.Thread(target=target, name="emulator", daemon=True)
    thread.start()
    if not ready.wait(30) or "error" in box:
        raise RuntimeError(f"the emulator did not start: {box.get('error')!r}")
    served: Served = box["served"]
    loop: asyncio.AbstractEventLoop = box["loop"]
    try:
        yield ServedEmulator(served.kubeconfig, cluster, served.url, served.token, served.ca_path, loop)
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(15)


@pytest.fixture
def served_emulator(tmp_path: Path) -> Iterator[ServedEmulator]:
    """The API alone (system namespaces, no models) served over HTTPS with a token."""
    cluster = assembly.build(None, RealClock(), models=False)
    with running(cluster, tmp_path, settings=ServerSettings(bookmark_interval=0.2)) as served:
        yield served
