"""The agent's usage collection: metrics.k8s.io samples folded into buckets (gaps, repeats, late
samples, new pods and restarts, rates rather than counters), the reports valid against the usage
contract, memory that does not grow with churn, and the loop's spool and sending."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from shipshape.agent.mirror import Mirror
from shipshape.agent.pusher import Answer, Outcome
from shipshape.agent.spool import Spool
from shipshape.agent.usage import (
    MetricsUnavailable,
    NodeSample,
    PodSample,
    RecordedMetrics,
    UsageAggregator,
    UsageLoop,
    UsageSettings,
    node_sample,
    owners_from,
    pod_sample,
)
from shipshape.contracts.usage import UsageReport, parse_usage, pod_workload
from shipshape.kube.clock import VirtualClock, rfc3339

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z, a multiple of 300
WALL = datetime(2026, 11, 27, tzinfo=UTC)


def pod_metrics(
    name: str, at: float, *containers: tuple[str, float, float], namespace: str = "shop"
) -> dict[str, Any]:
    """A PodMetrics as metrics-server writes it: CPU in nanocores, memory in Ki."""
    return {
        "kind": "PodMetrics",
        "metadata": {"name": name, "namespace": namespace},
        "timestamp": rfc3339(at),
        "window": "10s",
        "containers": [
            {"name": c, "usage": {"cpu": f"{round(cpu * 1e9)}n", "memory": f"{int(memory) // 1024}Ki"}}
            for c, cpu, memory in containers
        ],
    }


def node_metrics(name: str, at: float, cpu: float, memory: float) -> dict[str, Any]:
    return {
        "kind": "NodeMetrics",
        "metadata": {"name": name},
        "timestamp": rfc3339(at),
        "window": "10s",
        "usage": {"cpu": f"{round(cpu * 1e9)}n", "memory": f"{int(memory) // 1024}Ki"},
    }


def _node(at: float, cpu: float) -> NodeSample:
    found = node_sample(node_metrics("n1", at, cpu, 2 * 2**30))
    assert found is not None
    return found


def sample(
    name: str, at: float, cpu: float, memory: float = 100 * 2**20, container: str = "app"
) -> PodSample:
    found = pod_sample(pod_metrics(name, at, (container, cpu, memory)))
    assert found is not None
    return found


OWNERS = {
    "web-7d9f-a": ("Deployment", "web"),
    "web-7d9f-b": ("Deployment", "web"),
    "db-0": ("StatefulSet", "db"),
}


def owner_of(namespace: str, name: str) -> tuple[str, str] | None:
    return OWNERS.get(name)


def reports(aggregator: UsageAggregator, now: float) -> list[UsageReport]:
    return [parse_usage(orjson.loads(b.body)) for b in aggregator.close(now, WALL)]


def test_samples_of_a_bucket_fold_into_one_line_per_container_and_node() -> None:
    agg = UsageAggregator(300, 30, owner_of)
    for i, cpu in enumerate((0.1, 0.2, 0.3)):  # 0, 30, 60 s into the bucket
        agg.add_pod(sample("web-7d9f-a", T0 + 30 * i, cpu, (200 + i) * 2**20))
        agg.add_pod(sample("web-7d9f-b", T0 + 30 * i, 0.5))
    agg.add_node(_node(T0, 1.5))
    assert reports(agg, T0 + 300 + 29) == []  # still within the grace
    (report,) = reports(agg, T0 + 330)
    assert report.start == T0 and report.bucket_seconds == 300 and report.idempotency_key() == f"usage-{T0}"
    a = next(p for p in report.pods if p.name == "web-7d9f-a")
    assert (a.workload.kind, a.workload.name) == ("Deployment", "web")
    (app,) = a.containers
    assert app.samples == 3 and app.cpu_mean == pytest.approx(0.2) and app.cpu_max == pytest.approx(0.3)
    assert app.memory_max == 202 * 2**20
    assert [n.name for n in report.nodes] == ["n1"] and report.nodes[0].cpu_mean == pytest.approx(1.5)
    assert agg.open_buckets() == 0


def test_gaps_stay_gaps_and_an_empty_bucket_sends_nothing() -> None:
    agg = UsageAggregator(300, 30, owner_of)
    agg.add_pod(sample("web-7d9f-a", T0 + 10, 0.1))
    agg.add_pod(sample("web-7d9f-b", T0 + 10, 0.1))
    # b has no sample in the next bucket (a gap: absent, not zero); the bucket after is empty.
    agg.add_pod(sample("web-7d9f-a", T0 + 310, 0.1))
    first, second = reports(agg, T0 + 600 + 30)
    assert {p.name for p in first.pods} == {"web-7d9f-a", "web-7d9f-b"}
    assert {p.name for p in second.pods} == {"web-7d9f-a"}
    assert reports(agg, T0 + 900 + 30) == []


def test_a_sample_seen_twice_counts_once_and_a_late_one_is_dropped() -> None:
    agg = UsageAggregator(300, 30, owner_of)
    agg.add_pod(sample("web-7d9f-a", T0 + 10, 0.1))
    agg.add_pod(sample("web-7d9f-a", T0 + 10, 0.1))  # metrics-server had nothing newer
    assert agg.repeated == 1
    (report,) = reports(agg, T0 + 330)
    assert report.pods[0].containers[0].samples == 1
    agg.add_pod(sample("web-7d9f-b", T0 + 290, 0.1))  # its bucket was sent already
    assert agg.late == 1 and agg.open_buckets() == 0


def test_cpu_is_a_rate_not_a_counter_and_restarts_or_new_pods_just_add_lines() -> None:
    agg = UsageAggregator(300, 30, owner_of)
    # A drop is a quieter moment, not a counter reset: the mean of the rates is reported.
    agg.add_pod(sample("web-7d9f-a", T0, 0.5))
    agg.add_pod(sample("web-7d9f-a", T0 + 30, 0.1))
    # The container restarted: no sample while it was down, then samples again under the same name.
    agg.add_pod(sample("web-7d9f-a", T0 + 120, 0.3))
    # A new replica appears mid-bucket.
    agg.add_pod(sample("web-7d9f-b", T0 + 150, 0.2))
    (report,) = reports(agg, T0 + 330)
    a = next(p for p in report.pods if p.name == "web-7d9f-a").containers[0]
    assert a.samples == 3 and a.cpu_mean == pytest.approx(0.3) and a.cpu_max == pytest.approx(0.5)
    b = next(p for p in report.pods if p.name == "web-7d9f-b")
    assert b.workload.name == "web" and b.containers[0].samples == 1


def test_a_pod_of_unknown_owner_is_its_own_workload_and_the_mirror_gives_owners() -> None:
    agg = UsageAggregator(300, 30, lambda ns, name: None)
    agg.add_pod(sample("lonely", T0, 0.1))
    (report,) = reports(agg, T0 + 330)
    assert (report.pods[0].workload.kind, report.pods[0].workload.name) == ("Pod", "lonely")

    mirror = Mirror()
    mirror.replace(
        "Pod",
        [
            {
                "metadata": {
                    "name": "web-7d9f-a",
                    "namespace": "shop",
                    "resourceVersion": "1",
                    "labels": {"pod-template-hash": "7d9f"},
                    "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d9f", "controller": True}],
                }
            }
        ],
    )
    owners = owners_from(mirror.get)
    assert owners("shop", "web-7d9f-a") == ("Deployment", "web")
    assert owners("shop", "nope") is None
    job = {"kind": "Job", "name": "j"}
    assert pod_workload({"name": "j-1", "ownerReferences": [{**job, "controller": True}]}) == ("Job", "j")
    # Kubernetes' rule (metav1.GetControllerOf): a reference not marked controller owns nothing here
    assert pod_workload({"name": "j-1", "ownerReferences": [job]}) == ("Pod", "j-1")
    assert pod_workload({"name": "solo"}) == ("Pod", "solo")


def test_memory_does_not_grow_with_churn() -> None:
    agg = UsageAggregator(300, 30, lambda ns, name: ("Deployment", "churn"))
    for bucket in range(20):
        start = T0 + bucket * 300
        for i in range(50):  # 50 pods a bucket, each a new one: the old ones are gone
            agg.add_pod(sample(f"churn-{bucket}-{i}", start + 10, 0.1))
        agg.close(start + 300 + 30, WALL)
        assert agg.tracked() <= 2 * 50 * 2
        assert agg.open_buckets() <= 1
    # Samples stamped far ahead (a skewed clock) cannot keep more than a few buckets open.
    for k in range(10):
        agg.add_pod(sample("ahead", T0 + 10_000 * (k + 1), 0.1))
    agg.close(T0, WALL)
    assert agg.open_buckets() <= 3


class RecordingPusher:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str | None, bytes]] = []
        self.answer = Answer(Outcome.ACCEPTED, "accepted")

    def send(
        self, sequence: int, compressed: bytes, key: str | None = None, encoding: str = "zstd"
    ) -> Answer:
        if self.answer.outcome is Outcome.ACCEPTED:
            self.sent.append((sequence, key, compressed))
        return self.answer


def test_the_loop_rides_out_a_missing_metrics_api_spools_and_sends_by_bucket(tmp_path: Path) -> None:
    metrics = RecordedMetrics()
    metrics.unavailable = MetricsUnavailable("metrics.k8s.io pods: 404 Not Found", served=False)
    pusher = RecordingPusher()
    clock = VirtualClock(T0)
    loop = UsageLoop(
        metrics,
        owner_of,
        pusher,  # type: ignore[arg-type]
        Spool(tmp_path / "usage"),
        clock,
        UsageSettings(interval=30, bucket_seconds=300),
        wall=lambda: WALL,
    )
    assert not loop.read_once() and loop.available is False
    metrics.unavailable = None
    for step in range(12):  # 6 minutes of reads every 30 s
        clock.set(T0 + 30 * step)
        metrics.pod_items = [pod_metrics("web-7d9f-a", clock.now(), ("app", 0.25, 300 * 2**20))]
        metrics.node_items = [node_metrics("n1", clock.now(), 1.0, 2**30)]
        assert loop.read_once()
    clock.set(T0 + 330)
    pusher.answer = Answer(Outcome.RETRY, "backend unreachable")
    assert loop.close_due() == 1
    assert not loop.drain() and len(loop.spool.items()) == 1  # kept for later
    pusher.answer = Answer(Outcome.ACCEPTED, "accepted")
    assert loop.drain() and not loop.spool
    ((sequence, key, _),) = pusher.sent
    assert (sequence, key) == (T0, f"usage-{T0}")
    assert loop.sent == 1


def test_a_full_usage_spool_drops_the_oldest_bucket(tmp_path: Path) -> None:
    clock = VirtualClock(T0)
    loop = UsageLoop(
        RecordedMetrics(),
        owner_of,
        RecordingPusher(),  # type: ignore[arg-type]
        Spool(tmp_path / "usage", max_bytes=900),
        clock,
        UsageSettings(interval=30, bucket_seconds=300),
        wall=lambda: WALL,
    )
    for bucket in range(4):
        loop.aggregator.add_pod(sample("web-7d9f-a", T0 + bucket * 300, 0.1))
    clock.set(T0 + 4 * 300 + 30)
    loop.close_due()
    kept = [item.sequence for item in loop.spool.items()]
    assert kept and kept[-1] == T0 + 900 and T0 not in kept and loop.dropped >= 1
