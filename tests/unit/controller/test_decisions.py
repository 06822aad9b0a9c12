from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from shipshape.controller.availability import availability_floor, pdb_floor
from shipshape.controller.decisions import (
    Direction,
    Move,
    MoveKind,
    ShortageTracker,
    allowed_pools_of,
    deletion_cost_updates,
    deletion_costs,
    fallback_candidates,
    headroom_plan,
    next_move,
    nodes_by_name,
    removal_order,
    replacement_lands,
    spot_pods_by_pool,
)
from shipshape.controller.headroom import placeholder_deployments, priority_class
from shipshape.controller.notices import Notice, notice_from_instance_action, notices_from_taints
from shipshape.controller.placement import Exclusion, PlacementView, Pool, desired_split
from shipshape.controller.policy import CapacityType, ControllerConfig, WorkloadKind, WorkloadPolicy
from shipshape.controller.state import ClusterState, PodState, WorkloadState
from shipshape.controller.surge import ActionKind, plan_interruptions
from shipshape.kube.clock import rfc3339

from .builders import added, deployment, node, pod_of, replicaset, statefulset

A = Pool("m5.large", "us-east-1a")
B = Pool("m5.large", "us-east-1b")
C = Pool("c5.large", "us-east-1a")
POLICY = WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=2, spot_percentage=75, max_pool_share=1.0)
OD = CapacityType.ON_DEMAND
SPOT = CapacityType.SPOT


def pods(od: int, spot_pools: list[Pool], ready: bool = True) -> tuple[PodState, ...]:
    made = [PodState(f"od-{i}", OD, None, f"od-node-{i}", ready) for i in range(od)]
    made += [PodState(f"spot-{i}", SPOT, pool, f"{pool}-n{i}", ready) for i, pool in enumerate(spot_pools)]
    return tuple(made)


def state(
    members: tuple[PodState, ...],
    replicas: int | None = None,
    floor: int | None = None,
    policy: WorkloadPolicy = POLICY,
) -> WorkloadState:
    n = len(members) if replicas is None else replicas
    return WorkloadState(
        WorkloadKind.DEPLOYMENT, "shop", "web", n, policy, members, floor=n - 1 if floor is None else floor
    )


def split_of(members: list[PodState]) -> tuple[int, int]:
    return sum(1 for p in members if p.capacity is OD), sum(1 for p in members if p.capacity is SPOT)


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
    costs = deletion_costs(members, POLICY, {A: 1.0, B: 1.0})
    kept = sorted(members, key=lambda p: costs[p.name])[4:]  # scale 10 -> 6: the four cheapest go
    target = desired_split(6, POLICY)
    assert split_of(kept) == (target.on_demand, target.spot)
    assert (sum(1 for p in kept if p.pool == A), sum(1 for p in kept if p.pool == B)) == (
        1,
        2,
    )  # fullest pool first
    # Unknown-capacity pods (pending, no decision) are the first to go.
    pending = (*members, PodState("pending", None, None, None, False))
    assert deletion_costs(pending, POLICY, {})["pending"] == 0


def test_only_changed_deletion_costs_are_written() -> None:
    members = pods(2, [A, B])
    costs = deletion_costs(members, POLICY, {})
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


def unschedulable(pod: dict[str, Any], since: float, pools: list[Pool] | None) -> dict[str, Any]:
    pod["metadata"]["name"] = "web-x"
    decision = '{"capacityType": "spot", "pool": "", "reason": "spot-share", "id": "1"}'
    pod["metadata"]["annotations"] = {"spot.shipshape.dev/decision": decision}
    if pools:
        pod["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "node.kubernetes.io/capacity", "operator": "In", "values": ["spot"]},
                                {
                                    "key": "node.kubernetes.io/instance-type",
                                    "operator": "In",
                                    "values": [p.instance_type],
                                },
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [p.zone]},
                            ]
                        }
                        for p in pools
                    ]
                }
            }
        }
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": rfc3339(since),
            }
        ],
    }
    return pod


