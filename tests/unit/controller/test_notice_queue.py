"""The cloud event queue as a notice source: parsing, instance -> node mapping, at-least-once delivery."""

from __future__ import annotations

import json
from typing import Any

from shipshape.controller.loops.base import SharedState
from shipshape.controller.notices import (
    INTERRUPTION,
    REBALANCE,
    CloudEvent,
    QueueMessage,
    QueueNoticeSource,
    instance_id,
    notices_from_taints,
    parse_events,
)
from shipshape.controller.ops import OpsError, RecordingOps
from shipshape.controller.placement import Pool
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import QUEUE_NOTICE_TAINT, QUEUE_REBALANCE_TAINT, ClusterState
from shipshape.controller.surge import SURGE_NOTE
from shipshape.emulator.cloud.queue import EventQueue, InvalidReceipt
from shipshape.kube.clock import rfc3339

from .builders import Harness, InterruptionLane, added, deployment, namespace, node, pod_of, replicaset

NOW = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = NOW

    def __call__(self) -> float:
        return self.t


class Adapter:
    """The emulator's queue model behind the controller's `EventQueue` protocol."""

    def __init__(self, queue: EventQueue) -> None:
        self.queue = queue

    def receive(self, max_messages: int, visibility_timeout: float) -> list[QueueMessage]:
        return [
            QueueMessage(m.message_id, str(m.receipt), m.body)
            for m in self.queue.receive(max_messages, visibility_timeout)
        ]

    def delete(self, receipt: str) -> None:
        try:
            self.queue.delete(receipt)
        except InvalidReceipt as error:
            raise OpsError(str(error), status=400, retryable=False) from error


def spot_node(name: str, iid: str, zone: str = "us-east-1a") -> dict[str, Any]:
    found = node(name, "spot", zone=zone)
    found["spec"]["providerID"] = f"aws:///{zone}/{iid}"
    return found


def warning(queue: EventQueue, iid: str, at: float) -> str:
    return queue.send(queue.event(INTERRUPTION, iid, at, {"instance-action": "terminate"}))


def parse_event(body: str) -> CloudEvent | None:
    """The one instance a one-instance event names, None when it names none."""
    events = parse_events(body)
    return events[0] if events else None


def test_events_parse_and_instances_map_to_nodes() -> None:
    queue = EventQueue(now=Clock())
    body = json.dumps(queue.event(INTERRUPTION, "i-0abc", NOW, {"instance-action": "terminate"}))
    event = parse_event(body)
    assert event is not None and (event.detail_type, event.instance_id, event.time) == (
        INTERRUPTION,
        "i-0abc",
        NOW,
    )
    assert parse_event(json.dumps(queue.event(REBALANCE, "i-0abc", NOW, {}))) is not None
    assert parse_event("not json") is None
    assert parse_event(json.dumps({"detail-type": "EC2 Instance State-change Notification"})) is None
    assert parse_event(json.dumps({"detail-type": INTERRUPTION, "detail": {}, "time": rfc3339(NOW)})) is None
    assert instance_id(spot_node("n1", "i-0abc")) == "i-0abc"
    assert instance_id(node("n2", "spot")) is None


def test_notices_are_deduplicated_and_deleted_once_the_node_is_gone() -> None:
    clock = Clock()
    queue = EventQueue(now=clock)
    source = QueueNoticeSource(Adapter(queue), lead_seconds=120.0, visibility_seconds=30.0)
    nodes = {"n1": spot_node("n1", "i-1"), "n2": spot_node("n2", "i-2")}
    first = warning(queue, "i-1", NOW)
    warning(queue, "i-1", NOW)  # the same event sent twice (same id)
    warning(queue, "i-9", NOW)  # another cluster's instance
    fresh = source.poll(nodes, NOW)
    assert [(n.node, n.deadline, n.source) for n in fresh] == [("n1", NOW + 120.0, "event-queue")]
    assert source.duplicates == 1
    assert [n.node for n in source.notices(nodes)] == ["n1"]
    # Not deleted while the node lives: it comes back after the visibility timeout, and is recognised.
    assert len(queue.messages) == 2  # both copies of the warning; the stranger's was deleted
    clock.t += 31
    assert source.poll(nodes, clock.t) == []
    assert source.duplicates == 3  # both copies came back
    queue.redeliver(first)  # SQS delivering again at once
    assert source.poll(nodes, clock.t) == []
    # The node is gone: its messages are deleted, the notice forgotten.
    del nodes["n1"]
    source.poll(nodes, clock.t)
    assert queue.messages == {}
    assert source.notices(nodes) == []


