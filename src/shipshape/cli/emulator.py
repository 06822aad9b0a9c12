"""`shipshape emulator ...`: run the cluster emulator and steer it."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import typer

from shipshape.emulator import assembly
from shipshape.emulator import scenario as scenario_mod
from shipshape.emulator.apiserver import runner
from shipshape.emulator.runtime import Cluster
from shipshape.kube import errors
from shipshape.kube.clock import ScaledClock

app = typer.Typer(
    help="A Kubernetes-compatible cluster with spot instances, on this machine.", no_args_is_help=True
)


class ScenarioObjectsError(Exception):
    """A manifest of the scenario that the API refuses."""


async def _serve_until_signalled(
    cluster: Cluster, port: int, kubeconfig: Path, metadata_port: int | None
) -> None:
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
        await stop.wait()
    typer.echo("stopped", err=True)


@app.command()
def up(
    scenario: Path = typer.Option(..., "--scenario", "-s", help="Scenario YAML (pools, boot timeline, ...)."),
    port: int = typer.Option(6443, help="HTTPS port of the API server (0 picks a free one)."),
    kubeconfig: Path | None = typer.Option(
        None, help="Where to write the kubeconfig (default: .shipshape/<scenario>.kubeconfig)."
    ),
    speed: float = typer.Option(1.0, min=0.001, help="Emulated seconds per real second."),
    metadata_port: int | None = typer.Option(
        None, "--metadata-port", help="Port of the instance-metadata endpoint (default: a free one)."
    ),
) -> None:
    """Start an emulated cluster and serve the Kubernetes API until interrupted."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        loaded = scenario_mod.load(scenario)
    except scenario_mod.ScenarioError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    cluster = assembly.build(loaded, ScaledClock(speed))
    target = kubeconfig or Path(".shipshape") / f"{loaded.name}.kubeconfig"
    try:
        runner.run_loop(_serve_until_signalled(cluster, port, target.resolve(), metadata_port))
    except ScenarioObjectsError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"cannot serve on port {port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None


def _register_cloud_commands() -> None:
    from shipshape.cli import emulator_cloud

    emulator_cloud.register(app)


_register_cloud_commands()
