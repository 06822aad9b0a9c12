"""`shipshape analyze`: right-sizing and QoS colocation findings for a cluster or a snapshot file,
and, where the cluster has GPU nodes, the GPU analysis (allocation, idle GPUs from dcgm-exporter's
series in Prometheus or a snapshot, advice; a scale-down's `SetReplicas` instruction under
`gpu.advice[].apply` in `--json`).

Usage comes from Prometheus (`--prometheus URL`, a window of history), else from metrics.k8s.io
(one sample now: low confidence, said in each finding), or from the snapshot's `usage` section.
Node prices come from the shipped instance catalog (the spot price on spot nodes). Heavy modules
(numpy, the analyzers, the Kubernetes client, matplotlib) are imported inside the command.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from shipshape.kube import wellknown

if TYPE_CHECKING:
    from rich.console import Console

    from shipshape.analyzers.efficiency.analysis import EfficiencyReport
    from shipshape.analyzers.efficiency.snapshot import GpuUtilization
    from shipshape.analyzers.efficiency.usage import UsageData
    from shipshape.analyzers.gpu.report import GpuReport


def _fail(console: Console, message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(2)


def node_prices(nodes: list[dict[str, Any]]) -> dict[str, float]:
    """USD/h per node from the shipped catalog: instance type x region, spot price on spot nodes."""
    from shipshape.analyzers.efficiency.cluster import SPOT, capacity_type
    from shipshape.pricing.catalog import default_catalog

    catalog = default_catalog()
    out: dict[str, float] = {}
    for node in nodes:
        md = node.get("metadata") or {}
        labels = md.get("labels") or {}
        itype = labels.get(wellknown.INSTANCE_TYPE_LABEL) or labels.get(wellknown.BETA_INSTANCE_TYPE_LABEL)
        zone = labels.get(wellknown.ZONE_LABEL, "")
        region = labels.get(wellknown.REGION_LABEL) or zone[:-1]
        if not itype or not region:
            continue
        spot = capacity_type(labels) == SPOT
        price = catalog.spot_price(itype, region) if spot else catalog.on_demand_price(itype, region)
        if price is not None:
            out[str(md.get("name", ""))] = float(price)
    return out


def _cluster_of(usage: UsageData) -> str:
    """The cluster named by the usage keys (a central Prometheus's label), when they agree on one."""
    names = {key.cluster for key in usage.containers.keys}
    return names.pop() if len(names) == 1 else ""


def _seconds(console: Console, text: str, flag: str) -> float:
    from shipshape.kube.duration import DurationError, parse_duration

    try:
        value = parse_duration(text)
    except DurationError as error:
        raise _fail(console, f"{flag}: {error}") from error
    if value <= 0:
        raise _fail(console, f"{flag} must be positive, not {text}")
    return value


def _table(report: EfficiencyReport, console: Console, top: int) -> None:
    from rich.table import Table

    from shipshape.analyzers.efficiency.analysis import confidence_level

    table = Table(title=f"Findings ({report.source}, {report.strategy} strategy), most savings first")
    for column in ("kind", "target", "finding", "USD/month", "confidence", "lacking"):
        table.add_column(column, justify="right" if column == "USD/month" else "left", overflow="fold")
    for finding in report.findings[:top]:
        savings = "-" if finding.monthly_savings is None else f"{finding.monthly_savings:,.2f}"
        table.add_row(
            finding.kind,
            finding.target,
            finding.title,
            savings,
            f"{confidence_level(finding.confidence)} ({finding.confidence:.2f})",
            "; ".join(finding.lacking) or "-",
        )
    console.print(table)
    colocation = report.colocation
    console.print(
        f"right-sizing: {report.monthly_savings:,.2f} USD/month over {len(report.recommendations)} workload "
        f"containers; OOM kills when replaying the window with the recommendations: {report.oom_replay_kills}"
    )
    settings = colocation.settings
    console.print(
        f"colocation ({settings.cpu_calculate_policy}/{settings.memory_calculate_policy}, "
        f"thresholds {settings.cpu_reclaim_threshold_percent:g} %/"
        f"{settings.memory_reclaim_threshold_percent:g} %): "
        f"{colocation.batch_cpu_total:.2f} cores and {colocation.batch_memory_total / 2**30:.2f} GiB "
        f"reclaimable for batch work {100 - settings.reclaim_percentile:g} % of the time; "
        f"{sum(1 for n in colocation.nodes if n.interference_risk)} node(s) at risk of interference",
        highlight=False,
    )
    for line in colocation.lacking:
        console.print(f"lacking: {line}", highlight=False)


def gpu_report(
    pods: list[Any],
    nodes: list[Any],
    workloads: tuple[list[Any], list[Any]],
    hpas: list[Any],
    utilization: GpuUtilization | None,
) -> GpuReport:
    """The GPU analysis of the cluster's objects; idle GPUs (and scale-down) only with utilisation."""
    from shipshape.analyzers.efficiency.cluster import capacity_type
    from shipshape.analyzers.gpu import objects, report

    gpu_nodes, gpu_pods = objects.fleet_from_objects(nodes, pods, capacity_type, node_prices(nodes))
    return report.analyze(
        gpu_nodes,
        gpu_pods,
        utilization.series if utilization is not None else (),
        utilization.settings if utilization is not None else None,
        workloads=objects.workloads_from_objects(*workloads, hpas),
    )


def _gpu_table(gpu: GpuReport, console: Console, top: int) -> None:
    from rich.table import Table

    console.print(
        f"GPUs: {gpu.gpus}, {gpu.allocated:g} allocated ({gpu.allocated_pct:.0f} %), {gpu.idle_gpus:g} held "
        f"idle, {gpu.wasted_per_day:,.2f} USD/day wasted",
        highlight=False,
    )
    table = Table(title="GPU advice, most savings first")
    for column in ("kind", "target", "advice", "USD/day", "instruction"):
        table.add_column(column, justify="right" if column == "USD/day" else "left", overflow="fold")
    for item in gpu.advice[:top]:
        saving = "-" if item.savings_per_day is None else f"{item.savings_per_day:,.2f}"
        agent = " (the agent can apply it: --json)" if item.apply is not None else ""
        table.add_row(item.kind, item.target, item.message, saving, item.instruction + agent)
    console.print(table)


def analyze(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig", help="Kubeconfig of the cluster to read."),
    context: str | None = typer.Option(None, "--context", help="Kubeconfig context."),
    snapshot: Path | None = typer.Option(
        None, "--snapshot", help="Read a snapshot JSON ({pods, nodes, usage, ...}) instead of a cluster."
    ),
    prometheus: str | None = typer.Option(
        None, "--prometheus", help="Prometheus URL to read usage history from."
    ),
    cluster_name: str | None = typer.Option(
        None, "--cluster", help="Value of the cluster label (a central Prometheus holding several clusters)."
    ),
    window: str = typer.Option("7d", "--window", help="How much history to read from Prometheus."),
    step: str = typer.Option("5m", "--step", help="Resolution of the usage rows."),
    strategy: str = typer.Option("simple", "--strategy", help="Right-sizing strategy: simple or vpa."),
    cpu_percentile: float | None = typer.Option(
        None, "--cpu-percentile", help="CPU percentile of the strategy."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    chart: Path | None = typer.Option(None, "--chart", help="Write a chart (.png or .svg)."),
    top: int = typer.Option(20, "--top", min=1, help="How many findings to list."),
) -> None:
    """Right-sizing per container and QoS colocation per node, priced, with the patch that applies each."""
    from rich.console import Console

    console = Console(stderr=json_output)
    if (kubeconfig is None) == (snapshot is None):
        raise _fail(console, "give exactly one of --kubeconfig or --snapshot")
    if chart is not None and chart.suffix.lower() not in (".png", ".svg"):
        raise _fail(console, f"--chart {chart}: the file name must end in .png or .svg")
    from shipshape.analyzers.efficiency import analysis, rightsizing
    from shipshape.analyzers.efficiency.cluster import SnapshotError as ClusterError
    from shipshape.analyzers.efficiency.snapshot import EfficiencySnapshot, SnapshotError
    from shipshape.analyzers.efficiency.usage import Window

    if strategy not in rightsizing.STRATEGIES:
        raise _fail(console, f"--strategy {strategy}: one of {', '.join(rightsizing.STRATEGIES)}")
    window_seconds = _seconds(console, window, "--window")
    step_seconds = _seconds(console, step, "--step")
    strategy_settings: Any = None
    if cpu_percentile is not None:
        try:
            strategy_settings = rightsizing.SETTINGS[strategy](cpu_percentile=cpu_percentile)
        except ValueError as error:
            raise _fail(console, f"--cpu-percentile: {error}") from error

    pods: list[Any]
    nodes: list[Any]
    hpas: list[Any] = []
    classes: list[Any] = []
    workloads: tuple[list[Any], list[Any]] = ([], [])
    utilization: GpuUtilization | None = None
    usage: UsageData | None = None
    lacking: list[str] = []
    if snapshot is not None:
        try:
            body = json.loads(snapshot.read_text())
        except OSError as error:
            raise _fail(console, f"cannot read {snapshot}: {error.strerror}") from error
        except json.JSONDecodeError as error:
            raise _fail(console, f"{snapshot} is not JSON: {error.msg} (line {error.lineno})") from error
        try:
            loaded = EfficiencySnapshot.from_json(body)
        except SnapshotError as error:
            raise _fail(console, f"{snapshot}: {error}") from error
        pods, nodes = list(loaded.pods), list(loaded.nodes)
        hpas, classes, usage = list(loaded.hpas), list(loaded.priority_classes), loaded.usage
        workloads = (list(loaded.deployments), list(loaded.statefulsets))
        utilization = loaded.gpu_utilization
    else:
        from shipshape.kube import client

        try:
            api = client.load_api_client(kubeconfig, context)
            with console.status("reading pods and nodes"):
                pods, nodes = client.list_pods(api), client.list_nodes(api)
        except client.KubeClientError as error:
            raise _fail(console, str(error)) from error
        for name, reader, target in (
            ("HorizontalPodAutoscalers", client.list_horizontal_pod_autoscalers, hpas),
            ("PriorityClasses", client.list_priority_classes, classes),
            ("Deployments", client.list_deployments, workloads[0]),
            ("StatefulSets", client.list_statefulsets, workloads[1]),
        ):
            try:
                target.extend(reader(api))
            except client.KubeClientError as error:
                lacking.append(f"{name} not readable ({error})")
        if prometheus is None:
            from shipshape.analyzers.efficiency.metricsapi import (
                MetricsApiError,
                latest_window,
                usage_from_metrics,
            )

            try:
                pod_metrics = client.list_resource_metrics(api, "pods")
                node_metrics = client.list_resource_metrics(api, "nodes")
                latest = latest_window(pod_metrics, node_metrics, step_seconds)
                usage = usage_from_metrics(pod_metrics, node_metrics, latest)
            except (client.KubeClientError, MetricsApiError) as error:
                raise _fail(
                    console, f"metrics.k8s.io: {error} (give --prometheus URL for usage history)"
                ) from error
    if prometheus is not None:
        from shipshape.sources.prometheus import PrometheusError, PrometheusSettings, PrometheusSource

        end = (time.time() // step_seconds) * step_seconds
        history = Window.covering(end - window_seconds + step_seconds, end, step_seconds)
        try:
            with (
                PrometheusSource(PrometheusSettings(prometheus, cluster=cluster_name)) as source,
                console.status(f"reading {window} of usage from {prometheus}"),
            ):
                usage = source.fetch(history)
                gpu_series = source.fetch_gpu(history)
        except PrometheusError as error:
            raise _fail(console, str(error)) from error
        if gpu_series:
            from shipshape.analyzers.efficiency.snapshot import GpuUtilization
            from shipshape.analyzers.gpu.idle import IdleSettings

            utilization = GpuUtilization(
                IdleSettings(history.start, history.start + history.steps * history.step, history.step),
                tuple(gpu_series),
            )
    if usage is None:
        raise _fail(console, f"{snapshot} has no usage section; give --prometheus URL for usage history")
    try:
        report = analysis.analyze(
            pods,
            nodes,
            usage,
            hpas=hpas,
            priority_classes=classes,
            node_prices=node_prices(nodes),
            settings=analysis.AnalysisSettings(strategy=strategy, strategy_settings=strategy_settings),
            cluster_name=_cluster_of(usage),
        )
    except (ClusterError, ValueError) as error:
        raise _fail(console, str(error)) from error
    try:
        gpu = gpu_report(pods, nodes, workloads, hpas, utilization)
    except ValueError as error:  # the fleet's or the series' own checks
        raise _fail(console, f"GPUs: {error}") from error
    if gpu.gpus and utilization is None:
        lacking.append(
            "no GPU utilisation (dcgm-exporter) series: idle GPUs and their scale-down are not analysed "
            + (
                f"(Prometheus at {prometheus} holds no DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_DEV_GPU_UTIL)"
                if prometheus is not None
                else "(give --prometheus URL with dcgm-exporter's series, or a snapshot's gpuUtilization)"
            )
        )
    if chart is not None:
        from shipshape.analyzers.efficiency import charts

        charts.efficiency_chart(report, chart, top=top)
    if json_output:
        out = report.to_json()
        if gpu.gpus:
            out["gpu"] = gpu.to_json()
        out["lacking"] = lacking
        typer.echo(json.dumps(out, indent=2))
        return
    _table(report, console, top)
    if gpu.gpus:
        _gpu_table(gpu, console, top)
    for line in lacking:
        console.print(f"lacking: {line}", highlight=False)
    if chart is not None:
        console.print(f"chart written to {chart}")