def test_a_restarted_consumer_receives_an_undeleted_warning_again() -> None:
    clock = Clock()
    queue = EventQueue(now=clock)
    nodes = {"n1": spot_node("n1", "i-1")}
    warning(queue, "i-1", NOW)
    QueueNoticeSource(Adapter(queue), 120.0, 30.0).poll(nodes, NOW)
    restarted = QueueNoticeSource(Adapter(queue), 120.0, 30.0)
    assert restarted.poll(nodes, NOW + 1) == []  # still hidden
    clock.t += 31
    assert [n.node for n in restarted.poll(nodes, clock.t)] == ["n1"]


def test_rebalance_recommendations_are_kept_and_deleted() -> None:
    queue = EventQueue(now=Clock())
    source = QueueNoticeSource(Adapter(queue), 120.0)
    nodes = {"n1": spot_node("n1", "i-1", "us-east-1b")}
    queue.send(queue.event(REBALANCE, "i-1", NOW, {}))
    assert source.poll(nodes, NOW) == []
    assert source.recommended() == {"n1": Pool("m5.large", "us-east-1b")}
    assert queue.messages == {}
    source.poll({}, NOW + 1)
    assert source.recommended() == {}


def queue_responder(h: Harness, ops: RecordingOps, queue: EventQueue) -> InterruptionLane:
    """The interruption lane on `h`'s cache, writing through `ops`, reading `queue` too."""
    return InterruptionLane(
        h.clock,
        h.cache,
        ops,
        h.config,
        h.metrics,
        SharedState.for_config(h.config, risk=h.risk),
        queue=QueueNoticeSource(Adapter(queue), h.config.notice_lead_seconds),
    )


def test_the_responder_acts_on_a_queue_notice_without_any_taint() -> None:
    h = Harness()
    dep = deployment("web", 3, {"spot.shipshape.dev/enabled": "true"})
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, spot_node("spot-0", "i-1"), spot_node("spot-1", "i-2", "us-east-1b"))
    h.add(node("od-0", "on-demand"))
    h.add(
        pod_of(rs, "web-0", node="od-0"),
        pod_of(rs, "web-1", node="spot-0"),
        pod_of(rs, "web-2", node="spot-1"),
    )
    queue = EventQueue(now=h.clock.now)
    warning(queue, "i-1", h.clock.now())
    ops = RecordingOps(objects=h.objects)
    loop = queue_responder(h, ops, queue)
    loop.reconcile(h.clock.now())
    patches = [p for (_, _, name, p) in ops.of("patch_workload") if name == "web"]
    assert patches and json.loads(patches[0]["metadata"]["annotations"][SURGE_NOTE])["pods"] == ["web-1"]
    assert patches[0]["spec"]["replicas"] == 4
    assert Pool("m5.large", "us-east-1a") in h.risk.at_risk(h.clock.now())
    assert h.metric("shipshape_interruption_notices_total", {"source": "event-queue"}) == 1.0


