"""`shipshape startup ...`: where pod and node start-up time goes.

Reads a live cluster through `shipshape.kube.client` or a snapshot file (`--from-file`, a JSON
object with `pods`, `events` and `nodes` lists), and prints tables, JSON or charts.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from prometheus_client import start_http_server
from rich.console import Console
from rich.table import Table

from shipshape.analyzers.startup import aggregate, live, model, nodes
from shipshape.analyzers.startup.analysis import (
    NodeReport,
    PodReport,
    Snapshot,
    SnapshotError,
    analyze_node_startup,
    analyze_pod_startup,
)
from shipshape.analyzers.startup.prometheus import StartupMetrics
from shipshape.kube import client
from shipshape.kube.clock import parse_time

app = typer.Typer(
    help="Where pod and node start-up time goes: phases, percentiles, SLO, diagnosis.", no_args_is_help=True
)

KUBECONFIG = typer.Option(None, "--kubeconfig", help="Kubeconfig of the cluster to read.")
CONTEXT = typer.Option(None, "--context", help="Kubeconfig context.")
FROM_FILE = typer.Option(None, "--from-file", help="Read a snapshot JSON ({pods, events, nodes}) instead.")


def _fail(console: Console, message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(2)


def _load(
    console: Console,
    kubeconfig: Path | None,
    context: str | None,
    from_file: Path | None,
    namespace: str | None,
) -> Snapshot:
    if from_file is not None:
        try:
            body = json.loads(from_file.read_text())
        except OSError as error:
            raise _fail(console, f"cannot read {from_file}: {error.strerror}") from error
        except json.JSONDecodeError as error:
            raise _fail(console, f"{from_file} is not JSON: {error.msg} (line {error.lineno})") from error
        try:
            return Snapshot.from_json(body)
        except SnapshotError as error:
            raise _fail(console, f"{from_file}: {error}") from error
    try:
        api = client.load_api_client(kubeconfig, context)
        with console.status("reading pods, events and nodes"):
            snapshot = Snapshot(
                client.list_pods(api, namespace), client.list_events(api, namespace), client.list_nodes(api)
            )
    except client.KubeClientError as error:
        raise _fail(console, str(error)) from error
    try:
        webhooks = client.list_webhook_configurations(api)
    except client.KubeClientError:  # not allowed to read them: the diagnosis says so
        return snapshot
    return Snapshot(snapshot.pods, snapshot.events, snapshot.nodes, webhooks)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pods_tables(report: PodReport, console: Console, top: int) -> None:
    slowest = Table(title=f"Slowest {min(top, len(report.timelines))} pods, creation to Ready (seconds)")
    slowest.add_column("pod")
    slowest.add_column("node")
    slowest.add_column("total", justify="right")
    for phase in model.POD_PHASES:
        slowest.add_column(model.PHASE_TITLES[phase], justify="right")
    slowest.add_column("dominant")
    for timeline in report.slowest(top):
        slowest.add_row(
            timeline.key,
            timeline.node,
            _seconds(timeline.end_to_end),
            *(_seconds(timeline.phases.get(phase)) for phase in model.POD_PHASES),
            model.PHASE_TITLES.get(timeline.dominant_phase() or "", "-"),
        )
    console.print(slowest)

    percentiles = Table(title=f"Per-phase percentiles over {report.overall.pods} pods (seconds)")
    for column in ("phase", "pods", "p50", "p90", "p99", "max"):
        percentiles.add_column(column, justify="left" if column == "phase" else "right")
    rows: list[tuple[str, aggregate.Stats | None]] = [
        (model.PHASE_TITLES[phase], report.overall.phases.get(phase)) for phase in model.ALL_POD_PHASES
    ]
    rows += [
        ("creation to Ready", report.overall.end_to_end),
        ("SLI (kubelet definition)", report.overall.sli),
    ]
    for name, stats in rows:
        if stats is None:
            percentiles.add_row(name, "0", "-", "-", "-", "-")
        else:
            percentiles.add_row(
                name, str(stats.count), *(_seconds(v) for v in (stats.p50, stats.p90, stats.p99, stats.max))
            )
    console.print(percentiles)

    workloads = report.groups.get(aggregate.WORKLOAD, [])
    if workloads:
        table = Table(title="Workloads (slowest p90 first)")
        for column in ("workload", "pods", "ready", "p50", "p90", "p99", "dominant phase"):
            table.add_column(column)
        for group in workloads[:top]:
            e2e = group.end_to_end
            table.add_row(
                group.key,
                str(group.pods),
                str(group.ready),
                *(_seconds(getattr(e2e, q)) if e2e else "-" for q in ("p50", "p90", "p99")),
                model.PHASE_TITLES.get(group.dominant_phase or "", "-"),
            )
        console.print(table)

    slo = report.slo
    if slo.met is None:
        console.print(
            f"SLO (p99 <= {slo.threshold:g} s, stateless pods, pre-pulled images): unknown, {slo.reason}"
        )
    else:
        verdict = "[green]met[/green]" if slo.met else "[red]missed[/red]"
        console.print(
            f"SLO (p99 <= {slo.threshold:g} s, stateless pods, pre-pulled images): {verdict}, "
            f"p99 {slo.value:.1f} s over {slo.eligible} pods"
        )
    not_ready = [t for t in report.timelines if t.ready is None]
    if not_ready:
        console.print(f"{len(not_ready)} pods not Ready:")
        for timeline in not_ready[:top]:
            console.print(f"  {timeline.key}: {timeline.outcome}, {timeline.missing.get('ready', '')}")
    for finding in report.findings:
        console.print(f"\n[bold yellow]{finding.title}[/bold yellow] ({finding.rule})")
        console.print(f"  cause: {finding.cause}")
        console.print(f"  fix: {finding.fix}")
        for line in finding.evidence:
            console.print(f"  - {line}")


@app.command()
def pods(
    kubeconfig: Path | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = typer.Option(None, "-n", "--namespace", help="Only this namespace."),
    workload: str | None = typer.Option(
        None, "--workload", help="Only this workload: NAME, KIND/NAME or NS/KIND/NAME."
    ),
    from_file: Path | None = FROM_FILE,
    json_output: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    chart: Path | None = typer.Option(None, "--chart", help="Write a chart (.png or .svg)."),
    top: int = typer.Option(20, "--top", min=1, help="How many pods and workloads to list."),
) -> None:
    """Pod start-up phases: slowest pods, per-phase percentiles, SLO check and diagnosis."""
    console = Console()
    snapshot = _load(console, kubeconfig, context, from_file, namespace)
    node_report = analyze_node_startup(snapshot.nodes, snapshot.pods, snapshot.events)
    report = analyze_pod_startup(
        snapshot.pods,
        snapshot.events,
        snapshot.nodes,
        namespace=namespace,
        workload=workload,
        node_timelines={t.name: t for t in node_report.timelines},
        webhook_configurations=snapshot.webhook_configurations,
    )
    if chart is not None:
        from shipshape.analyzers.startup import charts  # matplotlib: imported only when drawing

        try:
            charts.pod_startup_chart(report.timelines, chart, slowest=top)
        except charts.ChartError as error:
            raise _fail(console, str(error)) from error
    if json_output:
        typer.echo(json.dumps(report.to_json(slowest=top), indent=2))
        return
    _pods_tables(report, console, top)
    if chart is not None:
        console.print(f"chart written to {chart}")


def read_log_timelines(directory: Path) -> dict[str, dict[str, float]]:
    """`<node>.json` files written by `shipshape node-collector --once --json`."""
    timelines: dict[str, dict[str, float]] = {}
    for path in sorted(directory.glob("*.json")):
        body = json.loads(path.read_text())
        events = body.get("events") if isinstance(body, dict) else None
        if not isinstance(events, list):
            raise ValueError(f"{path} is not a node-collector timeline (no events list)")
        timelines[path.stem] = {
            str(e["event"]): parse_time(str(e["time"])) for e in events if e.get("event") in nodes.EVENT_ORDER
        }
    return timelines


def _nodes_tables(report: NodeReport, console: Console) -> None:
    columns = (
        nodes.INSTANCE_CREATED,
        nodes.VM_INITIALIZED,
        nodes.CLOUD_INIT_FINISH,
        nodes.KUBELET_START,
        nodes.REGISTERED,
        nodes.CNI_READY,
        nodes.NODE_READY,
        nodes.FIRST_POD_STARTED,
    )
    table = Table(title="Node start-up: seconds from each node's first known event")
    table.add_column("node", overflow="fold")
    table.add_column("pool", overflow="fold")
    short = {
        nodes.INSTANCE_CREATED: "launch",
        nodes.VM_INITIALIZED: "VM",
        nodes.CLOUD_INIT_FINISH: "cloud-init",
        nodes.KUBELET_START: "kubelet",
        nodes.REGISTERED: "registered",
        nodes.CNI_READY: "CNI",
        nodes.NODE_READY: "Ready",
        nodes.FIRST_POD_STARTED: "1st pod",
    }
    for name in columns:
        table.add_column(short[name], justify="right")
    table.add_column("to Ready", justify="right")
    table.add_column("slowest segment")
    for timeline in report.timelines:
        origin = timeline.origin
        cells = [
            _seconds(timeline.events[name] - origin[1]) if origin and name in timeline.events else "-"
            for name in columns
        ]
        ready = (
            _seconds(timeline.time_to_ready) if timeline.time_to_ready is not None else "[red]missing[/red]"
        )
        table.add_row(
            timeline.name, timeline.info.pool_key, *cells, ready, timeline.dominant_segment() or "-"
        )
    console.print(table)
    segments = Table(title="Segments over all nodes (seconds)")
    for column in ("segment", "nodes", "p50", "p90", "max"):
        segments.add_column(column)
    for name, stats in report.segment_stats.items():
        if stats is not None:
            segments.add_row(
                name, str(stats.count), _seconds(stats.p50), _seconds(stats.p90), _seconds(stats.max)
            )
    console.print(segments)
    if report.comparisons:
        pools = Table(title="Pools (instance type / zone): median time to Ready")
        for column in ("pool", "nodes", "median to Ready", "vs cluster", "explained by"):
            pools.add_column(column)
        for comparison in report.comparisons:
            pools.add_row(
                comparison.pool,
                str(comparison.nodes),
                _seconds(comparison.median_to_ready),
                f"{comparison.delta:+.1f}",
                f"{comparison.dominant_segment} ({comparison.dominant_delta:+.1f})"
                if comparison.dominant_segment and abs(comparison.delta) >= 1.0
                else "-",
            )
        console.print(pools)
    for comparison in report.comparisons:
        console.print(f"- {comparison.sentence()} ({comparison.nodes} nodes)")
    for timeline in report.timelines:
        if nodes.NODE_READY not in timeline.events:
            console.print(
                f"[yellow]{timeline.name}[/yellow]: Node Ready missing ({timeline.missing[nodes.NODE_READY]})"
            )


@app.command("nodes")
def nodes_command(
    kubeconfig: Path | None = KUBECONFIG,
    context: str | None = CONTEXT,
    from_file: Path | None = FROM_FILE,
    logs: Path | None = typer.Option(
        None, "--logs", help="Directory of <node>.json from node-collector --json."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    chart: Path | None = typer.Option(None, "--chart", help="Write a Gantt chart (.png or .svg)."),
) -> None:
    """Node start-up: per-node timing table, per-pool comparison and a Gantt chart."""
    console = Console()
    snapshot = _load(console, kubeconfig, context, from_file, None)
    log_timelines = None
    if logs is not None:
        try:
            log_timelines = read_log_timelines(logs)
        except (OSError, ValueError, KeyError) as error:
            raise _fail(console, f"cannot read node timelines from {logs}: {error}") from error
    report = analyze_node_startup(snapshot.nodes, snapshot.pods, snapshot.events, log_timelines=log_timelines)
    if chart is not None:
        from shipshape.analyzers.startup import charts  # matplotlib: imported only when drawing

        try:
            charts.node_gantt_chart(report.timelines, chart)
        except charts.ChartError as error:
            raise _fail(console, str(error)) from error
    if json_output:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    _nodes_tables(report, console)


class ClusterFeed:
    """List + watch of pods, events and nodes, one thread per kind, into a queue of
    ("replace", kind, items) and ("apply", kind, (type, object)) messages; a 410 re-lists, other
    failures retry after a back-off (0.5 s doubling up to 30 s)."""

    BACKOFF_START, BACKOFF_MAX = 0.5, 30.0

    def __init__(self, api: Any, *, watch_seconds: int = client.WATCH_SECONDS) -> None:
        self.api = api
        self.watch_seconds = watch_seconds
        self.messages: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.stop = threading.Event()
        self.relists: dict[str, int] = dict.fromkeys(live.KINDS, 0)
        self._threads = [
            threading.Thread(target=self._run, args=(kind,), name=f"startup-watch-{kind}", daemon=True)
            for kind in live.KINDS
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _run(self, kind: str) -> None:
        version: str | None = None
        backoff = self.BACKOFF_START
        while not self.stop.is_set():
            try:
                if version is None:
                    items, version = client.list_versioned(self.api, kind)
                    self.relists[kind] += 1
                    self.messages.put(("replace", kind, items))
                for change, obj in client.watch(self.api, kind, version, timeout_seconds=self.watch_seconds):
                    if self.stop.is_set():
                        return
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if change != "BOOKMARK":
                        self.messages.put(("apply", kind, (change, obj)))
                backoff = self.BACKOFF_START
            except client.WatchExpired:
                version = None
            except (client.KubeClientError, ValueError) as error:  # ValueError: a line that is not JSON
                self.messages.put(("error", kind, str(error)))
                self.stop.wait(backoff)
                backoff = min(self.BACKOFF_MAX, backoff * 2)


def run_live(
    feed: ClusterFeed,
    state: live.LiveStartup,
    *,
    stop: threading.Event,
    tick: float = 1.0,
    report: Callable[[str], None] = lambda line: None,
) -> None:
    """Apply the feed's messages to `state` and flush it every `tick` seconds until `stop`."""
    next_flush = time.monotonic()
    while not stop.is_set():
        try:
            action, kind, payload = feed.messages.get(
                timeout=max(0.0, min(tick, next_flush - time.monotonic()))
            )
        except queue.Empty:
            pass
        else:
            if action == "replace":
                state.replace(kind, payload)
            elif action == "apply":
                state.apply(kind, *payload)
            else:
                report(f"[yellow]{kind} watch failed, retrying:[/yellow] {payload}")
        now = time.monotonic()
        if now >= next_flush:
            counts = state.flush(now)
            if counts["pods"] or counts["nodes"]:
                report(f"observed {counts['pods']} pods and {counts['nodes']} nodes")
            next_flush = now + tick


@app.command()
def serve(
    kubeconfig: Path | None = KUBECONFIG,
    context: str | None = CONTEXT,
    port: int = typer.Option(9464, "--port", help="Port of the /metrics endpoint."),
    settle: float = typer.Option(
        5.0, "--settle", min=0.0, help="Seconds a finished pod waits for late events before it is observed."
    ),
) -> None:
    """Watch the cluster and expose start-up histograms (kubelet buckets) at /metrics."""
    console = Console()
    try:
        api = client.load_api_client(kubeconfig, context)
    except client.KubeClientError as error:
        raise _fail(console, str(error)) from error
    metrics = StartupMetrics()
    start_http_server(port, registry=metrics.registry)
    console.print(f"serving start-up metrics on :{port}/metrics, watching pods, events and nodes")
    feed = ClusterFeed(api)
    feed.start()
    try:
        run_live(feed, live.LiveStartup(metrics, settle=settle), stop=feed.stop, report=console.print)
    finally:
        feed.stop.set()
