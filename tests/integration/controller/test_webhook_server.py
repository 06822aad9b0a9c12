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


def _raw_exchange(url: str, context: ssl.SSLContext, payload: bytes, responses: int) -> list[bytes]:
    """Send `payload` as is over one TLS connection and read `responses` HTTP responses (their heads and
    bodies by content-length), or until the server closes."""
    import socket

    port = int(url.rsplit(":", 1)[1])
    answers: list[bytes] = []
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        conn.sendall(payload)
        buffered = b""
        while len(answers) < responses:
            while b"\r\n\r\n" not in buffered:
                chunk = conn.recv(65536)
                if not chunk:
                    return answers
                buffered += chunk
            head, _, rest = buffered.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(rest) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                rest += chunk
            answers.append(head + b"\r\n\r\n" + rest[:length])
            buffered = rest[length:]
    return answers


async def test_the_server_speaks_plain_http_1_1(
    served: tuple[Harness, str, ssl.SSLContext, dict[str, Any]],
) -> None:
    """Routes and methods, a body over the limit, HEAD, and `?timeout=` as the API server sends it."""
    _, url, context, rs = served
    async with httpx.AsyncClient(verify=context) as client:
        assert (await client.get(f"{url}/nowhere")).status_code == 404
        wrong = await client.get(f"{url}/mutate")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
        head = await client.head(f"{url}/healthz")
        assert head.status_code == 200 and head.headers["content-length"] == "2" and head.content == b""
        answer = await client.post(f"{url}/mutate?timeout=2s", json=review(pod_of(rs)))
        assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True
        assert answer.headers["content-type"] == "application/json"
        huge = await client.post(f"{url}/mutate", content=b" " * (8 * 1024 * 1024 + 1))
        assert huge.status_code == 413 and huge.headers["connection"] == "close"
        assert (await client.get(f"{url}/healthz")).text == "ok"  # a new connection serves on


async def test_pipelined_requests_are_answered_in_order_and_garbage_closes_the_connection(
    served: tuple[Harness, str, ssl.SSLContext, dict[str, Any]],
) -> None:
    import asyncio
    import json

    h, url, context, rs = served
    bodies = [json.dumps(review(pod_of(rs), uid=f"pipelined-{i}")).encode() for i in range(3)]
    payload = b"".join(
        b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(body), body)
        for body in bodies
    )
    payload += b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    answers = await asyncio.to_thread(_raw_exchange, url, context, payload, 5)
    assert len(answers) == 4  # and then the server closed, as asked
    uids = [json.loads(answer.partition(b"\r\n\r\n")[2])["response"]["uid"] for answer in answers[:3]]
    assert uids == ["pipelined-0", "pipelined-1", "pipelined-2"]
    assert answers[3].startswith(b"HTTP/1.1 200 OK") and b"connection: close" in answers[3]
    refused = h.metrics.webhook_errors.labels(stage="request")._value.get()
    garbage = await asyncio.to_thread(_raw_exchange, url, context, b"NOT HTTP AT ALL\r\n\r\n", 2)
    assert len(garbage) == 1 and garbage[0].startswith(b"HTTP/1.1 400 Bad Request")
    # uvicorn answers what is not HTTP itself; the webhook's error counter still counts it.
    assert h.metrics.webhook_errors.labels(stage="request")._value.get() == refused + 1


async def test_a_client_that_waits_for_100_continue_gets_it_then_its_answer(
    served: tuple[Harness, str, ssl.SSLContext, dict[str, Any]],
) -> None:
    import asyncio
    import json
    import socket

    _, url, context, rs = served
    body = json.dumps(review(pod_of(rs), uid="continued")).encode()
    port = int(url.rsplit(":", 1)[1])

    def exchange() -> tuple[bytes, bytes]:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
        ):
            conn.sendall(
                b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body)
            )
            interim = conn.recv(65536)  # before the body is sent
            conn.sendall(body)
            answer = b""
            while b'"uid":"continued"' not in answer:
                chunk = conn.recv(65536)
                assert chunk, answer
                answer += chunk
            return interim, answer

    interim, answer = await asyncio.to_thread(exchange)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert answer.startswith(b"HTTP/1.1 200 OK")


async def test_a_rotated_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    """What the certificate rotation does (the controller's and the webhook process's): the new chain
    loaded into the server's TLS context, without a restart."""
    h = Harness()
    old = generate_certificates(["localhost"], ["127.0.0.1"], now=h.clock.now())
    new = generate_certificates(["localhost"], ["127.0.0.1"], now=h.clock.now())
    old_ca, old_cert, old_key = write_bundle(old, tmp_path / "old")
    new_ca, new_cert, new_key = write_bundle(new, tmp_path / "new")
    server = https_server(create_app(h.placer, h.metrics), old_cert, old_key)
    sock = bind("127.0.0.1", 0)
    url = f"https://127.0.0.1:{sock.getsockname()[1]}/healthz"
    trusts_old = ssl.create_default_context(cafile=str(old_ca))
    trusts_new = ssl.create_default_context(cafile=str(new_ca))
    try:
        async with running(server, sock):
            async with httpx.AsyncClient(verify=trusts_old) as client:
                assert (await client.get(url)).text == "ok"
            server.ssl.load_cert_chain(str(new_cert), str(new_key))
            async with httpx.AsyncClient(verify=trusts_new) as client:
                assert (await client.get(url)).text == "ok"
            async with httpx.AsyncClient(verify=trusts_old) as client:
                with pytest.raises(httpx.ConnectError):
                    await client.get(url)
    finally:
        sock.close()


async def test_a_stop_answers_the_review_in_flight_and_takes_no_new_connection(tmp_path: Path) -> None:
    import asyncio

    from shipshape.controller.webhook.server import OWNER_WAIT_SECONDS

    h = Harness()
    dep = deployment("web", 2, ENABLED)
    rs = replicaset(dep)  # never added: its pod waits for it as long as the server lets it
    h.add(namespace("shop"), dep, node("od", "on-demand"), node("s1", "spot"))
    bundle = generate_certificates(["localhost"], ["127.0.0.1"], now=h.clock.now())
    ca_file, cert_file, key_file = write_bundle(bundle, tmp_path / "certs")
    server = https_server(create_app(h.placer, h.metrics), cert_file, key_file)
    sock = bind("127.0.0.1", 0)
    url = f"https://127.0.0.1:{sock.getsockname()[1]}"
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        async with running(server, sock), httpx.AsyncClient(verify=context) as client:
            waiting = asyncio.create_task(client.post(f"{url}/mutate", json=review(pod_of(rs))))
            await asyncio.sleep(OWNER_WAIT_SECONDS / 4)
            server.exit()
            await asyncio.sleep(0.3)  # uvicorn looks at its exit flag every 0.1 s
            async with httpx.AsyncClient(verify=context) as late:
                with pytest.raises(httpx.ConnectError):
                    await late.get(f"{url}/healthz")
            answer = await waiting
            assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True
            assert answer.headers["connection"] == "close"
    finally:
        sock.close()