def test_the_leader_taints_a_queue_noticed_node_once_and_every_cache_then_avoids_it() -> None:
    h = Harness()
    h.add(namespace("shop"), spot_node("spot-0", "i-1"), spot_node("spot-1", "i-2", "us-east-1b"))
    tainted = h.cache.get("Node", "", "spot-0")
    assert tainted is not None
    tainted["metadata"]["resourceVersion"] = "41"
    tainted["spec"]["taints"] = [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]
    queue = EventQueue(now=h.clock.now)
    warned = h.clock.now()
    warning(queue, "i-1", warned)
    ops = RecordingOps(objects=h.objects)
    loop = queue_responder(h, ops, queue)
    loop.reconcile(h.clock.now())
    loop.reconcile(h.clock.now() + 1)  # the cache has not seen the taint yet: not sent again
    ((name, taints, version),) = ops.of("taint_node")
    assert (name, version) == ("spot-0", "41")
    assert taints == [
        {"key": "dedicated", "value": "web", "effect": "NoSchedule"},
        {
            "key": QUEUE_NOTICE_TAINT,
            "value": "event-queue",
            "effect": "NoSchedule",
            "timeAdded": rfc3339(warned),
        },
    ]
    # What another replica's cache makes of the tainted node: no new pods there, its pool at risk.
    other = ClusterState(h.config)
    other.apply(added({**tainted, "spec": {"taints": taints}}))
    view = other.placement_view(h.clock.now(), RiskModel())
    assert view.avoided_nodes == frozenset({"spot-0"})
    assert Pool("m5.large", "us-east-1a") in view.excluded
    assert [
        n.node for n in notices_from_taints([{**tainted, "spec": {"taints": taints}}], warned + 5, 120.0)
    ] == ["spot-0"]


def test_a_failed_taint_is_sent_again_next_round() -> None:
    h = Harness()
    h.add(namespace("shop"), spot_node("spot-0", "i-1"))
    queue = EventQueue(now=h.clock.now)
    warning(queue, "i-1", h.clock.now())
    ops = RecordingOps(objects=h.objects)
    loop = queue_responder(h, ops, queue)
    ops.fail["taint_node"] = OpsError("409 conflict", status=409)
    loop.reconcile(h.clock.now())
    del ops.fail["taint_node"]
    loop.reconcile(h.clock.now() + 1)
    assert [call[0] for call in ops.of("taint_node")] == ["spot-0", "spot-0"]


def test_the_leader_taints_a_queue_recommended_node_so_other_replicas_avoid_it_too() -> None:
    h = Harness()
    h.add(namespace("shop"), spot_node("spot-0", "i-1"))
    queue = EventQueue(now=h.clock.now)
    queue.send(queue.event(REBALANCE, "i-1", h.clock.now(), {}))
    ops = RecordingOps(objects=h.objects)
    loop = queue_responder(h, ops, queue)
    loop.reconcile(h.clock.now())
    loop.reconcile(h.clock.now() + 1)
    ((name, taints, _),) = ops.of("taint_node")
    assert name == "spot-0"
    assert taints == [{"key": QUEUE_REBALANCE_TAINT, "value": "event-queue", "effect": "PreferNoSchedule"}]
    other = ClusterState(h.config)
    node = h.cache.get("Node", "", "spot-0")
    assert node is not None
    other.apply(added({**node, "spec": {"taints": taints}}))
    view = other.placement_view(h.clock.now(), RiskModel())
    assert view.avoided_nodes == frozenset({"spot-0"})
    assert not view.excluded  # a recommendation is no notice: the pool still takes pods


