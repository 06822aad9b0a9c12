from __future__ import annotations

import base64
import json
from collections import Counter
from typing import Any

import jsonpatch
import pytest

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
    pool_cap,
    spread_cap,
)
from shipshape.controller.policy import CapacityType, SingleReplicaMode, WorkloadKind, WorkloadPolicy
from shipshape.controller.risk import RiskModel, SpotAdvisor
from shipshape.controller.state import read_decision

from .builders import Harness, deployment, namespace, node, pod_of, replicaset, review, statefulset

ENABLED = {"spot.shipshape.dev/enabled": "true"}
POOL_A = Pool("m5.large", "us-east-1a")
POOL_B = Pool("m5.large", "us-east-1b")
POOL_C = Pool("c5.large", "us-east-1a")


def admit(h: Harness, pod: dict[str, Any], uid: str | None = None) -> dict[str, Any]:
    """Send the pod through the webhook and return the mutated pod."""
    answer = h.placer.review(review(pod, uid=uid))["response"]
    assert answer["allowed"] is True
    if "patch" not in answer:
        return pod
    ops = json.loads(base64.b64decode(answer["patch"]))
    mutated: dict[str, Any] = jsonpatch.apply_patch(pod, ops)
    return mutated


def decision_of(pod: dict[str, Any]) -> dict[str, Any]:
    found = read_decision(pod)
    assert found is not None
    return found.body()


def split_of(pods: list[dict[str, Any]]) -> Counter[str]:
    return Counter(decision_of(p)["capacityType"] for p in pods)


def deployment_harness(
    replicas: int, annotations: dict[str, str], pools: list[Pool]
) -> tuple[Harness, dict[str, Any]]:
    h = Harness()
    dep = deployment("web", replicas, {**ENABLED, **annotations})
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, node("od-1", "on-demand"))
    for i, pool in enumerate(pools):
        h.add(node(f"spot-{i}", "spot", pool.instance_type, pool.zone))
    return h, rs


def test_desired_split_follows_the_definitions() -> None:
    policy = WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=2, spot_percentage=75)
    assert desired_split(10, policy).on_demand == 4
    assert desired_split(10, policy).spot == 6  # 75 % of the 8 above the base
    # Fractions round toward on-demand: 75 % of 5 = 3.75 -> 3 spot.
    assert desired_split(7, policy).spot == 3
    assert desired_split(2, policy).spot == 0
    assert desired_split(0, policy).total == 0


def test_burst_of_ten_lands_exactly_on_the_split() -> None:
    h, rs = deployment_harness(
        10,
        {"spot.shipshape.dev/on-demand-base": "2", "spot.shipshape.dev/spot-percentage": "75"},
        [POOL_A, POOL_B],
    )
    decided = [admit(h, pod_of(rs)) for _ in range(10)]  # none of them exists yet: assumptions only
    reasons = [decision_of(p)["reason"] for p in decided]
    assert split_of(decided) == {"on-demand": 4, "spot": 6}
    assert reasons[:2] == ["on-demand-base", "on-demand-base"]
    assert Counter(reasons) == {"on-demand-base": 2, "spot-share": 6, "on-demand-share": 2}
    pools = Counter(decision_of(p)["pool"] for p in decided if decision_of(p)["capacityType"] == "spot")
    assert pools == {str(POOL_A): 3, str(POOL_B): 3}
    assert (
        h.metric("shipshape_placement_decisions_total", {"capacity_type": "spot", "reason": "spot-share"})
        == 6
    )


def test_assumptions_end_when_the_pod_appears_or_expire() -> None:
    h, rs = deployment_harness(4, {"spot.shipshape.dev/on-demand-base": "2"}, [POOL_A])
    first = admit(h, pod_of(rs), uid="u-1")
    assert h.cache.assumed_count(h.clock.now()) == 1
    first["metadata"]["name"] = "web-abc12-x1"
    h.add(first)  # the real pod: its decision id retires the assumption, the pod itself now counts
    assert h.cache.assumed_count(h.clock.now()) == 0
    assert h.cache.group_counts(h.cache.workload_of(first).group, h.clock.now()).on_demand == 1  # type: ignore[union-attr]
    admit(h, pod_of(rs), uid="u-2")  # never created (rejected by a later admission step)
    h.clock.advance(h.config.assume_ttl_seconds + 1)
    assert h.cache.assumed_count(h.clock.now()) == 0
    # With the lost assumption gone, the next pod takes the second base slot again.
    assert decision_of(admit(h, pod_of(rs)))["reason"] == "on-demand-base"


