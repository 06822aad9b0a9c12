"""What a scenario's shape means for a simulation's figures (pure: the scenario and the results).

One finding so far, `on-demand-floor`: when the on-demand pools' minimum size already holds every
workload's requests, the on-demand nodes are paid whatever the strategy and each spot node is bought
on top of them. Savings are then bounded by that floor, and a base + percentage policy, which puts
the replicas above the base on spot, adds spot nodes while on-demand capacity stands idle: such a
scenario is too small to rank placement strategies by cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shipshape.emulator.cloud.model import pool_price
from shipshape.emulator.cloud.nodes import Shape
from shipshape.emulator.scenario import Pool, Scenario
from shipshape.kube.quantity import cpu_millis, to_int
from shipshape.kube.scheduling import pod_requests
from shipshape.simulate.run import StrategyResult
from shipshape.simulate.strategies import BASELINE

REPLICATED = {"Deployment", "StatefulSet", "ReplicaSet"}
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def _template_requests(manifest: Mapping[str, Any]) -> dict[str, int]:
    template = ((manifest.get("spec") or {}).get("template")) or {}
    return pod_requests(template)


def workload_requests(scenario: Scenario) -> tuple[int, int, int, int]:
    """(cpu millis, memory bytes) of the replicated workloads' pods, and of one node's DaemonSet pods."""
    cpu = memory = ds_cpu = ds_memory = 0
    for manifest in scenario.objects:
        kind = manifest.get("kind")
        requests = _template_requests(manifest)
        if kind in REPLICATED:
            replicas = (manifest.get("spec") or {}).get("replicas", 1)
            count = replicas if isinstance(replicas, int) else 1
            cpu += count * requests.get("cpu", 0)
            memory += count * requests.get("memory", 0)
        elif kind == "DaemonSet":
            ds_cpu += requests.get("cpu", 0)
            ds_memory += requests.get("memory", 0)
    return cpu, memory, ds_cpu, ds_memory


def _allocatable(pool: Pool) -> tuple[int, int]:
    allocatable = Shape.of(pool).allocatable()
    return cpu_millis(allocatable["cpu"]), to_int(allocatable["memory"])


def on_demand_floor(scenario: Scenario, results: Sequence[StrategyResult] = ()) -> Finding | None:
    """The `on-demand-floor` finding, or None when the workloads outgrow the on-demand pools' minimum."""
    floor = [p for p in scenario.pools if p.capacity_type == "on-demand" and p.min_size > 0]
    if not floor:
        return None
    nodes = sum(p.min_size for p in floor)
    floor_cpu = sum(p.min_size * _allocatable(p)[0] for p in floor)
    floor_memory = sum(p.min_size * _allocatable(p)[1] for p in floor)
    cpu, memory, ds_cpu, ds_memory = workload_requests(scenario)
    if cpu == 0 or cpu + nodes * ds_cpu > floor_cpu or memory + nodes * ds_memory > floor_memory:
        return None
    message = (
        f"the on-demand pools' minimum size ({nodes} nodes, {floor_cpu / 1000:.1f} CPU / "
        f"{floor_memory / GIB:.1f} GiB allocatable) already holds every workload's requests "
        f"({cpu / 1000:.1f} CPU / {memory / GIB:.1f} GiB): those nodes are paid whatever the strategy, "
        "and every spot node is bought on top of them"
    )
    baseline = next((r for r in results if r.strategy == BASELINE), None)
    if baseline is not None and baseline.total_cost > 0:
        hours = float(baseline.cost.get("seconds") or baseline.duration_seconds) / 3600.0
        floor_cost = sum(p.min_size * pool_price(p, scenario) for p in floor) * hours
        spot_floor = (
            sum(p.min_size * pool_price(p, scenario) for p in scenario.pools if p.capacity_type == "spot")
            * hours
        )
        best = 1.0 - (floor_cost + spot_floor) / baseline.total_cost
        message += (
            f". No strategy can save more than {best:.1%} here (the on-demand floor costs "
            f"{floor_cost:.2f} of the baseline's {baseline.total_cost:.2f} USD)"
        )
    message += (
        ". A base + percentage policy, which puts the replicas above the base on spot, adds spot nodes "
        "while on-demand capacity stands idle, so the strategies' costs here rank how few spot nodes "
        "each keeps, not how well it uses spot: judge them on a scenario whose workloads outgrow the "
        "on-demand floor (e.g. examples/scenarios/reference.yaml)."
    )
    return Finding("on-demand-floor", message)


def findings(scenario: Scenario, results: Sequence[StrategyResult] = ()) -> list[Finding]:
    """Every finding about the scenario and its results, for the report."""
    found = on_demand_floor(scenario, results)
    return [found] if found is not None else []