def test_one_notice_from_every_source_is_acted_on_once() -> None:
    """The same node announced by an interruption handler's taint, the node-side poller's taint and the
    event queue: one surge, one notice counted, and no second notice taint from the leader."""
    h = Harness()
    dep = deployment("web", 3, {"spot.shipshape.dev/enabled": "true"})
    rs = replicaset(dep)
    noticed = spot_node("spot-0", "i-1")
    now = h.clock.now()
    noticed["spec"]["taints"] = [
        {"key": "aws-node-termination-handler/spot-itn", "value": "spot-itn-abc", "effect": "NoSchedule"},
        {
            "key": QUEUE_NOTICE_TAINT,
            "value": "aws-metadata",
            "effect": "NoSchedule",
            "timeAdded": rfc3339(now),
        },
    ]
    h.add(
        namespace("shop"),
        dep,
        rs,
        noticed,
        spot_node("spot-1", "i-2", "us-east-1b"),
        node("od-0", "on-demand"),
    )
    h.add(
        pod_of(rs, "web-0", node="od-0"),
        pod_of(rs, "web-1", node="spot-0"),
        pod_of(rs, "web-2", node="spot-1"),
    )
    queue = EventQueue(now=h.clock.now)
    warning(queue, "i-1", now)
    warning(queue, "i-1", now)  # and delivered twice
    ops = RecordingOps(objects=h.objects)
    loop = queue_responder(h, ops, queue)
    for step in range(3):
        loop.observe(now + step)
        loop.reconcile(now + step)
    surges = [
        p for (_, _, name, p) in ops.of("patch_workload") if name == "web" and SURGE_NOTE in json.dumps(p)
    ]
    assert len(surges) == 1 and surges[0]["spec"]["replicas"] == 4
    assert ops.of("taint_node") == []  # the node already carries the notice taint
    counted = sum(
        h.metric("shipshape_interruption_notices_total", {"source": source}) or 0.0
        for source in (
            "event-queue",
            "taint:aws-node-termination-handler/spot-itn",
            f"taint:{QUEUE_NOTICE_TAINT}",
        )
    )
    assert counted == 1.0


def test_a_gcp_poller_taint_gives_the_clouds_30_second_deadline() -> None:
    added_at = NOW - 5
    tainted = spot_node("spot-0", "i-1")
    tainted["spec"]["taints"] = [
        {
            "key": QUEUE_NOTICE_TAINT,
            "value": "gcp-metadata",
            "effect": "NoSchedule",
            "timeAdded": rfc3339(added_at),
        },
        {"key": "karpenter.sh/disrupted", "effect": "NoSchedule", "timeAdded": rfc3339(added_at)},
    ]
    ((notice),) = notices_from_taints([tainted], NOW, lead_seconds=120.0)
    assert notice.deadline == added_at + 30  # the earliest of the node's notices
    queued = {**tainted, "spec": {"taints": [{**tainted["spec"]["taints"][0], "value": "event-queue"}]}}
    assert notices_from_taints([queued], NOW, lead_seconds=120.0)[0].deadline == added_at + 120


def test_a_queue_url_that_is_no_url_is_refused_in_one_line() -> None:
    from typer.testing import CliRunner

    from shipshape.cli.main import app

    result = CliRunner().invoke(app, ["controller", "--notice-queue-url", "/emulator/v1/queue"])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "must be an SQS queue URL" in line


def test_karpenter_and_nth_taints_of_every_version_are_notices() -> None:
    for key, value in (
        ("karpenter.sh/disrupted", None),  # Karpenter v1
        ("karpenter.sh/disruption", "disrupting"),  # v1beta1 (v0.32 - v0.37)
        ("aws-node-termination-handler/spot-itn", "spot-itn-event-3462"),
        ("aws-node-termination-handler/scheduled-maintenance", "instance-event-0a7c"),
        ("aws-node-termination-handler/asg-lifecycle-termination", "asg-lifecycle-term-61"),
    ):
        tainted = spot_node("n1", "i-1")
        taint = {"key": key, "effect": "NoSchedule", **({"value": value} if value else {})}
        tainted["spec"]["taints"] = [taint]
        ((notice),) = notices_from_taints([tainted], NOW, lead_seconds=120.0)
        assert (notice.node, notice.deadline, notice.source) == ("n1", NOW + 120, f"taint:{key}")
    rebalance = spot_node("n2", "i-2")
    rebalance["spec"]["taints"] = [
        {"key": "aws-node-termination-handler/rebalance-recommendation", "effect": "NoSchedule"}
    ]
    assert notices_from_taints([rebalance], NOW, lead_seconds=120.0) == []  # no drain for those
