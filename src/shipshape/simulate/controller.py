"""The placement controller inside an emulated cluster: the same webhook and loops, no HTTP.

- The state is one `Replica` (`controller.state.views`), fed from the store's watch events as the
  controller's informers feed theirs; the webhook and the loops read it through its `view()`, as they
  read their replicas in a controller process (one replica here: the simulation is single-threaded).
- `ReplicaPlacer.review` answers an `admission.k8s.io/v1` AdmissionReview for every pod CREATE, through
  the API's in-process admission plugin hook; its JSON Patch is applied as a webhook's would be.
- The loops (`controller.loops.all_reconcilers`) run on the engine's timers, one per lane, through the
  controller's own `LoopScheduler`, writing through `ApiOps`. Its cadence for a simulation
  (`SIMULATION_CADENCE`): a round is skipped when nothing it reads changed since its last round and
  less than five minutes passed (the loops are functions of the cache and time; time-driven changes
  such as cool-downs and back-offs are caught by the idle round). The interruption lane wakes one
  interval after a notice taint appears, as its one-second poll would, and while notices or surges
  are in progress it runs on every change and at least every ten seconds; otherwise it waits a minute
  between rounds.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import uuid
from typing import Any

from prometheus_client import CollectorRegistry

from shipshape.controller.loops import LoopSettings, SharedState, all_reconcilers, lanes
from shipshape.controller.loops.scheduler import Cadence, Lane, LoopScheduler
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.risk import RiskModel, SpotAdvisor
from shipshape.controller.state import KINDS, ClusterState
from shipshape.controller.state.views import Change, Replica
from shipshape.controller.webhook.admission import ReplicaPlacer
from shipshape.emulator import resources as r
from shipshape.emulator.admission import CREATE, Attributes
from shipshape.emulator.admission.webhooks import review_request
from shipshape.emulator.engine import Timer
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import WatchEvent
from shipshape.kube import errors, patch
from shipshape.pricing.catalog import default_catalog
from shipshape.simulate.ops import ApiOps

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.simulate.controller")

# Loop settings for days of emulated time: the same loops, rounds spaced for a simulation.
SIMULATION_LOOPS = LoopSettings(
    interruption_interval_seconds=1.0,
    rebalance_interval_seconds=60.0,
    # Doomed pods get their lowest cost from the responder itself; the ranks only need to be fresh
    # for the scale-downs that follow, and rewriting them is most of a round's work.
    deletion_cost_interval_seconds=300.0,
    fallback_interval_seconds=15.0,
    headroom_interval_seconds=300.0,
    # Each node's notice poller, modelled by reading the cloud model's metadata answers in process.
    poll_instance_metadata=True,
)


# Rounds spaced for a simulation: skipped while nothing changed (at most five minutes), at least every
# ten seconds while notices or surges are in progress, a minute apart for the interruption lane otherwise.
SIMULATION_CADENCE = Cadence(idle_seconds=300.0, busy_seconds=10.0, quiet_seconds=60.0)


def advisor_for(region: str, instance_types: list[str]) -> SpotAdvisor:
    """The spot advisor bands the cloud model draws interruptions from, for the controller's risk."""
    catalog = default_catalog()
    bands = {(region, itype): catalog.interruption_band(itype, region) for itype in instance_types}
    return SpotAdvisor(bands=bands)


class InProcessController:
    """One controller replica (always the leader) wired into a cluster; `start()` after the models."""

    def __init__(
        self,
        cluster: Cluster,
        config: ControllerConfig,
        settings: LoopSettings = SIMULATION_LOOPS,
        cadence: Cadence = SIMULATION_CADENCE,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.state = Replica(ClusterState(config))
        self.metrics = ControllerMetrics(CollectorRegistry())
        scenario = cluster.scenario
        region = config.region or (scenario.region if scenario else "us-east-1")
        types = sorted({p.instance_type for p in scenario.pools}) if scenario else []
        self.risk = RiskModel(
            advisor=advisor_for(region, types),
            cooldown_seconds=config.risk_cooldown_seconds,
            window_seconds=config.risk_window_seconds,
        )
        self.shared = SharedState.for_config(config, settings, self.risk, instance="simulator")
        self.placer = ReplicaPlacer(
            self.state,
            config,
            self.risk,
            cluster.clock,
            self.metrics,
            shortages=self.shared.shortages.shortages,
            # Metadata rebalance recommendations steer the webhook, as in a cluster.
            recommendations=self.shared.notices.recommendations,
        )
        self.ops = ApiOps(cluster.services["api"], cluster.services.get("cloud"))
        self.loops = all_reconcilers(cluster.clock, self.state, self.ops, config, self.metrics, self.shared)
        self.scheduler = LoopScheduler(lanes(self.loops), cadence)
        # In the registry's order, so that a run replays identically.
        self._cached = tuple(rt for rt in r.RESOURCES if rt.kind in KINDS and rt.group != "metrics.k8s.io")
        self._timers: dict[str, Timer] = {}
        self._review_ids = itertools.count(1)

    @property
    def rounds(self) -> int:
        return self.scheduler.rounds

    # ---- wiring ---------------------------------------------------------------------------------
    def start(self) -> None:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.config.namespace}}
        self.ops.apply(namespace)
        store = self.cluster.store
        for rt in self._cached:
            self.state.offer(Change("replace", rt.kind, items=tuple(store.iter(rt))))
        # Only the cached kinds' changes reach it (not the Leases' renewals, nor Events).
        store.subscribe(self._on_event, kinds=self._cached)
        self.cluster.services["api"].add_admission_plugin(self.admit)
        self.scheduler.start(self.cluster.clock.now(), lambda lane: lane.interval)
        for lane in self.scheduler.lanes:
            self._schedule(lane, lane.interval)

    def _on_event(self, event: WatchEvent) -> None:
        kind = event.resource.kind  # one of `_cached`: the subscription's kinds
        self.state.offer(Change("apply", kind, event={"type": event.type, "object": event.object}))
        for lane in self.scheduler.changed(kind, event.type, event.object):
            if self.scheduler.wake(lane, self.cluster.clock.now()):
                self._timers[lane.name].cancel()
                self._schedule(lane, lane.interval)

    def admit(self, attrs: Attributes) -> bool:
        """The webhook's review for a pod CREATE, its JSON Patch applied to the request's object."""
        if (
            attrs.resource is not r.PODS
            or attrs.operation != CREATE
            or attrs.subresource
            or attrs.object is None
        ):
            return False
        review = review_request(attrs, str(uuid.UUID(int=next(self._review_ids))))
        response = self.placer.review(review).get("response") or {}
        encoded = response.get("patch")
        if not encoded:
            return False
        operations = json.loads(base64.b64decode(encoded))
        try:
            patched = patch.json_patch(attrs.object, operations)
        except errors.ApiError:
            LOG.exception("the placement patch does not apply; pod admitted unmodified")
            return False
        if not isinstance(patched, dict) or patched == attrs.object:
            return False
        attrs.object = patched
        return True

    # ---- loop rounds ----------------------------------------------------------------------------
    def _schedule(self, lane: Lane, delay: float) -> None:
        self._timers[lane.name] = self.cluster.engine.call_later(delay, lambda: self._round(lane))

    def _round(self, lane: Lane) -> None:
        self._schedule(lane, self.scheduler.round(lane, self.cluster.clock.now()))
