from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
from cryptography import x509

from shipshape.controller.webhook.registration import (
    ServiceTarget,
    ensure_webhook_configuration,
    webhook_configuration,
)
from shipshape.controller.webhook.server import bind, create_app, https_server, running
from shipshape.kube.certs import generate_certificates, service_dns_names, write_bundle
from tests.unit.controller.builders import Harness, deployment, namespace, node, pod_of, replicaset, review

ENABLED = {"spot.shipshape.dev/enabled": "true"}


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Harness, str, ssl.SSLContext, dict[str, Any]]]:
    h = Harness()
    dep = deployment("web", 2, {**ENABLED, "spot.shipshape.dev/on-demand-base": "1"})
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, node("od", "on-demand"), node("s1", "spot"))
    bundle = generate_certificates(["localhost"], ["127.0.0.1"], now=h.clock.now())
    ca_file, cert_file, key_file = write_bundle(bundle, tmp_path / "certs")
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    server = https_server(create_app(h.placer, h.metrics), cert_file, key_file)
    sock = bind("127.0.0.1", 0)
    url = f"https://127.0.0.1:{sock.getsockname()[1]}"
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        async with running(server, sock):
            yield h, url, context, rs
    finally:
        sock.close()


async def test_admission_review_round_trip_over_tls(
    served: tuple[Harness, str, ssl.SSLContext, dict[str, Any]],
) -> None:
    _, url, context, rs = served
    async with httpx.AsyncClient(verify=context) as client:
        answers = []
        for _ in range(2):
            pod = pod_of(rs)
            response = await client.post(f"{url}/mutate", json=review(pod))
            assert response.status_code == 200
            body = response.json()
            assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
            answer = body["response"]
            mutated = jsonpatch.apply_patch(
                pod, jsonpatch.JsonPatch.from_string(base64.b64decode(answer["patch"]).decode())
            )
            answers.append(mutated["spec"]["affinity"]["nodeAffinity"])
        capacities = [
            a["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][
                0
            ]["values"]
            for a in answers
        ]
        assert capacities == [["on-demand"], ["spot"]]

        bad = await client.post(f"{url}/mutate", content=b"not json")
        assert bad.status_code == 400
        assert (await client.get(f"{url}/healthz")).text == "ok"
        metrics = (await client.get(f"{url}/metrics")).text
        assert "shipshape_webhook_duration_seconds_count 3.0" in metrics
        assert 'shipshape_placement_decisions_total{capacity_type="spot",reason="spot-share"} 1.0' in metrics


async def test_untrusted_client_cannot_talk_to_the_server(
    served: tuple[Harness, str, ssl.SSLContext, dict[str, Any]],
) -> None:
    _, url, _, _ = served
    async with httpx.AsyncClient() as client:  # system trust store: our CA is not in it
        with pytest.raises(httpx.ConnectError):
            await client.get(f"{url}/healthz")


