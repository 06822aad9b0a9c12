"""The loops over a cache fed by hand, with the recording fake of `ClusterOps`: what each one writes."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest

from shipshape.controller.loops import LoopSettings, SharedState
from shipshape.controller.loops.deletion_cost import DeletionCostKeeper
from shipshape.controller.loops.fallback import SpotFallback
from shipshape.controller.loops.headroom import HeadroomKeeper
from shipshape.controller.loops.policy_events import PolicyReporter
from shipshape.controller.loops.rebalance import Rebalancer
from shipshape.controller.ops import EvictionOutcome, OpsError, RecordingOps
from shipshape.controller.placement import Pool
from shipshape.controller.policy import DECISION, DELETION_COST, WorkloadKind
from shipshape.controller.surge import DOOMED_COST, RESTART_NOTE, RESTARTED_AT, SURGE_NOTE
from shipshape.kube.clock import rfc3339
from shipshape.kube.patch import merge_patch

from ..builders import Harness, InterruptionLane, deployment, namespace, node, pod_of, replicaset, with_room

Obj = dict[str, Any]
ON = {"spot.shipshape.dev/enabled": "true"}
NOTICE_TAINT = {"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}


class World:
    """A harness with nodes in two spot pools and on-demand, and loops sharing its risk model."""

    def __init__(self, settings: LoopSettings | None = None) -> None:
        self.h = Harness()
        self.ops = RecordingOps(objects=self.h.objects)
        self.shared = SharedState(
            risk=self.h.risk,
            shortages=SharedState.for_config(self.h.config).shortages,
            settings=settings or LoopSettings(poll_instance_metadata=False),
        )
        self.h.add(
            namespace("shop"),
            node("od-1", "on-demand"),
            node("a-1", "spot", "m5.large", "us-east-1a"),
            node("b-1", "spot", "m5.large", "us-east-1b"),
        )

    def spot_room(self) -> None:
        """The spot nodes Ready with room (what a move to spot needs, `rebalance.replacement_lands`)."""
        self.h.add(
            with_room(node("a-1", "spot", "m5.large", "us-east-1a")),
            with_room(node("b-1", "spot", "m5.large", "us-east-1b")),
        )

    def loop(self, cls: type[Any]) -> Any:
        return cls(self.h.clock, self.h.cache, self.ops, self.h.config, self.h.metrics, self.shared)

    def workload(
        self, name: str, replicas: int, placed: list[str], notes: dict[str, str] | None = None
    ) -> Obj:
        dep = deployment(name, replicas, {**ON, **(notes or {})})
        rs = replicaset(dep)
        self.h.add(dep, rs)
        for i, where in enumerate(placed):
            self.h.add(pod_of(rs, f"{name}-{i}", node=where))
        return dep

    def patch_cached(self, kind: str, ns: str, name: str, patch: Obj) -> None:
        obj = self.h.cache.get(kind, ns, name)
        assert obj is not None
        self.h.add(merge_patch(obj, patch))

    def taint(self, name: str, pool: Pool | None = None) -> None:
        zone = pool.zone if pool else "us-east-1a"
        self.h.add(
            node(
                name,
                "spot",
                "m5.large",
                zone,
                taints=[{**NOTICE_TAINT, "timeAdded": rfc3339(self.h.clock.now())}],
            )
        )


def test_multi_replica_deployment_is_surged_once_and_scaled_back_when_replacements_are_ready() -> None:
    w = World()
    w.workload("web", 4, ["od-1", "a-1", "a-1", "b-1"])
    responder = w.loop(InterruptionLane)
    w.taint("a-1")
    responder.reconcile(w.h.clock.now())

    patches = w.ops.of("patch_workload")
    assert len(patches) == 1
    kind, ns, name, patch = patches[0]
    assert (kind, ns, name) == (WorkloadKind.DEPLOYMENT, "shop", "web")
    assert patch["spec"]["replicas"] == 6
    note = json.loads(patch["metadata"]["annotations"][SURGE_NOTE])
    assert note["surge"] == 2 and note["pods"] == ["web-1", "web-2"] and note["nodes"] == ["a-1"]
    assert sorted(args[1] for args in w.ops.of("annotate_pod")) == ["web-1", "web-2"]
    assert all(args[2] == {DELETION_COST: DOOMED_COST} for args in w.ops.of("annotate_pod"))
    assert Pool("m5.large", "us-east-1a") in w.h.risk.at_risk(w.h.clock.now())
    assert (
        w.h.metric(
            "shipshape_interruption_notices_total", {"source": "taint:aws-node-termination-handler/spot-itn"}
        )
        == 1
    )

    # The patch reaches the cache; a second round (or a restarted controller) does not surge again.
    w.patch_cached("Deployment", "shop", "web", patch)
    for pod in ("web-1", "web-2"):
        w.patch_cached("Pod", "shop", pod, {"metadata": {"annotations": {DELETION_COST: DOOMED_COST}}})
    w.ops.calls.clear()
    w.h.clock.advance(1)
    restarted = w.loop(InterruptionLane)
    restarted.reconcile(w.h.clock.now())
    assert w.ops.of("patch_workload") == []

    # Replacements come up Ready on b-1 and od-1: the surge ends, replicas back to 4.
    rs = w.h.cache.get("ReplicaSet", "shop", "web-abc12")
    assert rs is not None
    w.h.add(pod_of(rs, "web-4", node="b-1"), pod_of(rs, "web-5", node="od-1"))
    w.h.clock.advance(20)
    restarted.reconcile(w.h.clock.now())
    ((_, _, _, end),) = w.ops.of("patch_workload")
    assert end["spec"] == {"replicas": 4}
    done = json.loads(end["metadata"]["annotations"][SURGE_NOTE])
    assert done["done"] is True and done["surge"] == 0 and done["pods"] == ["web-1", "web-2"]
    assert w.h.registry.get_sample_value("shipshape_notice_to_replacement_ready_seconds_count") == 1

    # While the ReplicaSet removes the doomed pods, they are not surged for again.
    w.patch_cached("Deployment", "shop", "web", end)
    w.ops.calls.clear()
    w.h.clock.advance(1)
    restarted.reconcile(w.h.clock.now())
    assert w.ops.of("patch_workload") == []
    # Once they are gone, the note goes too.
    for pod in ("web-1", "web-2"):
        gone = w.h.cache.get("Pod", "shop", pod)
        w.h.cache.apply({"type": "DELETED", "object": gone})
    restarted.reconcile(w.h.clock.now())
    assert w.ops.of("patch_workload") == [
        (WorkloadKind.DEPLOYMENT, "shop", "web", {"metadata": {"annotations": {SURGE_NOTE: None}}})
    ]


def test_replacements_not_ready_keep_the_surge() -> None:
    w = World()
    w.workload("web", 4, ["od-1", "a-1", "a-1", "b-1"])
    responder = w.loop(InterruptionLane)
    w.taint("a-1")
    responder.reconcile(w.h.clock.now())
    ((_, _, _, patch),) = w.ops.of("patch_workload")
    w.patch_cached("Deployment", "shop", "web", patch)
    rs = w.h.cache.get("ReplicaSet", "shop", "web-abc12")
    assert rs is not None
    w.h.add(pod_of(rs, "web-4", node="b-1", ready=False), pod_of(rs, "web-5", node="od-1"))
    w.ops.calls.clear()
    w.h.clock.advance(5)
    responder.reconcile(w.h.clock.now())
    assert w.ops.of("patch_workload") == []


def test_a_later_zone_notice_extends_the_surge() -> None:
    w = World()
    w.workload("web", 4, ["od-1", "a-1", "a-1", "b-1"])
    responder = w.loop(InterruptionLane)
    w.taint("a-1")
    responder.reconcile(w.h.clock.now())
    ((_, _, _, first),) = w.ops.of("patch_workload")
    w.patch_cached("Deployment", "shop", "web", first)
    w.ops.calls.clear()
    w.taint("b-1", Pool("m5.large", "us-east-1b"))
    w.h.clock.advance(2)
    responder.reconcile(w.h.clock.now())
    ((_, _, _, second),) = w.ops.of("patch_workload")
    note = json.loads(second["metadata"]["annotations"][SURGE_NOTE])
    assert second["spec"]["replicas"] == 7 and note["surge"] == 3
    assert note["pods"] == ["web-1", "web-2", "web-3"] and note["nodes"] == ["a-1", "b-1"]


def test_single_replica_surge_deployment_is_restarted_once() -> None:
    w = World()
    w.workload("solo", 1, ["a-1"], {"spot.shipshape.dev/single-replica": "surge"})
    responder = w.loop(InterruptionLane)
    w.taint("a-1")
    responder.reconcile(w.h.clock.now())
    ((_, _, name, patch),) = w.ops.of("patch_workload")
    assert name == "solo"
    assert patch["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT] == rfc3339(w.h.clock.now())
    assert json.loads(patch["metadata"]["annotations"][RESTART_NOTE])["nodes"] == ["a-1"]
    # The default strategy (25 %) already surges a single replica: no strategy change.
    assert "strategy" not in patch["spec"]
    assert [e[0]["reason"] for e in w.ops.of("post_event")] == ["SpotInterruptionResponse"]

    w.patch_cached("Deployment", "shop", "solo", patch)
    w.ops.calls.clear()
    fresh = w.loop(InterruptionLane)  # a restarted controller reads what was done from the Deployment
    fresh.reconcile(w.h.clock.now() + 1)
    assert w.ops.of("patch_workload") == []


def test_single_replica_with_max_unavailable_gets_a_surging_strategy() -> None:
    w = World()
    dep = deployment("solo", 1, ON, max_unavailable=1)
    rs = replicaset(dep)
    w.h.add(dep, rs, pod_of(rs, "solo-0", node="a-1"))
    w.taint("a-1")
    w.loop(InterruptionLane).reconcile(w.h.clock.now())
    ((_, _, _, patch),) = w.ops.of("patch_workload")
    assert patch["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


def test_instance_metadata_notice_without_taint() -> None:
    w = World(LoopSettings(poll_instance_metadata=True))
    w.workload("web", 4, ["od-1", "a-1", "b-1", "b-1"])
    w.ops.instance_actions["a-1"] = {"action": "terminate", "time": rfc3339(w.h.clock.now() + 120)}
    w.loop(InterruptionLane).reconcile(w.h.clock.now())
    ((_, _, _, patch),) = w.ops.of("patch_workload")
    assert patch["spec"]["replicas"] == 5
    assert w.h.metric("shipshape_interruption_notices_total", {"source": "instance-metadata"}) == 1


def test_rebalancer_returns_pods_to_spot_one_at_a_time_and_respects_blocked_evictions() -> None:
    w = World()
    w.spot_room()
    w.workload("web", 4, ["od-1", "od-1", "od-1", "od-1"])
    rebalancer = w.loop(Rebalancer)
    rebalancer.reconcile(w.h.clock.now())
    assert w.ops.of("evict") == [("shop", "web-3")]
    assert w.h.metric("shipshape_rebalance_moves_total", {"direction": "on-demand-to-spot"}) == 1
    # The same pod is not evicted again while the cache still shows it; the rate limit holds the rest.
    w.h.clock.advance(1)
    rebalancer.reconcile(w.h.clock.now())
    assert len(w.ops.of("evict")) == 1

    w2 = World()
    w2.spot_room()
    w2.workload("web", 4, ["od-1", "od-1", "od-1", "od-1"])
    w2.ops.evictions["shop/web-3"] = EvictionOutcome.BLOCKED
    w2.loop(Rebalancer).reconcile(w2.h.clock.now())
    assert w2.h.metric("shipshape_rebalance_moves_total", {"direction": "on-demand-to-spot"}) == 0


def test_rebalancer_moves_nothing_to_spot_pools_without_room_or_growth() -> None:
    """The spot nodes are not Ready with room (and nothing says their pools grow), then are gone: the
    on-demand pods stay where they are; once a pool has room, one moves."""
    w = World()
    w.workload("web", 4, ["od-1", "od-1", "od-1", "od-1"])
    rebalancer = w.loop(Rebalancer)
    rebalancer.reconcile(w.h.clock.now())
    assert w.ops.of("evict") == []
    w.h.cache.apply({"type": "DELETED", "object": node("a-1", "spot", "m5.large", "us-east-1a")})
    w.h.cache.apply({"type": "DELETED", "object": node("b-1", "spot", "m5.large", "us-east-1b")})
    w.h.clock.advance(600)
    rebalancer.reconcile(w.h.clock.now())
    assert w.ops.of("evict") == []
    assert set(w.h.cache.spot_pools()) == {Pool("m5.large", "us-east-1a"), Pool("m5.large", "us-east-1b")}
    w.spot_room()
    w.h.clock.advance(600)
    rebalancer.reconcile(w.h.clock.now())
    assert w.ops.of("evict") == [("shop", "web-3")]


def test_rebalancer_leaves_a_surging_workload_alone() -> None:
    w = World()
    w.workload("web", 4, ["od-1", "od-1", "od-1", "od-1"])
    note = json.dumps({"surge": 1, "pods": ["web-9"], "nodes": ["a-1"], "since": 0, "deadline": 0})
    w.patch_cached("Deployment", "shop", "web", {"metadata": {"annotations": {SURGE_NOTE: note}}})
    w.loop(Rebalancer).reconcile(w.h.clock.now())
    assert w.ops.of("evict") == []


def test_deletion_costs_written_only_when_changed() -> None:
    w = World()
    w.workload("web", 4, ["od-1", "a-1", "b-1", "a-1"])
    keeper = w.loop(DeletionCostKeeper)
    keeper.reconcile(w.h.clock.now())
    written = {args[1]: args[2][DELETION_COST] for args in w.ops.of("annotate_pod")}
    assert sorted(written) == ["web-0", "web-1", "web-2", "web-3"]
    assert len({int(cost) for cost in written.values()}) == 4
    first_two = sorted(written, key=lambda pod: int(written[pod]))[:2]
    assert "web-0" not in first_two  # a scale-down to 2 removes spot pods (3 spot > 1 wanted)
    for pod, cost in written.items():
        w.patch_cached("Pod", "shop", pod, {"metadata": {"annotations": {DELETION_COST: cost}}})
    w.ops.calls.clear()
    keeper.reconcile(w.h.clock.now())
    assert w.ops.of("annotate_pod") == []


def test_fallback_deletes_a_stuck_spot_pod_and_marks_its_pools() -> None:
    w = World()
    dep = w.workload("web", 2, ["od-1"])
    rs = replicaset(dep)
    stuck = pod_of(rs, "web-9")
    stuck["metadata"]["annotations"] = {
        DECISION: json.dumps(
            {"capacityType": "spot", "pool": "m5.large/us-east-1a", "reason": "spot-share", "id": "x"}
        )
    }
    stuck["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": rfc3339(w.h.clock.now()),
            }
        ],
    }
    w.h.add(stuck)
    fallback = w.loop(SpotFallback)
    fallback.reconcile(w.h.clock.now() + 30)
    assert w.ops.of("delete_pod") == []
    w.h.clock.advance(w.h.config.fallback_after_seconds + 1)
    fallback.reconcile(w.h.clock.now())
    assert w.ops.of("delete_pod") == [("shop", "web-9")]
    assert w.shared.shortages.shortages(w.h.clock.now()) == {
        Pool("m5.large", "us-east-1a"),
        Pool("m5.large", "us-east-1b"),
    }
    assert w.h.metric("shipshape_spot_fallbacks_total", {"direction": "to-on-demand"}) == 1
    # The pod is gone; a new node in a pool in shortage: spot placements resume there.
    w.h.cache.apply({"type": "DELETED", "object": stuck})
    w.h.add(node("a-2", "spot", "m5.large", "us-east-1a"))
    w.h.clock.advance(10)
    fallback.observe(w.h.clock.now())
    assert Pool("m5.large", "us-east-1a") not in w.shared.shortages.shortages(w.h.clock.now())


@pytest.mark.parametrize(
    ("covers", "expected"),
    [
        ("pool", 2),  # pool a holds two pods of 500m / 512Mi
        ("floor", 1),  # four ready, floor 3 (maxUnavailable 25 %): one of pool a's two may go uncovered
    ],
)
def test_headroom_keeps_the_priority_class_and_one_placeholder_per_shape(
    covers: Literal["floor", "pool"], expected: int
) -> None:
    w = World(LoopSettings(poll_instance_metadata=False, headroom_covers=covers))
    w.workload("web", 4, ["od-1", "a-1", "a-1", "b-1"])
    w.loop(HeadroomKeeper).reconcile(w.h.clock.now())
    applied = [args[0] for args in w.ops.of("apply")]
    assert applied[0]["kind"] == "PriorityClass"
    (placeholder,) = applied[1:]
    assert placeholder["spec"]["replicas"] == expected
    assert placeholder["metadata"]["namespace"] == w.h.config.namespace


def test_a_restart_whose_answer_was_lost_is_sent_again_unchanged() -> None:
    w = World()
    w.workload("solo", 1, ["a-1"])
    w.taint("a-1")
    w.ops.fail["patch_workload"] = OpsError("cannot reach the API server: connection reset")
    responder = w.loop(InterruptionLane)
    responder.reconcile(w.h.clock.now())
    del w.ops.fail["patch_workload"]
    w.h.clock.advance(7)
    responder.reconcile(w.h.clock.now())
    first, second = w.ops.of("patch_workload")
    assert first == second  # the same template: the API server starts no second rollout


def test_invalid_policy_reported_once_per_set_of_values() -> None:
    w = World()
    w.workload("web", 2, ["od-1", "a-1"], {"spot.shipshape.dev/spot-percentage": "150"})
    reporter = w.loop(PolicyReporter)
    reporter.reconcile(w.h.clock.now())
    reporter.reconcile(w.h.clock.now() + 10)
    ((event,),) = w.ops.of("post_event")
    assert event["reason"] == "InvalidSpotPolicy" and event["type"] == "Warning"
    assert "spot-percentage" in event["message"] and event["involvedObject"]["kind"] == "Deployment"
    w.patch_cached(
        "Deployment",
        "shop",
        "web",
        {"metadata": {"annotations": {"spot.shipshape.dev/spot-percentage": "x"}}},
    )
    reporter.reconcile(w.h.clock.now() + 20)
    assert len(w.ops.of("post_event")) == 2


def test_headroom_rounds_follow_pods_that_leave() -> None:
    w = World(LoopSettings(poll_instance_metadata=False, headroom_covers="pool"))
    w.workload("web", 4, ["od-1", "a-1", "a-1", "b-1"])
    keeper = w.loop(HeadroomKeeper)
    keeper.reconcile(w.h.clock.now())
    pods = list(w.h.cache.objects("Pod"))
    keeper.reconcile(w.h.clock.now() + 300)
    gone = next(pod for pod in pods if (pod.get("spec") or {}).get("nodeName") == "a-1")
    w.h.cache.apply({"type": "DELETED", "object": gone})
    keeper.reconcile(w.h.clock.now() + 600)
    first, again, resized = [args[0] for args in w.ops.of("apply") if args[0]["kind"] == "Deployment"]
    assert again == first and first["spec"]["replicas"] == 2  # the same pods: the same placeholder
    assert resized["spec"]["replicas"] == 1  # pool a now holds one pod
