"""The rebalancer's decisions: the next move toward the desired split, and whether its replacement lands."""

from __future__ import annotations

from dataclasses import replace

from shipshape.controller.placement import Exclusion, PlacementView
from shipshape.controller.policy import WorkloadKind, WorkloadPolicy
from shipshape.controller.rebalance import Direction, Move, MoveKind, next_move, replacement_lands
from shipshape.controller.state import PodState, WorkloadState

from .decision_cases import OD, POLICY, SPOT, A, B, C, pods, state


def test_rebalance_returns_excess_on_demand_to_spot_one_pod_at_a_time() -> None:
    view = PlacementView(pool_risk={A: 1.0, B: 2.0})
    after_fallback = state(pods(6, [A, B, A, B]))  # desired 4 on-demand / 6 spot
    move = next_move(after_fallback, view)
    assert move is not None and (move.kind, move.direction) == (MoveKind.EVICT, Direction.TO_SPOT)
    assert move.pod.startswith("od-")
    # Spot still short everywhere: nothing to gain by moving.
    short = PlacementView(pool_risk={A: 1.0, B: 2.0}, excluded={A: Exclusion.SHORTAGE, B: Exclusion.SHORTAGE})
    assert next_move(after_fallback, short) is None
    # A pod not ready, a budget of zero, or a rollout under way: wait.
    not_ready = state((*pods(5, [A, B, A, B]), PodState("late", OD, None, "x", ready=False)))
    assert next_move(not_ready, view) is None
    assert next_move(state(pods(6, [A, B, A, B]), floor=10), view) is None
    settling = WorkloadState(
        WorkloadKind.DEPLOYMENT, "shop", "web", 10, POLICY, pods(6, [A, B, A, B]), 9, settling=True
    )
    assert next_move(settling, view) is None


def test_rebalance_moves_excess_spot_from_the_riskiest_pool_and_leaves_a_good_split() -> None:
    view = PlacementView(pool_risk={A: 1.0, B: 3.0})
    move = next_move(state(pods(2, [A, A, A, B, B, B, B, A])), view)  # desired 4/6: two spot too many
    assert move is not None and move.direction is Direction.TO_ON_DEMAND
    assert move.pod in {"spot-3", "spot-4", "spot-5", "spot-6"}  # a pod of pool B
    assert next_move(state(pods(4, [A, A, A, B, B, B])), view) is None


def test_rebalance_spreads_a_crowded_pool() -> None:
    shared = WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=2, spot_percentage=75, max_pool_share=0.5)
    view = PlacementView(pool_risk={A: 1.0, B: 1.0})
    move = next_move(state(pods(4, [A, A, A, A, A, B]), policy=shared), view)
    assert move is not None and move.direction is Direction.ACROSS_POOLS
    assert move.pod in {f"spot-{i}" for i in range(5)}


def test_rebalance_spreads_a_pool_holding_more_than_the_workload_may_lose() -> None:
    default = WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=1)
    view = PlacementView(pool_risk={A: 1.0, B: 1.0, C: 1.0})
    # 9 replicas, 8 spot, one may go at a time: an even share (3) per pool; pool A holds 6.
    move = next_move(state(pods(1, [A, A, A, A, A, A, B, C]), policy=default), view)
    assert move is not None and move.direction is Direction.ACROSS_POOLS
    assert move.pod in {f"spot-{i}" for i in range(6)}
    # Four in pool A (max-pool-share's 0.5 of 8): crowded for a budget of one, not for a budget of six.
    four = pods(1, [A, A, A, A, B, B, C, C])
    assert next_move(state(four, policy=default), view) is not None
    assert next_move(state(four, floor=3, policy=default), view) is None
    # An explicit max-pool-share is the workload's own choice: only it applies.
    explicit = WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=1, max_pool_share=1.0)
    assert next_move(state(pods(1, [A, A, A, A, A, A, B, C]), policy=explicit), view) is None


def test_single_replica_moves_by_surge_restart_and_statefulsets_never_lose_their_only_pod() -> None:
    view = PlacementView(pool_risk={A: 1.0})
    lone = state(pods(1, []), floor=0, policy=WorkloadPolicy(WorkloadKind.DEPLOYMENT))
    move = next_move(lone, view)
    assert move is not None and (move.kind, move.direction) == (MoveKind.SURGE_RESTART, Direction.TO_SPOT)
    sts_policy = WorkloadPolicy(WorkloadKind.STATEFULSET)
    sts = WorkloadState(
        WorkloadKind.STATEFULSET, "shop", "db", 1, sts_policy, (PodState("db-0", SPOT, A, "n", True, 0),), 0
    )
    assert next_move(sts, view) is None


def test_statefulset_ordinal_on_the_wrong_capacity_is_moved() -> None:
    policy = WorkloadPolicy(WorkloadKind.STATEFULSET, on_demand_base=1, spot_percentage=100)
    members = tuple(
        PodState(f"db-{i}", OD, None, f"n{i}", True, i) for i in range(3)
    )  # all on-demand after fallback
    sts = WorkloadState(WorkloadKind.STATEFULSET, "shop", "db", 3, policy, members, floor=2)
    # Two zones: its allowance (1) in each, so ordinals 1 and 2 are spot; the highest moves first.
    move = next_move(sts, PlacementView(pool_risk={A: 1.0, B: 1.0}))
    assert move is not None and move.pod == "db-2" and move.direction is Direction.TO_SPOT
    # One zone: only ordinal 1 may be on spot, so ordinal 2 stays on-demand.
    move = next_move(sts, PlacementView(pool_risk={A: 1.0}))
    assert move is not None and move.pod == "db-1" and move.direction is Direction.TO_SPOT


def test_the_rebalancer_moves_only_where_the_replacement_would_be_scheduled() -> None:
    """`next_move` says what is off target; `replacement_lands` (over a view with each pool's room now)
    says whether the evicted pod's replacement would be scheduled."""
    after_fallback = state(pods(6, [A, B, A, B]))  # desired 4 on-demand / 6 spot: one to move to spot
    room = ((2000, 4 * 2**30, 10),)
    with_room = PlacementView(pool_risk={A: 1.0, B: 2.0}, populated=frozenset({A, B}), rooms={A: room})
    move = next_move(after_fallback, with_room)
    assert move is not None and move.direction is Direction.TO_SPOT
    assert replacement_lands(after_fallback, move, with_room)
    full = PlacementView(pool_risk={A: 1.0, B: 2.0}, populated=frozenset({A, B}))
    assert not replacement_lands(after_fallback, move, full)  # no room, nothing says the pools grow
    assert replacement_lands(after_fallback, move, replace(full, growth={B: True}))
    gone = PlacementView(pool_risk={A: 1.0, B: 2.0}, populated=frozenset(), autoscaled=True)
    assert not replacement_lands(after_fallback, move, gone)  # the pools' nodes are gone
    # Across pools: only another pool counts.
    crowded = state(pods(4, [A, A, A, A, A, B]), policy=replace(POLICY, max_pool_share=0.5))
    across = Move(crowded.key, "spot-0", MoveKind.EVICT, Direction.ACROSS_POOLS)
    assert not replacement_lands(crowded, across, with_room)  # only A has room, and it is the pod's own
    assert replacement_lands(crowded, across, replace(with_room, rooms={B: room}))
    # Toward on-demand: toward safety, not held back.
    back = Move(crowded.key, "spot-0", MoveKind.EVICT, Direction.TO_ON_DEMAND)
    assert replacement_lands(crowded, back, gone)
