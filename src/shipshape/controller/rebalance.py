"""The rebalancer's decisions (`loops/rebalance.py`).

- `next_move`: the one pod the rebalancer moves next, never taking ready replicas below the
  workload's availability floor;
- `replacement_lands`: whether the moved pod's replacement would be scheduled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from shipshape.controller.placement import (
    Exclusion,
    GroupCounts,
    PlacementView,
    choose_pool,
    desired_split,
    ordinal_capacity,
    spot_limit,
    spread_cap,
    statefulset_split,
    zone_counts,
)
from shipshape.controller.policy import CapacityType, WorkloadKind, WorkloadPolicy
from shipshape.controller.state import PodState, WorkloadState


def _counts(pods: Iterable[PodState]) -> GroupCounts:
    counts = GroupCounts()
    for pod in pods:
        if pod.capacity is not None:
            counts.add(pod.capacity, pod.pool)
    return counts


class MoveKind(StrEnum):
    EVICT = "evict"  # through the Eviction API (PDBs apply); the controller re-creates the pod
    SURGE_RESTART = "surge-restart"  # single replica: rollout restart with maxSurge 1, maxUnavailable 0


class Direction(StrEnum):
    TO_ON_DEMAND = "spot-to-on-demand"
    TO_SPOT = "on-demand-to-spot"
    ACROSS_POOLS = "across-spot-pools"


@dataclass(frozen=True, slots=True)
class Move:
    workload: str
    pod: str
    kind: MoveKind
    direction: Direction


def next_move(state: WorkloadState, view: PlacementView) -> Move | None:
    """The one pod to move next, or None. Only a settled, fully ready workload moves, one pod at a time,
    and only while its ready replicas stay at or above its floor after the move.

    Pods on nodes with a rebalance recommendation, or in pools at risk, are not moved: those only stop
    new placements (pods on noticed nodes are the interruption responder's).
    """
    if (
        state.settling
        or state.replicas <= 0
        or len(state.pods) != state.replicas
        or state.ready < state.replicas
    ):
        return None
    if any(pod.capacity is None for pod in state.pods):
        return None
    if state.replicas == 1:
        return _single_replica_move(state, view)
    if state.ready - 1 < state.floor:
        return None
    if state.kind is WorkloadKind.STATEFULSET:
        return _ordinal_move(state, view)
    desired = desired_split(state.replicas, state.policy)
    counts = _counts(state.pods)
    spot = [pod for pod in state.pods if pod.capacity is CapacityType.SPOT]
    if counts.spot > desired.spot:
        victim = _riskiest(spot, view)
        return Move(state.key, victim.name, MoveKind.EVICT, Direction.TO_ON_DEMAND)
    usable = sum(1 for pool in view.pool_risk if pool not in view.excluded)
    share = state.policy.pool_share(len(view.pool_risk), view.default_pool_share)
    loss_allowance = state.allowance if state.policy.max_pool_share is None else None
    cap = spread_cap(desired.spot, share, usable, loss_allowance)
    crowded = [pod for pod in spot if pod.pool is not None and counts.spot_by_pool.get(pod.pool, 0) > cap]
    if crowded:
        victim = _riskiest(crowded, view)
        without = _counts(p for p in state.pods if p.name != victim.name)
        destination = choose_pool(desired.spot, without, view, state.policy, None, loss_allowance)[0]
        if destination is not None and destination != victim.pool:
            return Move(state.key, victim.name, MoveKind.EVICT, Direction.ACROSS_POOLS)
    if counts.on_demand > desired.on_demand and _spot_available(desired.spot, counts, view, state.policy):
        victim = max((p for p in state.pods if p.capacity is CapacityType.ON_DEMAND), key=lambda p: p.name)
        return Move(state.key, victim.name, MoveKind.EVICT, Direction.TO_SPOT)
    return None


def _spot_available(
    spot_target: int, counts: GroupCounts, view: PlacementView, policy: WorkloadPolicy
) -> bool:
    return choose_pool(spot_target, counts, view, policy)[2] is None


def replacement_lands(state: WorkloadState, move: Move, view: PlacementView) -> bool:
    """Whether the pod that replaces the moved one would be scheduled: for a move to spot or across
    pools, a spot pool (other than the pod's own, across pools) that has room for its requests now or is
    known to grow (`placement.can_land`, strict), in a view built with rooms (`strict=True`).

    Moves toward on-demand are toward safety and are not held back here.
    """
    if move.direction is Direction.TO_ON_DEMAND:
        return True
    pod = next((p for p in state.pods if p.name == move.pod), None)
    if pod is None:
        return False
    requests = (pod.cpu_millis, pod.memory_bytes)
    without = _counts(p for p in state.pods if p.name != pod.name)
    zone_cap: int | None = None
    if state.kind is WorkloadKind.STATEFULSET:
        limit = spot_limit(state.allowance, len(view.zones))
        spot_target = statefulset_split(state.replicas, state.policy, limit).spot
        zone_cap = state.allowance
    else:
        spot_target = desired_split(state.replicas, state.policy).spot
    loss_allowance = state.allowance if state.policy.max_pool_share is None else None
    if move.direction is Direction.ACROSS_POOLS:
        view = replace(
            view, excluded={**view.excluded, **({pod.pool: Exclusion.AT_RISK} if pod.pool else {})}
        )
    chosen = choose_pool(
        max(spot_target, 1), without, view, state.policy, zone_cap, loss_allowance, requests, strict=True
    )
    return chosen[2] is None


def _riskiest(pods: Sequence[PodState], view: PlacementView) -> PodState:
    per_pool = Counter(pod.pool for pod in pods)
    return min(
        pods,
        key=lambda p: (
            -(view.pool_risk.get(p.pool, 0.0) if p.pool is not None else 0.0),
            -per_pool[p.pool],
            p.name,
        ),
    )


def _single_replica_move(state: WorkloadState, view: PlacementView) -> Move | None:
    want = desired_split(1, state.policy)
    pod = state.pods[0]
    if (pod.capacity is CapacityType.SPOT) == bool(want.spot):
        return None
    if state.kind is not WorkloadKind.DEPLOYMENT:
        return None  # a lone StatefulSet pod cannot surge: moving it would take it to zero ready
    if want.spot and not _spot_available(1, GroupCounts(), view, state.policy):
        return None
    direction = Direction.TO_SPOT if want.spot else Direction.TO_ON_DEMAND
    return Move(state.key, pod.name, MoveKind.SURGE_RESTART, direction)


def _ordinal_move(state: WorkloadState, view: PlacementView) -> Move | None:
    """A StatefulSet pod whose ordinal's capacity type (`ordinal_capacity` under the spot limit) differs
    from where it runs, or a spot pod in a zone holding more than the disruption allowance.

    Moves toward safety first (out of a crowded zone, spot to on-demand), then back to spot; the
    highest ordinal first within each.
    """
    limit = spot_limit(state.allowance, len(view.zones))
    spot_target = statefulset_split(state.replicas, state.policy, limit).spot
    counts = _counts(state.pods)
    per_zone = zone_counts(counts)
    to_spot: Move | None = None
    for pod in sorted(state.pods, key=lambda p: -(p.ordinal or 0)):
        if pod.ordinal is None:
            continue
        want, _ = ordinal_capacity(pod.ordinal, state.replicas, state.policy, limit)
        if pod.capacity is want:
            crowded = pod.pool is not None and per_zone[pod.pool.zone] > state.allowance
            if want is CapacityType.SPOT and crowded:
                return Move(state.key, pod.name, MoveKind.EVICT, Direction.ACROSS_POOLS)
        elif want is CapacityType.ON_DEMAND:
            return Move(state.key, pod.name, MoveKind.EVICT, Direction.TO_ON_DEMAND)
        elif (
            to_spot is None
            and choose_pool(spot_target, counts, view, state.policy, state.allowance)[2] is None
        ):
            to_spot = Move(state.key, pod.name, MoveKind.EVICT, Direction.TO_SPOT)
    return to_spot
