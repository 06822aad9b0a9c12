"""Admission webhooks called over real HTTPS by the in-process Api."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from shipshape.emulator import admission
from shipshape.emulator.admission import webhooks
from shipshape.emulator.api import Api, DeleteOptions
from shipshape.emulator.resources import MUTATING_WEBHOOKS, PODS, SERVICES, VALIDATING_WEBHOOKS
from shipshape.emulator.runtime import Cluster
from shipshape.kube import errors
from tests.unit.emulator.api.conftest import pod_body
from tests.webhook_server import Certificates, WebhookServer, json_patch, make_certificates

Obj = dict[str, Any]

SERVICE_DNS = "hooks.webhooks.svc"


@pytest.fixture(scope="module")
def certificates() -> Certificates:
    return make_certificates([SERVICE_DNS])


@pytest.fixture
async def server(certificates: Certificates, tmp_path: Path) -> AsyncIterator[WebhookServer]:
    async with WebhookServer(certificates, tmp_path) as running:
        yield running


def hook(
    name: str,
    client: Obj,
    *,
    resources: list[str] | None = None,
    operations: list[str] | None = None,
    **extra: Any,
) -> Obj:
    return {
        "name": name,
        "clientConfig": client,
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": operations or ["CREATE"],
                "resources": resources or ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **extra,
    }


async def configure(api: Api, kind: str, name: str, *hooks: Obj) -> None:
    rt = MUTATING_WEBHOOKS if kind == "mutating" else VALIDATING_WEBHOOKS
    await api.create(rt, "", {"metadata": {"name": name}, "webhooks": list(hooks)})


def url_client(server: WebhookServer, certificates: Certificates, path: str) -> Obj:
    return {"url": server.url(path), "caBundle": certificates.ca_bundle}


async def test_mutating_webhook_patch_is_applied_and_review_is_complete(
    api: Api, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/mutate"] = lambda request: json_patch(
        [{"op": "add", "path": "/metadata/labels/placed", "value": "spot"}]
    )
    await configure(
        api,
        "mutating",
        "placement",
        hook("placement.example.com", url_client(server, certificates, "/mutate")),
    )
    pod = await api.create(PODS, "default", pod_body())
    assert pod["metadata"]["labels"] == {"app": "web", "placed": "spot"}
    (request,) = server.calls("/mutate")
    assert request["operation"] == "CREATE"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert (request["namespace"], request["name"], request["dryRun"]) == ("default", "web", False)
    assert request["object"]["spec"]["schedulerName"] == "default-scheduler"  # defaulted before webhooks
    assert request["oldObject"] is None
    assert request["userInfo"]["username"] == "system:admin"
    assert request["options"]["kind"] == "CreateOptions"


async def test_webhook_warnings_are_collected_for_the_request(
    api: Api, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/warn"] = lambda request: {"allowed": True, "warnings": ["no PDB for spot pods"]}
    await configure(
        api, "validating", "warn", hook("warn.example.com", url_client(server, certificates, "/warn"))
    )
    with admission.collecting_warnings() as warnings:
        await api.create(PODS, "default", pod_body())
    assert warnings == ["no PDB for spot pods"]
    await api.create(PODS, "default", pod_body("other"))  # outside the block: nothing to collect into
    assert warnings == ["no PDB for spot pods"]


async def test_validating_denial_returns_the_webhook_status(
    api: Api, cluster: Cluster, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/deny"] = lambda request: {
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "spot pods need a PDB"},
    }
    await configure(
        api, "validating", "guard", hook("guard.example.com", url_client(server, certificates, "/deny"))
    )
    with pytest.raises(webhooks.WebhookDenied) as denied:
        await api.create(PODS, "default", pod_body())
    assert denied.value.code == 403
    assert denied.value.status()["message"] == (
        'admission webhook "guard.example.com" denied the request: spot pods need a PDB'
    )
    assert cluster.store.get(PODS, "default", "web") is None


@pytest.mark.parametrize(("policy", "created"), [("Ignore", True), ("Fail", False)])
async def test_dead_webhook_failure_policy(
    api: Api, cluster: Cluster, certificates: Certificates, policy: str, created: bool
) -> None:
    dead = {"url": "https://127.0.0.1:1/mutate", "caBundle": certificates.ca_bundle}
    await configure(api, "mutating", "dead", hook("dead.example.com", dead, failurePolicy=policy))
    if created:
        assert (await api.create(PODS, "default", pod_body()))["metadata"]["name"] == "web"
        return
    with pytest.raises(errors.InternalError) as failed:
        await api.create(PODS, "default", pod_body())
    assert failed.value.code == 500
    assert failed.value.message == (
        'Internal error occurred: failed calling webhook "dead.example.com": failed to call webhook: '
        'Post "https://127.0.0.1:1/mutate?timeout=10s": dial tcp 127.0.0.1:1: connect: connection refused'
    )
    assert cluster.store.get(PODS, "default", "web") is None


async def test_slow_webhook_times_out(api: Api, server: WebhookServer, certificates: Certificates) -> None:
    async def slow(request: Obj) -> Obj:
        await asyncio.sleep(5)
        return {"allowed": True}

    server.handlers["/slow"] = slow
    await configure(
        api,
        "validating",
        "slow",
        hook("slow.example.com", url_client(server, certificates, "/slow"), timeoutSeconds=1),
    )
    with pytest.raises(errors.InternalError) as failed:
        await api.create(PODS, "default", pod_body())
    assert failed.value.message.endswith(
        f'failed to call webhook: Post "{server.url("/slow")}?timeout=1s": context deadline exceeded'
    )


async def test_wrong_ca_bundle_fails_verification(api: Api, server: WebhookServer) -> None:
    server.handlers["/ok"] = lambda request: {"allowed": True}
    other_ca = make_certificates([]).ca_bundle
    await configure(
        api, "validating", "tls", hook("tls.example.com", {"url": server.url("/ok"), "caBundle": other_ca})
    )
    with pytest.raises(errors.InternalError) as failed:
        await api.create(PODS, "default", pod_body())
    # Both CAs carry the same name, so Go names the candidate whose signature did not verify.
    assert failed.value.message.endswith(
        f'Post "{server.url("/ok")}?timeout=10s": tls: failed to verify certificate: '
        "x509: certificate signed by unknown authority (possibly because of "
        '"x509: ECDSA verification failure" while trying to verify candidate authority certificate '
        '"shipshape-webhook-ca")'
    )
    assert server.calls("/ok") == []


async def test_namespace_and_object_selectors(
    api: Api, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/prod"] = lambda request: {"allowed": True}
    server.handlers["/spot"] = lambda request: {"allowed": True}
    await configure(
        api,
        "validating",
        "selectors",
        hook(
            "prod.example.com",
            url_client(server, certificates, "/prod"),
            namespaceSelector={"matchLabels": {"env": "prod"}},
        ),
        hook(
            "spot.example.com",
            url_client(server, certificates, "/spot"),
            objectSelector={"matchExpressions": [{"key": "capacity", "operator": "In", "values": ["spot"]}]},
        ),
    )
    await api.create(PODS, "prod", pod_body("a"))
    await api.create(PODS, "dev", pod_body("b"))
    await api.create(PODS, "dev", pod_body("c", labels={"capacity": "spot"}))
    assert [(r["namespace"], r["name"]) for r in server.calls("/prod")] == [("prod", "a")]
    assert [(r["namespace"], r["name"]) for r in server.calls("/spot")] == [("dev", "c")]


async def test_rules_distinguish_subresources(
    api: Api, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/main"] = lambda request: {"allowed": True}
    server.handlers["/any"] = lambda request: {"allowed": True}
    await configure(
        api,
        "validating",
        "rules",
        hook("main.example.com", url_client(server, certificates, "/main"), operations=["UPDATE"]),
        hook(
            "any.example.com",
            url_client(server, certificates, "/any"),
            operations=["*"],
            resources=["pods/*"],
        ),
    )
    pod = await api.create(PODS, "default", pod_body())
    await api.update(PODS, "default", "web", {**pod, "status": {"phase": "Running"}}, subresource="status")
    await api.create_subresource(PODS, "default", "web", "binding", {"target": {"name": "node-a"}})
    assert server.calls("/main") == []
    any_calls = [(r["operation"], r.get("subResource"), r["kind"]["kind"]) for r in server.calls("/any")]
    # As upstream's matcher: "pods/*" covers pods itself as well as every subresource.
    assert any_calls == [
        ("CREATE", None, "Pod"),
        ("UPDATE", "status", "Pod"),
        ("CREATE", "binding", "Binding"),
    ]


async def test_reinvocation_if_needed(api: Api, server: WebhookServer, certificates: Certificates) -> None:
    server.handlers["/first"] = lambda request: json_patch(
        [
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {"first": str(len(request["object"]["metadata"]["labels"]))},
            }
        ]
    )
    server.handlers["/second"] = lambda request: json_patch(
        [{"op": "add", "path": "/metadata/labels/second", "value": "yes"}]
    )
    await configure(
        api,
        "mutating",
        "a-first",
        hook("first.example.com", url_client(server, certificates, "/first"), reinvocationPolicy="IfNeeded"),
    )
    await configure(
        api, "mutating", "b-second", hook("second.example.com", url_client(server, certificates, "/second"))
    )
    pod = await api.create(PODS, "default", pod_body())
    assert len(server.calls("/first")) == 2 and len(server.calls("/second")) == 1
    assert pod["metadata"]["annotations"] == {"first": "2"}  # saw the second webhook's label on reinvocation


async def test_service_reference_through_address_annotation(
    api: Api, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/svc"] = lambda request: {"allowed": False, "status": {"message": "via service"}}
    await api.create(
        SERVICES,
        "default",
        {
            "metadata": {
                "name": "hooks",
                "annotations": {webhooks.SERVICE_ADDRESS_ANNOTATION: f"127.0.0.1:{server.port}"},
            },
            "spec": {"ports": [{"port": 443}]},
        },
    )
    # The certificate names hooks.webhooks.svc; the reference must name the same namespace.
    client = {
        "service": {"name": "hooks", "namespace": "default", "path": "/svc"},
        "caBundle": certificates.ca_bundle,
    }
    await configure(api, "validating", "svc", hook("svc.example.com", client))
    with pytest.raises(errors.InternalError) as failed:
        await api.create(PODS, "default", pod_body("a"))  # TLS name hooks.default.svc is not in the cert
    assert failed.value.message.endswith(
        'Post "https://hooks.default.svc:443/svc?timeout=10s": tls: failed to verify certificate: '
        "x509: certificate is valid for hooks.webhooks.svc, not hooks.default.svc"
    )
    assert server.calls("/svc") == []


async def test_service_reference_verified_against_service_dns_name(
    api: Api, cluster: Cluster, server: WebhookServer, certificates: Certificates
) -> None:
    from shipshape.emulator.resources import NAMESPACES

    cluster.store.create(NAMESPACES, {"metadata": {"name": "webhooks"}, "status": {"phase": "Active"}})
    server.handlers["/svc"] = lambda request: {"allowed": False, "status": {"message": "via service"}}
    await api.create(
        SERVICES,
        "webhooks",
        {
            "metadata": {
                "name": "hooks",
                "annotations": {webhooks.SERVICE_ADDRESS_ANNOTATION: f"127.0.0.1:{server.port}"},
            },
            "spec": {"ports": [{"port": 443}]},
        },
    )
    client = {
        "service": {"name": "hooks", "namespace": "webhooks", "path": "/svc"},
        "caBundle": certificates.ca_bundle,
    }
    await configure(api, "validating", "svc", hook("svc.example.com", client))
    with pytest.raises(webhooks.WebhookDenied, match="via service"):
        await api.create(PODS, "default", pod_body("a"))
    missing = {"service": {"name": "absent", "namespace": "webhooks"}, "caBundle": certificates.ca_bundle}
    await configure(
        api, "validating", "zz-absent", hook("absent.example.com", missing, failurePolicy="Ignore")
    )
    server.handlers["/svc"] = lambda request: {"allowed": True}
    assert (await api.create(PODS, "default", pod_body("b")))["metadata"]["name"] == "b"


async def test_webhook_configurations_are_never_sent_to_webhooks(
    api: Api, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/all"] = lambda request: {"allowed": False}
    everything = hook(
        "all.example.com", url_client(server, certificates, "/all"), operations=["*"], resources=["*"]
    )
    everything["rules"][0]["apiGroups"] = ["*"]
    await configure(api, "validating", "all", everything)
    await configure(
        api, "validating", "more", hook("more.example.com", url_client(server, certificates, "/all"))
    )
    assert server.received == []


async def test_dry_run_refused_by_webhook_with_side_effects(
    api: Api, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/ok"] = lambda request: {"allowed": True}
    side = hook("side.example.com", url_client(server, certificates, "/ok"), sideEffects="NoneOnDryRun")
    await configure(api, "validating", "side", side)
    assert (await api.create(PODS, "default", pod_body(), dry_run=True))["metadata"]["name"] == "web"
    assert server.calls("/ok")[0]["dryRun"] is True


async def test_submit_create_is_synchronous_without_webhooks_and_async_with_them(
    api: Api, cluster: Cluster, server: WebhookServer, certificates: Certificates
) -> None:
    results: list[tuple[Obj | None, errors.ApiError | None]] = []
    api.submit_create(PODS, "default", pod_body("sync"), on_done=lambda obj, err: results.append((obj, err)))
    assert len(results) == 1 and results[0][0] is not None  # done before returning

    server.handlers["/mutate"] = lambda request: json_patch(
        [{"op": "add", "path": "/metadata/labels/hooked", "value": "1"}]
    )
    await configure(api, "mutating", "m", hook("m.example.com", url_client(server, certificates, "/mutate")))
    done = asyncio.Event()

    def finished(obj: Obj | None, err: errors.ApiError | None) -> None:
        results.append((obj, err))
        done.set()

    api.submit_create(PODS, "default", pod_body("later"), on_done=finished)
    assert len(results) == 1  # not yet: the webhook call is in flight
    await asyncio.wait_for(done.wait(), timeout=5)
    created, error = results[1]
    assert error is None and created is not None and created["metadata"]["labels"]["hooked"] == "1"
    assert cluster.store.get(PODS, "default", "later") is not None


async def test_update_and_delete_reviews_carry_the_old_object(
    api: Api, cluster: Cluster, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/guard"] = lambda request: (
        {"allowed": False, "status": {"code": 403, "message": "protected"}}
        if request["operation"] == "DELETE"
        else {"allowed": True}
    )
    await configure(
        api,
        "validating",
        "guard",
        hook(
            "guard.example.com", url_client(server, certificates, "/guard"), operations=["UPDATE", "DELETE"]
        ),
    )
    pod = await api.create(PODS, "default", pod_body())
    await api.update(PODS, "default", "web", {**pod, "metadata": {**pod["metadata"], "labels": {"v": "2"}}})
    with pytest.raises(webhooks.WebhookDenied, match="protected"):
        await api.delete(PODS, "default", "web", DeleteOptions(grace_period_seconds=0))
    update, delete = server.calls("/guard")
    assert update["operation"] == "UPDATE" and update["oldObject"]["metadata"]["labels"] == {"app": "web"}
    assert update["object"]["metadata"]["labels"] == {"v": "2"}
    assert delete["object"] is None and delete["oldObject"]["metadata"]["name"] == "web"
    assert delete["options"] == {
        "kind": "DeleteOptions",
        "apiVersion": "meta.k8s.io/v1",
        "gracePeriodSeconds": 0,
    }
    assert cluster.store.get(PODS, "default", "web") is not None


async def test_broken_patch_from_a_webhook_is_an_internal_error(
    api: Api, cluster: Cluster, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/broken"] = lambda request: json_patch([{"op": "remove", "path": "/metadata/nothing"}])
    await configure(
        api, "mutating", "broken", hook("broken.example.com", url_client(server, certificates, "/broken"))
    )
    with pytest.raises(errors.InternalError, match=r'failed calling webhook "broken\.example\.com"'):
        await api.create(PODS, "default", pod_body())
    assert cluster.store.get(PODS, "default", "web") is None


async def test_mutation_that_makes_the_object_invalid_is_rejected_by_validation(
    api: Api, cluster: Cluster, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/bad"] = lambda request: json_patch(
        [{"op": "replace", "path": "/spec/containers/0/image", "value": ""}]
    )
    await configure(api, "mutating", "bad", hook("bad.example.com", url_client(server, certificates, "/bad")))
    with pytest.raises(errors.Invalid, match=r"spec.containers\[0\].image: Required value"):
        await api.create(PODS, "default", pod_body())
    assert cluster.store.get(PODS, "default", "web") is None


async def test_validating_webhooks_all_run_and_the_first_refusal_in_order_wins(
    api: Api, server: WebhookServer, certificates: Certificates
) -> None:
    async def slow_no(request: Obj) -> Obj:
        await asyncio.sleep(0.2)
        return {"allowed": False, "status": {"message": "first says no"}}

    server.handlers["/first"] = slow_no
    server.handlers["/second"] = lambda request: {"allowed": False, "status": {"message": "second says no"}}
    await configure(
        api,
        "validating",
        "both",
        hook("first.example.com", url_client(server, certificates, "/first")),
        hook("second.example.com", url_client(server, certificates, "/second")),
    )
    with pytest.raises(webhooks.WebhookDenied, match="first says no"):
        await api.create(PODS, "default", pod_body())
    assert len(server.calls("/first")) == 1 and len(server.calls("/second")) == 1


async def test_mutation_into_a_malformed_object_is_refused(
    api: Api, cluster: Cluster, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/garble"] = lambda request: json_patch(
        [{"op": "replace", "path": "/spec/containers", "value": "x"}]
    )
    await configure(
        api, "mutating", "garble", hook("garble.example.com", url_client(server, certificates, "/garble"))
    )
    with pytest.raises(errors.BadRequest, match="cannot be handled as a Pod"):
        await api.create(PODS, "default", pod_body())
    assert cluster.store.get(PODS, "default", "web") is None


async def test_generated_name_and_system_fields_reach_validating_not_mutating_webhooks(
    api: Api, server: WebhookServer, certificates: Certificates
) -> None:
    # Upstream's registry fills uid, creationTimestamp and the generated name after mutating
    # admission and before validation: validating webhooks see them, the request's name stays "".
    server.handlers["/seen"] = lambda request: {"allowed": True}
    await configure(api, "mutating", "m", hook("m.example.com", url_client(server, certificates, "/seen")))
    await configure(api, "validating", "v", hook("v.example.com", url_client(server, certificates, "/seen")))
    body = pod_body()
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "web-"
    created = await api.create(PODS, "default", body)
    mutating, validating = server.calls("/seen")
    assert mutating["name"] == validating["name"] == ""
    assert "name" not in mutating["object"]["metadata"] and "uid" not in mutating["object"]["metadata"]
    seen = validating["object"]["metadata"]
    assert seen["name"] == created["metadata"]["name"] and seen["name"].startswith("web-")
    assert seen["uid"] == created["metadata"]["uid"]
    assert seen["creationTimestamp"] == created["metadata"]["creationTimestamp"]


async def test_failed_delete_precondition_answers_before_webhooks(
    api: Api, cluster: Cluster, server: WebhookServer, certificates: Certificates
) -> None:
    server.handlers["/guard"] = lambda request: {"allowed": False, "status": {"code": 403, "message": "no"}}
    await configure(
        api,
        "validating",
        "guard",
        hook("guard.example.com", url_client(server, certificates, "/guard"), operations=["DELETE"]),
    )
    await api.create(PODS, "default", pod_body())
    with pytest.raises(errors.Conflict, match="Precondition failed: UID in precondition"):
        await api.delete(PODS, "default", "web", DeleteOptions(uid="someone-else"))
    assert server.calls("/guard") == []
