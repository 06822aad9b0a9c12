"""Lifecycle pieces without a cluster: guard deadlines, the recommend-only ops, the workload warnings,
the registration's selectors, the webhook owner, the uninstall plan and the log formats."""

from __future__ import annotations

import base64
import io
import json
import logging
from typing import Any

import pytest

from shipshape.cli import logs
from shipshape.contracts.annotations import (
    DECISION,
    GUARD_EXPIRES,
    GUARD_OWNER,
    HEADROOM_LABEL,
    RESTART_NOTE,
    SURGE_NOTE,
)
from shipshape.controller.acting import DRY_RUN_PREFIX, ActingOps
from shipshape.controller.events import event_for
from shipshape.controller.guards import GUARD_INTERVAL_SECONDS, guard_pdb
from shipshape.controller.loops.base import LoopSettings, SharedState
from shipshape.controller.loops.guards import remove_guards
from shipshape.controller.loops.rebalance import Rebalancer
from shipshape.controller.ops import EvictionOutcome, ObjectRef, RecordingOps
from shipshape.controller.policy import DELETION_COST, ConfigError, ControllerConfig, WorkloadKind
from shipshape.controller.surge import DOOMED_COST
from shipshape.controller.uninstall import ClusterView, lease_holder, plan_uninstall
from shipshape.controller.webhook.owner import WebhookOwner
from shipshape.controller.webhook.registration import WORKLOADS_WEBHOOK_NAME, webhook_configuration
from shipshape.kube.clock import VirtualClock, parse_time, rfc3339_micro

from .builders import (
    Harness,
    InterruptionLane,
    deployment,
    namespace,
    node,
    objects_of,
    pod_of,
    replicaset,
    review,
)
from .test_placement import admit

Obj = dict[str, Any]
ON = {"spot.shipshape.dev/enabled": "true"}


# --- guard PDBs ---------------------------------------------------------------------------------------


def guarded(ttl: float = 100.0) -> tuple[Harness, InterruptionLane, RecordingOps]:
    h = Harness()
    dep = deployment("solo", 1, ON)
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, node("spot-0", "spot"), pod_of(rs, "solo-x", node="spot-0"))
    ops = RecordingOps(objects=h.objects)
    shared = SharedState.for_config(
        h.config, LoopSettings(guard_ttl_seconds=ttl), h.risk, instance="replica-a"
    )
    return h, InterruptionLane(h.clock, h.cache, ops, h.config, h.metrics, shared), ops


def test_a_guard_carries_its_keeper_and_a_deadline_renewed_once_half_of_it_is_gone() -> None:
    h, loop, ops = guarded(ttl=100.0)
    start = h.clock.now()
    loop.reconcile(start)
    ((body,),) = ops.of("apply")
    annotations = body["metadata"]["annotations"]
    assert annotations[GUARD_OWNER] == "replica-a"
    assert parse_time(annotations[GUARD_EXPIRES]) == pytest.approx(start + 100, abs=1)
    h.add(body)  # the cache sees it
    loop.reconcile(start + GUARD_INTERVAL_SECONDS + 1)
    assert len(ops.of("apply")) == 1  # plenty of time left
    loop.reconcile(start + 60)
    assert len(ops.of("apply")) == 2  # less than half left: renewed
    assert parse_time(ops.of("apply")[1][0]["metadata"]["annotations"][GUARD_EXPIRES]) == pytest.approx(
        start + 160, abs=1
    )


