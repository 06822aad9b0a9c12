"""The node poller's parsers on the clouds' real notice formats, and what a notice becomes on the Node."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from shipshape.contracts import notices as contract
from shipshape.controller.notices import notices_from_taints
from shipshape.kube.clock import parse_time, rfc3339
from shipshape.nodecollector.notices import aws, azure, detect, gcp, publish
from shipshape.nodecollector.notices.model import Kind, MetadataError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cloud-notices"
NOW = parse_time("2026-11-25T10:15:03Z")


def fixture(path: str) -> str:
    return (FIXTURES / path).read_text()


def test_aws_instance_action_and_rebalance() -> None:
    terminate = aws.parse_instance_action(fixture("aws-imds/spot-instance-action-terminate.json"))
    assert terminate is not None and terminate.kind is Kind.INTERRUPTION
    assert terminate.deadline == parse_time("2026-11-25T10:17:00Z")
    stop = aws.parse_instance_action(fixture("aws-imds/spot-instance-action-stop.json"))
    hibernate = aws.parse_instance_action(fixture("aws-imds/spot-instance-action-hibernate.json"))
    assert stop is not None and hibernate is not None
    assert hibernate.deadline == parse_time("2026-11-25T10:15:05Z")
    # The same answer read again is the same notice; another time is another notice.
    assert aws.parse_instance_action(fixture("aws-imds/spot-instance-action-terminate.json")) == terminate
    assert len({terminate.event_id, stop.event_id, hibernate.event_id}) == 3
    rebalance = aws.parse_rebalance(fixture("aws-imds/rebalance-recommendation.json"))
    assert rebalance is not None and rebalance.kind is Kind.REBALANCE
    assert rebalance.issued == parse_time("2026-11-25T10:09:00Z") and rebalance.deadline is None
    for garbage in (
        "",
        "null",
        "[]",
        '{"action": "reboot", "time": "2026-11-25T10:17:00Z"}',
        '{"action": "stop"}',
    ):
        assert aws.parse_instance_action(garbage) is None
    assert aws.parse_rebalance('{"noticeTime": "yesterday"}') is None


def test_aws_scheduled_events_that_end_the_instance() -> None:
    body = fixture("aws-imds/events-maintenance-scheduled.json")
    assert aws.parse_scheduled_events(body) == []  # a reboot: the instance comes back
    (event,) = json.loads(body)
    retirement = json.dumps([{**event, "Code": "instance-retirement"}])
    (notice,) = aws.parse_scheduled_events(retirement)
    assert notice.deadline == parse_time("2026-12-03T09:00:00Z") and notice.reason == "ScheduledRetirement"
    assert (
        aws.parse_scheduled_events(json.dumps([{**event, "Code": "instance-stop", "State": "canceled"}]))
        == []
    )
    assert aws.parse_scheduled_events("not json") == []


def test_gcp_preempted_and_maintenance_event() -> None:
    assert gcp.parse_preempted(fixture("gcp-metadata/preempted-false.txt"), NOW) is None
    preempted = gcp.parse_preempted(fixture("gcp-metadata/preempted-true.txt"), NOW, "c8a41f07e2d95b36")
    assert preempted is not None and preempted.deadline == NOW + 30
    assert preempted == gcp.parse_preempted("TRUE", NOW, "c8a41f07e2d95b36")
    assert gcp.parse_maintenance_event(fixture("gcp-metadata/maintenance-event-none.txt"), NOW) is None
    assert gcp.parse_maintenance_event(fixture("gcp-metadata/maintenance-event-migrate.txt"), NOW) is None
    terminate = gcp.parse_maintenance_event(fixture("gcp-metadata/maintenance-event-terminate.txt"), NOW)
    assert terminate is not None and terminate.deadline == NOW + 60


def test_azure_preempt_for_this_vm_only() -> None:
    document = json.loads(fixture("azure-scheduled-events/scheduled-events-preempt.json"))
    (notice,) = azure.parse_scheduled_events(document, "aks-spotpool-27481936-vmss_4", NOW)
    assert notice.deadline == parse_time("2026-11-25T10:15:33Z")
    assert notice.ack_id == "8E3B6F2A-51C4-4D9E-A07B-3C6D2E9F1B48"
    assert json.loads(fixture("azure-scheduled-events/ack-start-request.json")) == {
        "StartRequests": [{"EventId": notice.ack_id}]
    }
    # Delivered to the whole placement group: another VM's event is not this node's notice.
    assert azure.parse_scheduled_events(document, "aks-spotpool-27481936-vmss_5", NOW) == []
    empty = json.loads(fixture("azure-scheduled-events/scheduled-events-empty.json"))
    assert azure.parse_scheduled_events(empty, "aks-spotpool-27481936-vmss_4", NOW) == []
    started = {"Events": [{**document["Events"][0], "EventStatus": "Started", "NotBefore": ""}]}
    (now_notice,) = azure.parse_scheduled_events(started, "aks-spotpool-27481936-vmss_4", NOW)
    assert now_notice.deadline == NOW and now_notice.event_id == notice.event_id
    freeze = {"Events": [{**document["Events"][0], "EventType": "Freeze"}]}
    assert azure.parse_scheduled_events(freeze, "aks-spotpool-27481936-vmss_4", NOW) == []


def test_cloud_detected_from_the_provider_id() -> None:
    assert detect.cloud_of_provider_id("aws:///us-east-1a/i-0abc") == "aws"
    assert detect.cloud_of_provider_id("gce://project/us-central1-a/gke-spot-1") == "gcp"
    assert detect.cloud_of_provider_id("azure:///subscriptions/s/resourceGroups/r/providers/x") == "azure"
    assert detect.cloud_of_provider_id("kind://docker/kind/kind-worker") is None
    assert detect.cloud_of_provider_id(None) is None


def node_body(taints: list[dict[str, str]] | None = None) -> dict[str, object]:
    return {
        "metadata": {"name": "n1", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"taints": taints or []},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_each_clouds_notice_reads_back_as_its_deadline() -> None:
    """The taint's timeAdded is the deadline minus the cloud's lead; the controller adds that cloud's
    lead back, so the deadline it plans with is the cloud's."""
    notices = [
        aws.parse_instance_action(fixture("aws-imds/spot-instance-action-terminate.json")),
        gcp.parse_preempted("TRUE", NOW),
        azure.parse_scheduled_events(
            json.loads(fixture("azure-scheduled-events/scheduled-events-preempt.json")),
            "aks-spotpool-27481936-vmss_4",
            NOW,
        )[0],
    ]
    for notice in notices:
        assert notice is not None and notice.deadline is not None
        writes = publish.plan(node_body(), notice, NOW)
        assert writes.taints is not None
        (taint,) = writes.taints
        assert (taint["key"], taint["value"], taint["effect"]) == (
            contract.NOTICE_TAINT,
            f"{notice.cloud}-metadata",
            "NoSchedule",
        )
        assert parse_time(taint["timeAdded"]) == min(
            NOW, notice.deadline - contract.LEAD_SECONDS[notice.cloud]
        )
        tainted = {**node_body(), "spec": {"taints": writes.taints}}
        (read,) = notices_from_taints([tainted], NOW + 1, lead_seconds=120.0)
        assert read.deadline == notice.deadline, notice.cloud
        assert writes.condition is not None and writes.condition["type"] == "SpotInterruptionNotice"
        assert rfc3339(notice.deadline) in writes.condition["message"]
        assert writes.event["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "n1",
            "uid": "u-1",
        }


