"""`shipshape gpu ...`: GPU placement on real traces (`replay`)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from shipshape.analyzers.gpu.policies import POLICIES

if TYPE_CHECKING:
    from shipshape.analyzers.gpu.replay import PolicyResult, ReplaySettings, Workload
    from shipshape.analyzers.gpu.trace import Nodes

app = typer.Typer(
    help="GPU placement: replay GPU cluster traces under placement policies.", no_args_is_help=True
)

T = TypeVar("T")
TABLE_POINTS = (50.0, 80.0, 90.0, 95.0, 100.0, 110.0, 120.0, 130.0)


def _fail(console: Console, message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(2)


def _read_csv(console: Console, flag: str, path: Path, parse: Callable[..., T]) -> T:
    from shipshape.analyzers.gpu.trace import TraceError

    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            return parse(reader, reader.fieldnames, source=f"{flag} {path.name}")
    except FileNotFoundError:
        raise _fail(console, f"{flag}: no such file: {path}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, csv.Error) as error:
        raise _fail(console, f"{flag}: cannot read {path}: {error}") from None
    except TraceError as error:
        raise _fail(console, str(error)) from None


@app.command()
def replay(
    nodes: Path = typer.Option(..., "--nodes", help="Node list CSV (sn,cpu_milli,memory_mib,gpu,model)."),
    pods: Path = typer.Option(
        ..., "--pods", help="Pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec])."
    ),
    policy: str = typer.Option(
        "all", "--policy", help=f"all, or policies separated by commas: {', '.join(POLICIES)}."
    ),
    seed: int = typer.Option(42, "--seed", help="Seed of the inflation, the shuffle and random choices."),
    json_output: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    chart: Path | None = typer.Option(None, "--chart", help="Write a chart of allocation (.png or .svg)."),
    inflation: float = typer.Option(
        1.3, "--inflation", help="Workload asked, as a multiple of GPU capacity."
    ),
    ties: str = typer.Option(
        "first", "--ties", help="Equal best scores of the paper's policies: the first node, or random."
    ),
) -> None:
    """Replay a GPU trace the way the FGD paper does: allocation and fragmentation per policy."""
    from shipshape.analyzers.gpu import replay as replay_mod
    from shipshape.analyzers.gpu import trace

    console = Console(stderr=json_output)
    if not console.is_terminal:
        console = Console(stderr=json_output, width=160)
    if chart is not None and chart.suffix.lower() not in (".png", ".svg"):
        raise _fail(console, f"--chart: the file must end in .png or .svg, not {chart.name!r}")
    try:
        names = replay_mod.policy_names(policy)
        settings = replay_mod.ReplaySettings(seed=seed, inflation=inflation, ties=ties)
    except replay_mod.ReplayError as error:
        raise _fail(console, str(error)) from None
    node_list = _read_csv(console, "--nodes", nodes, trace.parse_nodes)
    pod_list = _read_csv(console, "--pods", pods, trace.parse_pods)
    try:
        workload = replay_mod.prepare(node_list, pod_list, settings)
    except (replay_mod.ReplayError, ValueError) as error:
        raise _fail(console, str(error)) from None

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    results: list[replay_mod.PolicyResult] = []
    with Progress(
        TextColumn("{task.description:<15}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("pods"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=json_output,
    ) as progress:
        tasks = {name: progress.add_task(name, total=len(workload.pods)) for name in names}

        def advance(name: str, done: int, total: int) -> None:
            progress.update(tasks[name], completed=done)

        for name in names:
            results.append(replay_mod.replay(node_list, workload, name, settings, advance))

    if json_output:
        typer.echo(json.dumps(replay_mod.report_json(node_list, results)))
    else:
        _print_table(console, node_list, workload, results, settings)
    if chart is not None:
        from shipshape.analyzers.gpu import charts

        try:
            charts.replay_chart(
                results,
                chart,
                title=f"{pods.name} on {len(node_list)} nodes / {node_list.total_gpus} GPUs (seed {seed})",
            )
        except (charts.ChartError, OSError) as error:
            raise _fail(console, f"--chart: {error}") from None
        if not json_output:
            console.print(f"chart written to {chart}")


def _print_table(
    console: Console,
    nodes: Nodes,
    workload: Workload,
    results: Sequence[PolicyResult],
    settings: ReplaySettings,
) -> None:
    shown = [p for p in TABLE_POINTS if p <= settings.inflation * 100 + 1e-9]
    table = Table(
        title=(
            f"GPU allocated, % of {nodes.total_gpus} GPUs on {len(nodes)} nodes, by arrived workload "
            f"({len(workload.pods)} pods, {workload.cloned} cloned; seed {settings.seed})"
        )
    )
    table.add_column("policy", no_wrap=True)
    for point in shown:
        table.add_column(f"{point:g}%", justify="right")
    table.add_column(f"frag at {shown[-1]:g}%", justify="right")
    table.add_column("failed pods", justify="right")
    table.add_column("seconds", justify="right")
    for result in results:
        at = {p.arrived_pct: p for p in result.points}
        table.add_row(
            result.policy,
            *(f"{at[p].gpu_alloc_pct:.2f}" for p in shown),
            f"{at[shown[-1]].frag_gpu_pct:.2f}",
            str(result.failed_pods),
            f"{result.wall_seconds:.1f}",
        )
    console.print(table)
