"""One call for the whole GPU analysis of a cluster: inventory, allocation, idle GPUs, waste and
advice, from the typed fleet inputs (see `fleet`, `idle`, `objects`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shipshape.analyzers.gpu import advice, fleet, idle


@dataclass(frozen=True)
class GpuReport:
    inventory: tuple[fleet.InventoryRow, ...]
    allocations: dict[str, fleet.NodeAllocation]
    usage: tuple[idle.PodUsage, ...]
    advice: tuple[advice.Advice, ...]
    gpus: int
    allocated: float
    idle_gpus: float  # GPUs held by pods found idle
    wasted_per_day: float  # money, from the nodes' prices
    pending_pods: int

    @property
    def allocated_pct(self) -> float:
        return 100.0 * self.allocated / self.gpus if self.gpus else 0.0


def analyze(
    nodes: Sequence[fleet.GpuNode],
    pods: Sequence[fleet.GpuPod],
    series: Iterable[idle.UtilizationSeries] = (),
    idle_settings: idle.IdleSettings | None = None,
    advice_settings: advice.AdviceSettings | None = None,
) -> GpuReport:
    """Usage (and the advice that needs it) only with `idle_settings`, which set the window."""
    allocations = fleet.allocation(nodes, pods)
    usage = (
        idle.pod_usage(pods, {n.name: n for n in nodes}, series, idle_settings)
        if idle_settings is not None
        else []
    )
    return GpuReport(
        inventory=tuple(fleet.inventory(allocations)),
        allocations=allocations,
        usage=tuple(usage),
        advice=tuple(advice.advise(allocations, pods, usage, advice_settings)),
        gpus=sum(n.gpus for n in nodes),
        allocated=round(sum(a.allocated for a in allocations.values()), 6),
        idle_gpus=round(sum(u.pod.gpus for u in usage if u.idle), 6),
        wasted_per_day=idle.wasted_per_day(usage),
        pending_pods=sum(1 for p in pods if p.node is None),
    )
