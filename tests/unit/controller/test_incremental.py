"""Workload state kept per change of its inputs, and deletion costs written only where the order needs it."""

from __future__ import annotations

import itertools

from shipshape.controller.deletion_cost import deletion_cost_updates, removal_order
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType, ControllerConfig, WorkloadKind, WorkloadPolicy
from shipshape.controller.state import ClusterState, PodState, WorkloadState, workload_ref

from .builders import added, deployment, namespace, node, pod_of, replicaset
from .test_state import pdb

POLICY = WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=2, spot_percentage=75, max_pool_share=1.0)
A = Pool("m5.large", "us-east-1a")
OD, SPOT = CapacityType.ON_DEMAND, CapacityType.SPOT


def cluster() -> tuple[ClusterState, dict[str, object]]:
    cache = ClusterState(ControllerConfig())
    dep = deployment("web", 3)
    rs = replicaset(dep)
    objs: dict[str, object] = {"dep": dep, "rs": rs}
    for obj in (namespace("shop"), node("od-1", "on-demand"), node("a-1", "spot"), dep, rs):
        cache.apply(added(obj))
    for i, where in enumerate(["od-1", "a-1", "a-1"]):
        cache.apply(added(pod_of(rs, f"web-{i}", node=where)))
    return cache, objs


def state_of(cache: ClusterState) -> WorkloadState:
    obj = cache.get("Deployment", "shop", "web")
    assert obj is not None
    return cache.workload_state(workload_ref(WorkloadKind.DEPLOYMENT, obj), POLICY)


def test_workload_state_is_rebuilt_only_when_its_inputs_change() -> None:
    cache, objs = cluster()
    first = state_of(cache)
    assert state_of(cache) is first
    # Another workload's pod, a node status change and an unrelated ReplicaSet leave it alone.
    other = replicaset(deployment("api", 1), hash_="zz9")
    cache.apply(added(other))
    cache.apply(added(pod_of(other, "api-0", node="a-1")))
    cache.apply({"type": "MODIFIED", "object": {**node("a-1", "spot"), "status": {"phase": "Running"}}})
    assert state_of(cache) is first
    # Its own pod changing readiness is seen.
    cache.apply({"type": "MODIFIED", "object": pod_of(objs["rs"], "web-1", node="a-1", ready=False)})  # type: ignore[arg-type]
    second = state_of(cache)
    assert second is not first
    assert second.ready == 2
    # A node changing pool moves its pods.
    cache.apply({"type": "MODIFIED", "object": node("a-1", "spot", zone="us-east-1b")})
    third = state_of(cache)
    assert {pod.pool for pod in third.pods if pod.capacity is SPOT} == {Pool("m5.large", "us-east-1b")}
    # A new ReplicaSet of the Deployment (a rollout) and a deleted pod are seen.
    rs2 = replicaset(objs["dep"], hash_="def34")  # type: ignore[arg-type]
    cache.apply(added(rs2))
    cache.apply(added(pod_of(rs2, "web-new", node="od-1")))
    fourth = state_of(cache)
    assert "web-new" in {pod.name for pod in fourth.pods} and fourth.settling
    cache.apply({"type": "DELETED", "object": pod_of(objs["rs"], "web-0", node="od-1")})  # type: ignore[arg-type]
    assert "web-0" not in {pod.name for pod in state_of(cache).pods}


def test_a_budget_renewed_or_reported_on_keeps_the_state_and_a_new_spec_rebuilds_it() -> None:
    cache, _ = cluster()
    budget = pdb("web", "shop", {"app": "web"}, max_unavailable=1)
    cache.apply(added(budget))
    first = state_of(cache)
    assert first.floor == 2
    # A guard's renewed expiry, a status from the disruption controller: nothing the state reads.
    renewed = {
        **budget,
        "metadata": {**budget["metadata"], "annotations": {"spot.shipshape.dev/guard-expires-at": "x"}},
        "status": {"disruptionsAllowed": 1},
    }
    cache.apply({"type": "MODIFIED", "object": renewed})
    assert state_of(cache) is first
    cache.apply({"type": "MODIFIED", "object": pdb("web", "shop", {"app": "web"}, max_unavailable=2)})
    assert state_of(cache).floor == 1


def members(od: int, spot: int, costs: dict[str, str] | None = None) -> tuple[PodState, ...]:
    costs = costs or {}
    made = [PodState(f"od-{i}", OD, None, "n", True, deletion_cost=costs.get(f"od-{i}")) for i in range(od)]
    made += [
        PodState(f"spot-{i}", SPOT, A, "n", True, deletion_cost=costs.get(f"spot-{i}")) for i in range(spot)
    ]
    return tuple(made)


