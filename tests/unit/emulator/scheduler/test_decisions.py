"""Messages, scoring choices, preemption choices and throughput of the pure decision code."""

from __future__ import annotations

import random
import time
from typing import Any

from shipshape.emulator.scheduler import ClusterSnapshot, Profile, pod_info, schedule_all, schedule_one
from shipshape.emulator.scheduler import messages as msg
from shipshape.emulator.scheduler.framework import num_feasible_nodes_to_find
from shipshape.emulator.scheduler.messages import Status
from shipshape.kube import labels
from tests.unit.emulator.scheduler.builders import node, pod, taint

Obj = dict[str, Any]


def _always(p: Obj | Any, nodes: list[Obj], existing: list[Obj] | None = None) -> str:
    """The node chosen whatever the tie-breaking seed (a scoring test must not pass by luck)."""
    chosen = {
        schedule_one(p, ClusterSnapshot.of(nodes, existing or []), rng=random.Random(s)).node
        for s in range(8)
    }
    assert len(chosen) == 1, chosen
    return chosen.pop()


def test_reasons_are_counted_and_sorted_as_strings() -> None:
    statuses = (
        [Status.unschedulable("NodeResourcesFit", "Insufficient cpu")] * 3
        + [
            Status.unresolvable(
                "TaintToleration", msg.untolerated_taint("node.kubernetes.io/capacity", "spot")
            )
        ]
        * 4
        + [Status.unresolvable("NodeAffinity", msg.NODE_AFFINITY)] * 12
    )
    assert msg.no_nodes_available(19, statuses, "preemption: x") == (
        "0/19 nodes are available: 12 node(s) didn't match Pod's node affinity/selector, 3 Insufficient cpu, "
        "4 node(s) had untolerated taint {node.kubernetes.io/capacity: spot}. preemption: x."
    )


def test_request_above_allocatable_is_not_worth_preempting() -> None:
    snapshot = ClusterSnapshot.of(
        [node("n1", cpu="1")], [pod("low", cpu="500m", priority=-1, node_name="n1")]
    )
    decision = schedule_one(pod("huge", cpu="2", priority=10), snapshot)
    assert decision.message == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.."
    )
    assert not decision.victims


def test_nodes_to_find_follows_upstream_percentages() -> None:
    assert num_feasible_nodes_to_find(50) == 50
    assert num_feasible_nodes_to_find(200) == 100  # 49 % of 200 is below the 100-node floor
    assert num_feasible_nodes_to_find(5000) == 5000 * 10 // 100
    assert num_feasible_nodes_to_find(1000, percentage=100) == 1000


def test_prefer_no_schedule_taints_and_preferred_affinity_steer_scores() -> None:
    soft = node("soft", taints=[taint("maintenance", "soon", "PreferNoSchedule")])
    plain = node("plain")
    assert _always(pod("a"), [soft, plain]) == "plain"
    prefs = [
        {
            "weight": 100,
            "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]},
        }
    ]
    spec = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefs}}}
    liked = node("liked", labels={"pool": "x"})
    assert _always(pod("b", spec=spec), [plain, liked]) == "liked"


def test_soft_spread_and_default_spreading_prefer_emptier_domains() -> None:
    # a1 and b1 are equally empty; only the spreading (zone a already has web pods) tells them apart.
    nodes = [node("a1", zone="a"), node("a2", zone="a"), node("b1", zone="b")]
    existing = [pod(f"w{i}", labels={"app": "web"}, node_name="a2") for i in range(3)]
    constraint = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    soft = pod("w-new", labels={"app": "web"}, spec={"topologySpreadConstraints": [constraint]})
    assert _always(soft, nodes, existing) == "b1"
    owned = pod_info(pod("w-owned", labels={"app": "web"}), default_spread_selector=labels.parse("app=web"))
    assert _always(owned, nodes, existing) == "b1"


def test_preferred_pod_affinity_pulls_towards_matching_pods() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    cache = pod("cache", labels={"app": "cache"}, node_name="b1")
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}
    spec = {
        "affinity": {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
            }
        }
    }
    assert _always(pod("web", spec=spec), nodes, [cache]) == "b1"


