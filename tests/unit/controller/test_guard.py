"""The guard PodDisruptionBudget the responder keeps for single-replica `surge` Deployments, and the
metadata endpoint's rebalance recommendations."""

from __future__ import annotations

from typing import Any

from shipshape.controller.guards import GUARD_INTERVAL_SECONDS, GUARD_LABEL, guard_name, guard_pdb
from shipshape.controller.loops.base import LoopSettings, SharedState
from shipshape.controller.notices import rebalance_from_metadata
from shipshape.controller.ops import ObjectRef, RecordingOps
from shipshape.controller.placement import Pool
from shipshape.controller.surge import RESTART_NOTE
from shipshape.controller.webhook.admission import PodPlacer

from .builders import Harness, InterruptionLane, deployment, namespace, node, pod_of, replicaset
from .test_placement import admit, decision_of

ENABLED = {"spot.shipshape.dev/enabled": "true"}


def responder(h: Harness, ops: RecordingOps) -> InterruptionLane:
    # In-process metadata answers (as the simulation reads its cloud model).
    shared = SharedState.for_config(h.config, LoopSettings(poll_instance_metadata=True), risk=h.risk)
    return InterruptionLane(h.clock, h.cache, ops, h.config, h.metrics, shared)


def setup(replicas: int = 1, annotations: dict[str, str] | None = None) -> tuple[Harness, dict[str, Any]]:
    h = Harness()
    dep = deployment("solo", replicas, {**ENABLED, **(annotations or {})})
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, node("spot-0", "spot"), node("spot-1", "spot"))
    h.add(pod_of(rs, "solo-abc12-x", node="spot-0"))
    return h, dep


def test_guard_body_is_owned_by_the_deployment() -> None:
    _, dep = setup()
    body = guard_pdb(dep)
    assert body["metadata"]["name"] == guard_name("solo") == "solo-surge-guard"
    assert body["metadata"]["ownerReferences"][0]["uid"] == dep["metadata"]["uid"]
    assert body["metadata"]["labels"] == {GUARD_LABEL: "solo"}
    assert body["spec"] == {"minAvailable": 1, "selector": dep["spec"]["selector"]}
    long = guard_name("x" * 250)
    assert len(long) <= 253 and long != guard_name("x" * 249 + "y")


def test_a_single_surge_replica_without_pdb_gets_a_guard_and_loses_it_when_not_needed() -> None:
    h, dep = setup()
    ops = RecordingOps(objects=h.objects)
    loop = responder(h, ops)
    loop.reconcile(h.clock.now())
    (applied,) = ops.of("apply")
    assert applied[0]["metadata"]["name"] == "solo-surge-guard"
    h.cache.apply({"type": "ADDED", "object": applied[0]}, "PodDisruptionBudget")
    loop.reconcile(h.clock.now() + 1)  # within the interval: nothing looked at
    loop.reconcile(h.clock.now() + GUARD_INTERVAL_SECONDS + 1)
    assert len(ops.of("apply")) == 1 and not ops.of("delete")  # present: not written again
    # The user adds a PDB of their own: the guard goes.
    user_pdb = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "mine", "namespace": "shop"},
        "spec": {"maxUnavailable": 0, "selector": dep["spec"]["selector"]},
    }
    h.cache.apply({"type": "ADDED", "object": user_pdb}, "PodDisruptionBudget")
    loop.reconcile(h.clock.now() + 2 * GUARD_INTERVAL_SECONDS + 2)
    assert ops.of("delete") == [(ObjectRef("policy/v1", "PodDisruptionBudget", "shop", "solo-surge-guard"),)]


def test_no_guard_for_more_replicas_or_the_on_demand_mode() -> None:
    for replicas, extra in ((2, {}), (1, {"spot.shipshape.dev/single-replica": "on-demand"})):
        h, _ = setup(replicas, extra)
        ops = RecordingOps(objects=h.objects)
        responder(h, ops).reconcile(h.clock.now())
        assert ops.of("apply") == []


