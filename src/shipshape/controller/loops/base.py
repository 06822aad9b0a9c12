"""The shape every loop shares, and what the loops read in common.

A loop is a `Reconciler(clock, state, ops, config, metrics, shared)` with a `name`, an `interval`
(emulated seconds between rounds), `observe(now)` and `reconcile(now)`:

- `observe` runs on every controller replica: it only updates `SharedState` from the cache (the pools
  at risk, the pools in shortage, the notices at hand), which every replica's webhook reads;
- `reconcile` runs on the leader only: it reads the cache, takes its decisions from its pure decision
  module, and writes through `ClusterOps`; what it wrote and has not seen yet is an expectation
  (`kit.Expectations`), what it concluded from unchanged inputs is not worked out again
  (`kit.Unchanged`), and a loop that decides per workload decides only for the workloads that
  changed (`WorkloadQueue`).

A loop also says what wakes it (`watches`, `changed`, `busy`) and which `lane` it shares; the
scheduler (`scheduler.py`) runs it.

Reads of the cache happen inside `with self.view(now):`, the view of the loops' replica of the state
(`state.views.Replica`: the process's informer threads feed it, the simulator its store's events),
the same view the webhook reads its own replica through; writes happen outside it, so that what a
write sets off is applied before the next view.
Nothing that matters is kept in memory: what a loop did is written on the cluster's objects
(annotations), so a restarted or newly elected controller picks up where the last one stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from shipshape.analyzers.efficiency import publish
from shipshape.controller.events import event_for
from shipshape.controller.fallback import ShortageTracker
from shipshape.controller.loops.kit import DirtyQueue, Every, Expectations, Inputs, same_inputs
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.notices import Notice
from shipshape.controller.ops import ClusterOps, OpsError
from shipshape.controller.placement import Pool
from shipshape.controller.policy import ControllerConfig, PolicyResult, WorkloadKind
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import ClusterState, DirtyWorkloads, Managed, WorkloadState
from shipshape.controller.state.views import Replica
from shipshape.kube.clock import Clock

if TYPE_CHECKING:
    from shipshape.analyzers.efficiency import qos

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.loops")


class BatchResourcesSettings(BaseModel):
    """The opt-in batch resources loop: Koordinator's colocation thresholds and the publication's
    hysteresis (`analyzers/efficiency/qos.py`, `analyzers/efficiency/publish.py`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    interval_seconds: float = Field(default=60.0, gt=0)
    # Refresh only when a value moved by more than this share of the published one...
    diff_threshold: float = Field(default=0.1, gt=0, le=1)
    # ...or when the last update is older than this and the value differs at all.
    max_update_seconds: float = Field(default=300.0, gt=0)
    # Withdraw both resources when the node's metrics are older than this.
    stale_seconds: float = Field(default=900.0, gt=0)
    cpu_reclaim_threshold_percent: float = Field(default=60.0, ge=0, le=100)
    memory_reclaim_threshold_percent: float = Field(default=65.0, ge=0, le=100)
    cpu_calculate_policy: Literal["usage", "maxUsageRequest"] = "usage"
    memory_calculate_policy: Literal["usage", "request", "maxUsageRequest"] = "usage"

    def colocation_settings(self) -> qos.ColocationSettings:
        from shipshape.analyzers.efficiency import qos  # numpy: only once the loop runs

        return qos.ColocationSettings(
            cpu_reclaim_threshold_percent=self.cpu_reclaim_threshold_percent,
            memory_reclaim_threshold_percent=self.memory_reclaim_threshold_percent,
            cpu_calculate_policy=self.cpu_calculate_policy,
            memory_calculate_policy=self.memory_calculate_policy,
        )

    def publish_settings(self) -> publish.PublishSettings:
        return publish.PublishSettings(
            diff_threshold=self.diff_threshold,
            max_update_seconds=self.max_update_seconds,
            stale_seconds=self.stale_seconds,
        )


class LoopSettings(BaseModel):
    """How often the loops run and how hard they may push; every field has a safe default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interruption_interval_seconds: float = Field(default=1.0, gt=0)
    rebalance_interval_seconds: float = Field(default=10.0, gt=0)
    # Pods the rebalancer may move per minute, cluster-wide (one per workload per round at most).
    rebalance_moves_per_minute: float = Field(default=6.0, gt=0)
    deletion_cost_interval_seconds: float = Field(default=5.0, gt=0)
    # Deletion-cost annotations written per round at most (whole workloads; the rest wait a round).
    deletion_cost_writes_per_round: int = Field(default=200, gt=0)
    fallback_interval_seconds: float = Field(default=10.0, gt=0)
    headroom_interval_seconds: float = Field(default=30.0, gt=0)
    headroom_enabled: bool = True
    # What placeholders cover when one spot pool is lost: "floor" — the pods whose loss would take a
    # workload below its floor (PDB, or replicas - maxUnavailable; the rest wait for new nodes);
    # "pool" — every pod of the pool (replacements all start at once, at the price of more on-demand).
    headroom_covers: Literal["floor", "pool"] = "floor"
    # Ask `ClusterOps.spot_metadata` for each spot node's instance-metadata answers. In a cluster the
    # answers come from the node-side poller (`shipshape node-notices`) as taints and the API ops answer
    # nothing; a simulation turns this on to read its cloud model in process, as the poller would.
    poll_instance_metadata: bool = False
    # How long a single-replica guard PDB holds without being renewed (the leader renews it while
    # needed): once its controller is gone, a guard holds up a drain for at most this long.
    guard_ttl_seconds: float = Field(default=180.0, gt=0)
    # The loops that decide per workload (rebalancer, deletion costs) look only at the workloads that
    # changed since their last round, and at every one at least this often (`WorkloadQueue`).
    workload_resync_seconds: float = Field(default=600.0, gt=0)
    # Reclaimable batch capacity published on nodes as extended resources (off by default).
    batch_resources: BatchResourcesSettings = Field(default_factory=BatchResourcesSettings)


@dataclass(slots=True)
class NoticeBoard:
    """What the notice watcher knows now: the responder acts on `at_hand`, the webhook avoids the nodes
    `recommended` for rebalancing (each replaced whole, so the webhook reads either one or the next)."""

    # Every termination notice at hand (taints, instance metadata, on the leader the event queue).
    at_hand: tuple[Notice, ...] = ()
    # Spot nodes with a rebalance recommendation (instance metadata, event queue) and their pools.
    recommended: Mapping[str, Pool | None] = field(default_factory=dict)

    def recommendations(self) -> Mapping[str, Pool | None]:
        return self.recommended


@dataclass(slots=True)
class SharedState:
    """What the loops learn and the webhook reads: pool risk (notices, cool-down), spot shortages and the
    notices at hand; and the writes in flight that more than one loop makes."""

    risk: RiskModel
    shortages: ShortageTracker
    settings: LoopSettings = field(default_factory=LoopSettings)
    # This replica's name, as `reportingInstance` of the Events it posts.
    instance: str = ""
    notices: NoticeBoard = field(default_factory=NoticeBoard)
    # Restarts and surges of Deployments sent for a notice or a drain, not yet seen in the cache:
    # workload key -> the nodes they answer (the responder and the guards both restart Deployments).
    restarts: Expectations[str, frozenset[str]] = field(default_factory=Expectations)

    @classmethod
    def for_config(
        cls,
        config: ControllerConfig,
        settings: LoopSettings | None = None,
        risk: RiskModel | None = None,
        instance: str = "",
    ) -> SharedState:
        return cls(
            risk=risk
            or RiskModel(
                cooldown_seconds=config.risk_cooldown_seconds, window_seconds=config.risk_window_seconds
            ),
            shortages=ShortageTracker(config.fallback_retry_seconds, config.fallback_retry_max_seconds),
            settings=settings or LoopSettings(),
            instance=instance,
        )


WorkloadKey = tuple[str, str, str]  # (kind, namespace, name), as `DirtyWorkloads` names workloads


class WorkloadQueue:
    """The managed workloads a per-workload loop decides for in a round: the ones that changed.

    For a loop whose decision for a workload depends only on that workload's state and on inputs the
    whole round shares (a placement view, the pool risks). The loop's workloads sit in a
    `kit.DirtyQueue`; a round (`due`) marks the ones the state says changed since the loop last asked
    (`ClusterState.take_dirty`: those with a pod on a node that changed capacity type or pool too;
    every one after a capacity-label key new to the cluster, and at the
    periodic resync) and hands out those whose state is not the one they were settled with (a pod's
    status report marks its workload without changing what the loops see of it). Every workload is
    handed out when the round's shared inputs differ from the last round's. The loop calls
    `settled` for a workload it found nothing to do for; the others stay dirty and are handed out
    again next round. Workloads come in the order the state lists them (`ClusterState.managed`), as a
    full scan takes them, so that budgets and rate limits are spent alike.
    """

    def __init__(self, resync_seconds: float) -> None:
        self.queue: DirtyQueue[WorkloadKey] = DirtyQueue()
        self.resync = Every(resync_seconds)
        self._inputs: Inputs | None = None
        self._listed: tuple[Managed, ...] | None = None
        self._position: dict[WorkloadKey, int] = {}
        # The state each settled workload was settled with.
        self._settled: dict[WorkloadKey, WorkloadState] = {}
        # How many workloads the last round handed out, and the full passes so far.
        self.handed = 0
        self.full_passes = 0

    def due(
        self, state: ClusterState, config: ControllerConfig, now: float, inputs: Inputs = ()
    ) -> list[Managed]:
        """The managed workloads to decide for now, in the state's order (call inside `view()`)."""
        dirty = state.take_dirty(self)  # each queue its own account of the changes
        listed = state.managed(config)
        if listed is not self._listed:
            self._listed = listed
            self._position = {_key_of(m): i for i, m in enumerate(listed)}
        position = self._position
        queue = self.queue
        fresh = self._inputs is None or not same_inputs(self._inputs, inputs)
        if fresh or self.resync.due(now):
            # Every workload; after a change of the shared inputs, decided for again whatever its
            # state. A resync compares every workload's state with the one it was settled with, so
            # a change the state failed to mark is still caught.
            self.resync.ran(now)
            self.full_passes += 1
            if fresh:
                self._settled.clear()
            dirty = DirtyWorkloads(everything=True)
        self._inputs = inputs
        if dirty.everything:
            for key in list(queue):
                if key not in position:
                    queue.discard(key)
                    self._settled.pop(key, None)
            for key in position:
                queue.add(key, now)
            queue.mark_all()
        else:
            for key in dirty.workloads:
                if key in position:
                    queue.add(key, now)
                    queue.mark(key)
                else:
                    queue.discard(key)  # gone, or no longer managed
            if dirty.namespaces:
                for key in position:
                    if key[1] in dirty.namespaces:
                        queue.add(key, now)
                        queue.mark(key)
        settled = self._settled
        picked: list[int] = []
        for key in queue.dirty_keys():
            index = position.get(key)
            if index is None:
                queue.discard(key)
                settled.pop(key, None)
                continue
            kept = settled.get(key)
            current = listed[index].state
            if kept is not None and (kept is current or kept == current):
                queue.take(key)  # marked, but what the loop decides from is the same
                continue
            settled.pop(key, None)
            picked.append(index)
        picked.sort()
        self.handed = len(picked)
        return [listed[i] for i in picked]

    def settled(self, workload: Managed) -> None:
        """Nothing to do for the workload: not handed out again until its state changes, the round's
        inputs do, or the next resync."""
        key = _key_of(workload)
        if key in self.queue:
            self.queue.take(key)
            self._settled[key] = workload.state


def _key_of(workload: Managed) -> WorkloadKey:
    ref = workload.ref
    return (ref.kind.value, ref.namespace, ref.name)


class Reconciler:
    """Base of the loops; subclasses set `name`, return their interval and override the two rounds.

    What wakes a loop besides its interval (`scheduler.py`): every change of the cache makes it dirty
    unless `watches` names the kinds it reads; `changed` says whether a change needs a round within one
    interval (default: no); `busy` whether work is in progress that must not wait for changes (default
    None: no such notion). Loops naming the same `lane` run back to back in one round.
    """

    name: ClassVar[str] = "reconciler"
    # Loops of one lane share a timer and run in registry order (None: a lane of its own).
    lane: ClassVar[str | None] = None
    # The cache kinds whose changes make the loop dirty (None: every kind the cache keeps).
    watches: ClassVar[frozenset[str] | None] = None

    def __init__(
        self,
        clock: Clock,
        state: Replica | ClusterState,
        ops: ClusterOps,
        config: ControllerConfig,
        metrics: ControllerMetrics,
        shared: SharedState | None = None,
    ) -> None:
        self.clock = clock
        # The replica of the state the loops read (`state.views`); a bare state gets one of its own.
        self.replica = state if isinstance(state, Replica) else Replica(state)
        self.cache = self.replica.state
        self.ops = ops
        self.config = config
        self.metrics = metrics
        self.shared = shared or SharedState.for_config(config)

    @property
    def interval(self) -> float:
        return 10.0

    @property
    def settings(self) -> LoopSettings:
        return self.shared.settings

    def view(self, now: float | None = None) -> AbstractContextManager[ClusterState]:
        """The replica's `view(now)` (`state.views.Replica`): the state caught up with what the
        informers delivered and, with `now`, the webhook's assumptions past their TTL dropped, held
        for the block. The loops read nothing of `cache` outside one."""
        return self.replica.view(now)

    def changed(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> bool:
        """A change of the cache (after it was applied): True when it needs a round within one interval."""
        return False

    def busy(self) -> bool | None:
        """Work in progress that must not wait for changes (None: the loop has no such notion)."""
        return None

    def observe(self, now: float) -> None:
        """Update shared state from the cache (every replica); no writes."""

    def reconcile(self, now: float) -> None:
        """One round of the loop (the leader only)."""

    # --- helpers shared by the loops --------------------------------------------------------------

    def managed(self) -> list[Managed]:
        """Managed Deployments and StatefulSets with a valid policy (call inside `view()`); the
        state keeps the answer until something it reads changes (`ClusterState.managed`)."""
        return list(self.cache.managed(self.config))

    def policy_of(self, kind: WorkloadKind, obj: Obj) -> PolicyResult:
        return self.cache.policy_of(kind, obj, self.config)

    def post_event(
        self, obj: Obj, kind: str, reason: str, message: str, now: float, *, warning: bool = False
    ) -> None:
        """Best effort: an Event that cannot be posted is logged, never fatal."""
        body = event_for(obj, kind, reason, message, now=now, warning=warning, instance=self.shared.instance)
        try:
            self.ops.post_event(body)
        except OpsError as error:
            LOG.warning("cannot post event %s on %s: %s", reason, body["involvedObject"]["name"], error)
