"""The controller's loops, registered here explicitly, in the order a round runs them.

The interruption lane comes first (deadlines): the notice watcher, the interruption responder and the
surge guards, back to back in one round; then spot fallback, the rebalancer, the deletion-cost keeper,
headroom and the invalid-policy Events, a lane each; with `loops.batch_resources.enabled`, the batch
resources publisher last. Build them with `all_reconcilers(...)`; each has
`name`, `interval`, `observe(now)` (every replica) and `reconcile(now)` (the leader), and declares
what wakes it (`watches`, `changed`, `busy`; see `base.Reconciler`). `lanes(...)` groups them for the
scheduler (`scheduler.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shipshape.controller.batch_capacity import NodeResources
from shipshape.controller.loops.base import LoopSettings, Reconciler, SharedState
from shipshape.controller.loops.batch_resources import BatchResources
from shipshape.controller.loops.deletion_cost import DeletionCostKeeper
from shipshape.controller.loops.fallback import SpotFallback
from shipshape.controller.loops.guards import SurgeGuards
from shipshape.controller.loops.headroom import HeadroomKeeper
from shipshape.controller.loops.interruptions import InterruptionResponder
from shipshape.controller.loops.notices import NoticeWatcher
from shipshape.controller.loops.policy_events import PolicyReporter
from shipshape.controller.loops.rebalance import Rebalancer
from shipshape.controller.loops.scheduler import Lane, everything
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.notices import QueueNoticeSource
from shipshape.controller.ops import ClusterOps
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.state import ClusterState
from shipshape.controller.state.views import Replica
from shipshape.kube.clock import Clock

LOOPS: tuple[type[Reconciler], ...] = (
    NoticeWatcher,
    InterruptionResponder,
    SurgeGuards,
    SpotFallback,
    Rebalancer,
    DeletionCostKeeper,
    HeadroomKeeper,
    PolicyReporter,
    BatchResources,
)

__all__ = ["LOOPS", "LoopSettings", "Reconciler", "SharedState", "all_reconcilers", "lanes"]


def all_reconcilers(
    clock: Clock,
    state: Replica | ClusterState,
    ops: ClusterOps,
    config: ControllerConfig,
    metrics: ControllerMetrics,
    shared: SharedState,
    *,
    queue: QueueNoticeSource | None = None,
    node_resources: NodeResources | None = None,
) -> list[Reconciler]:
    """Every loop, in `LOOPS` order, sharing `shared` and one replica of the `state`; `queue`: a cloud
    event queue for the notice watcher (the leader reads it); `node_resources`: metrics and node writes
    for the batch resources loop, which runs only when `loops.batch_resources.enabled`."""
    replica = state if isinstance(state, Replica) else Replica(state)
    common = (clock, replica, ops, config, metrics, shared)
    optional: list[Reconciler] = []
    if shared.settings.batch_resources.enabled:
        if node_resources is None:
            raise ValueError("loops.batch_resources.enabled: there is no metrics source to publish from here")
        optional.append(BatchResources(*common, node_resources=node_resources))
    return [
        NoticeWatcher(*common, queue=queue),
        InterruptionResponder(*common),
        SurgeGuards(*common),
        SpotFallback(*common),
        Rebalancer(*common),
        DeletionCostKeeper(*common),
        HeadroomKeeper(*common),
        PolicyReporter(*common),
        *optional,
    ]


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