def test_preemption_picks_the_node_with_the_least_important_victims() -> None:
    nodes = [node("n1", cpu="2"), node("n2", cpu="2")]
    existing = [
        pod("mid", cpu="1500m", priority=50, node_name="n1"),
        pod("low-a", cpu="1", priority=1, node_name="n2"),
        pod("low-b", cpu="500m", priority=2, node_name="n2"),
    ]
    decision = schedule_one(pod("vip", cpu="1", priority=100), ClusterSnapshot.of(nodes, existing))
    assert decision.nominated_node == "n2"
    # Victims are reprieved most important first: low-b fits back, low-a has to go.
    assert [v.key[1] for v in decision.victims] == ["low-a"]


def test_nominated_pods_keep_their_room() -> None:
    snapshot = ClusterSnapshot.of([node("n1", cpu="2")])
    waiting = pod_info(pod("vip", cpu="1500m", priority=100))
    snapshot.nominate(waiting.key, waiting, "n1")
    decision = schedule_one(pod("other", cpu="1", priority=0), snapshot)
    assert not decision.scheduled
    assert "1 Insufficient cpu" in decision.message


def test_same_seed_same_placements() -> None:
    nodes = [node(f"n{i}") for i in range(10)]
    pods = [pod(f"p{i}") for i in range(30)]

    def run(seed: int) -> list[str]:
        return [d.node for d in schedule_all(pods, ClusterSnapshot.of(nodes), rng=random.Random(seed))]

    assert run(7) == run(7)


def test_throughput_on_a_test_sized_cluster() -> None:
    nodes = [node(f"n{i}", zone="abc"[i % 3]) for i in range(100)]
    pods = [pod(f"p{i}", labels={"app": f"a{i % 10}"}) for i in range(400)]
    start = time.perf_counter()
    decisions = schedule_all(pods, ClusterSnapshot.of(nodes), profile=Profile())
    elapsed = time.perf_counter() - start
    assert all(d.scheduled for d in decisions)
    per_node: dict[str, int] = {}
    for d in decisions:
        per_node[d.node] = per_node.get(d.node, 0) + 1
    assert max(per_node.values()) - min(per_node.values()) <= 2  # LeastAllocated spreads evenly
    assert elapsed < 5.0


def test_image_locality_prefers_nodes_that_have_the_image() -> None:
    warm = node("warm")
    warm["status"]["images"] = [{"names": ["docker.io/library/big:1.0", "big:1.0"], "sizeBytes": 900 * 2**20}]
    cold = node("cold")
    heavy = pod("heavy")
    heavy["spec"]["containers"][0]["image"] = "big:1.0"
    assert _always(heavy, [cold, warm]) == "warm"


def test_nominated_node_is_tried_first() -> None:
    nodes = [node(f"n{i}") for i in range(5)]
    waiting = pod("vip")
    waiting["status"]["nominatedNodeName"] = "n3"
    decision = schedule_one(waiting, ClusterSnapshot.of(nodes))
    assert (decision.node, decision.feasible) == ("n3", 1)


def test_no_second_preemption_while_victims_terminate() -> None:
    victim = pod("victim", cpu="1500m", priority=-1, node_name="n1")
    victim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    waiting = pod("vip", cpu="1", priority=10)
    waiting["status"]["nominatedNodeName"] = "n1"
    other = pod("other", cpu="1500m", priority=-1, node_name="n2")
    decision = schedule_one(
        waiting, ClusterSnapshot.of([node("n1", cpu="2"), node("n2", cpu="2")], [victim, other])
    )
    assert not decision.victims
    assert decision.message.endswith(
        "preemption: not eligible due to a terminating pod on the nominated node.."
    )


def test_preemption_can_remove_an_anti_affinity_conflict() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    spec = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    old = pod("web-old", labels={"app": "web"}, priority=-1, node_name="n1")
    decision = schedule_one(
        pod("web-new", labels={"app": "web"}, priority=5, spec=spec), ClusterSnapshot.of([node("n1")], [old])
    )
    assert decision.statuses["n1"].reasons == (msg.ANTI_AFFINITY_RULES,)
    assert (decision.nominated_node, [v.key[1] for v in decision.victims]) == ("n1", ["web-old"])
    same_priority = schedule_one(
        pod("web-new", labels={"app": "web"}, spec=spec),
        ClusterSnapshot.of([node("n1")], [pod("web-old", labels={"app": "web"}, node_name="n1")]),
    )
    assert same_priority.message.endswith("1 No preemption victims found for incoming pod..")
