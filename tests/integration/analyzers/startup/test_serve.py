"""`shipshape startup serve`: list once, then watch pods, events and nodes through the official
client against the served emulator, and expose each pod's start-up once at /metrics."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from prometheus_client import start_http_server
from prometheus_client.parser import text_string_to_metric_families

from shipshape.analyzers.startup import live
from shipshape.analyzers.startup.prometheus import StartupMetrics
from shipshape.cli import startup as startup_cli
from shipshape.emulator import assembly
from shipshape.emulator.scenario import Scenario
from shipshape.kube import client
from shipshape.kube.clock import ScaledClock
from tests.emulator_fixtures import ServedEmulator, running

T0 = 1_767_225_600.0


def scenario(replicas: int) -> Scenario:
    images = [f"registry.example/web{i}:1" for i in range(2)]
    return Scenario.model_validate(
        {
            "name": "serve",
            "seed": 3,
            "pools": [
                {
                    "name": "od",
                    "instanceType": "m5.xlarge",
                    "zone": "us-east-1a",
                    "capacityType": "on-demand",
                    "cpu": "4",
                    "memory": "16Gi",
                    "minSize": 1,
                    "initialSize": 1,
                    "maxSize": 1,
                }
            ],
            "autoscaler": {"enabled": False},
            "interruptions": {"enabled": False},
            "kubelet": {"preloadedImages": images},
            "objects": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": f"web{i}", "namespace": "default"},
                    "spec": {
                        "replicas": replicas,
                        "selector": {"matchLabels": {"app": f"web{i}"}},
                        "template": {
                            "metadata": {"labels": {"app": f"web{i}"}},
                            "spec": {"containers": [{"name": "app", "image": images[i]}]},
                        },
                    },
                }
                for i in range(2)
            ],
        }
    )


class Exporter:
    """The serve loop (feed, live state, /metrics) on background threads."""

    def __init__(self, kubeconfig: Path) -> None:
        self.api = client.load_api_client(kubeconfig)
        self.metrics = StartupMetrics()
        self.feed = startup_cli.ClusterFeed(self.api, watch_seconds=1)
        self.state = live.LiveStartup(self.metrics, settle=0.2)
        self.httpd, _ = start_http_server(0, addr="127.0.0.1", registry=self.metrics.registry)
        self.loop = threading.Thread(
            target=startup_cli.run_live,
            args=(self.feed, self.state),
            kwargs={"stop": self.feed.stop, "tick": 0.05},
            daemon=True,
        )

    def scrape(self) -> dict[str, float]:
        url = f"http://127.0.0.1:{self.httpd.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "le")
                if not sample.name.endswith("_bucket"):
                    samples[f"{sample.name}{{{labels}}}"] = sample.value
        return samples

    def wait_for(self, check: Callable[[dict[str, float]], bool], seconds: float = 15.0) -> dict[str, float]:
        deadline = time.monotonic() + seconds
        samples = self.scrape()
        while not check(samples):
            if time.monotonic() > deadline:
                raise AssertionError(f"metrics never got there: {samples}")
            time.sleep(0.05)
            samples = self.scrape()
        return samples

    def close(self) -> None:
        self.feed.stop.set()
        self.loop.join(5)
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedEmulator]:
    cluster = assembly.build(scenario(replicas=2), ScaledClock(speed=10.0, start=T0))
    with running(cluster, tmp_path) as emulator:
        asyncio.run_coroutine_threadsafe(assembly.apply_objects(cluster), emulator.loop).result(10)
        yield emulator


@pytest.fixture
def exporter(served: ServedEmulator) -> Iterator[Exporter]:
    running_exporter = Exporter(served.kubeconfig)
    running_exporter.feed.start()
    running_exporter.loop.start()
    yield running_exporter
    running_exporter.close()


TOTAL = "shipshape_pod_start_total_duration_seconds_count{namespace=default}"
SLI = "shipshape_pod_start_sli_duration_seconds_count{namespace=default}"
NODE_READY = "shipshape_node_startup_ready_duration_seconds_count{capacity_type=on-demand,pool=od}"


def test_each_pod_is_observed_once_as_the_watch_delivers_it(
    served: ServedEmulator, exporter: Exporter
) -> None:
    samples = exporter.wait_for(lambda s: s.get(TOTAL) == 4 and s.get(NODE_READY) == 1)
    assert samples[SLI] == 4
    assert exporter.feed.relists == {"pods": 1, "events": 1, "nodes": 1}  # listed once, then watched

    # a scale-up reaches the histograms through the watch alone
    apps = k8s.AppsV1Api(exporter.api)
    apps.patch_namespaced_deployment_scale("web0", "default", {"spec": {"replicas": 3}})
    exporter.wait_for(lambda s: s.get(TOTAL) == 5)
    # pods that keep changing (a label here) are not observed again
    core = k8s.CoreV1Api(exporter.api)
    for pod in client.list_pods(exporter.api, "default"):
        core.patch_namespaced_pod(
            pod["metadata"]["name"], "default", {"metadata": {"labels": {"seen": "yes"}}}
        )
    time.sleep(0.5)
    assert exporter.scrape()[TOTAL] == 5
    assert exporter.state.pending == 0


def test_an_expired_watch_lists_again_without_counting_twice(
    served: ServedEmulator, exporter: Exporter
) -> None:
    exporter.wait_for(lambda s: s.get(TOTAL) == 4)
    store = served.cluster.store

    def compact() -> None:  # keep only the last few changes, as etcd compaction does
        store._history = collections.deque(store._history, maxlen=2)

    served.call(compact)
    deadline = time.monotonic() + 15
    while exporter.feed.relists["pods"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exporter.feed.relists["pods"] >= 2
    time.sleep(0.3)
    assert exporter.scrape()[TOTAL] == 4


def _pod(name: str, uid: str, ready: bool) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"}]
    statuses: list[dict[str, Any]] = []
    if ready:
        conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:04Z"})
        statuses = [{"name": "app", "state": {"running": {"startedAt": "2026-01-01T00:00:03Z"}}}]
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "app:1"}]},
        "status": {"conditions": conditions, "containerStatuses": statuses},
    }


def test_live_state_waits_for_late_events_and_forgets_observed_pods() -> None:
    metrics = StartupMetrics()
    state = live.LiveStartup(metrics, settle=5.0)
    state.replace(live.PODS, [_pod("a", "u1", ready=False)])
    assert state.flush(100.0)["pods"] == 0
    state.apply(live.PODS, live.MODIFIED, _pod("a", "u1", ready=True))
    assert state.flush(101.0)["pods"] == 0  # finished, waiting for late events
    pulled = {
        "metadata": {"name": "a.1", "namespace": "ns", "uid": "e1"},
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "u1",
                           "fieldPath": "spec.containers{app}"},
        "reason": "Pulled",
        "message": 'Successfully pulled image "app:1" in 1.5s (1.5s including waiting). Image size: 9 bytes.',
        "firstTimestamp": "2026-01-01T00:00:03Z",
        "lastTimestamp": "2026-01-01T00:00:03Z",
        "count": 1,
    }  # fmt: skip
    state.apply(live.EVENTS, live.ADDED, pulled)
    assert state.flush(106.5)["pods"] == 1
    (family,) = metrics.image_pull.collect()
    pulls = family.samples
    assert [s.value for s in pulls if s.name.endswith("_count")] == [1.0]  # the late event counted
    assert state.events.for_pod("ns", "a") == []  # forgotten once observed
    state.replace(live.PODS, [_pod("a", "u1", ready=True)])  # a re-list
    assert state.flush(200.0)["pods"] == 0
    state.apply(live.PODS, live.DELETED, _pod("a", "u1", ready=True))
    assert state.pending == 0 and not state.pods