def test_dry_run_decides_without_assuming() -> None:
    h, rs = deployment_harness(4, {}, [POOL_A])
    answer = h.placer.review(review(pod_of(rs), dry_run=True))["response"]
    assert "patch" in answer
    assert h.cache.assumed_count(h.clock.now()) == 0


def test_scale_up_keeps_the_split() -> None:
    h, rs = deployment_harness(
        10,
        {"spot.shipshape.dev/on-demand-base": "2", "spot.shipshape.dev/spot-percentage": "75"},
        [POOL_A, POOL_B, POOL_C],  # 9 spot replicas at a 0.5 share need three pools (4 per pool)
    )
    for i in range(10):
        pod = admit(h, pod_of(rs))
        pod["metadata"]["name"] = f"web-abc12-{i}"
        h.add(pod)
    dep = deployment(
        "web",
        14,
        {**ENABLED, "spot.shipshape.dev/on-demand-base": "2", "spot.shipshape.dev/spot-percentage": "75"},
    )
    h.add(dep)
    new = [admit(h, pod_of(rs)) for _ in range(4)]
    # desired_split(14) = 5 on-demand (2 + 3), 9 spot (75 % of 12): one more on-demand, three more spot.
    assert split_of(new) == {"spot": 3, "on-demand": 1}


