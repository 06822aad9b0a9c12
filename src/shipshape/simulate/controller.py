"""The placement controller inside an emulated cluster: the same webhook and loops, no HTTP.

- The cache is fed from the store's watch events (as the controller's informers feed it).
- `PodPlacer.review` answers an `admission.k8s.io/v1` AdmissionReview for every pod CREATE, through
  the API's in-process admission plugin hook; its JSON Patch is applied as a webhook's would be.
- The loops (`controller.loops.all_reconcilers`) run on the engine's timers at their intervals,
  writing through `ApiOps`. A round is skipped when nothing it reads changed since its last round and
  less than `idle_seconds` passed (the loops are functions of the cache and time; time-driven changes
  such as cool-downs and back-offs are caught by the idle round). The interruption responder wakes up
  one interval after a notice taint appears, as its one-second poll would, and while notices or
  surges are in progress it runs on every change and at least every `busy_seconds`.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import uuid
from typing import Any

from prometheus_client import CollectorRegistry

from shipshape.contracts.annotations import SURGE_NOTE
from shipshape.controller.cache import KINDS, NOTICE_TAINTS, ClusterCache, taint_keys
from shipshape.controller.loops import LoopSettings, Reconciler, SharedState, all_reconcilers
from shipshape.controller.loops.interruptions import InterruptionResponder
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.risk import RiskModel, SpotAdvisor
from shipshape.controller.webhook.admission import PodPlacer
from shipshape.emulator import resources as r
from shipshape.emulator.admission import CREATE, Attributes
from shipshape.emulator.admission.webhooks import review_request
from shipshape.emulator.engine import Timer
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import DELETED, WatchEvent
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
        idle_seconds: float = 300.0,
        busy_seconds: float = 10.0,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.idle_seconds = idle_seconds
        self.busy_seconds = busy_seconds
        self.cache = ClusterCache(config)
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
        self.placer = PodPlacer(
            self.cache,
            config,
            self.risk,
            cluster.clock,
            self.metrics,
            shortages=self.shared.shortages.shortages,
        )
        self.ops = ApiOps(cluster.services["api"], cluster.services.get("cloud"))
        self.loops = all_reconcilers(cluster.clock, self.cache, self.ops, config, self.metrics, self.shared)
        for loop in self.loops:
            if isinstance(loop, InterruptionResponder):
                # Metadata rebalance recommendations steer the webhook, as in a cluster.
                self.placer.use_recommendations(loop.recommended)
        # In the registry's order, so that a run replays identically.
        self._cached = tuple(rt for rt in r.RESOURCES if rt.kind in KINDS and rt.group != "metrics.k8s.io")
        self._dirty: dict[str, bool] = {loop.name: True for loop in self.loops}
        self._last_round: dict[str, float] = {}
        self._timers: dict[str, Timer] = {}
        self._noticed: set[str] = set()
        self._review_ids = itertools.count(1)
        self.rounds = 0

    # ---- wiring ---------------------------------------------------------------------------------
    def start(self) -> None:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.config.namespace}}
        self.ops.apply(namespace)
        store = self.cluster.store
        for rt in self._cached:
            self.cache.replace(rt.kind, list(store.iter(rt)))
        store.subscribe(self._on_event)
        self.cluster.services["api"].add_admission_plugin(self.admit)
        for loop in self.loops:
            self._schedule(loop, loop.interval)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource not in self._cached:
            return
        self.cache.apply({"type": event.type, "object": event.object}, event.resource.kind)
        if event.resource is r.NODES:
            name = str(event.object["metadata"]["name"])
            noticed = event.type != DELETED and bool(taint_keys(event.object) & NOTICE_TAINTS)
            if noticed and name not in self._noticed:
                self._noticed.add(name)
                self._wake_responder()
            elif not noticed:
                self._noticed.discard(name)
        for name in self._dirty:
            self._dirty[name] = True

    def _wake_responder(self) -> None:
        for loop in self.loops:
            if isinstance(loop, InterruptionResponder):
                timer = self._timers.get(loop.name)
                due = self.cluster.clock.now() + loop.interval
                if timer is None or timer.when > due:
                    if timer is not None:
                        timer.cancel()
                    self._schedule(loop, loop.interval)

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
    def _schedule(self, loop: Reconciler, delay: float) -> None:
        self._timers[loop.name] = self.cluster.engine.call_later(delay, lambda: self._round(loop))

    def _quiet(self) -> bool:
        """Nothing to respond to: no node carries a notice and no surge is in progress."""
        if self._noticed:
            return False
        return not any(
            SURGE_NOTE in ((d.get("metadata") or {}).get("annotations") or {})
            for d in self.cache.objects("Deployment")
        )

    def _round(self, loop: Reconciler) -> None:
        now = self.cluster.clock.now()
        responder = isinstance(loop, InterruptionResponder)
        # While notices or surges are in progress the responder's time-driven steps (surge deadlines,
        # writes not yet seen) must not wait long: it runs on any change and at least every
        # `busy_seconds`; otherwise every loop runs on any change and at least every `idle_seconds`.
        bound = self.busy_seconds if responder and not self._quiet() else self.idle_seconds
        recent = now - self._last_round.get(loop.name, float("-inf")) < bound
        skip = not self._dirty[loop.name] and recent
        if not skip:
            self._dirty[loop.name] = False
            self._last_round[loop.name] = now
            self.rounds += 1
            try:
                loop.observe(now)
                loop.reconcile(now)
            except Exception:
                LOG.exception("loop %s failed; it runs again at its next interval", loop.name)
        delay = loop.interval
        if responder and self._quiet():
            delay = max(delay, min(self.idle_seconds, 60.0))
        self._schedule(loop, delay)
