"""A workload that cannot surge (a StatefulSet) keeps at most its disruption allowance of spot replicas
in any one zone, by ordinal; on a notice its doomed pods are replaced one at a time."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from shipshape.controller.availability import availability_floor, statefulset_max_unavailable
from shipshape.controller.loops.base import SharedState
from shipshape.controller.notices import Notice
from shipshape.controller.ops import EvictionOutcome, RecordingOps
from shipshape.controller.placement import (
    Exclusion,
    GroupCounts,
    PlacementView,
    PodRequest,
    Pool,
    Reason,
    decide,
    desired_split,
    ordinal_capacity,
    spot_limit,
    statefulset_split,
)
from shipshape.controller.policy import CapacityType, WorkloadKind, WorkloadPolicy
from shipshape.controller.rebalance import Direction, next_move
from shipshape.controller.state import PodState, WorkloadRef, WorkloadState
from shipshape.controller.surge import ActionKind, next_replacement, plan_interruptions

from .builders import Harness, InterruptionLane, namespace, node, pod_of, statefulset
from .decision_cases import by_name
from .test_placement import ENABLED, admit, decision_of

OD, SPOT = CapacityType.ON_DEMAND, CapacityType.SPOT
POLICY = WorkloadPolicy(WorkloadKind.STATEFULSET, on_demand_base=1, spot_percentage=100)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
POOLS = [Pool(itype, zone) for zone in ZONES for itype in ("m5.xlarge", "c5.2xlarge")]


@pytest.mark.parametrize("replicas", [2, 3, 6, 15, 40])
@pytest.mark.parametrize("allowance", [0, 1, 2, 5])
@pytest.mark.parametrize("zones", [1, 2, 3])
def test_spot_ordinals_stop_at_the_allowance_in_every_zone(replicas: int, allowance: int, zones: int) -> None:
    limit = spot_limit(allowance, zones)
    assert limit == allowance * zones
    capacities = [ordinal_capacity(i, replicas, POLICY, limit) for i in range(replicas)]
    spot = [i for i, (capacity, _) in enumerate(capacities) if capacity is SPOT]
    wanted = min(desired_split(replicas, POLICY).spot, allowance * zones)
    assert len(spot) == wanted == statefulset_split(replicas, POLICY, limit).spot
    # The lowest spot ordinals keep spot; every ordinal beyond the limit says why it is on-demand.
    assert spot == list(range(1, 1 + wanted))
    beyond = [reason for capacity, reason in capacities if reason is Reason.ORDINAL_ALLOWANCE]
    assert len(beyond) == desired_split(replicas, POLICY).spot - wanted
    # Deterministic: the same inputs give the same answer for each ordinal, whatever else exists.
    assert capacities == [ordinal_capacity(i, replicas, POLICY, limit) for i in range(replicas)]


def test_no_limit_for_workloads_that_surge() -> None:
    assert spot_limit(None, 3) is None
    assert statefulset_split(15, POLICY, None) == desired_split(15, POLICY)
    assert spot_limit(2, 0) == 2  # no spot pool known: one domain


def test_a_spot_ordinal_goes_to_a_zone_below_its_allowance_else_on_demand() -> None:
    view = PlacementView(pool_risk=dict.fromkeys(POOLS, 1.0))
    counts = GroupCounts()
    counts.add(OD, None)
    counts.add(SPOT, Pool("m5.xlarge", "us-east-1a"))
    decision = decide(PodRequest(POLICY, 15, ordinal=2, allowance=1), counts, view)
    assert decision.capacity_type is SPOT
    assert {pool.zone for pool in decision.allowed_pools} == {"us-east-1b", "us-east-1c"}
    counts.add(SPOT, Pool("c5.2xlarge", "us-east-1b"))
    # Zone c is being reclaimed: the only zone left below its allowance is excluded.
    at_risk = PlacementView(
        pool_risk=view.pool_risk,
        excluded={pool: Exclusion.AT_RISK for pool in POOLS if pool.zone == "us-east-1c"},
    )
    decision = decide(PodRequest(POLICY, 15, ordinal=3, allowance=1), counts, at_risk)
    assert (decision.capacity_type, decision.reason) == (OD, Reason.ZONE_ALLOWANCE_REACHED)
    # Ordinal 4 is beyond the limit (1 x 3 zones) whatever the counts.
    decision = decide(PodRequest(POLICY, 15, ordinal=4, allowance=1), GroupCounts(), view)
    assert (decision.capacity_type, decision.reason) == (OD, Reason.ORDINAL_ALLOWANCE)
    # An allowance of 0 (minAvailable = replicas) allows no spot replica at all.
    decision = decide(PodRequest(POLICY, 15, ordinal=1, allowance=0), GroupCounts(), view)
    assert decision.capacity_type is OD


def pdb(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {**spec, "selector": {"matchLabels": {"app": name}}},
    }


def zone_nodes() -> list[dict[str, Any]]:
    return [
        node(f"{pool.instance_type}-{pool.zone}", "spot", pool.instance_type, pool.zone) for pool in POOLS
    ] + [node("od-0", "on-demand")]


def test_webhook_places_one_spot_ordinal_per_zone_under_a_pdb_of_max_unavailable_1() -> None:
    h = Harness()
    sts = statefulset("search", 15, ENABLED)
    h.add(namespace("shop"), sts, pdb("search", {"maxUnavailable": 1}), *zone_nodes())
    pods = [admit(h, pod_of(sts, f"search-{i}")) for i in range(15)]
    decisions = [decision_of(p) for p in pods]
    spot = [d for d in decisions if d["capacityType"] == "spot"]
    assert len(spot) == 3
    assert Counter(Pool.parse(d["pool"]).zone for d in spot) == Counter(dict.fromkeys(ZONES, 1))
    assert [d["capacityType"] for d in decisions[:4]] == ["on-demand", "spot", "spot", "spot"]
    assert {d["reason"] for d in decisions[4:]} == {Reason.ORDINAL_ALLOWANCE.value}
    # The last spot ordinal's required affinity only allows the zone left below its allowance.
    affinity = pods[3]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    zones = {
        value
        for term in affinity["nodeSelectorTerms"]
        for expr in term["matchExpressions"]
        if expr["key"] == "topology.kubernetes.io/zone"
        for value in expr["values"]
    }
    assert zones == {Pool.parse(spot[2]["pool"]).zone}


def test_webhook_allowance_follows_the_pdb_and_the_rolling_update() -> None:
    h = Harness()
    sts = statefulset("search", 10, ENABLED)
    sts["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "20%"}}
    h.add(namespace("shop"), sts, *zone_nodes())
    ref = h.cache.workload_of(pod_of(sts, "search-0"))
    assert ref is not None
    assert statefulset_max_unavailable(sts) == 2
    assert h.placer.allowance(ref) == 2
    h.add(pdb("search", {"minAvailable": 10}))
    assert h.placer.allowance(ref) == 0
    decisions = [decision_of(admit(h, pod_of(sts, f"search-{i}")))["capacityType"] for i in range(10)]
    assert decisions == ["on-demand"] * 10


def sts_state(pods: list[PodState], replicas: int = 5, floor: int = 4) -> WorkloadState:
    return WorkloadState(WorkloadKind.STATEFULSET, "shop", "search", replicas, POLICY, tuple(pods), floor)


def spot_pod(ordinal: int, node_name: str, zone: str = "us-east-1a", ready: bool = True) -> PodState:
    return PodState(f"search-{ordinal}", SPOT, Pool("m5.xlarge", zone), node_name, ready, ordinal)


def od_pod(ordinal: int, ready: bool = True) -> PodState:
    return PodState(f"search-{ordinal}", OD, None, f"od-{ordinal}", ready, ordinal)


def test_doomed_pods_are_replaced_one_at_a_time() -> None:
    deadlines = {"a1": 100.0, "a2": 90.0}
    pods = [od_pod(0), od_pod(1), od_pod(2), spot_pod(3, "a1"), spot_pod(4, "a2")]
    state = sts_state(pods, floor=3)
    assert next_replacement(state, deadlines) == "search-4"  # earliest deadline first
    # search-4 evicted and recreated, not Ready yet: wait, even though the floor would allow another.
    replaced = [*pods[:3], pods[3], od_pod(4, ready=False)]
    assert next_replacement(sts_state(replaced, floor=3), deadlines) is None
    # search-4 gone, not recreated yet: wait.
    assert next_replacement(sts_state(pods[:4], floor=3), deadlines) is None
    # Ready again off the doomed nodes: the next one.
    ready_again = [*pods[:3], pods[3], od_pod(4)]
    assert next_replacement(sts_state(ready_again, floor=3), deadlines) == "search-3"
    # Nothing doomed: nothing to do.
    assert next_replacement(sts_state([od_pod(i) for i in range(5)]), deadlines) is None


def test_a_replacement_never_takes_ready_below_the_floor() -> None:
    deadlines = {"a1": 100.0}
    pods = [od_pod(0), od_pod(1), od_pod(2), spot_pod(3, "a1"), od_pod(4)]
    assert next_replacement(sts_state(pods, floor=5), deadlines) is None
    # A doomed pod that is not Ready costs nothing to evict.
    unready = [*pods[:3], spot_pod(3, "a1", ready=False), od_pod(4)]
    assert next_replacement(sts_state(unready, floor=5), deadlines) == "search-3"


def test_a_statefulset_reclaim_plans_a_replacement() -> None:
    nodes = by_name([node("a1", "spot"), node("od-0", "on-demand")])
    state = sts_state([od_pod(0), od_pod(1), od_pod(2), spot_pod(3, "a1"), od_pod(4)])
    plan = plan_interruptions([Notice("a1", 100.0, "taint")], nodes, [state])
    (action,) = plan.actions
    assert (action.kind, action.doomed_pods, action.replacements) == (ActionKind.REPLACE, ("search-3",), 1)


def test_rebalancer_moves_a_spot_ordinal_out_of_a_crowded_zone() -> None:
    view = PlacementView(pool_risk=dict.fromkeys(POOLS, 1.0))
    pods = [od_pod(0), spot_pod(1, "a1"), spot_pod(2, "a2"), od_pod(3), od_pod(4)]
    move = next_move(sts_state(pods, floor=4), view)
    assert move is not None and move.pod == "search-2" and move.direction is Direction.ACROSS_POOLS
    # One per zone: ordinal 3 (within 1 x 3 zones) belongs on spot, in the zone left.
    pods = [od_pod(0), spot_pod(1, "a1"), spot_pod(2, "b1", "us-east-1b"), od_pod(3), od_pod(4)]
    move = next_move(sts_state(pods, floor=4), view)
    assert move is not None and move.pod == "search-3" and move.direction is Direction.TO_SPOT
    # Ordinal 4 is beyond the limit: on spot it is moved back to on-demand.
    pods = [od_pod(0), od_pod(1), od_pod(2), od_pod(3), spot_pod(4, "c1", "us-east-1c")]
    move = next_move(sts_state(pods, floor=4), view)
    assert move is not None and move.pod == "search-4" and move.direction is Direction.TO_ON_DEMAND


def test_floor_of_a_statefulset_without_pdb_uses_its_rolling_update() -> None:
    sts = statefulset("db", 6, ENABLED)
    ref = WorkloadRef(WorkloadKind.STATEFULSET, "shop", "db", sts, None)  # type: ignore[arg-type]
    assert availability_floor(ref, []) == 5
    sts["spec"]["updateStrategy"] = {"rollingUpdate": {"maxUnavailable": 3}}
    assert availability_floor(ref, []) == 3


def test_responder_evicts_the_next_doomed_pod_once_and_respects_a_blocked_eviction() -> None:
    h = Harness()
    sts = statefulset("search", 3, ENABLED)
    nodes = [
        node("a1", "spot", taints=[{"key": "aws-node-termination-handler/spot-itn"}]),
        node("od-0", "on-demand"),
    ]
    h.add(namespace("shop"), sts, pdb("search", {"maxUnavailable": 1}), *nodes)
    h.add(pod_of(sts, "search-0", node="od-0"), pod_of(sts, "search-1", node="od-0"))
    h.add(pod_of(sts, "search-2", node="a1"))
    ops = RecordingOps(objects=h.objects, evictions={"shop/search-2": EvictionOutcome.BLOCKED})
    shared = SharedState.for_config(h.config, risk=h.risk)
    responder = InterruptionLane(h.clock, h.cache, ops, h.config, h.metrics, shared)
    responder.reconcile(h.clock.now())
    assert ops.of("evict") == [("shop", "search-2")]
    responder.reconcile(h.clock.now() + 1)  # blocked: tried again
    assert ops.of("evict") == [("shop", "search-2")] * 2
    ops.evictions.clear()
    responder.reconcile(h.clock.now() + 2)
    responder.reconcile(h.clock.now() + 3)  # sent; the cache still shows the pod: not sent again
    assert ops.of("evict") == [("shop", "search-2")] * 3