def test_a_cordoned_node_under_a_guarded_replica_restarts_it_once() -> None:
    h, _ = setup()
    cordoned = node("spot-0", "spot")
    cordoned["spec"]["unschedulable"] = True
    h.cache.apply({"type": "MODIFIED", "object": cordoned}, "Node")
    ops = RecordingOps(objects=h.objects)
    loop = responder(h, ops)
    loop.reconcile(h.clock.now())
    ((_, ns, name, patch),) = ops.of("patch_workload")
    assert (ns, name) == ("shop", "solo")
    assert '"spot-0"' in patch["metadata"]["annotations"][RESTART_NOTE]
    assert patch["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
    assert "strategy" not in patch["spec"]  # the default 25 % already surges one replica
    loop.reconcile(h.clock.now() + GUARD_INTERVAL_SECONDS + 1)  # written, not yet seen: not again
    assert len(ops.of("patch_workload")) == 1


def test_metadata_rebalance_recommendations_steer_the_webhook_without_draining() -> None:
    h = Harness()
    dep = deployment("web", 4, {**ENABLED, "spot.shipshape.dev/on-demand-base": "0"})
    rs = replicaset(dep)
    spot_a = node("spot-a", "spot", zone="us-east-1a")
    spot_b = node("spot-b", "spot", zone="us-east-1b")
    h.add(namespace("shop"), dep, rs, spot_a, spot_b)
    ops = RecordingOps(
        objects=h.objects, rebalance_recommendations={"spot-a": {"noticeTime": "2026-01-01T00:00:00Z"}}
    )
    loop = responder(h, ops)
    h.placer = PodPlacer(
        h.cache, h.config, h.risk, h.clock, h.metrics, recommendations=loop.shared.notices.recommendations
    )
    loop.observe(h.clock.now())
    assert ops.of("spot_metadata") == [(["spot-a", "spot-b"],)]
    assert dict(loop.recommended()) == {"spot-a": Pool("m5.large", "us-east-1a")}
    loop.observe(h.clock.now() + 1)  # polled every 5 s, not every round
    assert len(ops.of("spot_metadata")) == 1
    decision = decision_of(admit(h, pod_of(rs)))
    # The recommended node's pool is riskier: the other pool is preferred, and the node is avoided.
    assert decision["pool"] == "m5.large/us-east-1b"
    pod = admit(h, pod_of(rs))
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    avoided = [
        e["values"]
        for t in terms["nodeSelectorTerms"]
        for e in t["matchExpressions"]
        if e["operator"] == "NotIn"
    ]
    assert avoided and all(values == ["spot-a"] for values in avoided)
    assert not ops.of("evict") and not ops.of("delete_pod")  # not drained
    # An endpoint that does not answer keeps what it said; one that answers nothing clears it.
    ops.rebalance_recommendations.clear()
    ops.unreachable_metadata.add("spot-a")
    loop.observe(h.clock.now() + 10)
    assert dict(loop.recommended()) == {"spot-a": Pool("m5.large", "us-east-1a")}
    ops.unreachable_metadata.clear()
    loop.observe(h.clock.now() + 20)
    assert dict(loop.recommended()) == {}
    assert rebalance_from_metadata(None) is False
    assert rebalance_from_metadata({"noticeTime": "2026-01-01T00:00:00Z"}) is True


def test_a_new_single_replica_workload_is_guarded_at_once_not_after_the_interval() -> None:
    # A handler that drains at the notice evicts at once: a workload created just before a notice must
    # already have its guard, so a workload coming under management triggers a guard sync right away.
    h = Harness()
    h.add(namespace("shop"), node("spot-0", "spot"))
    ops = RecordingOps(objects=h.objects)
    loop = responder(h, ops)
    loop.reconcile(h.clock.now())
    assert ops.of("apply") == []
    dep = deployment("solo", 1, ENABLED)
    rs = replicaset(dep)
    h.add(dep, rs, pod_of(rs, "solo-abc12-x", node="spot-0"))
    loop.reconcile(h.clock.now() + 1)  # well within GUARD_INTERVAL_SECONDS
    assert GUARD_INTERVAL_SECONDS > 1
    (applied,) = ops.of("apply")
    assert applied[0]["metadata"]["name"] == "solo-surge-guard"
