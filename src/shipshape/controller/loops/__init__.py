"""The controller's loops, registered here explicitly, in the order a round runs them.

The interruption responder comes first (deadlines), then spot fallback, the rebalancer, the
deletion-cost keeper, headroom and the invalid-policy Events. Build them with `all_reconcilers(...)`;
each has `name`, `interval`, `observe(now)` (every replica) and `reconcile(now)` (the leader).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from shipshape.controller.loops.scheduler import Lane, everything
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

__all__ = ["LOOPS", "LoopSettings", "Reconciler", "SharedState", "all_reconcilers", "lanes"]


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


def lanes(loops: Sequence[Reconciler]) -> list[Lane]:
    """The scheduler's lanes: consecutive loops naming the same `lane` share one, the others one each.

    A lane watches what any of its loops watches, is urgent for what any finds urgent, and is busy
    while any is (None when none of them has a notion of busy).
    """
    groups: list[list[Reconciler]] = []
    for loop in loops:
        if groups and loop.lane is not None and groups[-1][0].lane == loop.lane:
            groups[-1].append(loop)
        else:
            groups.append([loop])
    return [_lane(tuple(group)) for group in groups]


def _lane(members: tuple[Reconciler, ...]) -> Lane:
    def watches(kind: str) -> bool:
        return any(loop.watches is None or kind in loop.watches for loop in members)

    listening = tuple(loop for loop in members if type(loop).changed is not Reconciler.changed)

    def urgent(kind: str, event_type: str, obj: Mapping[str, Any]) -> bool:
        # Every member hears every change (a loop may keep what it needs from it), so no short-cut.
        return [loop.changed(kind, event_type, obj) for loop in listening].count(True) > 0

    def busy() -> bool | None:
        answers = [loop.busy() for loop in members]
        if all(answer is None for answer in answers):
            return None
        return any(answers)

    first = members[0]
    return Lane(
        name=first.lane or first.name,
        loops=members,
        interval=min(loop.interval for loop in members),
        watches=everything if all(loop.watches is None for loop in members) else watches,
        urgent=urgent if listening else None,
        busy=busy,
    )
