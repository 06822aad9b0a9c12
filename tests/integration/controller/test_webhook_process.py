"""The webhook in a process of its own (`webhook.child`): it answers from the state the controller's
fan-out relays, follows what the loops learn, shows its metrics in the process's, comes back when it
dies, and stops gracefully; the controller process runs it so by default, or in-process when told."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
from prometheus_client import CollectorRegistry

from shipshape.controller.loops import LoopSettings
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.placement import Pool
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.risk import RiskModel
from shipshape.controller.state.views import Fanout, Relay
from shipshape.controller.webhook.child import ChildSpec, ProcessMetrics, SharedReads, WebhookChild
from shipshape.controller.webhook.server import bind
from shipshape.kube.certs import generate_certificates, write_bundle
from shipshape.kube.clock import RealClock
from tests.integration.emulator.served_cluster import serve_cluster
from tests.unit.controller.builders import added, deployment, namespace, node, pod_of, replicaset, review

from .harness import controller, managed_deployment

Obj = dict[str, Any]
ENABLED = {"spot.shipshape.dev/enabled": "true"}
SPOT_POOL = Pool("m5.large", "us-east-1a")


@dataclass
class Served:
    child: WebhookChild
    fanout: Fanout
    url: str
    context: ssl.SSLContext
    replicaset: Obj
    metrics: ControllerMetrics
    registry: CollectorRegistry
    risk: RiskModel
    shortages: set[Pool] = field(default_factory=set)
    restarted: list[int] = field(default_factory=list)

    def capacity(self) -> str | None:
        """The capacity type the webhook chooses for a new pod of the Deployment (None: no decision)."""
        pod = pod_of(self.replicaset)
        answer = httpx.post(f"{self.url}/mutate", json=review(pod), verify=self.context, timeout=10).json()
        patch = answer["response"].get("patch")
        if patch is None:
            return None
        mutated = jsonpatch.apply_patch(
            pod, jsonpatch.JsonPatch.from_string(base64.b64decode(patch).decode())
        )
        terms = mutated["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        return str(terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0])


def eventually(what: str, check: Callable[[], bool], seconds: float = 20.0) -> None:
    """Poll `check` until it holds: changes cross a pipe to another process."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.02)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    relay = Relay()
    fanout = Fanout(relay)
    dep = deployment("web", 10, {**ENABLED, "spot.shipshape.dev/on-demand-base": "1"})
    rs = replicaset(dep)
    for obj in (namespace("shop"), dep, rs, node("od", "on-demand", "m5.xlarge"), node("s1", "spot")):
        fanout.apply(added(obj), str(obj["kind"]))
    ca_file, cert, key = write_bundle(
        generate_certificates(["localhost"], ["127.0.0.1"], now=time.time()), tmp_path / "certs"
    )
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    risk = RiskModel()
    shortages: set[Pool] = set()
    sock = bind("127.0.0.1", 0)
    spec = ChildSpec(ControllerConfig(), RealClock(), str(cert), str(key))
    restarted: list[int] = []
    child = WebhookChild(
        spec,
        sock,
        relay,
        SharedReads(risk.notices, lambda now: frozenset(shortages), dict),
        registry.collect,
        on_restart=lambda: restarted.append(1),
    )
    child.start(60.0)
    url = f"https://127.0.0.1:{sock.getsockname()[1]}"
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        yield Served(child, fanout, url, context, rs, metrics, registry, risk, shortages, restarted)
    finally:
        child.stop()
        sock.close()


def test_the_webhook_process_answers_from_the_relayed_state_and_follows_its_changes(served: Served) -> None:
    assert [served.capacity(), served.capacity()] == ["on-demand", "spot"]
    dep = deployment("web", 10, {"spot.shipshape.dev/enabled": "false"})
    served.fanout.apply({"type": "MODIFIED", "object": dep}, "Deployment")
    eventually("the Deployment opted out", lambda: served.capacity() is None)


def test_what_the_loops_learn_reaches_the_webhook_process(served: Served) -> None:
    assert [served.capacity(), served.capacity()] == ["on-demand", "spot"]
    served.shortages.add(SPOT_POOL)
    eventually("the shortage avoided", lambda: served.capacity() == "on-demand")
    served.shortages.clear()
    eventually("the shortage over", lambda: served.capacity() == "spot")
    served.risk.record_notice("s0", SPOT_POOL, time.time())
    eventually("the pool at risk avoided", lambda: served.capacity() == "on-demand")


