"""`shipshape node-collector`: the node start-up timeline from the host's logs.

With `--once` it reads the logs, prints the timeline and exits. Otherwise it keeps reading until
Node Ready and the first pod start are found (or `--timeout`), publishing the timeline as the
node's `startup.shipshape.dev/timeline` annotation (with `--node-name`) and as Prometheus gauges
on `--port`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from prometheus_client import start_http_server
from rich.console import Console
from rich.table import Table

from shipshape.analyzers.startup import nodes
from shipshape.contracts.annotations import STARTUP_TIMELINE
from shipshape.kube import client
from shipshape.kube.clock import rfc3339_micro
from shipshape.nodecollector import publish
from shipshape.nodecollector.collect import CollectError, collect
from shipshape.nodecollector.timeline import NodeLogTimeline

TERMINAL_EVENTS = (nodes.NODE_READY, nodes.FIRST_POD_STARTED)


def _fail(message: object, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    return typer.Exit(code)


def _verdict(timeline: NodeLogTimeline) -> int:
    """Say on stderr what makes a one-shot timeline unusable: 1 when something does, else 0."""
    for problem in timeline.problems:
        typer.echo(f"error: impossible timeline: {problem}", err=True)
    if nodes.NODE_READY not in timeline.events:
        reason = timeline.missing.get(nodes.NODE_READY, "not found")
        typer.echo(f"error: Node Ready is missing from the logs ({reason})", err=True)
    return 1 if timeline.problems or nodes.NODE_READY not in timeline.events else 0


def _print_table(timeline: NodeLogTimeline, console: Console) -> None:
    table = Table(title="Node start-up (from the node's logs)")
    for column in ("Event", "Timestamp", "T", "Source"):
        table.add_column(column)
    body = timeline.to_json()
    for event in body["events"]:
        table.add_row(event["title"], event["time"], f"{event['t']:.1f}s", event["source"])
    console.print(table)
    for name, reason in body["missing"].items():
        console.print(f"[yellow]{nodes.EVENT_TITLES[name]}[/yellow]: missing ({reason})")
    for problem in body["problems"]:
        console.print(f"[red]impossible timeline[/red]: {problem}")


def node_collector(
    root: Path = typer.Option(Path("/"), "--root", help="The host's file tree (its / mounted in the pod)."),
    once: bool = typer.Option(False, "--once", help="Read the logs once, print the timeline and exit."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    year: int | None = typer.Option(
        None,
        help="Year of the first syslog line (default: from dates inside the logs, else the file's "
        "modification time when it is recent; a copy without dates needs it).",
    ),
    journal: Path | None = typer.Option(None, help="A `journalctl -o json` export to read instead."),
    node_name: str | None = typer.Option(
        None, envvar="NODE_NAME", help="Annotate this Node with the timeline."
    ),
    kubeconfig: Path | None = typer.Option(None, help="Kubeconfig (default: in-cluster)."),
    port: int = typer.Option(0, help="Serve Prometheus metrics on this port (0: none)."),
    interval: float = typer.Option(5.0, min=0.1, help="Seconds between reads of the logs."),
    timeout: float = typer.Option(900.0, min=0.0, help="Stop waiting for Node Ready after this long."),
) -> None:
    """Parse the node's boot logs into the start-up timeline (EKS timing table events)."""
    console = Console()
    try:
        timeline = collect(root, year=year, journal_export=journal)
    except CollectError as error:
        raise _fail(error) from error
    if once:
        if json_output:
            typer.echo(json.dumps(timeline.to_json(), indent=2))
        else:
            _print_table(timeline, console)
        raise typer.Exit(_verdict(timeline))
    try:
        api = client.load_api_client(kubeconfig) if node_name else None
    except client.KubeClientError as error:
        raise _fail(error) from error
    metrics = publish.CollectorMetrics(node_name or "")
    if port:
        try:
            start_http_server(port, registry=metrics.registry)
        except OSError as error:
            raise _fail(f"cannot serve metrics on port {port}: {error.strerror or error}", 1) from error
    deadline = time.monotonic() + timeout
    published = ""
    while True:
        metrics.update(timeline)
        value = publish.annotation_value(timeline)
        if api is not None and node_name and value != published:
            try:
                client.annotate_node(api, node_name, {STARTUP_TIMELINE: value})
                published = value
            except client.KubeClientError as error:
                console.print(f"[yellow]could not annotate node {node_name}:[/yellow] {error}")
        done = all(event in timeline.events for event in TERMINAL_EVENTS)
        if done or time.monotonic() >= deadline:
            break
        time.sleep(interval)
        timeline = collect(root, year=year, journal_export=journal)
    stamp = rfc3339_micro(time.time())
    console.print(f"{stamp} timeline complete: {', '.join(sorted(timeline.events))}")
    if port:  # keep serving the final figures for scrapes
        while True:
            time.sleep(3600)
