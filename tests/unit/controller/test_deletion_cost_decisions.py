"""The deletion-cost keeper's decisions: the removal order and the fewest cost annotations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shipshape.controller.deletion_cost import deletion_cost_updates, removal_order
from shipshape.controller.placement import Pool, desired_split
from shipshape.controller.policy import WorkloadKind
from shipshape.controller.state import PodState, WorkloadState

from .decision_cases import OD, POLICY, SPOT, A, B, pods, split_of, state


def ranks(members: Sequence[PodState], risk: Mapping[Pool, float]) -> dict[str, int]:
    """Each pod's rank in the removal order: the costs a renumbering writes, lowest removed first."""
    return {name: rank for rank, name in enumerate(removal_order(members, POLICY, risk))}


def test_removal_order_keeps_the_split_at_every_size() -> None:
    members = pods(4, [A, A, A, B, B, B])
    risk = {A: 1.0, B: 4.0}
    order = removal_order(members, POLICY, risk)
    assert sorted(order) == sorted(p.name for p in members)
    remaining = list(members)
    for name in order[:-2]:  # down to two replicas (one replica follows the single-replica mode)
        remaining = [p for p in remaining if p.name != name]
        target = desired_split(len(remaining), POLICY)
        assert split_of(remaining) == (target.on_demand, target.spot), len(remaining)
    first = next(p for p in members if p.name == order[0])
    assert first.pool == B  # spot from the riskiest pool goes first (pools equally full)


def test_scale_down_by_deletion_cost_removes_the_right_pods() -> None:
    members = pods(4, [A, A, A, A, B, B])  # pool A fuller than B
    costs = ranks(members, {A: 1.0, B: 1.0})
    kept = sorted(members, key=lambda p: costs[p.name])[4:]  # scale 10 -> 6: the four cheapest go
    target = desired_split(6, POLICY)
    assert split_of(kept) == (target.on_demand, target.spot)
    assert (sum(1 for p in kept if p.pool == A), sum(1 for p in kept if p.pool == B)) == (
        1,
        2,
    )  # fullest pool first
    # Unknown-capacity pods (pending, no decision) are the first to go.
    pending = (*members, PodState("pending", None, None, None, False))
    assert removal_order(pending, POLICY, {})[0] == "pending"


def test_only_changed_deletion_costs_are_written() -> None:
    members = pods(2, [A, B])
    costs = ranks(members, {})
    current = tuple(
        PodState(
            p.name,
            p.capacity,
            p.pool,
            p.node,
            p.ready,
            deletion_cost=str(costs[p.name]) if p.capacity is OD else None,
        )
        for p in members
    )
    updates = deletion_cost_updates(state(current), {})
    assert set(updates) == {p.name for p in members if p.capacity is SPOT}
    sts = WorkloadState(WorkloadKind.STATEFULSET, "shop", "db", 4, POLICY, current, floor=3)
    assert deletion_cost_updates(sts, {}) == {}
