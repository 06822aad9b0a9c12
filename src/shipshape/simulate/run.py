"""Run a scenario in discrete-event mode under one strategy and collect what the report shows.

`simulate(scenario, strategy, settings)` builds the emulated cluster on a `VirtualClock`, lets the
strategy install itself, applies the scenario's objects, and runs the engine to the end, calling
`progress(done, total)` (emulated seconds) as it goes. `compare(...)` runs several strategies with
the same seed.

Only what a simulation needs is changed from an interactive cluster: kubelets renew their Leases and
refresh node status rarely (`heartbeat_seconds`, `status_report_seconds`) and the node lifecycle
controller's grace period follows (nodes only go silent when the cloud cuts them off), since days
of heartbeats would dominate the run and change no outcome.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shipshape.emulator import assembly
from shipshape.emulator.controllers import DaemonSetController, NodeLifecycleController
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Scenario
from shipshape.kube.clock import VirtualClock
from shipshape.simulate.observer import Observer, workload_label
from shipshape.simulate.ops import complete
from shipshape.simulate.strategies import Strategy

Progress = Callable[[float, float], None]
# The cyclic garbage collector's first threshold during a run (`simulate`).
SIMULATION_GC_THRESHOLD = 20_000
PLACEHOLDER_NAMESPACES = frozenset({"shipshape-system"})


@dataclass(frozen=True, slots=True)
class SimulationSettings:
    duration: float
    seed: int | None = None
    warmup: float = 600.0
    sample_seconds: float = 600.0
    heartbeat_seconds: float = 3600.0
    status_report_seconds: float = 3600.0
    progress_steps: int = 200
    daemonset_window: float = 5.0


@dataclass(frozen=True, slots=True)
class WorkloadFigures:
    workload: str
    replicas: int
    pdb: str | None
    min_available: int | None
    zero_ready_minutes: float
    below_min_available_minutes: float | None
    measured_minutes: float
    min_ready: int | None
    first_ready_seconds: float | None

    @property
    def availability(self) -> float | None:
        """Share of measured time at or above the floor (the PDB's, else one ready replica)."""
        if self.measured_minutes <= 0:
            return None
        lost = (
            self.below_min_available_minutes
            if self.below_min_available_minutes is not None
            else self.zero_ready_minutes
        )
        return max(0.0, 1.0 - lost / self.measured_minutes)


@dataclass(slots=True)
class StrategyResult:
    strategy: str
    description: str
    seed: int
    duration_seconds: float
    wall_seconds: float
    cost: dict[str, Any]
    cost_series: list[tuple[float, float]]
    workloads: list[WorkloadFigures]
    replacement_latencies: list[float]
    unreplaced: int
    nodes_added: int
    nodes_removed: int
    notices: int
    engine_errors: int
    savings_vs_on_demand: float | None = None
    # CPU seconds of this process for the run: on a shared machine it moves less than wall time.
    cpu_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_cost(self) -> float:
        return float(self.cost.get("total", 0.0))

    @property
    def zero_ready_minutes(self) -> float:
        return sum(w.zero_ready_minutes for w in self.workloads)

    @property
    def below_min_available_minutes(self) -> float:
        return sum(w.below_min_available_minutes or 0.0 for w in self.workloads)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation; None for no values."""
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return float(statistics.quantiles(sorted(values), n=100, method="inclusive")[max(0, min(98, int(q) - 1))])


class _SimulationCollector:
    """The cyclic garbage collector's settings for a run, restored by `restore`.

    Every emulated change allocates and frees many small objects (watch events, copies, status
    dicts), almost none of them in reference cycles, while the cluster's stored objects and indexes
    (hundreds of MiB) live for the whole run. With the default settings the collector took about a
    sixth of a week's run: young collections every 700 allocations, and full ones walking every
    live object. During a run young collections are spaced by `SIMULATION_GC_THRESHOLD` allocations,
    and `age` (called every sample interval) moves the objects alive then out of the collector's
    sight (`gc.freeze`), so a full collection walks only what came since; `restore` hands them back
    to it. Peak memory for the reference week is the same (about 580 MiB).
    """

    def __init__(self) -> None:
        self._thresholds = gc.get_threshold()
        # Freezing is left alone when the process froze objects itself.
        self._freezes = gc.get_freeze_count() == 0
        if self._freezes:
            gc.collect()  # garbage of earlier work (an earlier run's cluster) must not be frozen
        gc.set_threshold(max(self._thresholds[0], SIMULATION_GC_THRESHOLD), *self._thresholds[1:])

    def age(self) -> None:
        if self._freezes:
            gc.freeze()

    def restore(self) -> None:
        gc.set_threshold(*self._thresholds)
        if self._freezes:
            gc.unfreeze()


def simulation_scenario(scenario: Scenario, settings: SimulationSettings) -> Scenario:
    """The scenario with the run's seed and the kubelet's simulation cadence."""
    kubelet = scenario.kubelet.model_copy(
        update={
            "heartbeat_seconds": settings.heartbeat_seconds,
            "node_status_report_seconds": settings.status_report_seconds,
        }
    )
    update: dict[str, Any] = {"kubelet": kubelet}
    if settings.seed is not None:
        update["seed"] = settings.seed
    return scenario.model_copy(update=update)


class CoalescedDaemonSetController(DaemonSetController):
    """The DaemonSet controller syncing at most once per `window` emulated seconds per burst of changes.

    Each sync walks every node; a node that joins brings a dozen node and daemon pod changes over its
    boot, and a reclaim brings dozens of nodes. Coalescing them delays daemon pods by at most the
    window and changes nothing else.
    """

    def __init__(self, window: float) -> None:
        super().__init__()
        self.drain_delay = window


def build_cluster(scenario: Scenario, clock: VirtualClock, settings: SimulationSettings) -> Cluster:
    """The assembly's models, with the node lifecycle controller's timing matched to the heartbeats
    and the DaemonSet controller's syncs coalesced."""
    cluster = assembly.build(scenario, clock, models=False)
    grace = 4 * max(settings.heartbeat_seconds, settings.status_report_seconds)
    for model in assembly.model_set():
        if isinstance(model, NodeLifecycleController):
            model = NodeLifecycleController(
                grace_period=grace, startup_grace_period=grace, monitor_period=settings.heartbeat_seconds
            )
        elif isinstance(model, DaemonSetController) and settings.daemonset_window > 0:
            model = CoalescedDaemonSetController(settings.daemonset_window)
        cluster.add(model)
    return cluster


def simulate(
    scenario: Scenario, strategy: Strategy, settings: SimulationSettings, progress: Progress | None = None
) -> StrategyResult:
    """One strategy over `settings.duration` emulated seconds; deterministic for a given seed."""
    prepared = simulation_scenario(strategy.prepare(scenario), settings)
    seed = prepared.seed
    saved = random.getstate()
    random.seed(seed)  # generated object names (pods of ReplicaSets, Events) replay identically
    collector = _SimulationCollector()
    wall_start = time.perf_counter()
    cpu_start = time.process_time()
    try:
        clock = VirtualClock()
        cluster = build_cluster(prepared, clock, settings)
        strategy.install(cluster)
        start = clock.now()
        observer = Observer(
            cluster.store,
            clock,
            measure_from=start + settings.warmup,
            excluded_namespaces=PLACEHOLDER_NAMESPACES,
        )
        complete(assembly.apply_objects(cluster))
        cloud = cluster.services["cloud"]
        series: list[tuple[float, float]] = [(0.0, 0.0)]

        def sample() -> None:
            series.append((clock.now() - start, float(cloud.cost()["total"])))
            collector.age()
            cluster.engine.call_later(settings.sample_seconds, sample)

        cluster.engine.call_later(settings.sample_seconds, sample)
        steps = max(1, settings.progress_steps)
        for step in range(1, steps + 1):
            cluster.engine.run_until(start + settings.duration * step / steps)
            if progress is not None:
                progress(settings.duration * step / steps, settings.duration)
        end = clock.now()
        observer.finish(end)
        cost = cloud.cost()
        if series[-1][0] < end - start:
            series.append((end - start, float(cost["total"])))
    finally:
        random.setstate(saved)
        collector.restore()
    return StrategyResult(
        strategy=strategy.name,
        description=strategy.description,
        seed=seed,
        duration_seconds=settings.duration,
        wall_seconds=time.perf_counter() - wall_start,
        cost=cost,
        cost_series=series,
        workloads=_workload_figures(observer, start),
        replacement_latencies=list(observer.latencies),
        unreplaced=observer.unreplaced(),
        nodes_added=observer.churn.nodes_added,
        nodes_removed=observer.churn.nodes_removed,
        notices=observer.churn.notices,
        engine_errors=len(cluster.engine.errors),
        cpu_seconds=time.process_time() - cpu_start,
    )


def _workload_figures(observer: Observer, start: float) -> list[WorkloadFigures]:
    out: list[WorkloadFigures] = []
    for key in sorted(observer.workloads):
        track = observer.workloads[key]
        out.append(
            WorkloadFigures(
                workload=workload_label(key),
                replicas=track.replicas,
                pdb=track.pdb,
                min_available=track.floor,
                zero_ready_minutes=track.zero_seconds / 60.0,
                below_min_available_minutes=None if track.floor is None else track.below_seconds / 60.0,
                measured_minutes=track.measured_seconds / 60.0,
                min_ready=track.min_ready,
                first_ready_seconds=None if track.first_full is None else track.first_full - start,
            )
        )
    return out


def compare(
    scenario: Scenario,
    strategies: Sequence[Strategy],
    settings: SimulationSettings,
    progress: Callable[[str, float, float], None] | None = None,
) -> list[StrategyResult]:
    """Each strategy with the same seed; savings are against the `on-demand` run when it is included."""
    results: list[StrategyResult] = []
    for strategy in strategies:

        def report(done: float, total: float, name: str = strategy.name) -> None:
            if progress is not None:
                progress(name, done, total)

        results.append(simulate(scenario, strategy, settings, report))
    baseline = next((res for res in results if res.strategy == "on-demand"), None)
    if baseline is not None and baseline.total_cost > 0:
        for res in results:
            res.savings_vs_on_demand = 1.0 - res.total_cost / baseline.total_cost
    return results
