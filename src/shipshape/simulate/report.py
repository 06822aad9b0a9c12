"""What a simulation reports: JSON (versioned schema), rich tables, and charts (PNG or SVG).

Charts are drawn with matplotlib's object API (no pyplot state); SVG text stays text and each drawn
line and bar carries an SVG id (`cost-<strategy>`, `availability-<strategy>-<workload>`), so a
chart's content can be checked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.table import Table

from shipshape.simulate.findings import Finding
from shipshape.simulate.run import StrategyResult, WorkloadFigures, percentile

SCHEMA = "shipshape.simulate/v1"
SUFFIXES = (".png", ".svg")
COLORS = {"on-demand": "#4e79a7", "spot-naive": "#e15759", "capacity-type": "#f28e2b", "shipshape": "#59a14f"}


class ChartError(ValueError):
    """A chart that cannot be written (unknown format, nothing to draw)."""


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def result_json(result: StrategyResult) -> dict[str, Any]:
    latencies = result.replacement_latencies
    return {
        "strategy": result.strategy,
        "description": result.description,
        "seed": result.seed,
        "durationSeconds": result.duration_seconds,
        "wallSeconds": _round(result.wall_seconds, 2),
        "cpuSeconds": None if result.cpu_seconds is None else _round(result.cpu_seconds, 2),
        "cost": {
            "total": _round(result.total_cost, 4),
            "nodeHours": _round(float(result.cost.get("nodeHours", 0.0)), 2),
            "byCapacityType": result.cost.get("byCapacityType", {}),
            "savingsVsOnDemand": _round(result.savings_vs_on_demand, 4),
        },
        "availability": {
            "zeroReadyMinutes": _round(result.zero_ready_minutes, 2),
            "belowMinAvailableMinutes": _round(result.below_min_available_minutes, 2),
            "workloads": [
                {
                    "workload": w.workload,
                    "replicas": w.replicas,
                    "pdb": w.pdb,
                    "minAvailable": w.min_available,
                    "zeroReadyMinutes": _round(w.zero_ready_minutes, 2),
                    "belowMinAvailableMinutes": _round(w.below_min_available_minutes, 2),
                    "measuredMinutes": _round(w.measured_minutes, 1),
                    "minReady": w.min_ready,
                    "availability": _round(w.availability, 5),
                }
                for w in result.workloads
            ],
        },
        "replacementLatency": {
            "count": len(latencies),
            "p50Seconds": _round(percentile(latencies, 50), 1),
            "p99Seconds": _round(percentile(latencies, 99), 1),
            "maxSeconds": _round(max(latencies), 1) if latencies else None,
            "unreplaced": result.unreplaced,
        },
        "nodeChurn": {
            "nodesAdded": result.nodes_added,
            "nodesRemoved": result.nodes_removed,
            "notices": result.notices,
        },
        "costSeries": [[round(t, 1), round(c, 4)] for t, c in result.cost_series],
        "engineErrors": result.engine_errors,
    }


def report_json(
    results: Sequence[StrategyResult], scenario: str, findings: Sequence[Finding] = ()
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "scenario": scenario,
        "strategies": [result_json(r) for r in results],
        "findings": [f.to_json() for f in findings],
    }


def _minutes(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def summary_table(results: Sequence[StrategyResult]) -> Table:
    table = Table(title="Strategies side by side")
    columns = (
        "strategy",
        "cost (USD)",
        "savings vs on-demand",
        "zero-ready min",
        "below minAvailable min",
        "replacement p50 / p99 s",
        "notices",
        "nodes +/-",
        "wall s",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for res in results:
        latencies = res.replacement_latencies
        savings = "-" if res.savings_vs_on_demand is None else f"{res.savings_vs_on_demand:.1%}"
        table.add_row(
            res.strategy,
            f"{res.total_cost:.2f}",
            savings,
            _minutes(res.zero_ready_minutes),
            _minutes(res.below_min_available_minutes),
            f"{_seconds(percentile(latencies, 50))} / {_seconds(percentile(latencies, 99))}",
            str(res.notices),
            f"{res.nodes_added}/{res.nodes_removed}",
            f"{res.wall_seconds:.1f}",
        )
    return table


def workload_table(results: Sequence[StrategyResult]) -> Table:
    table = Table(title="Availability per workload: zero-ready / below-minAvailable minutes")
    table.add_column("workload")
    table.add_column("replicas", justify="right")
    table.add_column("minAvailable", justify="right")
    for res in results:
        table.add_column(res.strategy, justify="right")
    names = sorted({w.workload for res in results for w in res.workloads})
    by_strategy = [{w.workload: w for w in res.workloads} for res in results]
    for name in names:
        first = next(figures[name] for figures in by_strategy if name in figures)
        cells = []
        for figures in by_strategy:
            w = figures.get(name)
            cells.append(
                "-"
                if w is None
                else f"{_minutes(w.zero_ready_minutes)} / {_minutes(w.below_min_available_minutes)}"
            )
        floor = "-" if first.min_available is None else str(first.min_available)
        table.add_row(name, str(first.replicas), floor, *cells)
    return table


def lost_minutes(figures: WorkloadFigures) -> float:
    """Minutes below the workload's floor: its PDB's minAvailable, else one ready replica."""
    if figures.below_min_available_minutes is not None:
        return figures.below_min_available_minutes
    return figures.zero_ready_minutes


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def write_chart(results: Sequence[StrategyResult], path: Path) -> None:
    """Cost over time per strategy, and each workload's minutes below its floor per strategy."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ChartError(f"chart file must end in .png or .svg, not {path.name!r}")
    if not results:
        raise ChartError("no simulation results to draw")
    names = sorted({w.workload for res in results for w in res.workloads})
    figure = Figure(figsize=(11, 4 + 0.35 * max(1, len(names))), layout="constrained")
    cost_axes, availability_axes = figure.subplots(2, 1, height_ratios=[3, max(2, len(names) * 0.35)])
    for res in results:
        hours = [t / 3600.0 for t, _ in res.cost_series]
        (line,) = cost_axes.plot(
            hours, [c for _, c in res.cost_series], label=res.strategy, color=COLORS.get(res.strategy)
        )
        line.set_gid(f"cost-{_slug(res.strategy)}")
    cost_axes.set_title("Compute cost over time")
    cost_axes.set_xlabel("hours")
    cost_axes.set_ylabel("USD (cumulative)")
    height = 0.8 / len(results)
    for index, res in enumerate(results):
        figures = {w.workload: w for w in res.workloads}
        values = [lost_minutes(figures[n]) if n in figures else 0.0 for n in names]
        positions = [row + index * height for row in range(len(names))]
        bars = availability_axes.barh(
            positions, values, height=height, label=res.strategy, color=COLORS.get(res.strategy)
        )
        for name, bar in zip(names, bars.patches, strict=True):
            bar.set_gid(f"availability-{_slug(res.strategy)}-{_slug(name)}")
    availability_axes.set_yticks([row + 0.4 - height / 2 for row in range(len(names))], names)
    availability_axes.set_xlim(left=0.0)
    availability_axes.set_xlabel(
        "minutes below minAvailable (without a PDB: minutes with zero ready replicas)"
    )
    availability_axes.set_title("Availability per workload (0 is best)")
    availability_axes.invert_yaxis()
    availability_axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    cost_axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    FigureCanvasAgg(figure)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "shipshape"}):
        figure.savefig(path, format=suffix[1:], metadata={"Date": None} if suffix == ".svg" else None)
