"""The interruption lane's pure decisions on their own: notices (first deadlines, risk notes, queue
taints), surges (restart watch) and guards (plan, removal)."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.controller.guards import (
    GUARD_EXPIRES,
    GuardCandidate,
    guard_pdb,
    guards_to_remove,
    plan_guards,
)
from shipshape.controller.notices import (
    Notice,
    first_deadlines,
    needs_taint,
    notice_from_instance_action,
    notices_from_taints,
    queue_notice_taint,
    risk_notes,
)
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType, WorkloadKind, WorkloadPolicy
from shipshape.controller.state import QUEUE_NOTICE_TAINT, PodState, WorkloadState, node_pool
from shipshape.controller.surge import ActionKind, RestartWatch, plan_interruptions
from shipshape.kube.clock import parse_time, rfc3339

from .builders import deployment, node
from .decision_cases import by_name, cluster_nodes, workloads_on_nodes

Obj = dict[str, Any]
A = Pool("m5.large", "us-east-1a")


def test_a_noticed_node_keeps_the_deadline_it_was_first_seen_with_while_it_is_there() -> None:
    _, kept = first_deadlines([Notice("a-1", 200.0, "taint:x")], {}, {"a-1"})
    assert kept == {"a-1": 200.0}
    again, kept = first_deadlines([Notice("a-1", 260.0, "taint:x")], kept, {"a-1"})
    assert again == [Notice("a-1", 200.0, "taint:x")]
    _, kept = first_deadlines([], kept, set())  # the node is gone
    assert kept == {}


def test_risk_notes_cover_the_noticed_pools_and_the_rest_of_a_zone_reclaimed_as_a_whole() -> None:
    nodes = {
        name: node(name, "spot", itype, zone)
        for name, itype, zone in (
            ("a-1", "m5.large", "us-east-1a"),
            ("a-2", "c5.large", "us-east-1a"),
            ("a-3", "r5.large", "us-east-1a"),
            ("b-1", "m5.large", "us-east-1b"),
        )
    }
    notices = [Notice("a-1", 1120.0, "taint:x"), Notice("a-2", 1120.0, "taint:x")]
    notes = risk_notes(notices, nodes, now=1010.0, lead_seconds=120.0)
    assert [(n.key, n.at, n.source) for n in notes] == [
        ("a-1", 1000.0, "taint:x"),
        ("a-2", 1000.0, "taint:x"),
        ("zone-reclaim/r5.large/us-east-1a", 1010.0, None),
    ]
    one = risk_notes(notices[:1], nodes, now=1010.0, lead_seconds=120.0)
    assert [n.key for n in one] == ["a-1"]  # one pool of a zone: no zone reclaim


def test_a_queue_notice_becomes_a_taint_dated_at_the_warning_never_in_the_future() -> None:
    taint = queue_notice_taint(Notice("a-1", 1120.0, "event-queue"), now=1010.0, lead_seconds=120.0)
    assert taint["key"] == QUEUE_NOTICE_TAINT and parse_time(taint["timeAdded"]) == 1000.0
    later = queue_notice_taint(Notice("a-1", 1300.0, "event-queue"), now=1010.0, lead_seconds=120.0)
    assert later["timeAdded"] == rfc3339(1010.0)
    tainted = node("a-1", "spot", taints=[{"key": QUEUE_NOTICE_TAINT, "effect": "NoSchedule"}])
    assert not needs_taint(tainted, frozenset({QUEUE_NOTICE_TAINT}))
    assert needs_taint(node("a-1", "spot"), frozenset({QUEUE_NOTICE_TAINT}))
    assert not needs_taint(None, frozenset())


def state(name: str, pods: tuple[PodState, ...], replicas: int = 1) -> WorkloadState:
    return WorkloadState(
        WorkloadKind.DEPLOYMENT,
        "shop",
        name,
        replicas,
        WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=0),
        pods,
        floor=0,
    )


def pod(name: str, node_name: str, ready: bool = True) -> PodState:
    return PodState(name, CapacityType.SPOT, A, node_name, ready)


def test_a_restart_is_watched_until_a_ready_pod_runs_off_its_nodes() -> None:
    watch = RestartWatch()
    watch.add("shop/Deployment/web", 100.0, frozenset({"a-1"}))
    watch.add("shop/Deployment/gone", 100.0, frozenset({"a-1"}))
    watch.add("shop/Deployment/slow", 100.0, frozenset({"a-1"}))
    states = {
        "shop/Deployment/web": state("web", (pod("web-x", "a-1"), pod("web-y", "b-1", ready=False))),
        "shop/Deployment/slow": state("slow", (pod("slow-x", "a-1"),)),
    }
    assert watch.ready(states, 110.0) == [] and len(watch) == 2  # "gone" is no longer watched
    states["shop/Deployment/web"] = state("web", (pod("web-y", "b-1"),))
    assert watch.ready(states, 130.0) == [30.0] and len(watch) == 1
    assert watch.ready(states, 100.0 + 3601.0) == [] and len(watch) == 0


def test_guards_are_planned_for_single_surge_replicas_renewed_at_half_time_removed_when_unneeded() -> None:
    solo = deployment("solo", 1, {"spot.shipshape.dev/enabled": "true"})
    guarded = GuardCandidate(solo, state("solo", (pod("solo-x", "a-1"),)), (), ("a-1",))
    protected = GuardCandidate(
        deployment("mine", 1),
        state("mine", (pod("mine-x", "a-1"),)),
        ({"metadata": {"name": "own"}},),
        ("a-1",),
    )
    plan = plan_guards([guarded, protected], {}, now=0.0, ttl=100.0, instance="replica-a")
    assert list(plan.apply) == [("shop", "solo-surge-guard")] and plan.delete == ()
    assert plan.drained == ((guarded, "a-1"),)  # only the guarded one is restarted off its cordoned node
    fresh = guard_pdb(solo, "replica-a", 100.0)
    stale_guard = {**guard_pdb(deployment("old", 1), "replica-a", 100.0)}
    existing = {("shop", "solo-surge-guard"): fresh, ("shop", "old-surge-guard"): stale_guard}
    assert plan_guards([guarded], existing, 40.0, 100.0, "replica-a").apply == {}  # 60 s of 100 left
    later = plan_guards([guarded], existing, 60.0, 100.0, "replica-a")
    assert list(later.apply) == [("shop", "solo-surge-guard")]  # half gone: renewed
    assert later.delete == (("shop", "old-surge-guard"),)
    other_keeper = plan_guards([guarded], existing, 0.0, 100.0, "replica-b")
    assert list(other_keeper.apply) == [("shop", "solo-surge-guard")]  # taken over


def test_guards_to_remove_are_the_expired_ones_or_a_keepers_own() -> None:
    mine = guard_pdb(deployment("a", 1), "replica-a", 100.0)
    theirs = guard_pdb(deployment("b", 1), "replica-b", 300.0)
    unreadable = guard_pdb(deployment("c", 1), "replica-b")
    user = {"metadata": {"name": "user", "namespace": "shop"}}
    assert GUARD_EXPIRES not in unreadable["metadata"]["annotations"]
    assert guards_to_remove([mine, theirs, unreadable, user], expired_at=200.0) == [mine, unreadable]
    assert guards_to_remove([mine, theirs, user], owner="replica-b") == [theirs]


def test_pool_wide_reclaim_plan() -> None:
    nodes = by_name(cluster_nodes())
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
    replacing = [a for a in plan.actions if a.kind is not ActionKind.RESCHEDULE]
    assert (sum(a.cpu_millis for a in replacing), sum(a.memory_bytes for a in replacing)) == (2000, 2**31)
    assert plan.deadlines == {"a1": 990.0, "a2": 1010.0}


def test_zone_wide_reclaim_plan_avoids_every_spot_node_of_the_zone() -> None:
    nodes = by_name([*cluster_nodes(), node("a3", "spot", "r5.large", A.zone)])
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


@pytest.mark.parametrize(
    "noticed", [["a1"], ["a1", "c1"], ["b1", "a2"], ["od1"], ["a1", "b1", "c1"]], ids=lambda n: "+".join(n)
)
def test_a_plan_from_the_pools_nodes_is_the_plan_from_every_node(noticed: list[str]) -> None:
    """Given each spot pool's nodes (as the state keeps them), the plan avoids the same nodes and acts
    the same as when it reads every node's pool."""
    nodes = by_name([*cluster_nodes(), node("a3", "spot", "r5.large", A.zone)])
    notices = [Notice(name, 1000.0 + i, "taint") for i, name in enumerate(noticed)]
    pool_nodes: dict[Pool, set[str]] = {}
    for name, body in nodes.items():
        pool = node_pool(body)
        if pool is not None:
            pool_nodes.setdefault(pool, set()).add(name)
    assert plan_interruptions(
        notices, nodes, workloads_on_nodes(), pool_nodes=pool_nodes
    ) == plan_interruptions(notices, nodes, workloads_on_nodes())