def test_expired_and_own_guards_are_removed_and_others_kept() -> None:
    dep = deployment("solo", 1, ON)
    now = 1_000_000.0
    expired = guard_pdb(dep, "gone", now - 1)
    expired["metadata"]["name"] = "a"
    live = guard_pdb(dep, "other", now + 60)
    live["metadata"]["name"] = "b"
    mine = guard_pdb(dep, "me", now + 60)
    mine["metadata"]["name"] = "c"
    legacy = guard_pdb(dep)  # written before guards had deadlines: counts as expired
    legacy["metadata"]["name"] = "d"
    user = {"metadata": {"name": "users", "namespace": "shop"}, "spec": {"minAvailable": 1}}
    pdbs = [expired, live, mine, legacy, user]
    ops = RecordingOps(objects=objects_of(pdbs))
    assert remove_guards(ops, pdbs, expired_at=now) == 2
    assert [ref.name for (ref,) in ops.of("delete")] == ["a", "d"]
    ops = RecordingOps(objects=objects_of(pdbs))
    assert remove_guards(ops, [expired, live, mine, user], owner="me") == 1
    assert ops.of("delete") == [(ObjectRef("policy/v1", "PodDisruptionBudget", "shop", "c"),)]


# --- recommend-only mode -------------------------------------------------------------------------------


def test_recommend_only_ops_send_nothing_but_events() -> None:
    h = Harness()
    inner = RecordingOps(objects=h.objects)
    ops = ActingOps(inner, h.metrics, dry_run=True)
    ops.evict("shop", "web-1")
    ops.delete_pod("shop", "web-1")
    ops.annotate_pod("shop", "web-1", {DELETION_COST: "1"})
    ops.patch_workload(WorkloadKind.DEPLOYMENT, "shop", "web", {"spec": {"replicas": 3}})
    assert ops.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}) == "unchanged"
    ops.delete(ObjectRef("policy/v1", "PodDisruptionBudget", "shop", "g"))
    ops.taint_node("n", [{"key": "k", "effect": "NoSchedule"}], "1")
    ops.post_event(event_for(deployment("web", 3), "Deployment", "R", "surging 1 replacement", now=0.0))
    assert [call.op for call in inner.calls] == ["post_event"]
    assert inner.of("post_event")[0][0]["message"] == DRY_RUN_PREFIX + "surging 1 replacement"
    assert h.metric("shipshape_actions_total", {"action": "evict", "dry_run": "true"}) == 1
    assert h.metric("shipshape_actions_total", {"action": "patch", "dry_run": "true"}) == 1

    # The loops find the same writes again each round: reported once per repeat period.
    repeated = ActingOps(
        RecordingOps(objects=h.objects), h.metrics, dry_run=True, clock=h.clock, repeat_seconds=600
    )
    event = event_for(deployment("web", 3), "Deployment", "R", "moved pod web-1", now=0.0)
    for _ in range(3):
        repeated.annotate_pod("shop", "web-2", {DELETION_COST: "7"})
        repeated.post_event(event)
        h.clock.advance(5)
    assert h.metric("shipshape_actions_total", {"action": "annotate", "dry_run": "true"}) == 2
    assert len(repeated.inner.of("post_event")) == 1  # type: ignore[attr-defined]
    h.clock.advance(600)
    repeated.annotate_pod("shop", "web-2", {DELETION_COST: "7"})
    repeated.post_event(event)
    assert h.metric("shipshape_actions_total", {"action": "annotate", "dry_run": "true"}) == 3
    assert len(repeated.inner.of("post_event")) == 2  # type: ignore[attr-defined]

    sending = ActingOps(RecordingOps(evictions={"shop/web-1": EvictionOutcome.EVICTED}), h.metrics)
    sending.evict("shop", "web-1")
    assert [c.op for c in sending.inner.calls] == ["evict"]  # type: ignore[attr-defined]


def test_recommend_only_webhook_writes_the_decision_alone(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(ControllerConfig(dry_run=True))
    dep = deployment("web", 4, ON)
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, node("od-0", "on-demand"), node("spot-0", "spot"))
    with caplog.at_level(logging.INFO, logger="shipshape.controller.webhook"):
        pod = admit(h, pod_of(rs))
    decision = json.loads(pod["metadata"]["annotations"][DECISION])
    assert decision["dryRun"] is True and decision["capacityType"] == "on-demand"
    assert "affinity" not in pod["spec"] and "tolerations" not in pod["spec"]
    (record,) = [r for r in caplog.records if r.getMessage() == "placement decision"]
    fields = logs.extras(record)
    assert fields["workload"] == "shop/web" and fields["dry_run"] is True
    assert fields["capacity_type"] == "on-demand" and fields["reason"] == "on-demand-base"


