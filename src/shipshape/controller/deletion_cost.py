"""The deletion-cost keeper's decisions (`loops/deletion_cost.py`):
`controller.kubernetes.io/pod-deletion-cost` values so that a scale-down removes the pods that bring
the split back to target (spot in the riskiest, fullest pool first).

- `removal_order`: the pods in the order a scale-down should remove them;
- `deletion_cost_updates`: the fewest annotations that make the pods' costs follow that order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from shipshape.controller.placement import Pool, desired_split
from shipshape.controller.policy import CapacityType, WorkloadKind, WorkloadPolicy
from shipshape.controller.state import PodState, WorkloadState


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
