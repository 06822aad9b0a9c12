"""Charts of start-up timelines (matplotlib, PNG or SVG by the file's suffix).

This module writes files; the analysis it draws is computed elsewhere. Figures are built with the
object API (no pyplot state). Each bar carries an SVG id (`phase-<phase>-<row>`,
`segment-<segment>-<row>`, `bucket-<upper bound>`) and SVG text stays text, so charts can be
checked for content.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from shipshape.analyzers.startup import model, nodes
from shipshape.analyzers.startup.model import PodTimeline
from shipshape.analyzers.startup.nodes import NodeTimeline
from shipshape.analyzers.startup.prometheus import POD_START_BUCKETS

PHASE_COLORS: Mapping[str, str] = {
    model.SCHEDULING: "#4e79a7",
    model.SANDBOX: "#f28e2b",
    model.IMAGE_PULL_WAIT: "#bab0ac",
    model.IMAGE_PULL: "#e15759",
    model.INIT_CONTAINERS: "#76b7b2",
    model.CONTAINER_START: "#59a14f",
    model.PROBE_WAIT: "#edc948",
    model.READINESS_GATES: "#b07aa1",
}
SEGMENT_COLORS: Mapping[str, str] = dict(
    zip(
        nodes.SEGMENT_NAMES,
        ("#9c755f", "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"),
        strict=True,
    )
)
HISTOGRAM_COLOR = "#4e79a7"
SUFFIXES = (".png", ".svg")


class ChartError(ValueError):
    """A chart that cannot be drawn (unknown format, nothing to draw)."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _save(figure: Figure, path: Path) -> None:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ChartError(f"chart file must end in .png or .svg, not {path.name!r}")
    FigureCanvasAgg(figure)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "shipshape"}):
        figure.savefig(path, format=suffix[1:], dpi=100, bbox_inches="tight")


def _draw_pod_bars(axes: Axes, timelines: Sequence[PodTimeline]) -> None:
    labels = []
    for row, timeline in enumerate(timelines):
        left = 0.0
        for phase in model.POD_PHASES:
            width = timeline.phases.get(phase)
            if not width:
                continue
            (bar,) = axes.barh(row, width, left=left, color=PHASE_COLORS[phase], height=0.7).patches
            bar.set_gid(f"phase-{phase}-{row}")
            left += width
        labels.append(f"{timeline.key} ({timeline.end_to_end or 0:.1f}s)")
    axes.set_yticks(range(len(timelines)), labels=labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("seconds from creation")
    axes.set_title("Slowest pods: where start-up time goes")
    handles = [Patch(color=PHASE_COLORS[p], label=model.PHASE_TITLES[p]) for p in model.POD_PHASES]
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)


def _draw_histogram(axes: Axes, values: Sequence[float], title: str) -> None:
    bounds = [b for b in POD_START_BUCKETS if b <= max(values, default=0.0) * 2 or b <= 10] or [0.5]
    counts = [0] * (len(bounds) + 1)
    for value in values:
        index = next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))
        counts[index] += 1
    labels = [f"≤{bound:g}" for bound in bounds] + [f">{bounds[-1]:g}"]
    bars = axes.bar(range(len(counts)), counts, color=HISTOGRAM_COLOR)
    for bound_label, patch in zip([*(f"{b:g}" for b in bounds), "inf"], bars.patches, strict=True):
        patch.set_gid(f"bucket-{bound_label}")
    axes.set_xticks(range(len(counts)), labels=labels, fontsize=7, rotation=45)
    axes.set_ylabel("pods")
    axes.set_xlabel("seconds (kubelet's pod start-up buckets)")
    axes.set_title(title)


def pod_startup_chart(timelines: Sequence[PodTimeline], path: Path, *, slowest: int = 20) -> None:
    """Stacked per-phase bars of the slowest Ready pods above a creation-to-Ready histogram."""
    ready = sorted((t for t in timelines if t.end_to_end is not None), key=lambda t: -(t.end_to_end or 0.0))
    if not ready:
        raise ChartError("no pod became Ready: nothing to chart")
    top = ready[:slowest]
    figure = Figure(figsize=(11, 4 + 0.3 * len(top)))
    bars_axes, histogram_axes = figure.subplots(2, 1, height_ratios=[max(3, len(top) * 0.3), 2.5])
    _draw_pod_bars(bars_axes, top)
    _draw_histogram(
        histogram_axes,
        [t.end_to_end for t in ready if t.end_to_end is not None],
        "Creation to Ready, all pods",
    )
    figure.tight_layout()
    _save(figure, path)


def latency_histogram(values: Sequence[float], path: Path, *, title: str = "Pod start-up latency") -> None:
    if not values:
        raise ChartError("no values: nothing to chart")
    figure = Figure(figsize=(8, 4))
    _draw_histogram(figure.subplots(), values, title)
    figure.tight_layout()
    _save(figure, path)


def node_gantt_chart(timelines: Sequence[NodeTimeline], path: Path, *, limit: int = 40) -> None:
    """One row per node: its start-up segments from its origin (launch, VM start or registration)."""
    rows = [t for t in timelines if t.origin is not None][:limit]
    if not rows:
        raise ChartError("no node timeline has a known origin: nothing to chart")
    figure = Figure(figsize=(11, 2 + 0.35 * len(rows)))
    axes = figure.subplots()
    labels = []
    for row, timeline in enumerate(rows):
        left = 0.0
        for name in nodes.SEGMENT_NAMES:
            width = timeline.segments.get(name)
            if width is None:
                continue
            if width > 0:
                (bar,) = axes.barh(row, width, left=left, color=SEGMENT_COLORS[name], height=0.7).patches
                bar.set_gid(f"segment-{_slug(name)}-{row}")
            left += width
        ready = timeline.time_to_ready
        labels.append(
            f"{timeline.name} [{timeline.info.pool_key}] "
            + (f"{ready:.0f}s" if ready is not None else "not Ready")
        )
    axes.set_yticks(range(len(rows)), labels=labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("seconds from the node's first known event")
    axes.set_title("Node start-up")
    axes.legend(
        handles=[Patch(color=SEGMENT_COLORS[n], label=n) for n in nodes.SEGMENT_NAMES],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=7,
    )
    figure.tight_layout()
    _save(figure, path)
