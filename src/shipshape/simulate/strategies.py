"""Placement strategies a simulation compares, registered explicitly in `STRATEGIES`.

A strategy rewrites the scenario before the cluster is built (`prepare`) and then installs itself on
the built cluster (`install`, before the scenario's objects are applied):

- `on-demand`: the baseline. Every spot pool is bought on-demand (same types, zones and sizes) and
  workload pods get a required node affinity to on-demand.
- `spot-naive`: every workload pod that can run on spot gets a required node affinity to spot, and
  nothing handles notices (no interruption handler, no controller).
- `capacity-type`: what a Karpenter-style setup does: workload pods prefer spot (a preferred node
  affinity), fall back to on-demand when no spot node takes them, with no ratio or spread; notices
  are handled by cordoning and draining the node (Karpenter's interruption handling).
- `shipshape`: the placement controller: its webhook decides each pod, its loops run on the engine's
  timers. Workloads that can run on spot are opted in with `spot.shipshape.dev/enabled: "true"`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from shipshape.contracts.annotations import ENABLED
from shipshape.controller.loops import LoopSettings
from shipshape.controller.policy import ControllerConfig
from shipshape.emulator import resources as r
from shipshape.emulator.admission import CREATE, Attributes
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Scenario
from shipshape.simulate import steering
from shipshape.simulate.controller import SIMULATION_LOOPS, InProcessController

Obj = dict[str, Any]


class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    def prepare(self, scenario: Scenario) -> Scenario: ...

    def install(self, cluster: Cluster) -> None: ...


def pod_plugin(
    rewrite: Callable[[Obj], Obj | None],
) -> Callable[[Attributes], bool]:
    """An admission plugin applying `rewrite` to each steered pod CREATE (None: leave it)."""

    def plugin(attrs: Attributes) -> bool:
        if attrs.resource is not r.PODS or attrs.operation != CREATE or attrs.subresource:
            return False
        pod = attrs.object
        if pod is None or not steering.is_steered(pod, attrs.namespace):
            return False
        rewritten = rewrite(pod)
        if rewritten is None:
            return False
        attrs.object = rewritten
        return True

    return plugin


def _with_handler(scenario: Scenario, enabled: bool) -> Scenario:
    return scenario.model_copy(
        update={"interruptions": scenario.interruptions.model_copy(update={"handler": enabled})}
    )


@dataclass(frozen=True, slots=True)
class OnDemand:
    name: str = "on-demand"
    description: str = "every pool bought on-demand, pods required on on-demand (the baseline)"

    def prepare(self, scenario: Scenario) -> Scenario:
        return steering.all_on_demand(scenario)

    def install(self, cluster: Cluster) -> None:
        cluster.services["api"].add_admission_plugin(
            pod_plugin(lambda pod: steering.require_capacity(pod, "on-demand"))
        )


@dataclass(frozen=True, slots=True)
class SpotNaive:
    name: str = "spot-naive"
    description: str = "every pod that can run on spot required on spot; notices not handled"

    def prepare(self, scenario: Scenario) -> Scenario:
        return _with_handler(scenario, False)

    def install(self, cluster: Cluster) -> None:
        scenario = cluster.scenario
        assert scenario is not None
        tolerations = steering.spot_tolerations(scenario)

        def rewrite(pod: Obj) -> Obj | None:
            if not steering.spot_eligible(pod.get("spec") or {}, scenario):
                return None
            return steering.require_capacity(pod, "spot", tolerations)

        cluster.services["api"].add_admission_plugin(pod_plugin(rewrite))


@dataclass(frozen=True, slots=True)
class CapacityTypePreference:
    name: str = "capacity-type"
    description: str = (
        "pods prefer spot and fall back to on-demand; nodes drained on notice (Karpenter-style)"
    )

    def prepare(self, scenario: Scenario) -> Scenario:
        return _with_handler(scenario, True)

    def install(self, cluster: Cluster) -> None:
        scenario = cluster.scenario
        assert scenario is not None
        tolerations = steering.spot_tolerations(scenario)
        cluster.services["api"].add_admission_plugin(
            pod_plugin(lambda pod: steering.prefer_spot(pod, tolerations))
        )


@dataclass(frozen=True, slots=True)
class Shipshape:
    name: str = "shipshape"
    description: str = "the placement controller: its webhook and loops, in process"
    # The controller's configuration (its config file's fields); the scenario's region when it sets none.
    config: ControllerConfig | None = None
    # Loop settings given in that file; the fields it sets replace the simulation's (`SIMULATION_LOOPS`).
    loops: LoopSettings | None = None

    def prepare(self, scenario: Scenario) -> Scenario:
        return steering.opt_in_workloads(scenario, {ENABLED: "true"})

    def install(self, cluster: Cluster) -> None:
        scenario = cluster.scenario
        config = self.config or ControllerConfig()
        if config.region is None and scenario is not None:
            config = config.model_copy(update={"region": scenario.region})
        settings = SIMULATION_LOOPS
        if self.loops is not None:
            settings = SIMULATION_LOOPS.model_copy(
                update={name: getattr(self.loops, name) for name in self.loops.model_fields_set}
            )
        controller = InProcessController(cluster, config, settings)
        controller.start()
        cluster.services["placement-controller"] = controller


STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy for strategy in (OnDemand(), SpotNaive(), CapacityTypePreference(), Shipshape())
}
BASELINE = "on-demand"


def strategy_named(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise steering.StrategyError(
            f"unknown strategy {name!r} (choose from {', '.join(STRATEGIES)})"
        ) from None
