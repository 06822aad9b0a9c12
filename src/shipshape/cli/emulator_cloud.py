"""`shipshape emulator interrupt|shortage`: steer a running emulator's cloud through its control API."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shipshape.cli import common
from shipshape.kube.duration import DurationError, parse_duration

if TYPE_CHECKING:
    from shipshape.emulator.cloud.client import ControlClient, ControlError

KubeconfigOption = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="kubeconfig of the emulator (default: $KUBECONFIG or ~/.kube/config)"),
]


class AmbiguousNode(ValueError):
    """A short node name that fits several nodes."""


def resolve_node(given: str, names: Iterable[str]) -> str:
    """The node `given` stands for: its full name, or the one node whose name it shortens (the part
    before the first dot, as the demo prints it; or any unambiguous prefix or suffix). A name that
    fits no node is returned as it is."""
    known = sorted(set(names))
    if given in known:
        return given
    short = [name for name in known if name.split(".", 1)[0] == given]
    if len(short) == 1:
        return short[0]
    partial = short or [name for name in known if name.startswith(given) or name.endswith(given)]
    if len(partial) == 1:
        return partial[0]
    if partial:
        raise AmbiguousNode(f"node {given!r} is ambiguous: it matches {', '.join(partial)}")
    return given  # no node by that name: the emulator says what it knows of it


def _node_names(client: ControlClient) -> list[str]:
    """Node names through the API server the control API lives next to."""
    from shipshape.emulator.cloud.client import ControlError

    try:
        response = client.http.get("/api/v1/nodes")
        body = response.json() if response.status_code == 200 else {}
    except Exception as exc:  # httpx's errors and a body that is not JSON
        raise ControlError(f"cannot list the nodes of {client.server}: {common.one_line(exc)}") from None
    items = body.get("items") if isinstance(body, dict) else None
    return [str((item.get("metadata") or {}).get("name")) for item in items or [] if isinstance(item, dict)]


def _seconds(text: str, flag: str) -> float:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise typer.BadParameter(str(exc), param_hint=flag) from None


def _client(kubeconfig: Path | None) -> ControlClient:
    """A client for the emulator of the kubeconfig; a kubeconfig it cannot use is a usage error."""
    from shipshape.emulator.cloud.client import ControlClient, ControlError, default_kubeconfig, load_target

    try:
        target = load_target(kubeconfig or default_kubeconfig())
    except ControlError as exc:
        raise common.fail(exc) from None
    return ControlClient.connect(target)


def _fail(exc: ControlError) -> typer.Exit:
    return common.fail(exc, common.FAILED)


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
    from shipshape.emulator.cloud.client import ControlError

    seconds = _seconds(notice, "--notice")
    try:
        client = _client(kubeconfig)
        try:
            if node is not None:
                try:
                    node = resolve_node(node, _node_names(client))
                except AmbiguousNode as exc:
                    raise common.fail(exc) from None
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
    from shipshape.emulator.cloud.client import ControlError

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