def dep_state(pods: tuple[PodState, ...]) -> WorkloadState:
    return WorkloadState(WorkloadKind.DEPLOYMENT, "shop", "web", len(pods), POLICY, pods, floor=len(pods) - 1)


def applied(pods: tuple[PodState, ...], updates: dict[str, str]) -> tuple[PodState, ...]:
    return tuple(
        PodState(
            p.name, p.capacity, p.pool, p.node, p.ready, deletion_cost=updates.get(p.name, p.deletion_cost)
        )
        for p in pods
    )


def follows_order(pods: tuple[PodState, ...]) -> bool:
    order = removal_order(pods, POLICY, {})
    costs = {p.name: int(p.deletion_cost) for p in pods if p.deletion_cost is not None}
    return len(costs) == len(pods) and all(costs[a] < costs[b] for a, b in itertools.pairwise(order))


def test_a_pod_leaving_does_not_renumber_the_others() -> None:
    pods = members(4, 6)
    pods = applied(pods, deletion_cost_updates(dep_state(pods), {}))
    assert follows_order(pods)
    fewer = tuple(p for p in pods if p.name != removal_order(pods, POLICY, {})[0])
    assert deletion_cost_updates(dep_state(fewer), {}) == {}


def test_new_pods_get_costs_between_their_neighbours_only() -> None:
    pods = applied(members(4, 6), deletion_cost_updates(dep_state(members(4, 6)), {}))
    grown = (*pods, PodState("spot-9", SPOT, A, "n", True), PodState("od-9", OD, None, "n", True))
    updates = deletion_cost_updates(dep_state(grown), {})
    # The two new pods, plus only the old ones whose relative place in the order moved.
    assert {"spot-9", "od-9"} <= set(updates) and len(updates) < len(grown) // 2
    assert follows_order(applied(grown, updates))


def test_costs_out_of_order_are_fixed_and_fixed_pods_left_alone() -> None:
    pods = applied(members(4, 6), deletion_cost_updates(dep_state(members(4, 6)), {}))
    order = removal_order(pods, POLICY, {})
    swapped = {order[0]: next(p.deletion_cost for p in pods if p.name == order[-1]), order[-1]: "0"}
    scrambled = applied(pods, swapped)  # type: ignore[arg-type]
    updates = deletion_cost_updates(dep_state(scrambled), {})
    assert 0 < len(updates) <= 2
    assert follows_order(applied(scrambled, updates))
    doomed = applied(scrambled, {order[3]: "-1000000"})
    assert order[3] not in deletion_cost_updates(dep_state(doomed), {}, frozenset({order[3]}))


def test_no_room_between_neighbours_renumbers_from_zero() -> None:
    pods = members(1, 2, {"od-0": "5", "spot-0": "0", "spot-1": "1"})
    order = removal_order(pods, POLICY, {})
    crowded = applied(pods, {order[0]: "0", order[1]: "1", order[2]: "2"})
    crowded += (PodState("spot-7", SPOT, A, "n", True),)
    updates = deletion_cost_updates(dep_state(crowded), {})
    assert follows_order(applied(crowded, updates))


def test_unbound_pods_are_indexed_until_bound_or_gone() -> None:
    cache, objs = cluster()
    rs = objs["rs"]
    pending = pod_of(rs, "web-9")  # type: ignore[arg-type]
    cache.apply(added(pending))
    assert [p["metadata"]["name"] for p in cache.unbound_pods()] == ["web-9"]
    cache.apply({"type": "MODIFIED", "object": pod_of(rs, "web-9", node="a-1")})  # type: ignore[arg-type]
    assert cache.unbound_pods() == []
    cache.apply(added(pod_of(rs, "web-8")))  # type: ignore[arg-type]
    cache.apply({"type": "DELETED", "object": pod_of(rs, "web-8")})  # type: ignore[arg-type]
    assert cache.unbound_pods() == []


def test_a_rebuild_reuses_the_pod_states_of_unchanged_pods() -> None:
    cache, objs = cluster()
    first = state_of(cache)
    by_name = {pod.name: pod for pod in first.pods}
    changed = pod_of(objs["rs"], "web-2", node="a-1")  # type: ignore[arg-type]
    changed["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": "7"}
    cache.apply({"type": "MODIFIED", "object": changed})
    second = state_of(cache)
    assert second is not first
    again = {pod.name: pod for pod in second.pods}
    assert again["web-0"] is by_name["web-0"] and again["web-1"] is by_name["web-1"]
    assert again["web-2"].deletion_cost == "7" and by_name["web-2"].deletion_cost is None
    # A node that changes capacity type moves its pods: their states are built again.
    cache.apply({"type": "MODIFIED", "object": node("a-1", "on-demand")})
    third = {pod.name: pod for pod in state_of(cache).pods}
    assert third["web-1"].capacity is OD and third["web-0"] is by_name["web-0"]
