"""The emulator's cloud event queue (SQS JSON protocol, EventBridge EC2 events) and the controller
consuming it as a notice source."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shipshape.controller.cache import QUEUE_NOTICE_TAINT
from shipshape.controller.loops import LoopSettings
from shipshape.controller.loops.interruptions import SURGE_NOTE
from shipshape.controller.policy import ControllerConfig
from shipshape.emulator.cloud.client import ControlClient, ControlError, load_target
from shipshape.emulator.cloud.queue import INTERRUPTION, REBALANCE, EventQueue
from shipshape.emulator.resources import DEPLOYMENTS, NODES
from shipshape.kube.clock import parse_time
from tests.integration.emulator.served_cluster import SPOT_A, ServedCluster, ready_pods, serve_cluster

from .harness import controller, managed_deployment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

WEB = managed_deployment("web", 4)


def instance_of(cluster: ServedCluster, node: str) -> str:
    found = cluster.get(NODES, "", node)
    assert found is not None
    return str(found["spec"]["providerID"]).rsplit("/", 1)[-1]


def test_queue_speaks_sqs_and_delivers_at_least_once(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster:
        client = ControlClient.connect(load_target(cluster.served.kubeconfig))
        try:
            cloud = cluster.served.cluster.services["cloud"]
            node = cluster.nodes_of(SPOT_A)[0]
            cluster.call(lambda: cloud.interrupt(node=node, notice=120.0))
            messages = client.receive_events(10, visibility_timeout=60)
            bodies = [json.loads(m["Body"]) for m in messages]
            kinds = sorted(b["detail-type"] for b in bodies)
            # EC2 sends a rebalance recommendation no later than the interruption warning.
            assert kinds == sorted([INTERRUPTION, REBALANCE])
            warning = next(b for b in bodies if b["detail-type"] == INTERRUPTION)
            assert warning["source"] == "aws.ec2"
            assert warning["detail"] == {
                "instance-id": instance_of(cluster, node),
                "instance-action": "terminate",
            }
            assert client.receive_events(10) == []  # hidden while in flight
            first = next(m for m in messages if json.loads(m["Body"])["detail-type"] == INTERRUPTION)
            queue: EventQueue = cluster.served.cluster.services["event_queue"]
            cluster.call(lambda: queue.redeliver(first["MessageId"]))
            (again,) = client.receive_events(10)
            assert again["MessageId"] == first["MessageId"] and again["Body"] == first["Body"]
            assert again["Attributes"]["ApproximateReceiveCount"] == "2"
            with pytest.raises(ControlError, match="receipt handle"):
                client.delete_event(first["ReceiptHandle"])  # superseded by the newer receipt
            client.delete_event(again["ReceiptHandle"])
            other = next(m for m in messages if m is not first)
            client.delete_event(other["ReceiptHandle"])
            assert cluster.call(lambda: dict(queue.messages)) == {}
            with pytest.raises(ControlError, match="MaxNumberOfMessages"):
                client.receive_events(11)
        finally:
            client.close()


def test_controller_acts_on_a_queue_warning_alone(tmp_path: Path) -> None:
    """A warning that only the queue carries (no taint, metadata not polled) is enough for a surge."""
    config = ControllerConfig(notice_queue_url="/emulator/v1/queue", notice_queue_visibility_seconds=20)
    loops = LoopSettings(headroom_enabled=False, poll_instance_metadata=False)
    with serve_cluster(tmp_path) as cluster, controller(cluster, tmp_path / "c", config=config, loops=loops):
        cluster.kubectl("apply", "-f", "-", stdin=WEB)
        cluster.wait("every replica ready", lambda: len(ready_pods(cluster.pods(app="web"))) == 4, 120)
        spot_pods = [
            p
            for p in cluster.pods(app="web")
            if (cluster.get(NODES, "", p["spec"]["nodeName"]) or {})
            .get("metadata", {})
            .get("labels", {})
            .get("node.kubernetes.io/capacity")
            == "spot"
        ]
        assert spot_pods
        node = spot_pods[0]["spec"]["nodeName"]
        queue: EventQueue = cluster.served.cluster.services["event_queue"]
        now = cluster.now()
        event = queue.event(INTERRUPTION, instance_of(cluster, node), now, {"instance-action": "terminate"})
        cluster.call(lambda: [queue.send(event), queue.send(event)])  # delivered twice

        def surged() -> dict[str, object] | None:
            dep = cluster.get(DEPLOYMENTS, "default", "web")
            raw = ((dep or {}).get("metadata", {}).get("annotations") or {}).get(SURGE_NOTE)
            return json.loads(raw) if raw else None

        note = cluster.wait("the surge for the queue's warning", surged, 60)
        assert note["nodes"] == [node]
        assert note["pods"] == sorted(
            p["metadata"]["name"] for p in spot_pods if p["spec"]["nodeName"] == node
        )
        dep = cluster.get(DEPLOYMENTS, "default", "web")
        assert dep is not None and dep["spec"]["replicas"] == 4 + len(note["pods"])  # surged once
        # The queue alone told it; the leader tainted the node so that every replica's webhook and
        # kube-scheduler see the notice too, dated at the warning.
        found = cluster.wait(
            "the node tainted for the notice",
            lambda: (cluster.get(NODES, "", node) or {}).get("spec", {}).get("taints"),
            30,
        )
        assert [(t["key"], t["effect"]) for t in found] == [(QUEUE_NOTICE_TAINT, "NoSchedule")]
        assert abs(parse_time(found[0]["timeAdded"]) - now) <= 1.0
        # The node stays (nothing terminates it here): the warning is kept, not deleted, until its
        # deadline has passed; then the controller deletes it.
        cluster.wait("the warning deleted after its deadline", lambda: not queue.messages, 240)
