"""`shipshape emulator ...`: run the cluster emulator and steer it.

The emulator is imported inside `up` (so that `interrupt`, `shortage` and the help answer at once).
Each `up` gets a free port unless `--port` names one, and its own folder
`.emulator/up/<scenario>-<port>/` for the kubeconfig, so that two runs never overwrite each other's
credentials.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from shipshape.cli import common
from shipshape.kube.clock import parse_time, rfc3339
from shipshape.kube.duration import DurationError, parse_duration

if TYPE_CHECKING:
    from shipshape.emulator.runtime import Cluster

UP_FOLDER = Path(".emulator/up")

app = typer.Typer(
    help="A Kubernetes-compatible cluster with spot instances, on this machine.", no_args_is_help=True
)


class ScenarioObjectsError(Exception):
    """A manifest of the scenario that the API refuses."""


def emulated_start(value: str | None, now: float) -> float:
    """When emulated time begins: `value` as an RFC 3339 time or a duration before `now`; default now."""
    if value is None:
        return now
    try:
        return now - parse_duration(value)
    except DurationError:
        pass
    try:
        if datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None:
            return parse_time(value)
    except ValueError:
        pass
    raise typer.BadParameter(
        f"{value!r} is neither an RFC 3339 time (2026-01-01T00:00:00Z) nor a duration (e.g. 2h)",
        param_hint="--start",
    )


def behind_wall_clock_for(start: float, now: float, speed: float) -> float:
    """Real seconds during which emulated time, from `start` at `now` and `speed`x, stays behind the
    wall clock (0: ahead from the start; inf: never catches up)."""
    lag = now - start
    if lag < 0 or (lag == 0 and speed > 1):
        return 0.0
    if speed <= 1:
        return math.inf
    return lag / (speed - 1)


def _human(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"


def clock_note(start: float, now: float, speed: float, start_given: bool) -> str | None:
    """What to tell the user about emulated time against this machine's clock (clients such as
    kubectl compute ages on their own clock and print `<invalid>` for times in their future)."""
    behind = behind_wall_clock_for(start, now, speed)
    if behind == math.inf:
        return None
    if behind == 0:
        if speed <= 1 and start <= now:
            return None
        hint = "" if start_given else "; --start <duration> begins emulated time that far in the past"
        return (
            f"note: emulated time runs ahead of this machine's clock (--speed {speed:g}), so kubectl "
            f"shows <invalid> ages{hint}"
        )
    return (
        f"emulated time starts at {rfc3339(start)}, {_human(now - start)} behind this machine's clock, "
        f"and catches up with it in {_human(behind)} (--speed {speed:g}); after that kubectl shows "
        "<invalid> ages"
    )


async def _serve_until_signalled(
    cluster: Cluster, port: int, kubeconfig: Path, metadata_port: int | None
) -> None:
    from shipshape.emulator import assembly
    from shipshape.emulator.apiserver import runner
    from shipshape.kube import errors

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with runner.serve(cluster, port=port, kubeconfig=kubeconfig, metadata_port=metadata_port) as served:
        try:
            await assembly.apply_objects(cluster)
        except errors.ApiError as exc:
            raise ScenarioObjectsError(f"the scenario's objects cannot be created: {exc.message}") from None
        typer.echo(f"ready {served.kubeconfig}")
        typer.echo(f"API server at {served.url}; to use it: export KUBECONFIG={served.kubeconfig}", err=True)
        await stop.wait()
    typer.echo("stopped", err=True)


def run_folder(base: Path, name: str, port: int) -> Path:
    """The folder of one run: `<base>/<name>-<port>` (a port serves one run at a time)."""
    return base / f"{name}-{port}"


@app.command()
def up(
    scenario: Path = typer.Option(..., "--scenario", "-s", help="Scenario YAML (pools, boot timeline, ...)."),
    port: int | None = typer.Option(
        None, help="HTTPS port of the API server (default: a free one, printed; 0 also picks one)."
    ),
    kubeconfig: Path | None = typer.Option(
        None,
        help="Where to write the kubeconfig (default: .emulator/up/<scenario>-<port>/kubeconfig, "
        "a folder per run).",
    ),
    speed: float = typer.Option(1.0, min=0.001, help="Emulated seconds per real second."),
    metadata_port: int | None = typer.Option(
        None, "--metadata-port", help="Port of the instance-metadata endpoint (default: a free one)."
    ),
    start: str | None = typer.Option(
        None,
        "--start",
        help="When emulated time begins: an RFC 3339 time, or a duration before now (e.g. 2h) that "
        "keeps a faster clock behind the wall clock for duration/(speed-1). Default: now.",
    ),
) -> None:
    """Start an emulated cluster and serve the Kubernetes API until interrupted."""
    from shipshape.emulator import assembly
    from shipshape.emulator import scenario as scenario_mod
    from shipshape.emulator.apiserver import runner
    from shipshape.kube.clock import ScaledClock

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        loaded = scenario_mod.load(scenario)
    except scenario_mod.ScenarioError as exc:
        raise common.fail(exc, listing=True) from None
    now = time.time()
    begins = emulated_start(start, now)
    chosen_port = common.serving_port(port)
    note = clock_note(begins, now, speed, start_given=start is not None)
    if note is not None:
        typer.echo(note, err=True)
    cluster = assembly.build(loaded, ScaledClock(speed, start=begins))
    target = kubeconfig or run_folder(UP_FOLDER, loaded.name, chosen_port) / "kubeconfig"
    try:
        runner.run_loop(_serve_until_signalled(cluster, chosen_port, target.resolve(), metadata_port))
    except ScenarioObjectsError as exc:
        raise common.fail(exc) from None
    except OSError as exc:
        raise common.fail(
            f"cannot serve on port {chosen_port}: {common.os_reason(exc)}", common.FAILED
        ) from None


def _register_cloud_commands() -> None:
    from shipshape.cli import emulator_cloud

    emulator_cloud.register(app)


_register_cloud_commands()
