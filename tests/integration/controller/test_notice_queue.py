"""The cloud event queue through the real AWS SDK (boto3, SigV4, long polling): against the emulator's
SQS endpoint and against moto's SQS server, with the real EventBridge event JSON; and the controller
consuming it as a notice source."""

from __future__ import annotations

import json
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from shipshape.controller.loops import LoopSettings
from shipshape.controller.notices import INTERRUPTION, REBALANCE, QueueNoticeSource
from shipshape.controller.ops import OpsError
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.queue_client import SqsQueue, endpoint_of, queue_for, region_of
from shipshape.controller.state import QUEUE_NOTICE_TAINT
from shipshape.controller.surge import SURGE_NOTE
from shipshape.emulator.cloud import http as cloud_http
from shipshape.emulator.resources import DEPLOYMENTS, NODES
from shipshape.kube.clock import parse_time
from tests.integration.emulator.served_cluster import SPOT_A, ServedCluster, ready_pods, serve_cluster

from .harness import controller, managed_deployment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

EVENTS = Path(__file__).resolve().parents[2] / "fixtures" / "cloud-notices" / "aws-eventbridge"
WEB = managed_deployment("web", 4)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The SDK's default credential chain finds the emulated account's key in the environment (and
    nothing from the machine: no shared files, no instance metadata)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", cloud_http.ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", cloud_http.SECRET_ACCESS_KEY)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def instance_of(cluster: ServedCluster, node: str) -> str:
    found = cluster.get(NODES, "", node)
    assert found is not None
    return str(found["spec"]["providerID"]).rsplit("/", 1)[-1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Endpoint:
    name: str
    url: str


@contextmanager
def moto_queue() -> Iterator[Endpoint]:
    """moto's SQS server on a free local port, with one queue made through boto3."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        sqs = boto3.client("sqs", endpoint_url=f"http://{host}:{port}", region_name="us-east-1")
        url = sqs.create_queue(QueueName="shipshape-notices")["QueueUrl"]
        yield Endpoint("moto", url)
    finally:
        server.stop()


def node_of(name: str, instance: str) -> dict[str, Any]:
    labels = {
        "node.kubernetes.io/capacity": "spot",
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "us-east-2a",
    }
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": f"aws:///us-east-2a/{instance}"},
    }


def check_real_events(queue: SqsQueue) -> None:
    """Every fixture event sent through the SDK, read back by the notice source: one notice per node
    whatever the number of events about it, unknown kinds deleted and counted, all deleted once done."""
    sqs = queue.sqs
    for path in sorted(EVENTS.glob("*.json")):
        sqs.send_message(QueueUrl=queue.url, MessageBody=path.read_text())
    sqs.send_message(QueueUrl=queue.url, MessageBody=json.dumps({"detail-type": "Something Else"}))
    nodes = {
        "spot-1": node_of("spot-1", "i-0f1e2d3c4b5a69788"),  # warning + rebalance + terminated
        "spot-2": node_of("spot-2", "i-0a9b8c7d6e5f40312"),  # stopping
        "old-1": node_of("old-1", "i-0c4d5e6f7a8b90123"),  # scheduled retirement (id and ARN forms)
    }
    kinds: list[str] = []
    source = QueueNoticeSource(queue, lead_seconds=120.0, visibility_seconds=30.0, on_message=kinds.append)
    now = parse_time("2026-11-25T10:15:30Z")
    fresh = source.poll(nodes, now)
    by_node = {n.node: n.deadline for n in fresh}
    assert sorted(by_node) == ["old-1", "spot-1", "spot-2"]
    assert by_node["spot-2"] == parse_time("2026-11-25T10:17:04Z")  # the state change's own time
    # The warning (10:15:00 + 120 s) came before the terminated state change about the same instance.
    assert by_node["spot-1"] in (parse_time("2026-11-25T10:17:00Z"), parse_time("2026-11-25T10:18:30Z"))
    assert by_node["old-1"] == parse_time("2026-11-20T14:04:11Z")  # acted on as a warning, long before start
    assert sorted(source.recommended()) == ["spot-1"]
    assert source.unknown == 1
    assert sorted(kinds) == [
        "rebalance-recommendation",
        "scheduled-change",  # two files: the entity as an instance id and as an ARN
        "scheduled-change",
        "spot-interruption",
        "state-change",  # stopping, terminated
        "state-change",
        "unknown",
    ]
    # The nodes are gone: every kept message is deleted.
    source.poll({}, now + 1)
    assert (
        sqs.receive_message(QueueUrl=queue.url, VisibilityTimeout=0, WaitTimeSeconds=0).get("Messages")
        is None
    )


def check_long_polling(queue: SqsQueue) -> None:
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.extend(queue.fetch(10, 30, 10)))
    waiter.start()
    queue.sqs.send_message(QueueUrl=queue.url, MessageBody="{}")
    waiter.join(15)
    assert not waiter.is_alive() and [m.body for m in got] == ["{}"]
    queue.delete(got[0].receipt)


def test_the_queue_url_picks_region_and_endpoint() -> None:
    assert region_of("https://sqs.eu-west-1.amazonaws.com/210987654321/notices") == "eu-west-1"
    assert region_of("https://us-west-2.queue.amazonaws.com/210987654321/notices") == "us-west-2"
    assert region_of("https://sqs.cn-north-1.amazonaws.com.cn/210987654321/notices") == "cn-north-1"
    assert region_of("http://127.0.0.1:4566/000000000000/notices") is None
    assert endpoint_of("https://sqs.eu-west-1.amazonaws.com/210987654321/notices") is None
    assert endpoint_of("http://127.0.0.1:4566/000000000000/notices") == "http://127.0.0.1:4566"
    with pytest.raises(OpsError):
        endpoint_of("/emulator/v1/queue")


@pytest.mark.usefixtures("aws_env")
def test_sdk_against_moto_with_the_real_events() -> None:
    with moto_queue() as endpoint:
        queue = queue_for(endpoint.url, wait_seconds=1, start=False)
        check_real_events(queue)
        check_long_polling(queue)
        # The receiver thread: long polls in the background, the responder's receive never blocks.
        queue.sqs.send_message(QueueUrl=endpoint.url, MessageBody="{}")
        queue.start()
        try:
            got: list[Any] = []
            deadline = threading.Event()
            for _ in range(100):
                got = queue.receive(10, 30)
                if got or deadline.wait(0.05):
                    break
            assert [m.body for m in got] == ["{}"]
        finally:
            queue.close()


@pytest.mark.usefixtures("aws_env")
def test_sdk_against_the_emulator_signed_and_at_least_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve_cluster(tmp_path) as cluster:
        url = cluster.call(lambda: cloud_http.queue_url(cluster.served.cluster))
        assert url is not None
        # SigV4 is required: unsigned, or signed with the wrong secret, is refused.
        unsigned = httpx.post(
            str(endpoint_of(url)) + "/",
            content=json.dumps({"QueueUrl": url}),
            headers={
                "X-Amz-Target": "AmazonSQS.ReceiveMessage",
                "Content-Type": "application/x-amz-json-1.0",
            },
        )
        assert unsigned.status_code == 403 and "MissingAuthenticationToken" in unsigned.json()["__type"]
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
        with pytest.raises(OpsError, match="SignatureDoesNotMatch") as refused:
            queue_for(url, wait_seconds=0, start=False).fetch(1, 30, 0)
        assert refused.value.status == 403 and not refused.value.retryable
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", cloud_http.SECRET_ACCESS_KEY)
        queue = queue_for(url, wait_seconds=1, start=False)
        # The cloud's own events: a notice is an interruption warning and a rebalance recommendation.
        cloud = cluster.served.cluster.services["cloud"]
        node = cluster.nodes_of(SPOT_A)[0]
        cluster.call(lambda: cloud.interrupt(node=node, notice=120.0))
        messages = queue.fetch(10, 60, 0)
        bodies = [json.loads(m.body) for m in messages]
        assert sorted(b["detail-type"] for b in bodies) == sorted([INTERRUPTION, REBALANCE])
        warning = next(b for b in bodies if b["detail-type"] == INTERRUPTION)
        assert warning["detail"] == {
            "instance-id": instance_of(cluster, node),
            "instance-action": "terminate",
        }
        assert queue.fetch(10, 60, 0) == []  # hidden while in flight
        emulated = cluster.served.cluster.services["event_queue"]
        first = next(m for m in messages if json.loads(m.body)["detail-type"] == INTERRUPTION)
        cluster.call(lambda: emulated.redeliver(first.message_id))
        (again,) = queue.fetch(10, 60, 0)
        assert again.message_id == first.message_id and again.body == first.body
        with pytest.raises(OpsError, match="ReceiptHandleIsInvalid"):
            queue.delete(first.receipt)  # superseded by the newer receipt
        for message in (again, *(m for m in messages if m is not first)):
            queue.delete(message.receipt)
        assert cluster.call(lambda: dict(emulated.messages)) == {}
        check_real_events(queue)
        check_long_polling(queue)


@pytest.mark.usefixtures("aws_env")
def test_controller_acts_on_a_queue_warning_alone(tmp_path: Path) -> None:
    """A warning that only the queue carries (no taint) is enough for a surge."""
    with serve_cluster(tmp_path) as cluster:
        url = cluster.call(lambda: cloud_http.queue_url(cluster.served.cluster))
        config = ControllerConfig(
            notice_queue_url=url, notice_queue_visibility_seconds=20, notice_queue_wait_seconds=1
        )
        loops = LoopSettings(headroom_enabled=False)
        with controller(cluster, tmp_path / "c", config=config, loops=loops):
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
            queue = cluster.served.cluster.services["event_queue"]
            now = cluster.now()
            event = queue.event(
                INTERRUPTION, instance_of(cluster, node), now, {"instance-action": "terminate"}
            )
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
