"""Acceptance: the analyzer on what the emulator writes (pods, events, nodes through its store),
against the emulator's exact phase times (its ground truth), in virtual time.

Each scenario has known phase durations (image sizes and bandwidth, probe settings, serialized
pulls, init containers, a slow admission webhook); the table says which diagnosis must fire, and
every other rule must stay quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shipshape.analyzers.startup import diagnose, model
from shipshape.analyzers.startup.analysis import PodReport, analyze_pod_startup
from shipshape.emulator import assembly
from shipshape.emulator.kubelet.pods import INIT_SECONDS
from shipshape.emulator.resources import EVENTS, MUTATING_WEBHOOKS, NODES, PODS, VALIDATING_WEBHOOKS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Scenario
from shipshape.kube.clock import VirtualClock
from tests.webhook_server import Certificates, WebhookServer, make_certificates

T0 = 1_767_225_600.0
ALL_RULES = frozenset(name for name, _ in diagnose.RULES)
Truth = dict[str, dict[str, tuple[float, float]]]


@dataclass(frozen=True)
class Case:
    """A scenario with known phase durations and the diagnosis it must produce."""

    name: str
    expected: frozenset[str]
    deployments: int = 1
    image_size: str = "50Mi"
    preloaded: bool = True  # images already on the node (no pull)
    serialize: bool = True
    bandwidth_mbps: float = 100.0
    readiness_delay: int = 0
    init_seconds: float = 0.0
    webhook_delay: float = 0.0


CASES = (
    Case("pre-pulled, nothing slow", frozenset()),
    Case(
        "serialized pulls",
        frozenset({"serialized-image-pulls"}),
        deployments=4,
        image_size="400Mi",
        preloaded=False,
    ),
    Case("parallel pulls", frozenset(), deployments=4, image_size="400Mi", preloaded=False, serialize=False),
    Case(
        "large image on a slow link",
        frozenset({"large-images"}),
        image_size="900Mi",
        preloaded=False,
        bandwidth_mbps=20.0,
    ),
    Case("readiness initialDelaySeconds", frozenset({"readiness-initial-delay"}), readiness_delay=20),
    Case("long init container", frozenset({"long-init-containers"}), init_seconds=15.0),
    Case("slow admission webhook", frozenset({"slow-admission"}), webhook_delay=4.0),
)


def image(index: int) -> str:
    return f"registry.example/img{index}:1"


def scenario(case: Case, webhook_url: str = "", ca_bundle: str = "") -> Scenario:
    objects: list[dict[str, Any]] = []
    if case.webhook_delay:
        objects.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "slow-injector"},
                "webhooks": [
                    {
                        "name": "inject.slow.example.com",
                        "clientConfig": {"url": webhook_url, "caBundle": ca_bundle},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["pods"],
                            }
                        ],
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 10,
                    }
                ],
            }
        )
    for i in range(case.deployments):
        container: dict[str, Any] = {
            "name": "app",
            "image": image(i),
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        }
        if case.readiness_delay:
            container["readinessProbe"] = {
                "httpGet": {"path": "/ready", "port": 8080},
                "initialDelaySeconds": case.readiness_delay,
                "periodSeconds": 1,
            }
        spec: dict[str, Any] = {"containers": [container]}
        annotations: dict[str, str] = {}
        if case.init_seconds:
            spec["initContainers"] = [{"name": "migrate", "image": image(i)}]
            annotations[INIT_SECONDS] = str(case.init_seconds)
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"web{i}", "namespace": "default"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": f"web{i}"}},
                    "template": {
                        "metadata": {"labels": {"app": f"web{i}"}, "annotations": annotations},
                        "spec": spec,
                    },
                },
            }
        )
    images = [image(i) for i in range(case.deployments)]
    return Scenario.model_validate(
        {
            "name": "startup",
            "seed": 1,
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
            "kubelet": {
                "serializeImagePulls": case.serialize,
                "bandwidthMBps": case.bandwidth_mbps,
                "images": dict.fromkeys(images, case.image_size),
                "preloadedImages": images if case.preloaded else [],
            },
            "objects": objects,
        }
    )


class SlowWebhook:
    """A real HTTPS admission webhook on its own thread that holds each review `delay` seconds of
    the emulator's virtual time: in discrete-event mode the in-process Api blocks on the call, so the
    webhook moves the clock as a slow webhook's latency would, and records (received, answered)."""

    def __init__(self, certificates: Certificates, workdir: Path, clock: VirtualClock, delay: float) -> None:
        self.clock = clock
        self.delay = delay
        self.held: dict[str, tuple[float, float]] = {}  # generateName-made pod name -> times
        self._server = WebhookServer(certificates, workdir)
        self._server.handlers["/mutate"] = self._review
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="webhook", daemon=True)

    def _review(self, request: dict[str, Any]) -> dict[str, Any]:
        received = self.clock.now()
        self.clock.advance(self.delay)
        metadata = request["object"]["metadata"]
        self.held[metadata.get("name") or metadata.get("generateName", "")] = (received, self.clock.now())
        return {"allowed": True}

    @property
    def url(self) -> str:
        return self._server.url("/mutate")

    def __enter__(self) -> SlowWebhook:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._server.__aenter__(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._server.__aexit__(None, None, None), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@dataclass
class Run:
    report: PodReport
    truth: Truth
    cluster: Cluster
    webhook: dict[str, tuple[float, float]]


@pytest.fixture(scope="module")
def certificates() -> Certificates:
    return make_certificates(["slow.example.com"])


def run(case: Case, tmp_path: Path, certificates: Certificates, seconds: float = 300.0) -> Run:
    clock = VirtualClock(T0)
    with contextlib.ExitStack() as stack:
        hook = None
        if case.webhook_delay:
            hook = stack.enter_context(SlowWebhook(certificates, tmp_path, clock, case.webhook_delay))
        spec = scenario(case, hook.url if hook else "", certificates.ca_bundle)
        cluster = assembly.build(spec, clock)
        asyncio.run(assembly.apply_objects(cluster))
        cluster.engine.run_until(T0 + seconds)
        assert not cluster.engine.errors
    store = cluster.store
    pods = [p for p in store.list(PODS) if p["metadata"]["namespace"] == "default"]
    # what `shipshape startup pods` lists to name the webhooks that intercept pod creation
    configurations = [
        {**c, "kind": kind}
        for kind, rt in (
            ("MutatingWebhookConfiguration", MUTATING_WEBHOOKS),
            ("ValidatingWebhookConfiguration", VALIDATING_WEBHOOKS),
        )
        for c in store.list(rt)
    ]
    report = analyze_pod_startup(
        pods, store.list(EVENTS), store.list(NODES), webhook_configurations=configurations
    )
    kubelet = cluster.services["kubelet"]
    truth = {t.uid: kubelet.timeline(t.uid) for t in report.timelines}
    return Run(report, truth, cluster, dict(hook.held) if hook else {})


@pytest.fixture(scope="module")
def runs(certificates: Certificates, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Each scenario emulated once (virtual time) and analysed."""
    return {case.name: run(case, tmp_path_factory.mktemp("hook"), certificates) for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_right_diagnosis_fires_and_no_other(case: Case, runs: dict[str, Run]) -> None:
    report = runs[case.name].report
    fired = {finding.rule for finding in report.findings}
    assert fired == case.expected
    assert case.expected <= ALL_RULES


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_phases_match_the_emulated_ground_truth(case: Case, runs: dict[str, Run]) -> None:
    result = runs[case.name]
    assert len(result.report.timelines) == case.deployments
    for timeline in result.report.timelines:
        exact = result.truth[timeline.uid]
        assert timeline.outcome == model.READY
        # phases from API timestamps agree within their one-second resolution
        start, end = exact["startup"]
        assert timeline.end_to_end == pytest.approx(end - start, abs=1.0)
        assert timeline.sandbox_ready == pytest.approx(exact["sandbox"][1], abs=1.0)
        scheduled_start, scheduled_end = exact["scheduled"]
        assert timeline.phases[model.SCHEDULING] == pytest.approx(scheduled_end - scheduled_start, abs=1.0)
        containers = {(c.init, c.name): c for c in timeline.containers}
        app = containers[(False, "app")]
        if case.preloaded:
            assert app.image_present is True
            assert timeline.phases[model.IMAGE_PULL] == 0.0
        else:
            pull_start, pull_end = exact["pull:app"]
            requested, available = exact["image:app"]
            # the Pulled message carries milliseconds
            assert app.pull == pytest.approx(pull_end - pull_start, abs=2e-3)
            assert app.pull_wait == pytest.approx((available - requested) - (pull_end - pull_start), abs=2e-3)
        ready_start, ready_end = exact["ready"]
        assert timeline.phases[model.PROBE_WAIT] == pytest.approx(ready_end - ready_start, abs=1.0)
        if case.init_seconds:
            init_start, init_end = exact["init:migrate"]
            assert init_end - init_start == pytest.approx(case.init_seconds)
            assert containers[(True, "migrate")].run_time == pytest.approx(init_end - init_start, abs=1.0)
            assert timeline.phases[model.INIT_CONTAINERS] == pytest.approx(
                exact["initialized"][1] - exact["sandbox"][1], abs=1.0
            )
        else:
            assert timeline.phases[model.INIT_CONTAINERS] == 0.0


def test_pull_times_follow_image_size_and_bandwidth(runs: dict[str, Run]) -> None:
    (timeline,) = runs["large image on a slow link"].report.timelines
    (app,) = timeline.containers
    assert app.image_size is not None
    # 900 MiB at 20 MB/s, as the kubelet model downloads it
    assert app.pull == pytest.approx(app.image_size / 20e6, rel=0.05)
    assert app.pull is not None and app.pull > 40


def test_serialized_pulls_wait_for_each_other(runs: dict[str, Run]) -> None:
    serial = runs["serialized pulls"].report.timelines
    waits = sorted(t.phases[model.IMAGE_PULL_WAIT] or 0.0 for t in serial)
    pulls = [t.phases[model.IMAGE_PULL] or 0.0 for t in serial]
    # the k-th pull waited for the k earlier ones
    for k, wait in enumerate(waits):
        assert wait == pytest.approx(k * pulls[0], abs=0.5)
    parallel = runs["parallel pulls"].report.timelines
    assert max(t.phases[model.IMAGE_PULL_WAIT] or 0.0 for t in parallel) < 0.5


def test_slow_webhook_shows_as_admission_time(runs: dict[str, Run]) -> None:
    """A mutating webhook runs before the API server stamps creationTimestamp, so its latency lies
    between the controller's request (the Deployment's scale-up event) and the pod's creation."""
    result = runs["slow admission webhook"]
    (timeline,) = result.report.timelines
    (held,) = result.webhook.values()
    assert held[1] - held[0] == pytest.approx(4.0)
    assert timeline.phases[model.ADMISSION] == pytest.approx(held[1] - held[0], abs=1.0)
    (finding,) = result.report.findings
    assert "Deployment/web0" in finding.subjects[0]
    # the webhook configurations name the suspect, with what to tune
    assert "inject.slow.example.com" in finding.cause
    assert any("timeoutSeconds=10, failurePolicy=Fail" in line for line in finding.evidence)
    # without the webhook the same pod is admitted at once
    fast = runs["pre-pulled, nothing slow"].report.timelines[0]
    assert (fast.phases[model.ADMISSION] or 0.0) < 1.0