def test_fallback_after_the_threshold_and_return_after_the_backoff() -> None:
    dep = deployment("web", 3)
    rs = replicaset(dep)
    now = 1_800_000_000.0
    stuck = unschedulable(pod_of(rs), now - 200, [A, B])
    fresh = unschedulable(pod_of(rs), now - 30, [A])
    assert allowed_pools_of(stuck) == (A, B)
    found = fallback_candidates([stuck, fresh], now, 120.0, known_pools=[A, B, C])
    assert [(f.pod, f.pools) for f in found] == [("web-x", (A, B))]
    anywhere = unschedulable(pod_of(rs), now - 500, None)
    assert fallback_candidates([anywhere], now, 120.0, known_pools=[C, A])[0].pools == (C, A)

    tracker = ShortageTracker(retry_seconds=300, max_retry_seconds=1000)
    assert tracker.mark([A, B], now) == [A, B]
    assert tracker.mark([A], now + 10) == []  # already short: not marked twice
    assert tracker.shortages(now + 299) == {A, B}
    assert tracker.shortages(now + 301) == frozenset()  # spot is tried again
    tracker.mark([A], now + 301)
    assert tracker.shortages(now + 301 + 599) == {A}  # back-off doubled
    tracker.mark([A], now + 301 + 601)
    assert tracker.shortages(now + 301 + 601 + 999) == {A}  # capped at the maximum
    tracker.capacity_seen(A)
    assert tracker.shortages(now + 1000) == frozenset()


def cluster_nodes() -> list[dict[str, Any]]:
    return [
        node("a1", "spot", A.instance_type, A.zone),
        node("a2", "spot", A.instance_type, A.zone),
        node("c1", "spot", C.instance_type, C.zone),
        node("b1", "spot", B.instance_type, B.zone),
        node("od1", "on-demand", "m5.large", "us-east-1a"),
    ]


def workloads_on_nodes() -> list[WorkloadState]:
    web = WorkloadState(
        WorkloadKind.DEPLOYMENT,
        "shop",
        "web",
        4,
        POLICY,
        (
            PodState("w0", OD, None, "od1", True, cpu_millis=500, memory_bytes=2**29),
            PodState("w1", SPOT, A, "a1", True, cpu_millis=500, memory_bytes=2**29),
            PodState("w2", SPOT, A, "a2", True, cpu_millis=500, memory_bytes=2**29),
            PodState("w3", SPOT, B, "b1", True, cpu_millis=500, memory_bytes=2**29),
        ),
        floor=3,
    )
    lone = WorkloadState(
        WorkloadKind.DEPLOYMENT,
        "shop",
        "lone",
        1,
        WorkloadPolicy(WorkloadKind.DEPLOYMENT),
        (PodState("l0", SPOT, C, "c1", True, cpu_millis=250, memory_bytes=2**28),),
        floor=0,
    )
    db = WorkloadState(
        WorkloadKind.STATEFULSET,
        "shop",
        "db",
        2,
        WorkloadPolicy(WorkloadKind.STATEFULSET),
        (
            PodState("db-0", OD, None, "od1", True, 0),
            PodState("db-1", SPOT, A, "a2", True, 1, cpu_millis=1000, memory_bytes=2**30),
        ),
        floor=1,
    )
    return [web, lone, db]


def test_pool_wide_reclaim_plan() -> None:
    nodes = nodes_by_name(cluster_nodes())
    notices = [Notice("a1", 1000.0, "taint"), Notice("a2", 1010.0, "metadata"), Notice("a1", 990.0, "queue")]
    plan = plan_interruptions(notices, nodes, workloads_on_nodes())
    assert plan.reclaimed_pools == {A}
    assert plan.reclaimed_zones == frozenset()
    assert plan.avoid_nodes == {"a1", "a2"}
    by_workload = {a.workload: a for a in plan.actions}
    web = by_workload["shop/Deployment/web"]
    assert (web.kind, web.replacements, web.ready_after_loss, web.floor) == (ActionKind.SURGE, 2, 2, 3)
    assert web.below_floor_without_action and web.deadline == 990.0  # duplicate notices: the earliest counts
    assert by_workload["shop/StatefulSet/db"].kind is ActionKind.REPLACE  # one at a time, no surge
    assert "shop/Deployment/lone" not in by_workload  # its pool is not reclaimed
    assert plan.replacement_requests == (2000, 2**31)
    assert plan.deadlines == {"a1": 990.0, "a2": 1010.0}


def test_zone_wide_reclaim_plan_avoids_every_spot_node_of_the_zone() -> None:
    nodes = nodes_by_name([*cluster_nodes(), node("a3", "spot", "r5.large", A.zone)])
    plan = plan_interruptions(
        [Notice("a1", 1000.0, "taint"), Notice("c1", 1000.0, "taint")], nodes, workloads_on_nodes()
    )
    assert plan.reclaimed_zones == {"us-east-1a"}
    assert plan.avoid_nodes == {"a1", "a2", "a3", "c1"}  # a3's pool got no notice, but its zone is going
    assert "b1" not in plan.avoid_nodes and "od1" not in plan.avoid_nodes
    kinds = {a.workload: a.kind for a in plan.actions}
    assert kinds["shop/Deployment/lone"] is ActionKind.SURGE_RESTART
    assert plan.actions[0].workload == "shop/Deployment/lone"  # earliest deadline, would hit zero ready
    assert plan_interruptions([], nodes, workloads_on_nodes()).actions == ()


