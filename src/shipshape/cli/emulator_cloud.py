"""`shipshape emulator interrupt|shortage`: steer a running emulator's cloud through its control API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shipshape.emulator.cloud.client import ControlClient, ControlError, default_kubeconfig, load_target
from shipshape.kube.duration import DurationError, parse_duration

KubeconfigOption = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="kubeconfig of the emulator (default: $KUBECONFIG or ~/.kube/config)"),
]


def _seconds(text: str, flag: str) -> float:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise typer.BadParameter(str(exc), param_hint=flag) from None


def _client(kubeconfig: Path | None) -> ControlClient:
    return ControlClient.connect(load_target(kubeconfig or default_kubeconfig()))


def _fail(exc: ControlError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(1)


def interrupt(
    node: Annotated[str | None, typer.Option("--node", help="one node (spot instance) by name")] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="every spot instance of a pool")] = None,
    zone: Annotated[str | None, typer.Option("--zone", help="every spot instance in a zone")] = None,
    notice: Annotated[str, typer.Option("--notice", help="time from notice to termination")] = "120s",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Send spot interruption notices (the instances terminate after the notice)."""
    chosen = [flag for flag, value in (("--node", node), ("--pool", pool), ("--zone", zone)) if value]
    if len(chosen) != 1:
        raise typer.BadParameter(
            "give exactly one of --node, --pool or --zone" + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    seconds = _seconds(notice, "--notice")
    try:
        client = _client(kubeconfig)
        try:
            result = client.interrupt(node=node, pool=pool, zone=zone, notice=seconds)
        finally:
            client.close()
    except ControlError as exc:
        raise _fail(exc) from None
    nodes = result.get("nodes") or []
    target = f"node {node}" if node else f"pool {pool}" if pool else f"zone {zone}"
    if not nodes:
        typer.echo(f"no new notice for {target}: its spot instances already have one, or none is running")
        return
    typer.echo(
        f"interruption notice sent to {len(nodes)} node(s) of {target}; "
        f"they terminate at {result.get('terminationTime')} (notice {result.get('notice'):g}s):"
    )
    for name in nodes:
        typer.echo(f"  {name}")


def shortage(
    pool: Annotated[str, typer.Option("--pool", help="the pool that cannot grow")],
    duration: Annotated[str, typer.Option("--for", help="how long, e.g. 10m")],
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Make a pool run out of capacity for a while: no new instances until it ends."""
    seconds = _seconds(duration, "--for")
    if seconds <= 0:
        raise typer.BadParameter("a shortage must last longer than 0s", param_hint="--for")
    try:
        client = _client(kubeconfig)
        try:
            result = client.shortage(pool=pool, seconds=seconds)
        finally:
            client.close()
    except ControlError as exc:
        raise _fail(exc) from None
    typer.echo(f"pool {result.get('pool')} has no capacity until {result.get('until')} ({seconds:g}s)")


def register(app: typer.Typer) -> None:
    app.command("interrupt")(interrupt)
    app.command("shortage")(shortage)
