"""One call for the whole GPU analysis of a cluster: inventory, allocation, idle GPUs, waste and
advice, from the typed fleet inputs (see `fleet`, `idle`, `objects`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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

    def to_json(self) -> dict[str, Any]:
        """The totals, the advice (each with the instruction the agent executes, where there is one,
        under `apply`) and what the usage lacked."""
        return {
            "gpus": self.gpus,
            "allocated": self.allocated,
            "allocatedPct": round(self.allocated_pct, 2),
            "idleGpus": self.idle_gpus,
            "wastedPerDay": round(self.wasted_per_day, 4),
            "pendingPods": self.pending_pods,
            "advice": [a.to_json() for a in self.advice],
            "lacking": [f"{u.pod.key}: {u.lacking}" for u in self.usage if u.lacking],
        }


def analyze(
    nodes: Sequence[fleet.GpuNode],
    pods: Sequence[fleet.GpuPod],
    series: Iterable[idle.UtilizationSeries] = (),
    idle_settings: idle.IdleSettings | None = None,
    advice_settings: advice.AdviceSettings | None = None,
    workloads: Mapping[tuple[str, str, str], fleet.Workload] | None = None,
) -> GpuReport:
    """Usage (and the advice that needs it) only with `idle_settings`, which set the window;
    `workloads` lets the scale-down advice carry its instruction."""
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
        advice=tuple(advice.advise(allocations, pods, usage, advice_settings, workloads)),
        gpus=sum(n.gpus for n in nodes),
        allocated=round(sum(a.allocated for a in allocations.values()), 6),
        idle_gpus=round(sum(u.pod.gpus for u in usage if u.idle), 6),
        wasted_per_day=idle.wasted_per_day(usage),
        pending_pods=sum(1 for p in pods if p.node is None),
    )