def test_a_notice_already_on_the_node_is_not_written_again() -> None:
    notice = aws.parse_instance_action(fixture("aws-imds/spot-instance-action-terminate.json"))
    assert notice is not None
    # The leader tainted the node for the same notice from the event queue: one notice taint.
    queued = {"key": contract.NOTICE_TAINT, "value": "event-queue", "effect": "NoSchedule"}
    node = node_body([queued])
    node["status"] = {"conditions": [{"type": "SpotInterruptionNotice", "status": "True"}]}
    writes = publish.plan(node, notice, NOW)
    assert writes.taints is None and writes.condition is None
    assert (
        writes.event["metadata"]["name"] == publish.plan(node_body(), notice, NOW).event["metadata"]["name"]
    )
    # A rebalance recommendation: PreferNoSchedule, and none on a node that already has a notice.
    rebalance = aws.parse_rebalance(fixture("aws-imds/rebalance-recommendation.json"))
    assert rebalance is not None
    fresh = publish.plan(node_body(), rebalance, NOW)
    assert fresh.taints == [
        {"key": contract.REBALANCE_TAINT, "value": "aws-metadata", "effect": "PreferNoSchedule"}
    ]
    assert fresh.condition is None
    assert publish.plan(node, rebalance, NOW).taints is None


def wire(answer: Callable[[httpx.Request], httpx.Response]) -> tuple[httpx.Client, list[str]]:
    """An httpx client whose requests reach `answer` (a fake metadata service at the wire); the
    requests are logged as "METHOD path"."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        return answer(request)

    return httpx.Client(transport=httpx.MockTransport(handler)), seen


def test_without_a_provider_id_the_answering_service_names_the_cloud() -> None:
    def gce_only(request: httpx.Request) -> httpx.Response:
        flavoured = request.headers.get("Metadata-Flavor") == "Google"
        if request.url.path.startswith("/computeMetadata/v1/") and flavoured:
            return httpx.Response(200, text="4711", headers={"Metadata-Flavor": "Google", "ETag": "e1"})
        return httpx.Response(404)

    http, seen = wire(gce_only)
    source = detect.detect(http, "http://metadata.test", None, lambda: 0.0)
    assert source.cloud == "gcp"
    assert seen == ["PUT /latest/api/token", "GET /computeMetadata/v1/instance/id"]

    http, _ = wire(lambda request: httpx.Response(404))
    with pytest.raises(MetadataError, match="no instance metadata service answers"):
        detect.detect(http, "http://metadata.test", "", lambda: 0.0)


def test_imds_renews_a_refused_token_once() -> None:
    issued: list[str] = []

    def imds(request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            assert request.headers["X-aws-ec2-metadata-token-ttl-seconds"] == "21600"
            issued.append(f"token-{len(issued)}")
            ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}
            return httpx.Response(200, text=issued[-1], headers=ttl)
        if request.headers.get("X-aws-ec2-metadata-token") != issued[-1] or len(issued) < 2:
            return httpx.Response(401)  # the first token "expired"
        if request.url.path.endswith("spot/instance-action"):
            return httpx.Response(200, text=fixture("aws-imds/spot-instance-action-terminate.json"))
        return httpx.Response(404)

    http, seen = wire(imds)
    source = aws.Imds(http, "http://169.254.169.254", monotonic=lambda: 0.0)
    (notice,) = source.poll(lambda: NOW)
    assert notice.deadline == parse_time("2026-11-25T10:17:00Z")
    assert seen == [
        "PUT /latest/api/token",
        "GET /latest/meta-data/spot/instance-action",
        "PUT /latest/api/token",
        "GET /latest/meta-data/spot/instance-action",
        "GET /latest/meta-data/events/recommendations/rebalance",
        "GET /latest/meta-data/events/maintenance/scheduled",
    ]