def test_statefulset_ordinals_are_deterministic_and_exact_for_every_size() -> None:
    policy = WorkloadPolicy(WorkloadKind.STATEFULSET, on_demand_base=2, spot_percentage=75)
    for n in range(2, 15):
        spot = sum(1 for i in range(n) if ordinal_capacity(i, n, policy)[0] is CapacityType.SPOT)
        assert spot == desired_split(n, policy).spot, n
    assert ordinal_capacity(0, 10, policy) == (CapacityType.ON_DEMAND, Reason.ORDINAL_BASE)
    assert ordinal_capacity(1, 10, policy) == (CapacityType.ON_DEMAND, Reason.ORDINAL_BASE)

    h = Harness()
    sts = statefulset(
        "db",
        10,
        {**ENABLED, "spot.shipshape.dev/on-demand-base": "2", "spot.shipshape.dev/spot-percentage": "75"},
    )
    # Allowance 2 (rolling update maxUnavailable) in each of three zones: room for all 6 spot ordinals.
    sts["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}
    zones = [node(f"spot-{z}", "spot", zone=f"us-east-1{z}") for z in "abc"]
    h.add(namespace("shop"), sts, *zones)
    first = [decision_of(admit(h, pod_of(sts, f"db-{i}")))["capacityType"] for i in range(10)]
    h.clock.advance(h.config.assume_ttl_seconds + 1)  # the first pods are gone again
    again = [decision_of(admit(h, pod_of(sts, f"db-{i}")))["capacityType"] for i in range(10)]
    assert first == again  # a recreated ordinal gets the same capacity type whatever else exists
    assert first[:2] == ["on-demand", "on-demand"]
    assert first.count("spot") == 6


@pytest.mark.parametrize(
    ("kind", "mode", "expected", "reason"),
    [
        (WorkloadKind.DEPLOYMENT, SingleReplicaMode.SURGE, CapacityType.SPOT, Reason.SINGLE_SURGE),
        (
            WorkloadKind.DEPLOYMENT,
            SingleReplicaMode.ON_DEMAND,
            CapacityType.ON_DEMAND,
            Reason.SINGLE_ON_DEMAND,
        ),
        (
            WorkloadKind.STATEFULSET,
            SingleReplicaMode.ON_DEMAND,
            CapacityType.ON_DEMAND,
            Reason.SINGLE_ON_DEMAND,
        ),
    ],
)
def test_single_replica_mode_decides_and_the_base_does_not_apply(
    kind: WorkloadKind, mode: SingleReplicaMode, expected: CapacityType, reason: Reason
) -> None:
    policy = WorkloadPolicy(kind, on_demand_base=3, single_replica=mode)
    ordinal = 0 if kind is WorkloadKind.STATEFULSET else None
    decision = decide(PodRequest(policy, 1, ordinal), GroupCounts(), PlacementView(pool_risk={POOL_A: 1.0}))
    assert (decision.capacity_type, decision.reason) == (expected, reason)


def test_single_replica_defaults_through_the_webhook() -> None:
    h, rs = deployment_harness(1, {}, [POOL_A])
    assert decision_of(admit(h, pod_of(rs)))["capacityType"] == "spot"
    sts = statefulset("db", 1, ENABLED)
    h.add(sts)
    assert decision_of(admit(h, pod_of(sts, "db-0")))["capacityType"] == "on-demand"


def test_max_pool_share_with_three_pools() -> None:
    h, rs = deployment_harness(
        8,
        {"spot.shipshape.dev/on-demand-base": "2", "spot.shipshape.dev/max-pool-share": "0.33"},
        [POOL_A, POOL_B, POOL_C],
    )
    decided = [admit(h, pod_of(rs)) for _ in range(8)]
    spot_pools = Counter(decision_of(p)["pool"] for p in decided if decision_of(p)["capacityType"] == "spot")
    assert sum(spot_pools.values()) == 6
    assert max(spot_pools.values()) <= pool_cap(6, 0.33) == 2
    assert len(spot_pools) == 3


def test_max_pool_share_sends_the_excess_on_demand_when_pools_are_too_few() -> None:
    h, rs = deployment_harness(
        5, {"spot.shipshape.dev/on-demand-base": "1", "spot.shipshape.dev/max-pool-share": "0.5"}, [POOL_A]
    )
    decided = [admit(h, pod_of(rs)) for _ in range(5)]
    reasons = Counter(decision_of(p)["reason"] for p in decided)
    assert split_of(decided) == {
        "spot": 2,
        "on-demand": 3,
    }  # only half of the 4 spot replicas in the one pool
    assert reasons["max-pool-share-reached"] == 2


def test_spread_cap_keeps_a_pool_loss_within_the_loss_allowance_or_an_even_share() -> None:
    assert spread_cap(40, 0.5, 4, None) == pool_cap(40, 0.5) == 20
    assert spread_cap(40, 0.5, 4, 1) == 10  # an even share of four pools
    assert spread_cap(40, 0.5, 4, 15) == 15  # the workload may lose 15 at once
    assert spread_cap(40, 0.5, 4, 30) == 20  # never above max-pool-share
    assert spread_cap(40, 1.0, 1, 1) == 40  # one usable pool: nothing to spread over
    assert spread_cap(1, 0.5, 3, 0) == 1


def test_a_pool_takes_no_more_than_the_loss_allowance_unless_max_pool_share_is_set() -> None:
    pools = [Pool("m5.large", f"us-east-1{z}") for z in "abcd"]
    view = PlacementView(pool_risk={pool: 1.0 for pool in pools})
    counts = GroupCounts(on_demand=1, spot_by_pool={pools[0]: 10, pools[1]: 3, pools[2]: 3, pools[3]: 3})
    default = WorkloadPolicy(WorkloadKind.DEPLOYMENT)
    # 41 replicas, base 1: 40 spot; a PDB lets one go at a time -> an even share (10) per pool.
    decision = decide(PodRequest(default, 41, loss_allowance=1), counts, view)
    assert decision.capacity_type is CapacityType.SPOT
    assert pools[0] not in decision.allowed_pools and len(decision.allowed_pools) == 3
    # Without the allowance (or with max-pool-share set) only max-pool-share (20 per pool) bounds them.
    assert pools[0] in decide(PodRequest(default, 41), counts, view).allowed_pools
    explicit = WorkloadPolicy(WorkloadKind.DEPLOYMENT, max_pool_share=0.5)
    assert pools[0] in decide(PodRequest(explicit, 41, loss_allowance=1), counts, view).allowed_pools


def test_the_webhook_spreads_a_deployment_by_its_disruption_budget() -> None:
    pools = [Pool("m5.large", f"us-east-1{z}") for z in "abcd"]
    h, rs = deployment_harness(41, {}, pools)
    h.add(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    admitted = [admit(h, pod_of(rs)) for _ in range(41)]
    spot = [pod for pod in admitted if decision_of(pod)["capacityType"] == "spot"]
    assert len(spot) == 40
    # Each pod may only land in pools below an even share (10 of the 40) at its admission, so the
    # scheduler cannot pile more into one pool: the last pod is allowed only the one pool left at 9.
    zones_allowed = [
        [
            zone
            for term in pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            for expr in term["matchExpressions"]
            if expr["key"] == "topology.kubernetes.io/zone"
            for zone in expr["values"]
        ]
        for pod in spot
    ]
    assert all(zones for zones in zones_allowed)
    assert len(zones_allowed[-1]) == 1
    assert max(Counter(decision_of(pod)["pool"] for pod in spot).values()) == 10


def test_one_pool_has_no_default_cap() -> None:
    h, rs = deployment_harness(5, {}, [POOL_A])
    assert split_of([admit(h, pod_of(rs)) for _ in range(5)]) == {"on-demand": 1, "spot": 4}


def test_pool_with_a_notice_is_avoided_and_rebalance_nodes_are_excluded() -> None:
    h, rs = deployment_harness(3, {"spot.shipshape.dev/max-pool-share": "1"}, [POOL_A, POOL_B])
    h.add(
        node(
            "spot-a2",
            "spot",
            POOL_A.instance_type,
            POOL_A.zone,
            taints=[{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}],
        ),
        node(
            "spot-b2",
            "spot",
            POOL_B.instance_type,
            POOL_B.zone,
            taints=[
                {"key": "aws-node-termination-handler/rebalance-recommendation", "effect": "PreferNoSchedule"}
            ],
        ),
    )
    decided = [admit(h, pod_of(rs)) for _ in range(3)]
    spot = [p for p in decided if decision_of(p)["capacityType"] == "spot"]
    assert [decision_of(p)["pool"] for p in spot] == [str(POOL_B), str(POOL_B)]
    terms = spot[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert len(terms) == 1
    expressions = {e["key"]: (e["operator"], e["values"]) for e in terms[0]["matchExpressions"]}
    assert expressions["topology.kubernetes.io/zone"] == ("In", ["us-east-1b"])
    assert expressions["kubernetes.io/hostname"] == ("NotIn", ["spot-a2", "spot-b2"])


def test_cooldown_after_a_notice_then_the_pool_returns() -> None:
    h, rs = deployment_harness(3, {"spot.shipshape.dev/max-pool-share": "1"}, [POOL_A, POOL_B])
    h.risk.record_notice("gone-1", POOL_A, h.clock.now())
    assert not h.risk.record_notice("gone-1", POOL_A, h.clock.now())  # duplicate notice ignored
    assert {decision_of(admit(h, pod_of(rs)))["pool"] for _ in range(3)} <= {"", str(POOL_B)}
    h.clock.advance(h.config.risk_cooldown_seconds + 1)
    view = h.cache.placement_view(h.clock.now(), h.risk)
    assert POOL_A not in view.excluded
    assert view.pool_risk[POOL_A] > view.pool_risk[POOL_B]  # the observed interruption still raises its risk


def test_every_pool_at_risk_or_short_falls_back_to_on_demand() -> None:
    policy = WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=0)
    request = PodRequest(policy, 4)
    risky = PlacementView(
        pool_risk={POOL_A: 1.0, POOL_B: 1.0}, excluded={POOL_A: Exclusion.AT_RISK, POOL_B: Exclusion.SHORTAGE}
    )
    assert decide(request, GroupCounts(), risky).reason is Reason.NO_SPOT_POOL
    short = PlacementView(pool_risk={POOL_A: 1.0}, excluded={POOL_A: Exclusion.SHORTAGE})
    assert decide(request, GroupCounts(), short).capacity_type is CapacityType.ON_DEMAND
    assert decide(request, GroupCounts(), short).reason is Reason.SPOT_FALLBACK


def test_lower_risk_pool_preferred_from_the_advisor_band() -> None:
    advisor = SpotAdvisor(bands={("us-east-1", "m5.large"): 4, ("us-east-1", "c5.large"): 0})
    h = Harness(risk=RiskModel(advisor=advisor))
    dep = deployment("web", 1, ENABLED)
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, node("s1", "spot", "m5.large"), node("s2", "spot", "c5.large"))
    assert decision_of(admit(h, pod_of(rs)))["pool"] == str(POOL_C)
