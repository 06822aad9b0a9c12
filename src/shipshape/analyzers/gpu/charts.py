"""Chart of a trace replay: GPU allocation against arrived workload, one line per policy, and the
cluster's expected fragmentation below (matplotlib object API, PNG or SVG by suffix). Each line
carries an SVG id (`alloc-<policy>`, `frag-<policy>`) and SVG text stays text."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from shipshape.analyzers.gpu.replay import PolicyResult

SUFFIXES = (".png", ".svg")


class ChartError(ValueError):
    """A chart that cannot be drawn (unknown format, nothing to draw)."""


def replay_chart(results: Sequence[PolicyResult], path: Path, *, title: str) -> None:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ChartError(f"chart file must end in .png or .svg, not {path.name!r}")
    if not results:
        raise ChartError("no policy replayed: nothing to chart")
    figure = Figure(figsize=(9, 7.5))
    alloc_axes, frag_axes = figure.subplots(2, 1, height_ratios=[3, 2], sharex=True)
    for result in results:
        arrived = [a for a, _ in result.curve]
        (line,) = alloc_axes.plot(arrived, [x for _, x in result.curve], label=result.policy, linewidth=1.4)
        line.set_gid(f"alloc-{result.policy}")
        (frag_line,) = frag_axes.plot(
            [p.arrived_pct for p in result.points],
            [p.frag_gpu_pct for p in result.points],
            marker="o",
            markersize=3,
            linewidth=1.2,
            color=line.get_color(),
        )
        frag_line.set_gid(f"frag-{result.policy}")
    top = max(a for r in results for a, _ in r.curve)
    alloc_axes.plot([0, 100], [0, 100], color="#bbbbbb", linewidth=0.8, linestyle="--")
    alloc_axes.set_xlim(0, top)
    alloc_axes.set_ylabel("GPU allocated (% of capacity)")
    alloc_axes.set_title(title)
    alloc_axes.grid(True, alpha=0.3)
    alloc_axes.legend(loc="lower right", fontsize=8)
    frag_axes.set_xlabel("arrived workload (GPU asked, % of capacity)")
    frag_axes.set_ylabel("expected fragmentation (%)")
    frag_axes.grid(True, alpha=0.3)
    figure.tight_layout()
    FigureCanvasAgg(figure)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "shipshape"}):
        figure.savefig(path, format=suffix[1:], dpi=100, bbox_inches="tight")
