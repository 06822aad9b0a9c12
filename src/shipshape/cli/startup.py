"""`shipshape startup ...`: where pod and node start-up time goes.

Reads a live cluster through `shipshape.kube.client` or files (`--from-file`, repeatable):
`kubectl get pods,events,nodes -A -o json|yaml` output, single objects, JSON lines, or a snapshot
`{pods, events, nodes}` (see `shipshape.cli.snapshot_file`). Prints kubectl-like tables (`-o wide`
for every column), JSON or YAML, and charts. The Kubernetes client, the metrics server and
matplotlib are imported inside the commands.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from shipshape.cli import common, output
from shipshape.cli.output import Format

if TYPE_CHECKING:
    from shipshape.analyzers.startup import live as live_mod
    from shipshape.analyzers.startup.analysis import NodeReport, PodReport, Snapshot

app = typer.Typer(
    help="Where pod and node start-up time goes: phases, percentiles, SLO, diagnosis.", no_args_is_help=True
)

KUBECONFIG = typer.Option(None, "--kubeconfig", help="Kubeconfig of the cluster to read.")
CONTEXT = typer.Option(None, "--context", help="Kubeconfig context.")
FROM_FILE = typer.Option(
    None,
    "--from-file",
    "-f",
    help="Read files instead of a cluster (repeatable): `kubectl get pods,events,nodes -A -o json` or "
    "-o yaml output, single objects, JSON lines, or a snapshot {pods, events, nodes}.",
)
OUTPUT = typer.Option(None, "--output", "-o", help=output.OUTPUT_HELP)
JSON_FLAG = typer.Option(False, "--json", help="Print the report as JSON (same as -o json).")


def _fail(console: Console | None, message: str) -> typer.Exit:
    return common.fail(message)


def _load(
    console: Console,
    kubeconfig: Path | None,
    context: str | None,
    from_file: list[Path] | None,
    namespace: str | None,
) -> Snapshot:
    from shipshape.analyzers.startup.analysis import Snapshot

    if from_file:
        from shipshape.cli import snapshot_file

        files = []
        for path in from_file:
            try:
                files.append((str(path), path.read_text(encoding="utf-8")))
            except OSError as error:
                raise common.fail(f"cannot read {path}: {error.strerror}") from error
            except UnicodeDecodeError as error:
                raise common.fail(f"{path} is not UTF-8 text (byte {error.start})") from error
        try:
            return snapshot_file.read_snapshot(files)
        except snapshot_file.InputError as error:
            raise common.fail(str(error)) from error
    from shipshape.kube import client

    try:
        api = client.load_api_client(kubeconfig, context)
        with console.status("reading pods, events and nodes"):
            snapshot = Snapshot(
                client.list_pods(api, namespace), client.list_events(api, namespace), client.list_nodes(api)
            )
    except client.KubeClientError as error:
        raise common.fail(str(error)) from error
    try:
        webhooks = client.list_webhook_configurations(api)
    except client.KubeClientError:  # not allowed to read them: the diagnosis says so
        return snapshot
    return Snapshot(snapshot.pods, snapshot.events, snapshot.nodes, webhooks)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pods_tables(report: PodReport, console: Console, top: int, wide: bool) -> None:
    from shipshape.analyzers.startup import aggregate, model

    headers = ["POD", "NODE", "TO-READY", "DOMINANT"]
    if wide:
        headers[3:3] = [model.PHASE_TITLES[phase].upper().replace(" ", "-") for phase in model.POD_PHASES]
    rows = []
    for timeline in report.slowest(top):
        row = [
            timeline.key,
            timeline.node or "-",
            _seconds(timeline.end_to_end),
            model.PHASE_TITLES.get(timeline.dominant_phase() or "", "-"),
        ]
        if wide:
            row[3:3] = [_seconds(timeline.phases.get(phase)) for phase in model.POD_PHASES]
        rows.append(row)
    numeric = range(2, len(headers) - 1)
    output.print_table(
        f"Slowest {min(top, len(report.timelines))} pods, creation to Ready (seconds)", headers, rows, numeric
    )

    stats_rows: list[tuple[str, aggregate.Stats | None]] = [
        (model.PHASE_TITLES[phase], report.overall.phases.get(phase)) for phase in model.ALL_POD_PHASES
    ]
    stats_rows += [
        ("creation to Ready", report.overall.end_to_end),
        ("SLI (kubelet definition)", report.overall.sli),
    ]
    typer.echo("")
    output.print_table(
        f"Per-phase percentiles over {report.overall.pods} pods (seconds)",
        ["PHASE", "PODS", "P50", "P90", "P99", "MAX"],
        [
            [name, "0", "-", "-", "-", "-"]
            if stats is None
            else [
                name,
                str(stats.count),
                *(_seconds(v) for v in (stats.p50, stats.p90, stats.p99, stats.max)),
            ]
            for name, stats in stats_rows
        ],
        range(1, 6),
    )

    workloads = report.groups.get(aggregate.WORKLOAD, [])
    if workloads:
        typer.echo("")
        output.print_table(
            "Workloads (slowest p90 first)",
            ["WORKLOAD", "PODS", "READY", "P50", "P90", "P99", "DOMINANT"],
            [
                [
                    group.key,
                    str(group.pods),
                    str(group.ready),
                    *(
                        _seconds(getattr(group.end_to_end, q)) if group.end_to_end else "-"
                        for q in ("p50", "p90", "p99")
                    ),
                    model.PHASE_TITLES.get(group.dominant_phase or "", "-"),
                ]
                for group in workloads[:top]
            ],
            range(1, 6),
        )

    typer.echo("")
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


def _nothing_matched(snapshot: Snapshot, namespace: str | None, workload: str | None) -> str:
    """Why a pod report is empty, for the user."""
    from shipshape.analyzers.startup.analysis import analyze_pod_startup

    if not snapshot.pods:
        return "no pods to analyze: the cluster or the files hold none"
    wanted = " and ".join(
        part
        for part in (
            f"namespace {namespace}" if namespace else "",
            f"workload {workload}" if workload else "",
        )
        if part
    )
    if not wanted:
        return f"none of the {len(snapshot.pods)} pods has a creation-to-Ready timeline"
    everything = analyze_pod_startup(snapshot.pods, snapshot.events, snapshot.nodes)
    names = sorted(
        {t.workload.name for t in everything.timelines if not namespace or t.namespace == namespace}
    )
    known = f"; workloads: {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}" if names else ""
    return f"no pod matches {wanted} ({len(snapshot.pods)} pods read{known})"


@app.command()
def pods(
    kubeconfig: Path | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = typer.Option(None, "-n", "--namespace", help="Only this namespace."),
    workload: str | None = typer.Option(
        None, "--workload", help="Only this workload: NAME, KIND/NAME or NS/KIND/NAME."
    ),
    from_file: list[Path] | None = FROM_FILE,
    output_format: Format | None = OUTPUT,
    json_output: bool = JSON_FLAG,
    chart: Path | None = typer.Option(None, "--chart", help="Write a chart (.png or .svg)."),
    top: int = typer.Option(20, "--top", min=1, help="How many pods and workloads to list."),
) -> None:
    """Pod start-up phases: slowest pods, per-phase percentiles, SLO check and diagnosis."""
    from shipshape.analyzers.startup.analysis import analyze_node_startup, analyze_pod_startup

    fmt = output.chosen(output_format, json_output)
    common.check_output_file(chart, "--chart")
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
    if not report.timelines:
        raise common.fail(_nothing_matched(snapshot, namespace, workload), common.FAILED)
    if chart is not None:
        from shipshape.analyzers.startup import charts  # matplotlib: imported only when drawing

        try:
            charts.pod_startup_chart(report.timelines, chart, slowest=top)
        except charts.ChartError as error:
            raise common.fail(f"--chart: {error}") from error
    if fmt in (Format.json, Format.yaml):
        output.print_document(report.to_json(slowest=top), fmt)
        return
    _pods_tables(report, console, top, wide=fmt is Format.wide)
    if chart is not None:
        console.print(f"chart written to {chart}")


def read_log_timelines(directory: Path) -> dict[str, dict[str, float]]:
    """`<node>.json` files written by `shipshape node-collector --once --json`."""
    from shipshape.analyzers.startup import nodes
    from shipshape.kube.clock import parse_time

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


def _nodes_tables(report: NodeReport, console: Console, wide: bool) -> None:
    from shipshape.analyzers.startup import nodes

    short = {
        nodes.INSTANCE_CREATED: "LAUNCH",
        nodes.VM_INITIALIZED: "VM",
        nodes.CLOUD_INIT_FINISH: "CLOUD-INIT",
        nodes.KUBELET_START: "KUBELET",
        nodes.REGISTERED: "REGISTERED",
        nodes.CNI_READY: "CNI",
        nodes.NODE_READY: "READY",
        nodes.FIRST_POD_STARTED: "1ST-POD",
    }
    columns = list(short) if wide else []
    headers = ["NODE", "POOL", *(short[name] for name in columns), "TO-READY", "SLOWEST-SEGMENT"]
    rows = []
    for timeline in report.timelines:
        origin = timeline.origin
        cells = [
            _seconds(timeline.events[name] - origin[1]) if origin and name in timeline.events else "-"
            for name in columns
        ]
        ready = _seconds(timeline.time_to_ready) if timeline.time_to_ready is not None else "missing"
        rows.append(
            [timeline.name, timeline.info.pool_key, *cells, ready, timeline.dominant_segment() or "-"]
        )
    output.print_table(
        "Node start-up: seconds from each node's first known event", headers, rows, range(2, len(headers) - 1)
    )
    typer.echo("")
    output.print_table(
        "Segments over all nodes (seconds)",
        ["SEGMENT", "NODES", "P50", "P90", "MAX"],
        [
            [name, str(stats.count), _seconds(stats.p50), _seconds(stats.p90), _seconds(stats.max)]
            for name, stats in report.segment_stats.items()
            if stats is not None
        ],
        range(1, 5),
    )
    if report.comparisons:
        typer.echo("")
        output.print_table(
            "Pools (instance type / zone): median time to Ready",
            ["POOL", "NODES", "MEDIAN-TO-READY", "VS-CLUSTER", "EXPLAINED-BY"],
            [
                [
                    comparison.pool,
                    str(comparison.nodes),
                    _seconds(comparison.median_to_ready),
                    f"{comparison.delta:+.1f}",
                    f"{comparison.dominant_segment} ({comparison.dominant_delta:+.1f})"
                    if comparison.dominant_segment and abs(comparison.delta) >= 1.0
                    else "-",
                ]
                for comparison in report.comparisons
            ],
            range(1, 4),
        )
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
    from_file: list[Path] | None = FROM_FILE,
    logs: Path | None = typer.Option(
        None, "--logs", help="Directory of <node>.json from node-collector --json."
    ),
    output_format: Format | None = OUTPUT,
    json_output: bool = JSON_FLAG,
    chart: Path | None = typer.Option(None, "--chart", help="Write a Gantt chart (.png or .svg)."),
) -> None:
    """Node start-up: per-node timing table, per-pool comparison and a Gantt chart."""
    from shipshape.analyzers.startup.analysis import analyze_node_startup

    fmt = output.chosen(output_format, json_output)
    common.check_output_file(chart, "--chart")
    if logs is not None and not logs.is_dir():
        raise common.fail(f"--logs: {logs} is not a folder")
    console = Console()
    snapshot = _load(console, kubeconfig, context, from_file, None)
    log_timelines = None
    if logs is not None:
        try:
            log_timelines = read_log_timelines(logs)
        except (OSError, ValueError, KeyError) as error:
            raise common.fail(f"cannot read node timelines from {logs}: {error}") from error
    report = analyze_node_startup(snapshot.nodes, snapshot.pods, snapshot.events, log_timelines=log_timelines)
    if not report.timelines:
        raise common.fail("no nodes to analyze: the cluster or the files hold none", common.FAILED)
    if chart is not None:
        from shipshape.analyzers.startup import charts  # matplotlib: imported only when drawing

        try:
            charts.node_gantt_chart(report.timelines, chart)
        except charts.ChartError as error:
            raise common.fail(f"--chart: {error}") from error
    if fmt in (Format.json, Format.yaml):
        output.print_document(report.to_json(), fmt)
        return
    _nodes_tables(report, console, wide=fmt is Format.wide)
    if chart is not None:
        console.print(f"chart written to {chart}")


class ClusterFeed:
    """List + watch of pods, events and nodes, one thread per kind, into a queue of
    ("replace", kind, items) and ("apply", kind, (type, object)) messages; a 410 re-lists, other
    failures retry after a back-off (0.5 s doubling up to 30 s)."""

    BACKOFF_START, BACKOFF_MAX = 0.5, 30.0

    def __init__(self, api: Any, *, watch_seconds: int | None = None) -> None:
        from shipshape.analyzers.startup import live
        from shipshape.kube import client

        self.api = api
        self.watch_seconds = client.WATCH_SECONDS if watch_seconds is None else watch_seconds
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
        from shipshape.kube import client

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
    state: live_mod.LiveStartup,
    *,
    stop: threading.Event,
    tick: float = 1.0,
    report: Callable[[str], None] = lambda line: None,
) -> None:
    """Apply the feed's messages to `state` and flush it every `tick` seconds until `stop`. A failing
    watch is reported once per outage (its retries are not), and again when it is back."""
    next_flush = time.monotonic()
    failing: dict[str, str] = {}
    while not stop.is_set():
        try:
            action, kind, payload = feed.messages.get(
                timeout=max(0.0, min(tick, next_flush - time.monotonic()))
            )
        except queue.Empty:
            pass
        else:
            if action in ("replace", "apply") and failing.pop(kind, None) is not None:
                report(f"{kind} watch is back")
            if action == "replace":
                state.replace(kind, payload)
            elif action == "apply":
                state.apply(kind, *payload)
            elif failing.get(kind) != payload:
                failing[kind] = payload
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
    import errno

    from prometheus_client import start_http_server

    from shipshape.analyzers.startup import live
    from shipshape.analyzers.startup.prometheus import StartupMetrics
    from shipshape.kube import client

    console = Console()
    try:
        api = client.load_api_client(kubeconfig, context)
    except client.KubeClientError as error:
        raise common.fail(str(error)) from error
    metrics = StartupMetrics()
    try:
        start_http_server(port, registry=metrics.registry)
    except OSError as error:
        reason = "the port is in use" if error.errno == errno.EADDRINUSE else (error.strerror or str(error))
        raise common.fail(
            f"cannot serve metrics on port {port}: {reason} (choose another with --port)", 1
        ) from error
    try:
        client.server_version(api)
    except client.KubeClientError as error:
        if error.status is None:  # unreachable at start: a wrong kubeconfig more likely than an outage
            raise common.fail(error, common.FAILED) from error
    console.print(f"serving start-up metrics on :{port}/metrics, watching pods, events and nodes")
    feed = ClusterFeed(api)
    feed.start()
    try:
        run_live(feed, live.LiveStartup(metrics, settle=settle), stop=feed.stop, report=console.print)
    finally:
        feed.stop.set()
