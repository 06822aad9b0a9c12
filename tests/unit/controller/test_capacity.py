"""Capacity the controller may steer to: pools that outlive their nodes, which pools can grow (the
configuration, cluster-autoscaler's status, Karpenter NodePools), and the webhook's decisions and
affinity on clusters labelled other ways than `node.kubernetes.io/capacity`."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from shipshape.controller import growth
from shipshape.controller.placement import (
    PlacementView,
    Pool,
    Reason,
    can_land,
    choose_pool,
)
from shipshape.controller.policy import ConfigError, ControllerConfig, WorkloadKind, WorkloadPolicy

from .builders import Harness, deployment, namespace, pod_of, replicaset, review, with_room

Obj = dict[str, Any]
A, B = Pool("m5.large", "us-east-1a"), Pool("m5.large", "us-east-1b")
POLICY = WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=0)
ON = {"spot.shipshape.dev/enabled": "true", "spot.shipshape.dev/on-demand-base": "0"}


def labelled(name: str, labels: dict[str, str], zone: str = "us-east-1a", room: bool = True) -> Obj:
    body: Obj = {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": zone,
                "topology.kubernetes.io/region": "us-east-1",
                **labels,
            },
        },
        "spec": {},
    }
    return with_room(body) if room else body


# --- landing: room now or growth -------------------------------------------------------------------


def test_a_pool_takes_a_pod_with_room_now_or_when_it_can_grow() -> None:
    room = PlacementView(pool_risk={A: 1.0}, populated=frozenset({A}), rooms={A: ((400, 2**30, 5),)})
    assert can_land(A, (300, 2**29), room, strict=True)
    assert not can_land(A, (500, 2**29), room, strict=True)  # no node has room for it
    grows = PlacementView(pool_risk={A: 1.0}, growth={A: True}, populated=frozenset())
    assert can_land(A, (500, 2**29), grows, strict=True)
    fixed = PlacementView(pool_risk={A: 1.0}, growth={A: False}, populated=frozenset({A}))
    assert not can_land(A, (1, 1), fixed)
    unknown = PlacementView(pool_risk={A: 1.0}, populated=frozenset({A}))
    assert can_land(A, (1, 1), unknown) and not can_land(A, (1, 1), unknown, strict=True)
    # An autoscaler is visible, though it does not say which pools it grows: a pool with nodes grows.
    autoscaled = PlacementView(pool_risk={A: 1.0}, populated=frozenset({A}), autoscaled=True)
    assert can_land(A, (1, 1), autoscaled, strict=True)
    assert not can_land(A, (1, 1), PlacementView(pool_risk={A: 1.0}, populated=frozenset(), autoscaled=True))
    gone = PlacementView(pool_risk={A: 1.0}, populated=frozenset())
    assert not can_land(A, (1, 1), gone)


def test_no_known_pool_is_not_spot_unconstrained() -> None:
    assert choose_pool(3, _counts(), PlacementView(), POLICY)[2] is Reason.NO_SPOT_CAPACITY
    assert choose_pool(3, _counts(), PlacementView(spot_anywhere=True), POLICY) == (None, (), None)
    gone = PlacementView(pool_risk={A: 1.0, B: 1.0}, populated=frozenset({B}))
    assert choose_pool(3, _counts(), gone, POLICY)[:2] == (B, (B,))


def _counts() -> Any:
    from shipshape.controller.placement import GroupCounts

    return GroupCounts()


# --- growth sources --------------------------------------------------------------------------------

STATUS = {
    "time": "2026-11-25 04:00:00.000000000 +0000 UTC",
    "autoscalerStatus": "Running",
    "nodeGroups": [
        {
            "name": "eks-spot-a-20c9a3f1-1b2c",
            "health": {"status": "Healthy", "cloudProviderTarget": 2, "minSize": 0, "maxSize": 4},
            "scaleUp": {"status": "NoActivity"},
        },
        {
            "name": "eks-spot-b-77aa0c12-9f3e",
            "health": {"status": "Healthy", "cloudProviderTarget": 2, "minSize": 0, "maxSize": 4},
            "scaleUp": {"status": "Backoff", "backoffInfo": {"errorCode": "InsufficientInstanceCapacity"}},
        },
        {
            "name": "eks-od-c-1",
            "health": {"status": "Healthy", "cloudProviderTarget": 3, "minSize": 0, "maxSize": 3},
        },
    ],
}


def status_configmap(doc: Obj) -> Obj:
    return {
        "kind": "ConfigMap",
        "metadata": {"name": "cluster-autoscaler-status", "namespace": "kube-system"},
        "data": {"status": yaml.safe_dump(doc)},
    }


def test_autoscaler_status_node_groups_are_matched_to_pools_by_node_group_label() -> None:
    groups = growth.autoscaler_groups(status_configmap(STATUS))
    assert [(g.name, g.can_grow) for g in groups] == [
        ("eks-spot-a-20c9a3f1-1b2c", True),
        ("eks-spot-b-77aa0c12-9f3e", False),  # scale-up backed off: capacity errors
        ("eks-od-c-1", False),  # at its maximum
    ]
    found = growth.autoscaler_growth(groups, {A: {"spot-a"}, B: {"spot-b"}, Pool("x", "y"): {"other"}})
    assert found == {A: True, B: False}
    # A group goes to the pool with the longest name it holds: spot-a-b's group is not spot-a's.
    longer = [growth.GroupStatus("eks-spot-a-b-1f2e", 4, 4, False), groups[0]]
    assert growth.autoscaler_growth(longer, {A: {"spot-a"}, B: {"spot-a-b"}}) == {A: True, B: False}
    assert growth.autoscaler_groups({"data": {"status": "Cluster-autoscaler status: {{"}}) == []
    assert growth.autoscaler_groups(None) == []


def nodepool(requirements: list[Obj], limits: Obj | None = None, used: Obj | None = None) -> Obj:
    return {
        "kind": "NodePool",
        "metadata": {"name": "spot"},
        "spec": {"template": {"spec": {"requirements": requirements}}, "limits": limits or {}},
        "status": {"resources": used or {}},
    }


def test_karpenter_nodepools_that_allow_spot_make_the_pools_they_admit() -> None:
    spot = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}
    zone_a = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}
    assert growth.karpenter_growth([nodepool([spot, zone_a])], [A, B]) == {A: True}
    # Without a capacity-type requirement Karpenter launches on-demand only.
    assert growth.karpenter_growth([nodepool([zone_a])], [A, B]) == {}
    full = nodepool([spot], limits={"cpu": "100"}, used={"cpu": "100"})
    assert growth.karpenter_growth([full], [A]) == {} and not growth.spot_nodepools([full])
    assert growth.spot_nodepools([nodepool([spot], limits={"cpu": "100"}, used={"cpu": "60"})])


def test_configuration_wins_over_the_autoscaler_and_karpenter() -> None:
    config = ControllerConfig.from_mapping(
        {
            "node_groups": [
                {"instance_type": "m5.large", "zone": "us-east-1a", "can_grow": True, "max_size": 2}
            ]
        }
    )
    configured = growth.configured_growth(config.node_groups, {A: 2})
    assert configured == {A: False}  # at its max_size
    assert growth.pool_growth(configured, {A: True, B: True}, {B: False}) == {A: False, B: True}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"capacity_labels": [{"key": "bad key", "spot": ["x"], "on_demand": ["y"]}]},
            "not a valid label key",
        ),
        ({"capacity_labels": [{"key": "a.io/b", "spot": ["x"]}]}, "absent_means_on_demand"),
        (
            {"capacity_labels": [{"key": "a.io/b", "spot": ["x"], "on_demand": ["y"]}] * 2},
            "each key may be given once",
        ),
        ({"node_groups": [{"instance_type": "m5.large"}]}, "node_groups.0.zone"),
    ],
)
def test_bad_capacity_configuration_is_one_clear_error(data: Obj, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ControllerConfig.from_mapping(data)


# --- the cache and the webhook --------------------------------------------------------------------


def test_pools_outlive_their_nodes_and_a_pool_without_nodes_takes_nothing() -> None:
    h = Harness()
    h.add(labelled("od-1", {"eks.amazonaws.com/capacityType": "ON_DEMAND"}))
    h.add(labelled("a-1", {"eks.amazonaws.com/capacityType": "SPOT"}))
    assert set(h.cache.spot_pools()) == {A}
    h.cache.apply({"type": "DELETED", "object": labelled("a-1", {"eks.amazonaws.com/capacityType": "SPOT"})})
    assert set(h.cache.spot_pools()) == {A}
    view = h.cache.placement_view(h.clock.now(), h.risk)
    assert view.pool_risk.keys() == {A} and A not in (view.populated or ())
    dep = deployment("web", 2, ON)
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs)
    outcome = h.placer.admit(review(pod_of(rs))["request"])
    assert outcome.decision is not None and outcome.decision.reason is Reason.NO_SPOT_CAPACITY
    # Once the autoscaler's status says the pool can grow, spot is steered to it again.
    h.add(
        labelled(
            "od-1", {"eks.amazonaws.com/capacityType": "ON_DEMAND", "eks.amazonaws.com/nodegroup": "od"}
        ),
    )
    h.add(
        labelled("a-2", {"eks.amazonaws.com/capacityType": "SPOT", "eks.amazonaws.com/nodegroup": "spot-a"})
    )
    h.cache.apply({"type": "DELETED", "object": labelled("a-2", {})})
    assert h.placer.admit(review(pod_of(rs))["request"]).decision.reason is Reason.NO_SPOT_CAPACITY  # type: ignore[union-attr]
    h.add(status_configmap(STATUS))
    decision = h.placer.admit(review(pod_of(rs))["request"]).decision
    assert decision is not None and decision.pool == A


def _required(patch: list[Obj]) -> list[Obj]:
    for op in patch:
        if op["path"] == "/spec/affinity":
            terms: list[Obj] = op["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ]
            return terms
    return []


def test_the_webhook_steers_with_the_labels_a_gke_cluster_carries() -> None:
    h = Harness()
    h.add(namespace("shop"), labelled("od-1", {}), labelled("a-1", {"cloud.google.com/gke-spot": "true"}))
    dep = deployment("web", 2, {**ON, "spot.shipshape.dev/spot-percentage": "50"})
    rs = replicaset(dep)
    h.add(dep, rs)
    first = h.placer.admit(review(pod_of(rs))["request"])
    second = h.placer.admit(review(pod_of(rs))["request"])
    kinds = {o.decision.capacity_type.value: o for o in (first, second) if o.decision is not None}
    assert set(kinds) == {"spot", "on-demand"}
    spot_terms = _required(kinds["spot"].patch)
    assert spot_terms and all(
        {"key": "cloud.google.com/gke-spot", "operator": "In", "values": ["true"]} in t["matchExpressions"]
        for t in spot_terms
    )
    assert _required(kinds["on-demand"].patch) == [
        {"matchExpressions": [{"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]}]}
    ]
    decision = json.loads(
        next(op for op in kinds["spot"].patch if op["path"].startswith("/metadata/annotations"))["value"][
            "spot.shipshape.dev/decision"
        ]
    )
    assert decision["pool"] == "m5.large/us-east-1a"


def test_a_pod_that_chooses_its_capacity_by_any_convention_is_left_alone() -> None:
    h = Harness()
    h.add(namespace("shop"), labelled("od-1", {"kubernetes.azure.com/scalesetpriority": "regular"}))
    dep = deployment("web", 2, ON)
    rs = replicaset(dep)
    h.add(dep, rs)
    pod = pod_of(rs)
    pod["spec"]["nodeSelector"] = {"kubernetes.azure.com/scalesetpriority": "spot"}
    assert h.placer.admit(review(pod)["request"]).skipped == "capacity-pinned"


def test_configured_conventions_classify_and_steer() -> None:
    config = ControllerConfig.from_mapping(
        {
            "capacity_labels": [
                {"key": "example.com/lifecycle", "spot": ["preemptible"], "on_demand": ["standard"]}
            ]
        }
    )
    h = Harness(config)
    h.add(
        namespace("shop"),
        labelled("od-1", {"example.com/lifecycle": "standard"}),
        labelled("b-1", {"example.com/lifecycle": "preemptible"}, zone="us-east-1b"),
    )
    assert set(h.cache.spot_pools()) == {B}
    dep = deployment("web", 1, ON)
    rs = replicaset(dep)
    h.add(dep, rs)
    outcome = h.placer.admit(review(pod_of(rs))["request"])
    assert outcome.decision is not None and outcome.decision.pool == B
    assert {"key": "example.com/lifecycle", "operator": "In", "values": ["preemptible"]} in _required(
        outcome.patch
    )[0]["matchExpressions"]
