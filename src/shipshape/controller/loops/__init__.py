"""The controller's loops, registered here explicitly, in the order a round runs them.

The interruption responder comes first (deadlines), then spot fallback, the rebalancer, the
deletion-cost keeper, headroom and the invalid-policy Events. Build them with `all_reconcilers(...)`;
each has `name`, `interval`, `observe(now)` (every replica) and `reconcile(now)` (the leader).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from shipshape.controller.cache import ClusterCache
from shipshape.controller.loops.base import LoopSettings, Reconciler, SharedState
from shipshape.controller.loops.deletion_cost import DeletionCostKeeper
from shipshape.controller.loops.fallback import SpotFallback
from shipshape.controller.loops.headroom import HeadroomKeeper
from shipshape.controller.loops.interruptions import InterruptionResponder
from shipshape.controller.loops.policy_events import PolicyReporter
from shipshape.controller.loops.rebalance import Rebalancer
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.ops import ClusterOps
from shipshape.controller.policy import ControllerConfig
from shipshape.kube.clock import Clock

LOOPS: tuple[type[Reconciler], ...] = (
    InterruptionResponder,
    SpotFallback,
    Rebalancer,
    DeletionCostKeeper,
    HeadroomKeeper,
    PolicyReporter,
)

__all__ = ["LOOPS", "LoopSettings", "Reconciler", "SharedState", "all_reconcilers"]


def all_reconcilers(
    clock: Clock,
    cache: ClusterCache,
    ops: ClusterOps,
    config: ControllerConfig,
    metrics: ControllerMetrics,
    shared: SharedState,
    lock: AbstractContextManager[Any] | None = None,
) -> list[Reconciler]:
    return [loop(clock, cache, ops, config, metrics, shared, lock) for loop in LOOPS]
