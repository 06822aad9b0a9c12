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


THREAD_NAME = "shipshape-emulator"
STOP_SECONDS = 15.0  # a clean stop: close the server and the engine
CANCEL_SECONDS = 5.0  # then the serving task is cancelled
TASK_GRACE_SECONDS = 2.0  # tasks left once serving ended may finish within this, or count as leaked


class EmulatorTeardownError(RuntimeError):
    """The served emulator did not stop cleanly (thread alive, error while stopping, tasks left)."""


def live_emulator_threads() -> list[threading.Thread]:
    """Threads `running` started that are still alive (a session-level check uses this)."""
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME) and t.is_alive()]


def _describe(tasks: set[asyncio.Task[Any]]) -> str:
    return ", ".join(sorted(f"{t.get_name()} ({t.get_coro()!r})" for t in tasks))


async def _leftover_tasks(grace_seconds: float) -> set[asyncio.Task[Any]]:
    """Tasks other than the current one still pending once serving ended; given a short grace to end."""
    current = asyncio.current_task()
    pending = {t for t in asyncio.all_tasks() if t is not current}
    if pending:
        _, pending = await asyncio.wait(pending, timeout=grace_seconds)
    for task in pending:
        task.cancel()
    return pending


@contextlib.contextmanager
def running(
    cluster: Cluster,
    workdir: Path | None = None,
    *,
    stop_seconds: float = STOP_SECONDS,
    cancel_seconds: float = CANCEL_SECONDS,
    task_grace_seconds: float = TASK_GRACE_SECONDS,
    **serve_options: Any,
) -> Iterator[ServedEmulator]:
    """Serve `cluster` from a background thread until the block exits.

    At exit the server and the engine stop; if they do not within `stop_seconds` the serving task is
    cancelled; a thread still alive after that, an error while stopping, or asyncio tasks left behind
    raise `EmulatorTeardownError` (the test fails rather than leaving a cluster running behind it).
    """
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        stop = asyncio.Event()
        box["stop"] = stop
        box["loop"] = asyncio.get_running_loop()
        box["task"] = asyncio.current_task()
        try:
            async with serve(cluster, workdir=workdir, **serve_options) as served:
                box["served"] = served
                ready.set()
                await stop.wait()
        except BaseException as exc:
            box["error"] = exc
            ready.set()
            raise
        leaked = await _leftover_tasks(task_grace_seconds)
        if leaked:
            box["leaked"] = leaked

    def target() -> None:
        with contextlib.suppress(BaseException):  # recorded in box["error"] by main
            run_loop(main())

    thread = threading.Thread(target=target, name=THREAD_NAME, daemon=True)
    thread.start()
    limits = (stop_seconds, cancel_seconds)
    if not ready.wait(30) or "error" in box:
        _stop(thread, box, *limits)
        raise RuntimeError(f"the emulator did not start: {box.get('error')!r}")
    served: Served = box["served"]
    loop: asyncio.AbstractEventLoop = box["loop"]
    try:
        yield ServedEmulator(served.kubeconfig, cluster, served.url, served.token, served.ca_path, loop)
    finally:
        _stop(thread, box, *limits)


def _stop(thread: threading.Thread, box: dict[str, Any], stop_seconds: float, cancel_seconds: float) -> None:
    """Stop the serving thread (see `running`), raising EmulatorTeardownError if it does not stop cleanly."""
    loop: asyncio.AbstractEventLoop | None = box.get("loop")
    if loop is not None and not loop.is_closed() and "stop" in box:
        with contextlib.suppress(RuntimeError):  # the loop closed in between
            loop.call_soon_threadsafe(box["stop"].set)
    thread.join(stop_seconds)
    cancelled = False
    if thread.is_alive() and loop is not None and "task" in box:
        cancelled = True
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(box["task"].cancel)
        thread.join(cancel_seconds)
    if thread.is_alive():
        raise EmulatorTeardownError(
            f"the emulator thread is still running {stop_seconds + cancel_seconds:g} s after it was "
            "told to stop and its serving task was cancelled"
        )
    error = box.get("error")
    if cancelled:
        raise EmulatorTeardownError(
            f"the emulator did not stop within {stop_seconds:g} s; its serving task had to be cancelled"
        ) from error
    if error is not None and "served" in box:
        raise EmulatorTeardownError(f"the emulator failed while serving or stopping: {error!r}") from error
    if box.get("leaked"):
        raise EmulatorTeardownError(f"asyncio tasks left running by the emulator: {_describe(box['leaked'])}")


@pytest.fixture
def served_emulator(tmp_path: Path) -> Iterator[ServedEmulator]:
    """The API alone (system namespaces, no models) served over HTTPS with a token."""
    cluster = assembly.build(None, RealClock(), models=False)
    with running(cluster, tmp_path, settings=ServerSettings(bookmark_interval=0.2)) as served:
        yield served
