from __future__ import annotations

from typing import Any

import pytest

from shipshape.contracts.annotations import DECISION
from shipshape.controller.availability import availability_floor, pdb_floor
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType, ControllerConfig
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import ClusterState, GroupKey

from .builders import added, deployment, node, pod_of, replicaset, statefulset
from .decision_cases import OD, POLICY, SPOT, A, B, cluster_nodes

DECIDED_SPOT = '{"capacityType": "spot", "pool": "m5.large/us-east-1b", "reason": "spot-share", "id": "d-1"}'


def test_counts_follow_pod_binding_node_labels_and_deletion() -> None:
    cache = ClusterState(ControllerConfig())
    dep = deployment("web", 3)
    rs = replicaset(dep)
    cache.apply(added(dep))
    cache.apply(added(rs))
    group = GroupKey("shop", "ReplicaSet", rs["metadata"]["name"])
    pod = pod_of(rs, "web-1")
    pod["metadata"]["annotations"] = {"spot.shipshape.dev/decision": DECIDED_SPOT}
    cache.apply(added(pod))
    assert cache.group_counts(group, 0.0).spot_by_pool == {Pool("m5.large", "us-east-1b"): 1}

    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}
    cache.apply(added(node("n1", "spot", "c5.large", "us-east-1a")))
    cache.apply({"type": "MODIFIED", "object": bound})
    assert cache.group_counts(group, 0.0).spot_by_pool == {Pool("c5.large", "us-east-1a"): 1}  # where it runs

    cache.apply({"type": "MODIFIED", "object": node("n1", "on-demand")})
    counts = cache.group_counts(group, 0.0)
    assert (counts.on_demand, counts.spot) == (1, 0)

    terminating = {**bound, "metadata": {**bound["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    cache.apply({"type": "MODIFIED", "object": terminating})
    assert cache.group_counts(group, 0.0).total == 0
    cache.apply({"type": "DELETED", "object": terminating})
    assert cache.pods_of_group(group) == []


def test_an_unreadable_decision_counts_for_nothing_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A pod whose decision another replica (or a person) wrote in a form this one does not know is
    counted as undecided, with the reason in the log, instead of breaking the cache."""
    cache = ClusterState(ControllerConfig())
    dep = deployment("web", 3)
    rs = replicaset(dep)
    cache.apply(added(dep))
    cache.apply(added(rs))
    group = GroupKey("shop", "ReplicaSet", rs["metadata"]["name"])
    for i, text in enumerate(
        (DECIDED_SPOT.replace("{", '{"v": 2, ', 1), '{"capacityType": "spot"}', "not json", DECIDED_SPOT)
    ):
        pod = pod_of(rs, f"web-{i}")
        pod["metadata"]["annotations"] = {DECISION: text}
        cache.apply(added(pod))
    counts = cache.group_counts(group, 0.0)
    assert counts.spot_by_pool == {Pool("m5.large", "us-east-1b"): 1} and counts.on_demand == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "shipshape.contracts.annotations"]
    assert any("web-0" in m and "unknown version 2" in m for m in messages)
    assert any("web-1" in m and "Field required" in m for m in messages)
    assert any("web-2" in m and "is not JSON" in m for m in messages)


def test_assumption_totals_per_group() -> None:
    cache = ClusterState(ControllerConfig(assume_ttl_seconds=10))
    a, b = GroupKey("shop", "ReplicaSet", "a"), GroupKey("shop", "ReplicaSet", "b")
    cache.assume("1", a, CapacityType.SPOT, Pool("m5.large", "z"), now=0.0)
    cache.assume("2", a, CapacityType.ON_DEMAND, None, now=5.0)
    cache.assume("3", b, CapacityType.SPOT, None, now=5.0)
    counts = cache.group_counts(a, now=6.0)
    assert (counts.on_demand, counts.spot, cache.group_counts(b, 6.0).spot_unplaced) == (1, 1, 1)
    counts.add(CapacityType.ON_DEMAND, None)  # a returned count is the caller's own copy
    assert cache.group_counts(a, now=6.0).on_demand == 1
    assert cache.group_counts(a, now=10.0).spot == 0  # the first one expired
    assert cache.group_counts(a, now=15.0).total == 0


def test_workload_lookup_needs_the_whole_owner_chain() -> None:
    cache = ClusterState(ControllerConfig())
    dep = deployment("web", 3)
    rs = replicaset(dep)
    pod = pod_of(rs, "web-1")
    assert cache.workload_of(pod) is None
    cache.apply(added(rs))
    assert cache.workload_of(pod) is None  # the Deployment is not known yet
    cache.apply(added(dep))
    ref = cache.workload_of(pod)
    assert ref is not None and (ref.kind.value, ref.name, ref.group.name) == (
        "Deployment",
        "web",
        "web-abc12",
    )
    sts = statefulset("db", 2)
    cache.apply(added(sts))
    sts_ref = cache.workload_of(pod_of(sts, "db-1"))
    assert sts_ref is not None and sts_ref.group == GroupKey("shop", "StatefulSet", "db")
    orphan_rs = {**rs, "metadata": {**rs["metadata"], "name": "bare", "ownerReferences": []}}
    cache.apply(added(orphan_rs))
    assert cache.workload_of(pod_of(orphan_rs, "bare-1")) is None


def pdb(name: str, namespace: str, match: dict[str, str], max_unavailable: int = 1) -> dict[str, object]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": match}},
    }


def test_matching_pdbs_follow_every_pdb_change() -> None:
    cache = ClusterState(ControllerConfig())
    labels = {"app": "web"}
    assert cache.pdbs_matching("shop", labels) == []
    cache.apply(added(pdb("web", "shop", labels)))
    cache.apply(added(pdb("other-ns", "data", labels)))
    cache.apply(added(pdb("other-app", "shop", {"app": "api"})))
    assert [p["metadata"]["name"] for p in cache.pdbs_matching("shop", labels)] == ["web"]
    cache.apply({"type": "MODIFIED", "object": pdb("web", "shop", labels, max_unavailable=3)})
    (changed,) = cache.pdbs_matching("shop", labels)
    assert changed["spec"]["maxUnavailable"] == 3
    cache.apply({"type": "DELETED", "object": changed})
    assert cache.pdbs_matching("shop", labels) == []
    # What the caller does with the answer does not change the next one.
    cache.apply(added(pdb("web", "shop", labels)))
    cache.pdbs_matching("shop", labels).clear()
    assert len(cache.pdbs_matching("shop", labels)) == 1


def test_node_summary_follows_pools_and_taints_but_not_status_updates() -> None:
    cache = ClusterState(ControllerConfig())
    a = Pool("m5.large", "us-east-1a")
    cache.apply(added(node("a-1", "spot")))
    cache.apply(added(node("od-1", "on-demand")))
    assert cache.pool_nodes() == {a: frozenset({"a-1"})}
    summary = cache._nodes()
    heartbeat = {**node("a-1", "spot"), "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    cache.apply({"type": "MODIFIED", "object": heartbeat})
    assert cache._nodes() is summary  # nothing the summary reads changed
    noticed = node(
        "a-1", "spot", taints=[{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}]
    )
    cache.apply({"type": "MODIFIED", "object": noticed})
    assert cache.placement_view(0.0, RiskModel()).avoided_nodes == frozenset({"a-1"})
    cache.apply(added(node("a-2", "spot")))
    assert cache.pool_nodes() == {a: frozenset({"a-1", "a-2"})}
    cache.apply({"type": "DELETED", "object": noticed})
    assert cache.pool_nodes() == {a: frozenset({"a-2"})}
    assert cache.placement_view(0.0, RiskModel()).avoided_nodes == frozenset()


def test_kept_pod_counts_add_up_as_a_recount_with_assumptions_first() -> None:
    """The pods' counts are kept between pod and node changes; with assumptions they add up, pools in
    the order a pod-by-pod recount gives (assumed pools first, then the pods' in pod order)."""
    cache = ClusterState(ControllerConfig(assume_ttl_seconds=100))
    dep = deployment("web", 6)
    rs = replicaset(dep)
    cache.apply(added(dep))
    cache.apply(added(rs))
    group = GroupKey("shop", "ReplicaSet", rs["metadata"]["name"])
    for name, capacity, instance_type, zone in (
        ("n1", "spot", "c5.large", "us-east-1a"),
        ("n2", "spot", "m5.large", "us-east-1b"),
        ("n3", "on-demand", "m5.large", "us-east-1a"),
    ):
        cache.apply(added(node(name, capacity, instance_type, zone)))
    for i, node_name in enumerate(("n1", "n2", "n1", "n3")):
        cache.apply(added(pod_of(rs, f"web-{i}", node=node_name)))
    c5a, m5b, r5c = (
        Pool("c5.large", "us-east-1a"),
        Pool("m5.large", "us-east-1b"),
        Pool("r5.large", "us-east-1c"),
    )
    counts = cache.group_counts(group, 0.0)
    assert (list(counts.spot_by_pool.items()), counts.on_demand) == ([(c5a, 2), (m5b, 1)], 1)

    cache.assume("a-1", group, CapacityType.SPOT, r5c, now=1.0)
    cache.assume("a-2", group, CapacityType.SPOT, m5b, now=1.0)
    cache.assume("a-3", group, CapacityType.SPOT, None, now=1.0)
    counts = cache.group_counts(group, 2.0)
    assert list(counts.spot_by_pool.items()) == [(r5c, 1), (m5b, 2), (c5a, 2)]
    assert (counts.spot_unplaced, counts.on_demand, counts.total) == (1, 1, 7)

    cache.apply({"type": "MODIFIED", "object": node("n2", "on-demand")})  # a node's placement moves
    counts = cache.group_counts(group, 2.0)
    assert list(counts.spot_by_pool.items()) == [(r5c, 1), (m5b, 1), (c5a, 2)]
    assert counts.on_demand == 2
    cache.apply({"type": "DELETED", "object": pod_of(rs, "web-0", node="n1")})  # a pod goes
    assert cache.group_counts(group, 2.0).spot_by_pool == {r5c: 1, m5b: 1, c5a: 1}
    assert cache.group_counts(group, 200.0).total == 3  # assumptions expired, pods' counts kept


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
