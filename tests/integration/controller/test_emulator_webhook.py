"""The webhook over real HTTPS, called by the emulator's API server for the pods its controllers create.

The emulator's Deployment and ReplicaSet controllers create the pods of a 10-replica Deployment in one
burst; each creation is admitted through the registered MutatingWebhookConfiguration, and the cache is
fed by the emulator's watch events, as the controller's informers will feed it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import ClusterState, read_decision
from shipshape.controller.webhook.admission import PodPlacer
from shipshape.controller.webhook.registration import WEBHOOK_NAME, webhook_configuration
from shipshape.controller.webhook.server import bind, create_app, https_server
from shipshape.emulator.api import Api
from shipshape.emulator.controllers import all_controllers
from shipshape.emulator.resources import DEPLOYMENTS, MUTATING_WEBHOOKS, NAMESPACES, NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import WatchEvent
from shipshape.kube.certs import generate_certificates, write_bundle
from shipshape.kube.clock import VirtualClock
from tests.unit.controller.builders import node

Obj = dict[str, Any]


class ThreadedWebhook:
    """The webhook server on its own thread and event loop (the emulator's API blocks on each call)."""

    def __init__(self, placer: PodPlacer, metrics: ControllerMetrics, certs: Path) -> None:
        self.server = https_server(create_app(placer, metrics), certs / "tls.crt", certs / "tls.key")
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True
        )

    def __enter__(self) -> ThreadedWebhook:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the webhook server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.exit()
        self.thread.join(10)
        self.sock.close()


def run_create(api: Api, rt: Any, namespace: str, body: Obj) -> Obj:
    """An API create that needs no webhook call completes without an event loop."""
    coro = api.create(rt, namespace, body)
    try:
        coro.send(None)
    except StopIteration as stop:
        created: Obj = stop.value
        return created
    raise AssertionError("the create waited for I/O")


@pytest.fixture
def emulated(tmp_path: Path) -> Iterator[tuple[Cluster, Api, ClusterState]]:
    cluster = Cluster(VirtualClock())
    api = Api(cluster)
    for name in ("default", "kube-system", "shipshape-system"):
        cluster.store.create(
            NAMESPACES,
            {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}, "spec": {}},
        )
    for body in (
        node("od-1", "on-demand"),
        node("a-1", "spot", "m5.large", "us-east-1a"),
        node("b-1", "spot", "m5.large", "us-east-1b"),
    ):
        cluster.store.create(NODES, {k: v for k, v in body.items() if k != "kind"})
    config = ControllerConfig()
    cache = ClusterState(config)
    for rt in (NAMESPACES, NODES):
        cache.replace(rt.kind, cluster.store.list(rt))

    def feed(event: WatchEvent) -> None:
        cache.apply({"type": event.type, "object": event.object}, kind=event.resource.kind)

    cluster.store.subscribe(feed)
    metrics = ControllerMetrics(CollectorRegistry())
    placer = PodPlacer(cache, config, RiskModel(), cluster.clock, metrics)
    bundle = generate_certificates(["localhost"], ["127.0.0.1"], now=time.time())
    write_bundle(bundle, tmp_path)
    with ThreadedWebhook(placer, metrics, tmp_path) as webhook:
        registration = webhook_configuration(
            ca_bundle=bundle.ca_pem,
            namespace=config.namespace,
            url=f"https://127.0.0.1:{webhook.port}/mutate",
        )
        # The pod webhook alone: the Deployment below is created without an event loop to call one.
        registration["webhooks"] = [h for h in registration["webhooks"] if h["name"] == WEBHOOK_NAME]
        run_create(api, MUTATING_WEBHOOKS, "", registration)
        for model in all_controllers():
            cluster.add(model)
        yield cluster, api, cache


def test_ten_replica_burst_through_the_emulator_lands_on_the_split(
    emulated: tuple[Cluster, Api, ClusterState],
) -> None:
    cluster, api, _ = emulated
    labels = {"app": "web"}
    run_create(
        api,
        DEPLOYMENTS,
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "annotations": {
                    "spot.shipshape.dev/enabled": "true",
                    "spot.shipshape.dev/on-demand-base": "2",
                    "spot.shipshape.dev/spot-percentage": "75",
                },
            },
            "spec": {
                "replicas": 10,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "nginx"}]},
                },
            },
        },
    )
    cluster.engine.run_until(cluster.clock.now() + 5)
    pods = cluster.store.list(PODS, "default")
    assert len(pods) == 10
    decisions = [read_decision(pod) for pod in pods]
    assert all(d is not None for d in decisions)
    assert Counter(d.capacity_type for d in decisions if d) == {"on-demand": 4, "spot": 6}
    assert Counter(d.pool for d in decisions if d and d.capacity_type == "spot") == {
        "m5.large/us-east-1a": 3,
        "m5.large/us-east-1b": 3,
    }
    for pod, decision in zip(pods, decisions, strict=True):
        assert decision is not None
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert all(
            {"key": "node.kubernetes.io/capacity", "operator": "In", "values": [decision.capacity_type]}
            in term["matchExpressions"]
            for term in terms
        )


def test_pods_outside_managed_workloads_are_created_unchanged(
    emulated: tuple[Cluster, Api, ClusterState],
) -> None:
    cluster, api, cache = emulated
    labels = {"app": "plain"}
    run_create(
        api,
        DEPLOYMENTS,
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "plain"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "nginx"}]},
                },
            },
        },
    )
    cluster.engine.run_until(cluster.clock.now() + 5)
    pods = cluster.store.list(PODS, "default")
    assert len(pods) == 2
    assert all("affinity" not in pod["spec"] and read_decision(pod) is None for pod in pods)
    assert cache.assumed_count(cluster.clock.now()) == 0
