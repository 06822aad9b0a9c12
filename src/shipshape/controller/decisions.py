"""Pure decisions of the controller's loops; the loops themselves only read the state and act.

- `deletion_costs`: `controller.kubernetes.io/pod-deletion-cost` values so that a scale-down removes
  the pods that bring the split back to target (spot in the riskiest, fullest pool first);
- `next_move`: the one pod the rebalancer moves next, never taking ready replicas below the
  workload's availability floor;
- `fallback_candidates` and `ShortageTracker`: spot-bound pods stuck unschedulable are re-decided to
  on-demand, and spot is tried again after a back-off;
- `headroom_plan`: on-demand placeholder capacity sized from the largest set of pods one spot pool
  could lose.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from shipshape.controller.placement import (
    Exclusion,
    GroupCounts,
    PlacementView,
    Pool,
    choose_pool,
    desired_split,
    ordinal_capacity,
    spot_limit,
    spread_cap,
    statefulset_split,
    zone_counts,
)
from shipshape.controller.policy import CapacityType, WorkloadKind, WorkloadPolicy
from shipshape.controller.state import PodState, WorkloadState, read_decision
from shipshape.kube import capacity as kube_capacity
from shipshape.kube.clock import parse_time
from shipshape.kube.objects import is_active
from shipshape.kube.wellknown import INSTANCE_TYPE_LABEL, ZONE_LABEL

Obj = dict[str, Any]


def _counts(pods: Iterable[PodState]) -> GroupCounts:
    counts = GroupCounts()
    for pod in pods:
        if pod.capacity is not None:
            counts.add(pod.capacity, pod.pool)
    return counts


# --- scale-down ranking ---------------------------------------------------------------------------


def removal_order(
    pods: Sequence[PodState], policy: WorkloadPolicy, pool_risk: Mapping[Pool, float]
) -> list[str]:
    """Pod names in the order a scale-down should remove them so that every smaller size keeps the split.

    Pods of unknown capacity go first; then, at each size n, a spot pod when spot exceeds
    desired_split(n - 1) (from the fullest pool, then the riskiest), else an on-demand pod.
    """
    ordered = sorted(pods, key=lambda p: (p.ready, p.name))
    order = [pod.name for pod in ordered if pod.capacity is None]
    on_demand = deque(pod for pod in ordered if pod.capacity is CapacityType.ON_DEMAND)
    # Each pool's spot pods in (ready, name) order: the pool's best victim is always its first.
    by_pool: dict[Pool | None, deque[PodState]] = {}
    for pod in ordered:
        if pod.capacity is CapacityType.SPOT:
            by_pool.setdefault(pod.pool, deque()).append(pod)
    spot = sum(len(queue) for queue in by_pool.values())

    def rank(queue: deque[PodState]) -> tuple[bool, int, float, str]:
        first = queue[0]
        risk = pool_risk.get(first.pool, 0.0) if first.pool is not None else 0.0
        return (first.ready, -len(queue), -risk, first.name)

    while spot or on_demand:
        target = desired_split(spot + len(on_demand) - 1, policy)
        if spot > target.spot or not on_demand:
            victim = min((queue for queue in by_pool.values() if queue), key=rank).popleft()
            spot -= 1
        else:
            victim = on_demand.popleft()
        order.append(victim.name)
    return order


def deletion_costs(
    pods: Sequence[PodState], policy: WorkloadPolicy, pool_risk: Mapping[Pool, float]
) -> dict[str, int]:
    """pod-deletion-cost per pod: the ReplicaSet controller deletes lower costs first."""
    return {name: rank for rank, name in enumerate(removal_order(pods, policy, pool_risk))}


# pod-deletion-cost is an int32. Renumbered costs are spaced so that later pods fit between them.
_COST_MIN, _COST_MAX = -(2**31), 2**31 - 1
_COST_STEP = 100


def deletion_cost_updates(
    state: WorkloadState, pool_risk: Mapping[Pool, float], fixed: frozenset[str] = frozenset()
) -> dict[str, str]:
    """The fewest annotations that make the pods' costs follow the removal order.

    The ReplicaSet controller only compares costs, so costs already increasing along the wanted
    order are kept (a pod that left does not shift everyone else's), and the pods that are new or
    out of order get values between their kept neighbours; only when no such value exists are the
    costs renumbered (0, 100, 200, ...). `fixed` pods (e.g. marked doomed by a surge) keep their cost and are
    left out. StatefulSets scale down by ordinal and need none.
    """
    if state.kind is not WorkloadKind.DEPLOYMENT:
        return {}
    order = [name for name in removal_order(state.pods, state.policy, pool_risk) if name not in fixed]
    current = {pod.name: _cost_value(pod.deletion_cost) for pod in state.pods}
    wanted = _fit_costs(order, [current[name] for name in order])
    if wanted is None:
        wanted = [rank * _COST_STEP for rank in range(len(order))]
    return {name: str(cost) for name, cost in zip(order, wanted, strict=True) if current[name] != cost}


def _cost_value(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is None or _COST_MIN <= value <= _COST_MAX else None


def _fit_costs(order: Sequence[str], current: Sequence[int | None]) -> list[int] | None:
    """Costs strictly increasing along `order` that keep as many current values as possible
    (a longest increasing subsequence); None when the others cannot fit between their neighbours."""
    known = [i for i, cost in enumerate(current) if cost is not None]
    # Longest strictly increasing subsequence of the known costs (O(n log n), first-found on ties).
    tails: list[int] = []  # index into `known` of the smallest tail of each length
    previous: dict[int, int] = {}
    for position, index in enumerate(known):
        cost = current[index]
        assert cost is not None
        low, high = 0, len(tails)
        while low < high:
            middle = (low + high) // 2
            tail_cost = current[known[tails[middle]]]
            assert tail_cost is not None
            if tail_cost < cost:
                low = middle + 1
            else:
                high = middle
        if low:
            previous[position] = tails[low - 1]
        if low == len(tails):
            tails.append(position)
        else:
            tails[low] = position
    kept: set[int] = set()
    if tails:
        link: int | None = tails[-1]
        while link is not None:
            kept.add(known[link])
            link = previous.get(link)
    result: list[int | None] = [current[i] if i in kept else None for i in range(len(current))]
    start = 0
    while start < len(result):
        if result[start] is not None:
            start += 1
            continue
        end = start
        while end < len(result) and result[end] is None:
            end += 1
        below = result[start - 1] if start > 0 else None
        above = result[end] if end < len(result) else None
        count = end - start
        ranks = [rank * _COST_STEP for rank in range(start, end)]
        if (below is None or below < ranks[0]) and (above is None or ranks[-1] < above):
            values = ranks  # the spaced rank fits: keep the numbers readable
        elif above is None:
            assert below is not None
            values = [below + _COST_STEP * (j + 1) for j in range(count)]
        elif below is None:
            values = [above - _COST_STEP * (count - j) for j in range(count)]
        elif above - below - 1 >= count:  # spread over the gap, leaving room on both sides
            values = [below + (above - below) * (j + 1) // (count + 1) for j in range(count)]
        else:
            return None
        if values[0] < _COST_MIN or values[-1] > _COST_MAX:
            return None
        result[start:end] = values
        start = end
    return [value for value in result if value is not None]


# --- rebalance ------------------------------------------------------------------------------------


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


# --- spot fallback --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fallback:
    """A spot-bound pod unschedulable for too long: delete it so that it is re-decided."""

    namespace: str
    pod: str
    pools: tuple[Pool, ...]
    since: float


def allowed_pools_of(
    pod: Mapping[str, Any], conventions: kube_capacity.Conventions = kube_capacity.DEFAULT
) -> tuple[Pool, ...]:
    """Spot pools a pod's required node affinity allows (empty: any spot pool)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or []
    pools: set[Pool] = set()
    for term in terms:
        expressions = term.get("matchExpressions") or []
        if not any(conventions.is_spot_requirement(e) for e in expressions):
            continue
        values = {e.get("key"): e.get("values") or [] for e in expressions if e.get("operator") == "In"}
        for instance_type in values.get(INSTANCE_TYPE_LABEL, []):
            for zone in values.get(ZONE_LABEL, []):
                pools.add(Pool(instance_type, zone))
    return tuple(sorted(pools))


def unschedulable_since(pod: Mapping[str, Any]) -> float | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            stamp = condition.get("lastTransitionTime") or (pod.get("metadata") or {}).get(
                "creationTimestamp"
            )
            return parse_time(stamp) if stamp else None
    return None


def fallback_candidates(
    pods: Iterable[Mapping[str, Any]],
    now: float,
    threshold_seconds: float,
    known_pools: Iterable[Pool],
    conventions: kube_capacity.Conventions = kube_capacity.DEFAULT,
) -> list[Fallback]:
    """Spot-decided pods, not bound, unschedulable for longer than the threshold."""
    known = tuple(sorted(known_pools))
    found: list[Fallback] = []
    for pod in pods:
        if not is_active(pod) or (pod.get("spec") or {}).get("nodeName"):
            continue
        decision = read_decision(pod)
        if decision is None or decision.capacity_type != CapacityType.SPOT.value:
            continue
        since = unschedulable_since(pod)
        if since is None or now - since < threshold_seconds:
            continue
        metadata = pod.get("metadata") or {}
        found.append(
            Fallback(
                str(metadata.get("namespace")),
                str(metadata.get("name")),
                allowed_pools_of(pod, conventions) or known,
                since,
            )
        )
    return sorted(found, key=lambda f: (f.since, f.namespace, f.pod))


@dataclass(slots=True)
class ShortageTracker:
    """Spot pools without capacity: no new spot placements there until a back-off ends.

    The back-off doubles with each consecutive shortage of a pool (up to a maximum) and resets when
    capacity is seen again (a spot pod bound in the pool, or a new node of the pool).
    """

    retry_seconds: float = 300.0
    max_retry_seconds: float = 3600.0
    _until: dict[Pool, float] = field(default_factory=dict)
    _strikes: dict[Pool, int] = field(default_factory=dict)
    # The fallback loop marks, every replica's webhook reads (another thread in a controller process).
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def mark(self, pools: Iterable[Pool], now: float) -> list[Pool]:
        """Record a shortage; returns the pools newly marked (already marked ones are left alone)."""
        newly: list[Pool] = []
        with self._lock:
            for pool in pools:
                if self._until.get(pool, -math.inf) > now:
                    continue
                strikes = self._strikes.get(pool, 0)
                self._until[pool] = now + min(self.max_retry_seconds, self.retry_seconds * 2**strikes)
                self._strikes[pool] = strikes + 1
                newly.append(pool)
        return newly

    def capacity_seen(self, pool: Pool) -> None:
        with self._lock:
            self._until.pop(pool, None)
            self._strikes.pop(pool, None)

    def shortages(self, now: float) -> frozenset[Pool]:
        with self._lock:
            return frozenset(pool for pool, until in self._until.items() if until > now)


# --- headroom -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class PlaceholderShape:
    cpu_millis: int
    memory_bytes: int
    count: int


@dataclass(frozen=True, slots=True)
class HeadroomPlan:
    pool: Pool | None
    cpu_millis: int
    memory_bytes: int
    placeholders: tuple[PlaceholderShape, ...]


def headroom_plan(pods_by_pool: Mapping[Pool, Sequence[PodState]], cpu_per_gib: float = 0.25) -> HeadroomPlan:
    """Placeholders sized from the largest set of pods one spot pool could lose.

    "Largest" is by requests, cpu and memory weighed together (`cpu_per_gib` cores per GiB). One
    placeholder per lost pod, grouped by shape, so that each replacement preempts one placeholder of
    its own size and starts at once.
    """

    def weight(pods: Sequence[PodState]) -> tuple[float, int]:
        cpu = sum(p.cpu_millis for p in pods) / 1000
        memory = sum(p.memory_bytes for p in pods) / 2**30 * cpu_per_gib
        return cpu + memory, len(pods)

    if not pods_by_pool:
        return HeadroomPlan(None, 0, 0, ())
    pool = max(sorted(pods_by_pool), key=lambda p: weight(pods_by_pool[p]))
    lost = pods_by_pool[pool]
    shapes = Counter((pod.cpu_millis, pod.memory_bytes) for pod in lost)
    placeholders = tuple(
        sorted(
            (PlaceholderShape(cpu, memory, count) for (cpu, memory), count in shapes.items()), reverse=True
        )
    )
    return HeadroomPlan(
        pool=pool,
        cpu_millis=sum(p.cpu_millis for p in lost),
        memory_bytes=sum(p.memory_bytes for p in lost),
        placeholders=placeholders,
    )


def spot_pods_by_pool(states: Iterable[WorkloadState]) -> dict[Pool, list[PodState]]:
    grouped: dict[Pool, list[PodState]] = {}
    for state in states:
        for pod in state.pods:
            if pod.capacity is CapacityType.SPOT and pod.pool is not None:
                grouped.setdefault(pod.pool, []).append(pod)
    return grouped


def nodes_by_name(nodes: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str((node.get("metadata") or {}).get("name")): node for node in nodes}