def test_rebalance_evictions_switched_off_moves_nothing() -> None:
    h = Harness(ControllerConfig(rebalance_evictions=False))
    dep = deployment("web", 4, ON)
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, node("od-1", "on-demand"), node("a-1", "spot"))
    for i in range(4):
        h.add(pod_of(rs, f"web-{i}", node="od-1"))
    ops = RecordingOps(objects=h.objects)
    shared = SharedState.for_config(h.config, LoopSettings(poll_instance_metadata=False), h.risk)
    Rebalancer(h.clock, h.cache, ops, h.config, h.metrics, shared).reconcile(h.clock.now())
    assert ops.calls == []
    assert h.metric("shipshape_rebalance_moves_total", {"direction": "on-demand-to-spot"}) == 0


# --- webhook: workload warnings, registration, owner ---------------------------------------------------


def workload_review(obj: Obj, operation: str = "CREATE") -> Obj:
    body = review(obj, operation=operation)
    body["request"]["resource"] = {"group": "apps", "version": "v1", "resource": "deployments"}
    body["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    return body


def test_workload_writes_are_admitted_unchanged_with_the_policy_warnings() -> None:
    h = Harness()
    h.add(namespace("shop"))
    bad = deployment("web", 3, {**ON, "spot.shipshape.dev/spot-percentage": "150"})
    for operation in ("CREATE", "UPDATE"):
        answer = h.placer.review(workload_review(bad, operation))["response"]
        assert answer["allowed"] is True and "patch" not in answer
        (warning,) = answer["warnings"]
        assert warning.startswith("shipshape: Deployment web: spot.shipshape.dev/spot-percentage='150'")
    fine = h.placer.review(workload_review(deployment("api", 3, ON)))["response"]
    assert fine == {"uid": fine["uid"], "allowed": True}
    unmanaged = h.placer.review(
        workload_review(deployment("x", 3, {"spot.shipshape.dev/spot-percentage": "1x"}))
    )
    assert "warnings" not in unmanaged["response"]


def test_registration_ands_the_configured_selectors_with_its_exclusions() -> None:
    config = ControllerConfig.from_mapping(
        {
            "webhook_namespace_selector": {"matchLabels": {"spot.shipshape.dev/enabled": "true"}},
            "webhook_object_selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
        }
    )
    assert config.webhook_namespace_selector is not None and config.webhook_object_selector is not None
    body = webhook_configuration(
        ca_bundle=b"ca",
        namespace="shipshape-system",
        url="https://127.0.0.1:1/mutate",
        namespace_selector=config.webhook_namespace_selector.body(),
        object_selector=config.webhook_object_selector.body(),
    )
    pods, workloads = body["webhooks"]
    assert pods["namespaceSelector"]["matchLabels"] == {"spot.shipshape.dev/enabled": "true"}
    assert [e["key"] for e in pods["namespaceSelector"]["matchExpressions"]] == [
        "kubernetes.io/metadata.name"
    ]
    assert [e["key"] for e in pods["objectSelector"]["matchExpressions"]] == [
        "tier",
        "app.kubernetes.io/name",
    ]
    assert workloads["name"] == WORKLOADS_WEBHOOK_NAME
    assert workloads["namespaceSelector"] == pods["namespaceSelector"] and workloads["objectSelector"] == {}
    assert workloads["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    default = webhook_configuration(ca_bundle=b"ca", namespace="ns", url="https://h/mutate")
    assert "matchLabels" not in default["webhooks"][0]["namespaceSelector"]
    for bad in (
        {"webhook_namespace_selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
        {"webhook_object_selector": {"matchExpressions": [{"key": "a", "operator": "Has", "values": ["b"]}]}},
        {"webhook_object_selector": {"matchLabel": {"a": "b"}}},
    ):
        with pytest.raises(ConfigError):
            ControllerConfig.from_mapping(bad)


class FakeConfigurations:
    def __init__(self) -> None:
        self.stored: dict[str, Obj] = {}
        self.writes = 0

    def get(self, name: str) -> Obj | None:
        found = self.stored.get(name)
        return json.loads(json.dumps(found)) if found is not None else None

    def create(self, body: Obj) -> Obj:
        self.writes += 1
        self.stored[body["metadata"]["name"]] = json.loads(json.dumps(body))
        return body

    def replace(self, name: str, body: Obj) -> Obj:
        self.writes += 1
        self.stored[name] = json.loads(json.dumps(body))
        return body


def test_the_owner_repairs_drift_each_period_and_at_once_after_a_lease_change() -> None:
    clock = VirtualClock()
    fake = FakeConfigurations()
    desired = webhook_configuration(ca_bundle=b"ca", namespace="ns", url="https://127.0.0.1:1/mutate")
    owner = WebhookOwner(clock, fake, lambda: desired, resync_seconds=30)
    now = clock.now()
    owner.reconcile(now)
    assert fake.writes == 1
    owner.reconcile(now + 10)  # unchanged, and not due
    fake.stored["shipshape-placement"]["webhooks"][0]["failurePolicy"] = "Fail"
    owner.reconcile(now + 20)
    assert fake.writes == 1  # the drift waits for the period...
    owner.reconcile(now + 31)
    assert fake.writes == 2 and fake.stored["shipshape-placement"]["webhooks"][0]["failurePolicy"] == "Ignore"
    fake.stored["shipshape-placement"]["webhooks"][0]["clientConfig"]["caBundle"] = "b3RoZXI="
    owner.request()  # ...or for the Lease to change hands
    owner.reconcile(now + 32)
    assert fake.writes == 3
    assert (
        fake.stored["shipshape-placement"]["webhooks"][0]["clientConfig"]["caBundle"]
        == base64.b64encode(b"ca").decode()
    )
    owner.reconcile(now + 70)
    assert fake.writes == 3 and owner.writes == 3


# --- uninstall ------------------------------------------------------------------------------------------


def test_uninstall_plan_covers_everything_that_changes_behaviour_and_nothing_else() -> None:
    config = ControllerConfig()
    surged = deployment("web", 6, {**ON, SURGE_NOTE: json.dumps({"surge": 2, "since": 1, "deadline": 2})})
    restarted = deployment("solo", 1, {**ON, RESTART_NOTE: "{}"})
    plain = deployment("other", 2)
    rs = replicaset(surged)
    placed = pod_of(rs, "web-a", node="spot-0")
    placed["metadata"]["annotations"] = {DECISION: "{}", DELETION_COST: "5"}
    doomed = pod_of(rs, "web-b", node="spot-0")
    doomed["metadata"]["annotations"] = {DELETION_COST: DOOMED_COST}
    foreign = pod_of(replicaset(plain), "other-a", node="spot-0")
    foreign["metadata"]["annotations"] = {DELETION_COST: "7"}  # the user's own: kept
    placeholder = deployment("headroom-1", 1, ns=config.namespace)
    placeholder["metadata"]["labels"] = {HEADROOM_LABEL: "true"}
    tainted = node(
        "spot-0",
        "spot",
        taints=[
            {"key": "spot.shipshape.dev/interruption-notice", "effect": "NoSchedule"},
            {"key": "keep", "effect": "NoSchedule"},
        ],
    )
    view = ClusterView(
        webhook_configurations=[
            {"metadata": {"name": "shipshape-placement"}},
            {"metadata": {"name": "other"}},
        ],
        pdbs=[guard_pdb(restarted, "a", 0.0), {"metadata": {"name": "users", "namespace": "shop"}}],
        deployments=[surged, restarted, plain, placeholder],
        replicasets=[rs, replicaset(plain)],
        pods=[placed, doomed, foreign],
        nodes=[tainted, node("spot-1", "spot")],
        namespaces=[namespace("shop")],
        priority_classes=[{"metadata": {"name": "shipshape-headroom"}}, {"metadata": {"name": "high"}}],
        leases=[{"metadata": {"name": "shipshape-controller", "namespace": config.namespace}}],
        secrets=[{"metadata": {"name": "shipshape-webhook-tls", "namespace": config.namespace}}],
    )
    steps = plan_uninstall(view, config)
    assert [s.target for s in steps] == [
        "mutatingwebhookconfiguration/shipshape-placement",
        "poddisruptionbudget/shop/solo-surge-guard",
        "deployment/shop/web",
        "deployment/shop/solo",
        f"deployment/{config.namespace}/headroom-1",
        "priorityclass/shipshape-headroom",
        "node/spot-0",
        "pod/shop/web-a",
        "pod/shop/web-b",
        f"lease/{config.namespace}/shipshape-controller",
        f"secret/{config.namespace}/shipshape-webhook-tls",
    ]
    web = steps[2]
    assert web.body == {"metadata": {"annotations": {SURGE_NOTE: None}}, "spec": {"replicas": 4}}
    assert steps[3].body == {"metadata": {"annotations": {RESTART_NOTE: None}}}
    assert steps[6].body["spec"]["taints"] == [{"key": "keep", "effect": "NoSchedule"}]
    done_surge = deployment(
        "web", 4, {SURGE_NOTE: json.dumps({"surge": 0, "since": 1, "deadline": 2, "done": True})}
    )
    (step,) = plan_uninstall(ClusterView(deployments=[done_surge]), config)
    assert "spec" not in step.body  # a finished surge has given its replicas back already
    assert plan_uninstall(ClusterView(), config) == []


def test_uninstall_knows_a_lease_still_held() -> None:
    config = ControllerConfig()
    now = 1_000_000.0
    lease = {
        "metadata": {"name": "shipshape-controller", "namespace": config.namespace},
        "spec": {
            "holderIdentity": "replica-a",
            "leaseDurationSeconds": 15,
            "renewTime": rfc3339_micro(now - 5),
        },
    }
    assert lease_holder(ClusterView(leases=[lease]), config, now) == "replica-a"
    assert lease_holder(ClusterView(leases=[lease]), config, now + 20) is None
    released = {**lease, "spec": {**lease["spec"], "holderIdentity": None}}
    assert lease_holder(ClusterView(leases=[released]), config, now) is None


# --- logs -----------------------------------------------------------------------------------------------


def emit(fmt: logs.LogFormat, level: str = "info") -> str:
    logs.configure(level, fmt)
    root = logging.getLogger()
    stream = io.StringIO()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    try:
        logging.getLogger("shipshape.controller.webhook").info(
            "placement decision",
            extra={"workload": "shop/web", "pod": "web-1", "pool": "m5.large/us-east-1a"},
        )
        logging.getLogger("httpx").info("HTTP Request: GET http://node/latest/meta-data 200 OK")
        logging.getLogger("shipshape.x").debug("hidden at info")
    finally:
        root.removeHandler(handler)
        root.setLevel(logging.WARNING)
    return stream.getvalue()


def test_log_lines_are_structured_and_quiet_by_default() -> None:
    text = emit("text").splitlines()
    assert len(text) == 1
    assert text[0].endswith("placement decision workload=shop/web pod=web-1 pool=m5.large/us-east-1a")
    (line,) = emit("json").splitlines()
    record = json.loads(line)
    assert record["message"] == "placement decision" and record["level"] == "INFO"
    assert record["workload"] == "shop/web" and record["pool"] == "m5.large/us-east-1a"
    assert len(emit("text", "debug").splitlines()) == 3  # debug shows the clients' lines too
    with pytest.raises(ValueError, match="log level"):
        logs.configure("loud")