def test_an_admission_shows_in_the_process_metrics(served: Served) -> None:
    served.metrics.actions.labels(action="patch", dry_run="false").inc()  # counted by the controller
    assert served.capacity() == "on-demand"
    scraped = CollectorRegistry(auto_describe=False)
    scraped.register(ProcessMetrics(served.registry, served.child.samples))
    decisions = scraped.get_sample_value(
        "shipshape_placement_decisions_total", {"capacity_type": "on-demand", "reason": "on-demand-base"}
    )
    assert decisions == 1.0
    assert scraped.get_sample_value("shipshape_webhook_duration_seconds_count") == 1.0
    assert scraped.get_sample_value("shipshape_actions_total", {"action": "patch", "dry_run": "false"}) == 1.0
    # The webhook's own GET /metrics shows the whole process too.
    text = httpx.get(f"{served.url}/metrics", verify=served.context, timeout=10).text
    assert 'shipshape_actions_total{action="patch",dry_run="false"} 1.0' in text
    assert "shipshape_webhook_duration_seconds_count 1.0" in text


def test_a_webhook_process_that_dies_is_started_again_with_the_whole_state(served: Served) -> None:
    first = served.child.pid
    assert first is not None and served.capacity() == "on-demand"
    served.fanout.apply(added(node("s2", "spot", "c5.xlarge", "us-east-1b")), "Node")
    os.kill(first, signal.SIGKILL)
    eventually(
        "a new webhook process serving", lambda: served.child.pid != first and served.child.serving.is_set()
    )
    assert served.restarted == [1] and served.child.restarts == 1
    # Same port, the state sent again (the new node too): the new process knows the Deployment.
    assert served.capacity() == "on-demand"  # its own assumptions died with the old process
    served.shortages.add(SPOT_POOL)
    eventually("the other spot pool chosen", lambda: served.capacity() == "spot")


def test_a_certificate_it_cannot_load_leaves_the_webhook_serving_the_old_one(
    served: Served, tmp_path: Path
) -> None:
    assert [served.capacity(), served.capacity()] == ["on-demand", "spot"]
    missing = tmp_path / "missing"
    served.child.serve_certificate(missing / "tls.crt", missing / "tls.key")
    served.shortages.add(SPOT_POOL)  # a message after it is still acted on
    eventually("the shortage avoided", lambda: served.capacity() == "on-demand")
    assert served.child.pid is not None and served.child.restarts == 0


def test_a_ctrl_c_is_for_the_controller_to_act_on(served: Served) -> None:
    """A terminal's Ctrl-C reaches the whole process group: the webhook process keeps serving until
    the controller stops it (it would otherwise die, and be started again, mid-stop)."""
    pid = served.child.pid
    assert pid is not None
    os.kill(pid, signal.SIGINT)
    assert served.capacity() == "on-demand"
    served.child.stop()
    assert served.child.exitcode == 0 and served.child.restarts == 0


def test_stop_is_graceful(served: Served) -> None:
    served.child.stop()
    assert served.child.exitcode == 0  # it left by itself on Stop: not terminated, not killed
    assert not served.child.serving.is_set()


pytestmark_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


@pytestmark_kubectl
@pytest.mark.integration
@pytest.mark.parametrize("webhook_process", [True, False], ids=["own-process", "in-process"])
def test_the_controller_admits_pods_from_either_arrangement(tmp_path: Path, webhook_process: bool) -> None:
    with (
        serve_cluster(tmp_path) as cluster,
        controller(
            cluster,
            tmp_path / "c",
            loops=LoopSettings(headroom_enabled=False),
            webhook_process=webhook_process,
        ) as process,
    ):
        assert (process.webhook_child is not None) is webhook_process
        assert process.webhook_serving
        loops = process.scheduler.thread.native_id
        assert loops is not None
        if os.getpriority(os.PRIO_PROCESS, 0) <= 10:
            assert os.getpriority(os.PRIO_PROCESS, loops) == 10  # the loops give way to the webhook
        cluster.kubectl("apply", "-f", "-", stdin=managed_deployment("web", 3))
        cluster.wait("three pods created", lambda: len(cluster.pods(app="web")) == 3, 120)
        decided = process.registry.get_sample_value(
            "shipshape_placement_decisions_total", {"capacity_type": "on-demand", "reason": "on-demand-base"}
        )
        assert decided is not None and decided >= 1
        if webhook_process:
            assert process.registry.get_sample_value("shipshape_webhook_process_restarts_total") == 0.0
    assert not process.webhook_serving
