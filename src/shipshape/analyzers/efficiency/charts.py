"""Charts of an efficiency report (matplotlib, PNG or SVG by the file's suffix): the workloads that
save the most per month, and the batch capacity each node could offer (the settings' percentile
next to the window's mean). Object API only (no pyplot state)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from shipshape.analyzers.efficiency.analysis import EfficiencyReport

SUFFIXES = (".png", ".svg")


class ChartError(ValueError):
    """A chart that cannot be drawn (unknown format)."""


def efficiency_chart(report: EfficiencyReport, path: Path, top: int = 15) -> None:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ChartError(f"chart {path}: the file name must end in .png or .svg")
    figure = Figure(figsize=(12, 8))
    FigureCanvasAgg(figure)
    savings, batch = figure.subplots(2, 1)
    findings = [f for f in report.findings if f.kind == "rightsizing" and f.monthly_savings is not None][:top]
    names = [f.target for f in findings][::-1]
    values = [f.monthly_savings or 0.0 for f in findings][::-1]
    savings.barh(names, values, color=["#59a14f" if v >= 0 else "#e15759" for v in values])
    savings.set_title(f"Right-sizing ({report.strategy}): USD per month, top {len(findings)}")
    savings.set_xlabel("USD / month (negative: under-provisioned, costs more)")
    savings.tick_params(axis="y", labelsize=7)
    nodes = sorted(report.colocation.nodes, key=lambda n: -n.cpu.batch.percentile)[:top]
    pct = report.colocation.settings.reclaim_percentile
    labels = [n.node for n in nodes]
    positions = list(range(len(nodes)))
    batch.bar([p - 0.2 for p in positions], [n.cpu.batch.percentile for n in nodes], 0.4, label=f"p{pct:g}")
    batch.bar([p + 0.2 for p in positions], [n.cpu.batch.mean for n in nodes], 0.4, label="mean")
    batch.set_xticks(positions, labels, rotation=30, ha="right", fontsize=7)
    batch.set_ylabel("cores")
    batch.set_title("Reclaimable batch CPU per node (Koordinator's model)")
    batch.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format=suffix[1:], dpi=100)
