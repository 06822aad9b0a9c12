"""What the controller and its webhook process send each other survives the pipe, and the process's
metrics are both processes' counts summed."""

from __future__ import annotations

import pickle
from multiprocessing import Pipe

import pytest
from prometheus_client import CollectorRegistry

from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.placement import Pool
from shipshape.controller.state.views import Change
from shipshape.controller.webhook import messages
from shipshape.controller.webhook.child import exposition

POOL = Pool("m5.large", "us-east-1a")
POD = {"kind": "Pod", "metadata": {"name": "web-1", "namespace": "shop", "resourceVersion": "7"}}


def sample_families() -> tuple[messages.MetricFamily, ...]:
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    metrics.decisions.labels(capacity_type="spot", reason="spot-share").inc()
    metrics.webhook_latency.observe(0.0012)
    return messages.families(registry.collect())


MESSAGES: list[object] = [
    messages.Synced(),
    messages.StateChanges(
        (Change("replace", "Node", items=({"metadata": {"name": "n1"}},)), Change("apply", "Pod", event=POD))
    ),
    messages.RiskNotices((messages.NoticeRecord("node-1", POOL, 1_767_225_600.5),)),
    messages.Shortages(frozenset({POOL})),
    messages.Recommendations.of({"node-2": POOL, "node-3": None}),
    messages.ServingCertificate("/tmp/tls.crt", "/tmp/tls.key"),
    messages.Stop(),
    messages.SamplesRequest(3),
    messages.Exposition(4, b"# HELP x\n"),
    messages.Serving(1234),
    messages.Samples(3, sample_families()),
    messages.ExpositionRequest(4, sample_families()),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_survives_the_pipe(message: object) -> None:
    assert pickle.loads(pickle.dumps(message)) == message
    sending, receiving = Pipe()
    try:
        sending.send(message)
        assert receiving.recv() == message
    finally:
        sending.close()
        receiving.close()


def test_pools_stay_pools_and_recommendations_a_mapping() -> None:
    received = pickle.loads(pickle.dumps(messages.Recommendations.of({"node-2": POOL, "node-3": None})))
    assert received.mapping() == {"node-2": POOL, "node-3": None}
    assert isinstance(received.mapping()["node-2"], Pool)
    (notice,) = pickle.loads(
        pickle.dumps(messages.RiskNotices((messages.NoticeRecord("n", POOL, 1.0),)))
    ).notices
    assert isinstance(notice.pool, Pool) and notice.pool.zone == "us-east-1a"


def test_a_family_converts_back_to_the_same_exposition() -> None:
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    metrics.skipped.labels(cause="not-managed").inc(2)
    metrics.webhook_latency.observe(0.004)
    round_trip = [family.metric() for family in messages.families(registry.collect())]
    assert exposition(round_trip) == exposition(list(registry.collect()))


def test_merged_metrics_sum_what_each_process_counted() -> None:
    controller, webhook = CollectorRegistry(), CollectorRegistry()
    ours, theirs = ControllerMetrics(controller), ControllerMetrics(webhook)
    ours.actions.labels(action="patch", dry_run="false").inc()
    ours.webhook_latency.observe(0.002)  # (an in-process webhook before: counted by both, summed)
    theirs.decisions.labels(capacity_type="spot", reason="spot-share").inc(3)
    theirs.webhook_latency.observe(0.0008)
    theirs.webhook_latency.observe(0.02)

    families = messages.merged(controller.collect(), messages.families(webhook.collect()))
    text = exposition(families).decode()
    for metric in families:
        for sample in metric.samples:
            assert text.count(f"\n{sample.name}{{") + text.count(f"\n{sample.name} ") >= 1
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for metric in families for s in metric.samples
    }
    assert values[("shipshape_actions_total", (("action", "patch"), ("dry_run", "false")))] == 1.0
    assert (
        values[("shipshape_placement_decisions_total", (("capacity_type", "spot"), ("reason", "spot-share")))]
        == 3.0
    )
    assert values[("shipshape_webhook_duration_seconds_count", ())] == 3.0
    assert values[("shipshape_webhook_duration_seconds_bucket", (("le", "0.001"),))] == 1.0
    assert values[("shipshape_webhook_duration_seconds_bucket", (("le", "0.002"),))] == 2.0
    assert values[("shipshape_webhook_duration_seconds_bucket", (("le", "0.003"),))] == 2.0
    assert values[("shipshape_webhook_duration_seconds_bucket", (("le", "+Inf"),))] == 3.0
    assert values[("shipshape_webhook_duration_seconds_sum", ())] == pytest.approx(0.0228)
