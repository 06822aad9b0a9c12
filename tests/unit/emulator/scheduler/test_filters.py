"""Each filter plugin with a node that passes and one that fails, via the pure entry points."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator.scheduler import ClusterSnapshot, Profile, fits, schedule_one
from shipshape.emulator.scheduler import messages as msg
from tests.unit.emulator.scheduler.builders import node, pod, taint, toleration

Obj = dict[str, Any]


def _place(p: Obj, nodes: list[Obj], existing: list[Obj] | None = None) -> str:
    return schedule_one(p, ClusterSnapshot.of(nodes, existing or [])).node


def test_node_unschedulable_filter_and_its_toleration() -> None:
    cordoned = node("n1", unschedulable=True)
    assert fits(pod("a"), cordoned) == [msg.NODE_UNSCHEDULABLE]
    tolerant = pod(
        "b", spec={"tolerations": [toleration("node.kubernetes.io/unschedulable", effect="NoSchedule")]}
    )
    assert fits(tolerant, cordoned) == []


def test_node_name_filter() -> None:
    bound_elsewhere = pod("a", node_name="other")
    assert fits(bound_elsewhere, node("n1")) == [msg.NODE_NAME]
    assert fits(pod("a", node_name="n1"), node("n1")) == []


def test_taint_toleration_filter_names_the_first_untolerated_taint() -> None:
    spot = node("n1", taints=[taint("node.kubernetes.io/capacity", "spot"), taint("gpu", "yes", "NoExecute")])
    assert fits(pod("a"), spot) == ["node(s) had untolerated taint {node.kubernetes.io/capacity: spot}"]
    partly = pod("b", spec={"tolerations": [toleration("node.kubernetes.io/capacity", "spot")]})
    assert fits(partly, spot) == ["node(s) had untolerated taint {gpu: yes}"]
    both = pod("c", spec={"tolerations": [toleration("node.kubernetes.io/capacity"), toleration("gpu")]})
    assert fits(both, spot) == []
    # PreferNoSchedule never filters.
    assert fits(pod("d"), node("n2", taints=[taint("soft", "x", "PreferNoSchedule")])) == []


def test_node_affinity_filter_selector_and_required_terms() -> None:
    spot = node("n1", labels={"node.kubernetes.io/capacity": "spot"})
    wants_od = pod("a", spec={"nodeSelector": {"node.kubernetes.io/capacity": "on-demand"}})
    assert fits(wants_od, spot) == [msg.NODE_AFFINITY]
    term = {
        "matchExpressions": [{"key": "node.kubernetes.io/capacity", "operator": "In", "values": ["spot"]}]
    }
    required = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    assert fits(pod("b", spec={"affinity": required}), spot) == []
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    pinned = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [by_name]}}
    }
    assert fits(pod("c", spec={"affinity": pinned}), spot) == [msg.NODE_AFFINITY]
    assert fits(pod("c", spec={"affinity": pinned}), node("n2")) == []


def test_resources_fit_filter_counts_bound_pods() -> None:
    n = node("n1", cpu="2", memory="4Gi")
    busy = [pod("x", cpu="1500m", memory="1Gi"), pod("y", cpu="100m", memory="2Gi")]
    assert fits(pod("a", cpu="500m", memory="512Mi"), n, busy) == ["Insufficient cpu"]
    assert fits(pod("a", cpu="500m", memory="2Gi"), n, busy) == ["Insufficient cpu", "Insufficient memory"]
    assert fits(pod("a", cpu="400m", memory="512Mi"), n, busy) == []


def test_resources_fit_too_many_pods_and_ephemeral_storage() -> None:
    small = node("n1", pods=2, extra={"ephemeral-storage": "10Gi"})
    assert fits(pod("a"), small, [pod("x"), pod("y")]) == [msg.TOO_MANY_PODS]
    disk = pod("b", extra_requests={"ephemeral-storage": "20Gi"})
    assert fits(disk, small) == ["Insufficient ephemeral-storage"]
    assert fits(pod("c", extra_requests={"ephemeral-storage": "5Gi"}), small) == []


def test_gpu_extended_resource() -> None:
    gpu_node = node("gpu-1", extra={"nvidia.com/gpu": "1"})
    cpu_node = node("cpu-1")
    trainer = pod("trainer", extra_requests={"nvidia.com/gpu": "1"})
    assert fits(trainer, cpu_node) == ["Insufficient nvidia.com/gpu"]
    assert fits(trainer, gpu_node) == []
    assert fits(trainer, gpu_node, [pod("other", extra_requests={"nvidia.com/gpu": "1"})]) == [
        "Insufficient nvidia.com/gpu"
    ]
    assert _place(trainer, [cpu_node, gpu_node]) == "gpu-1"


def test_limits_stand_in_for_missing_requests() -> None:
    only_limits = pod("a", cpu=None, memory=None)
    only_limits["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "3"}}
    assert fits(only_limits, node("n1", cpu="2")) == ["Insufficient cpu"]


def _spread(max_skew: int = 1, key: str = "topology.kubernetes.io/zone", hard: bool = True) -> Obj:
    return {
        "topologySpreadConstraints": [
            {
                "maxSkew": max_skew,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ]
    }


def test_topology_spread_filter_max_skew_over_zones() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b"), node("c1", zone="c")]
    existing = [
        pod("w1", labels={"app": "web"}, node_name="a1"),
        pod("w2", labels={"app": "web"}, node_name="b1"),
    ]
    snapshot = ClusterSnapshot.of(nodes, existing)
    decision = schedule_one(pod("w3", labels={"app": "web"}, spec=_spread()), snapshot)
    assert decision.node == "c1"
    assert decision.statuses["a1"].reasons == (msg.SPREAD_CONSTRAINTS,)
    assert decision.statuses["b1"].reasons == (msg.SPREAD_CONSTRAINTS,)


def test_topology_spread_missing_label_and_min_domains() -> None:
    unlabeled = node("x")
    del unlabeled["metadata"]["labels"]["topology.kubernetes.io/zone"]
    assert fits(pod("w", labels={"app": "web"}, spec=_spread()), unlabeled) == [msg.SPREAD_MISSING_LABEL]
    # Two zones known, minDomains 3: the global minimum counts as 0, so a zone with one pod is full.
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    existing = [
        pod("w1", labels={"app": "web"}, node_name="a1"),
        pod("w2", labels={"app": "web"}, node_name="b1"),
    ]
    spec = _spread()
    spec["topologySpreadConstraints"][0]["minDomains"] = 3
    decision = schedule_one(pod("w3", labels={"app": "web"}, spec=spec), ClusterSnapshot.of(nodes, existing))
    assert not decision.scheduled
    without = schedule_one(
        pod("w3", labels={"app": "web"}, spec=_spread()), ClusterSnapshot.of(nodes, existing)
    )
    assert without.scheduled


def test_topology_spread_ignores_nodes_the_pod_cannot_use() -> None:
    # nodeAffinityPolicy Honor: zone c is not eligible, so its emptiness does not block zones a/b.
    nodes = [node("a1", zone="a"), node("b1", zone="b"), node("c1", zone="c", labels={"pool": "other"})]
    existing = [pod("w1", labels={"app": "web"}, node_name="a1")]
    spec = {**_spread(), "affinity": _not_pool_other()}
    decision = schedule_one(pod("w2", labels={"app": "web"}, spec=spec), ClusterSnapshot.of(nodes, existing))
    assert decision.node == "b1"


def _not_pool_other() -> Obj:
    term = {"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _anti(key: str = "kubernetes.io/hostname", app: str = "web") -> Obj:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def test_hostname_anti_affinity() -> None:
    nodes = [node("n1"), node("n2")]
    existing = [pod("w1", labels={"app": "web"}, node_name="n1")]
    decision = schedule_one(
        pod("w2", labels={"app": "web"}, spec=_anti()), ClusterSnapshot.of(nodes, existing)
    )
    assert decision.node == "n2"
    assert decision.statuses["n1"].reasons == (msg.ANTI_AFFINITY_RULES,)
    full = schedule_one(
        pod("w3", labels={"app": "web"}, spec=_anti()),
        ClusterSnapshot.of(nodes, [*existing, pod("w2", labels={"app": "web"}, node_name="n2")]),
    )
    assert not full.scheduled
    assert "2 node(s) didn't match pod anti-affinity rules" in full.message


def test_existing_pods_anti_affinity_is_symmetric() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    loner = pod("db", labels={"app": "db"}, node_name="a1", spec=_anti("topology.kubernetes.io/zone", "web"))
    decision = schedule_one(pod("w1", labels={"app": "web"}), ClusterSnapshot.of(nodes, [loner]))
    assert decision.node == "b1"
    assert decision.statuses["a1"].reasons == (msg.EXISTING_ANTI_AFFINITY,)


def test_required_pod_affinity_zone_and_first_pod_exception() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}
    spec = {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    cache = pod("cache-0", labels={"app": "cache"}, node_name="b1")
    decision = schedule_one(pod("web", labels={"app": "web"}, spec=spec), ClusterSnapshot.of(nodes, [cache]))
    assert decision.node == "b1"
    assert decision.statuses["a1"].reasons == (msg.AFFINITY_RULES,)
    # No matching pod anywhere: a pod that is not itself matching cannot go anywhere...
    lonely = schedule_one(pod("web", labels={"app": "web"}, spec=spec), ClusterSnapshot.of(nodes))
    assert not lonely.scheduled
    # ...but the first pod of a group with affinity to itself can.
    first = schedule_one(pod("cache-1", labels={"app": "cache"}, spec=spec), ClusterSnapshot.of(nodes))
    assert first.scheduled


@pytest.mark.parametrize("profile", [Profile(scoring="LeastAllocated"), Profile(scoring="MostAllocated")])
def test_filters_do_not_depend_on_scoring(profile: Profile) -> None:
    decision = schedule_one(pod("a", cpu="2"), ClusterSnapshot.of([node("n1", cpu="1")]), profile=profile)
    assert not decision.scheduled
    assert decision.message.startswith("0/1 nodes are available: 1 Insufficient cpu.")


def test_node_affinity_answers_follow_a_node_relabelled_in_the_same_snapshot() -> None:
    """Answers are remembered per node while its labels stay; a relabelled node is asked again."""
    snapshot = ClusterSnapshot.of([node("n1", labels={"node.kubernetes.io/capacity": "spot"})])
    wants_od = pod("a", spec={"nodeSelector": {"node.kubernetes.io/capacity": "on-demand"}})
    assert schedule_one(wants_od, snapshot).node == ""
    snapshot.set_node(node("n1", labels={"node.kubernetes.io/capacity": "on-demand"}))
    assert schedule_one(pod("b", spec=wants_od["spec"]), snapshot).node == "n1"
    snapshot.set_node(node("n1", labels={"node.kubernetes.io/capacity": "spot"}))
    assert schedule_one(pod("c", spec=wants_od["spec"]), snapshot).node == ""


def test_taint_verdicts_follow_a_node_tainted_and_untainted_in_the_same_snapshot() -> None:
    snapshot = ClusterSnapshot.of([node("n1")])
    assert schedule_one(pod("a"), snapshot).node == "n1"
    snapshot.set_node(node("n1", taints=[taint("dedicated", "gpu")]))
    decision = schedule_one(pod("b"), snapshot)
    assert decision.node == ""
    assert "untolerated taint {dedicated: gpu}" in decision.message
    tolerant = pod("c", spec={"tolerations": [toleration("dedicated")]})
    assert schedule_one(tolerant, snapshot).node == "n1"
    snapshot.set_node(node("n1"))
    assert schedule_one(pod("d"), snapshot).node == "n1"


def test_node_only_verdicts_follow_taints_labels_and_cordons_not_status_updates() -> None:
    """The node-only filters' verdicts are remembered per node across status-only updates, and
    worked out again when the node's taints, labels or cordon change."""
    snapshot = ClusterSnapshot.of([node("n1")], [])
    info = snapshot.nodes["n1"]
    key, labels = info.static_key, info.labels
    heartbeat = node("n1")
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "later"}]
    snapshot.set_node(heartbeat)
    assert info.static_key is key and info.labels is labels and info.obj is heartbeat
    assert schedule_one(pod("a"), snapshot).node == "n1"

    snapshot.set_node(node("n1", taints=[taint("dedicated", "gpu")]))
    assert info.static_key is not key
    assert schedule_one(pod("b"), snapshot).node == ""
    snapshot.set_node(node("n1"))
    assert schedule_one(pod("c"), snapshot).node == "n1"
    snapshot.set_node(node("n1", unschedulable=True))
    assert schedule_one(pod("d"), snapshot).node == ""
    snapshot.set_node(node("n1", labels={"pool": "other"}))
    assert schedule_one(pod("e", spec={"nodeSelector": {"pool": "other"}}), snapshot).node == "n1"
    snapshot.set_node(node("n1"))
    assert schedule_one(pod("f", spec={"nodeSelector": {"pool": "other"}}), snapshot).node == ""