def test_serving_certificate_names_and_chain() -> None:
    bundle = generate_certificates(
        service_dns_names("shipshape", "shipshape-system"), ["127.0.0.1"], now=1.8e9
    )
    cert = x509.load_pem_x509_certificate(bundle.cert_pem)
    ca = x509.load_pem_x509_certificate(bundle.ca_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "shipshape.shipshape-system.svc" in names.get_values_for_type(x509.DNSName)
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True


class FakeConfigurations:
    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []

    def get(self, name: str) -> dict[str, Any] | None:
        self.calls.append("get")
        return self.stored.get(name)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("create")
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
        # The API server fills defaults of its own (which must not count as a difference).
        stored["webhooks"] = [
            {**w, "clientConfig": {**w["clientConfig"]}, "extra": "default"} for w in body["webhooks"]
        ]
        self.stored[body["metadata"]["name"]] = stored
        return stored

    def replace(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("replace")
        assert body["metadata"]["resourceVersion"] == self.stored[name]["metadata"]["resourceVersion"]
        self.stored[name] = body
        return body


def test_registration_creates_then_leaves_alone_then_updates_the_ca_bundle() -> None:
    fake = FakeConfigurations()
    first = webhook_configuration(
        ca_bundle=b"CA-1", namespace="shipshape-system", url="https://127.0.0.1:9443/mutate"
    )
    hook = first["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] <= 5
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "shipshape-system"]
    assert hook["rules"][0]["operations"] == ["CREATE"] and hook["rules"][0]["resources"] == ["pods"]
    assert ensure_webhook_configuration(fake, first) == "created"
    assert ensure_webhook_configuration(fake, first) == "unchanged"
    rotated = webhook_configuration(
        ca_bundle=b"CA-2", namespace="shipshape-system", url="https://127.0.0.1:9443/mutate"
    )
    assert ensure_webhook_configuration(fake, rotated) == "updated"
    stored = fake.stored["shipshape-placement"]["webhooks"][0]["clientConfig"]
    assert base64.b64decode(stored["caBundle"]) == b"CA-2"
    in_cluster = webhook_configuration(
        ca_bundle=b"CA-2",
        namespace="shipshape-system",
        service=ServiceTarget("shipshape-system", "shipshape"),
    )
    assert in_cluster["webhooks"][0]["clientConfig"]["service"]["path"] == "/mutate"
    with pytest.raises(ValueError, match="exactly one"):
        webhook_configuration(ca_bundle=b"x", namespace="n")


@pytest.mark.parametrize("late", ["ReplicaSet", "Deployment", "never"])
async def test_a_pod_whose_replicaset_is_unknown_waits_for_it(tmp_path: Path, late: str) -> None:
    """The ReplicaSet's informer event can come after its first pods' admissions: the server waits a
    little for it (and for the ReplicaSet's Deployment, which another informer brings), and places the
    pod once it arrives; a pod whose owner never comes is admitted as is."""
    import asyncio

    from shipshape.controller.state import ClusterState
    from shipshape.controller.state.views import Change, Replica
    from shipshape.controller.webhook.admission import ReplicaPlacer
    from shipshape.controller.webhook.server import OWNER_WAIT_SECONDS
    from tests.unit.controller.builders import added

    h = Harness()
    replica = Replica(ClusterState(h.config))
    dep = deployment("web", 2, ENABLED)
    rs = replicaset(dep)
    early = [namespace("shop"), node("od", "on-demand"), node("s1", "spot")]
    early += [dep] if late == "ReplicaSet" else [rs] if late == "Deployment" else [dep]
    for obj in early:
        replica.offer(Change("apply", str(obj["kind"]), event=added(obj)))
    owner_arrives = late != "never"
    last = rs if late == "ReplicaSet" else dep
    placer = ReplicaPlacer(replica, h.config, h.risk, h.clock, h.metrics)
    bundle = generate_certificates(["localhost"], ["127.0.0.1"], now=h.clock.now())
    ca_file, cert_file, key_file = write_bundle(bundle, tmp_path / "certs")
    server = https_server(create_app(placer, h.metrics), cert_file, key_file)
    sock = bind("127.0.0.1", 0)
    context = ssl.create_default_context(cafile=str(ca_file))
    if owner_arrives:  # the ReplicaSet's event, 50 ms after the pod's review was sent
        asyncio.get_running_loop().call_later(
            0.05, lambda: replica.offer(Change("apply", str(last["kind"]), event=added(last)))
        )
    try:
        async with running(server, sock), httpx.AsyncClient(verify=context) as client:
            started = asyncio.get_running_loop().time()
            url = f"https://127.0.0.1:{sock.getsockname()[1]}/mutate"
            response = await client.post(url, json=review(pod_of(rs)))
            took = asyncio.get_running_loop().time() - started
    finally:
        sock.close()
    answer = response.json()["response"]
    assert answer["allowed"] is True
    if owner_arrives:
        assert "patch" in answer  # placed, as any pod of a known ReplicaSet
        assert took < OWNER_WAIT_SECONDS + 1.0
    else:
        assert "patch" not in answer  # admitted unmodified once the wait is over
        assert took >= OWNER_WAIT_SECONDS