def test_headroom_is_sized_from_the_largest_pool_loss() -> None:
    grouped = spot_pods_by_pool(workloads_on_nodes())
    plan = headroom_plan(grouped)
    assert plan.pool == A  # 2 cpu in pool A beat 0.25 in C and 0.5 in B
    assert (plan.cpu_millis, plan.memory_bytes) == (2000, 2 * 2**30)
    assert [(s.cpu_millis, s.memory_bytes, s.count) for s in plan.placeholders] == [
        (1000, 2**30, 1),
        (500, 2**29, 2),
    ]
    assert headroom_plan({}).pool is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"minAvailable": 3}, 3),
        ({"minAvailable": "50%"}, 3),
        ({"maxUnavailable": 1}, 4),
        ({"maxUnavailable": "10%"}, 4),
    ],
)
def test_pdb_floor(spec: dict[str, Any], expected: int) -> None:
    assert pdb_floor({"spec": spec}, 5) == expected


def test_workload_state_from_the_cache() -> None:
    cache = ClusterState(ControllerConfig())
    dep = deployment("web", 4, max_unavailable=0)
    rs = replicaset(dep)
    for obj in (dep, rs, *cluster_nodes()):
        cache.apply(added(obj))
    for i, where in enumerate(["od1", "a1", "a2", "b1"]):
        cache.apply(added(pod_of(rs, f"web-{i}", node=where, ready=i != 3)))
    ref = cache.workload_of(pod_of(rs, "web-0"))
    assert ref is not None
    current = cache.workload_state(ref, POLICY)
    assert current.ready == 3 and current.floor == 4  # maxUnavailable 0 (maxSurge 25 % > 0)
    assert [(p.capacity, p.pool) for p in current.pods] == [(OD, None), (SPOT, A), (SPOT, A), (SPOT, B)]
    assert current.pods[0].cpu_millis == 500
    cache.apply(
        added(
            {
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "p", "namespace": "shop"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            }
        )
    )
    assert availability_floor(ref, cache.pdbs_matching("shop", {"app": "web"})) == 2
    sts = statefulset("db", 3)
    cache.apply(added(sts))
    sts_ref = cache.workload_of(pod_of(sts, "db-0"))
    assert sts_ref is not None and availability_floor(sts_ref, []) == 2


def test_notices_from_taints_and_the_metadata_endpoint() -> None:
    now = 1_800_000_000.0
    tainted = node(
        "a1",
        "spot",
        taints=[
            {
                "key": "aws-node-termination-handler/spot-itn",
                "effect": "NoSchedule",
                "timeAdded": rfc3339(now - 20),
            }
        ],
    )
    karpenter = node("a2", "spot", taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}])
    plain = node(
        "a3", "spot", taints=[{"key": "node.kubernetes.io/capacity", "value": "spot", "effect": "NoSchedule"}]
    )
    found = notices_from_taints([tainted, karpenter, plain], now, lead_seconds=120)
    assert [(n.node, n.deadline) for n in found] == [("a1", now + 100), ("a2", now + 120)]
    notice = notice_from_instance_action("a1", {"action": "terminate", "time": rfc3339(now + 120)})
    assert notice is not None and notice.deadline == now + 120 and notice.source == "instance-metadata"
    assert notice_from_instance_action("a1", None) is None
    assert notice_from_instance_action("a1", {"action": "terminate", "time": "soon"}) is None


def test_placeholder_bodies() -> None:
    plan = headroom_plan(spot_pods_by_pool(workloads_on_nodes()))
    bodies = placeholder_deployments(plan, "shipshape-system")
    assert [b["spec"]["replicas"] for b in bodies] == [1, 2]
    template = bodies[1]["spec"]["template"]["spec"]
    assert template["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    required = template["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    on_demand = {"key": "node.kubernetes.io/capacity", "operator": "In", "values": ["on-demand"]}
    assert required["nodeSelectorTerms"] == [{"matchExpressions": [on_demand]}]
    gke = [[{"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]}]]
    gke_body = placeholder_deployments(plan, "shipshape-system", on_demand_terms=gke)[0]
    terms = gke_body["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": gke[0]}
    ]
    unlabelled = placeholder_deployments(plan, "shipshape-system", on_demand_terms=[[]])[0]
    assert "nodeAffinity" not in unlabelled["spec"]["template"]["spec"]["affinity"]
    assert template["priorityClassName"] == priority_class()["metadata"]["name"]
    assert priority_class()["value"] < 0 and priority_class()["preemptionPolicy"] == "Never"


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
