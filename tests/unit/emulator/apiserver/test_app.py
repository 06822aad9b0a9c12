"""The HTTP layer in-process (no TLS): routing, errors as Status, list/paging/selectors, delete, watch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from shipshape.emulator import assembly
from shipshape.emulator.apiserver import ApiServer, ServerSettings
from shipshape.emulator.resources import CONFIGMAPS, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.kube.clock import VirtualClock

TOKEN = "s3cret"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
def cluster() -> Cluster:
    return assembly.build(None, VirtualClock(), models=False)


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[httpx.AsyncClient]:
    server = ApiServer(cluster, ServerSettings(max_body_bytes=64 * 1024))
    transport = httpx.ASGITransport(app=server.app(TOKEN))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator", headers=headers) as c:
        yield c
    server.hub.close()


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"},
    }


async def _create_cms(client: httpx.AsyncClient, n: int) -> None:
    for i in range(n):
        r = await client.post("/api/v1/namespaces/default/configmaps", json=_cm(f"cm{i}", idx=str(i % 2)))
        assert r.status_code == 201, r.text


async def test_auth(cluster: Cluster) -> None:
    server = ApiServer(cluster)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=server.app(TOKEN)), base_url="http://e"
    ) as c:
        anonymous = await c.get("/api/v1/pods")
        assert anonymous.status_code == 401
        assert anonymous.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
        assert (await c.get("/healthz")).text == "ok"
        assert (await c.get("/healthz", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await c.get("/api/v1/pods", headers={"Authorization": f"bearer {TOKEN}"})).status_code == 200
        assert (await c.get("/api/v1/pods", headers={"Authorization": f"Basic {TOKEN}"})).status_code == 401
        assert (await c.get("/version")).json()["gitVersion"] == "v1.32.0"
    server.hub.close()


async def test_create_get_and_errors_as_status(client: httpx.AsyncClient, cluster: Cluster) -> None:
    created = await client.post("/api/v1/namespaces/default/configmaps", json=_cm("a"))
    assert created.status_code == 201 and created.json()["metadata"]["uid"]
    again = await client.post("/api/v1/namespaces/default/configmaps", json=_cm("a"))
    assert (again.status_code, again.json()["reason"]) == (409, "AlreadyExists")
    got = await client.get("/api/v1/namespaces/default/configmaps/a")
    assert got.json()["data"] == {"k": "v"}
    missing = await client.get("/api/v1/namespaces/default/configmaps/zz")
    assert missing.status_code == 404 and missing.json()["message"] == 'configmaps "zz" not found'
    no_ns = await client.post("/api/v1/namespaces/nope/configmaps", json=_cm("b"))
    assert no_ns.status_code == 404 and no_ns.json()["message"] == 'namespaces "nope" not found'
    discovery_post = await client.post("/version", json={})
    assert (discovery_post.status_code, discovery_post.json()["reason"]) == (405, "MethodNotAllowed")
    unknown = await client.get("/api/v1/widgets")
    assert (unknown.status_code, unknown.json()["kind"]) == (404, "Status")
    not_allowed = await client.post("/api/v1/namespaces/default/configmaps/a", json=_cm("a"))
    assert not_allowed.status_code == 405 and not_allowed.json()["reason"] == "MethodNotAllowed"
    rv_before = cluster.store.resource_version
    bad_json = await client.post(
        "/api/v1/namespaces/default/configmaps",
        content=b'{"metadata": {',
        headers={"content-type": "application/json"},
    )
    assert bad_json.status_code == 400 and bad_json.json()["reason"] == "BadRequest"
    protobuf = await client.post(
        "/api/v1/namespaces/default/configmaps",
        content=b"k8s\x00",
        headers={"content-type": "application/vnd.kubernetes.protobuf"},
    )
    assert protobuf.status_code == 415
    huge = _cm("huge")
    huge["data"] = {"k": "x" * (65 * 1024)}
    too_large = await client.post("/api/v1/namespaces/default/configmaps", json=huge)
    assert too_large.status_code == 413 and too_large.json()["reason"] == "RequestEntityTooLarge"
    wrong_ns = _cm("c")
    wrong_ns["metadata"]["namespace"] = "kube-system"
    assert (await client.post("/api/v1/namespaces/default/configmaps", json=wrong_ns)).status_code == 400
    wrong_kind = {**_cm("d"), "kind": "Secret"}
    assert (await client.post("/api/v1/namespaces/default/configmaps", json=wrong_kind)).status_code == 400
    assert cluster.store.resource_version == rv_before  # malformed input changed nothing
    dry = await client.post("/api/v1/namespaces/default/configmaps?dryRun=All", json=_cm("dry"))
    assert dry.status_code == 201 and cluster.store.get(CONFIGMAPS, "default", "dry") is None
    assert (
        await client.post("/api/v1/namespaces/default/configmaps?dryRun=Some", json=_cm("x"))
    ).status_code == 400


async def test_update_conflict_and_name_mismatch(client: httpx.AsyncClient) -> None:
    first = (await client.post("/api/v1/namespaces/default/configmaps", json=_cm("a"))).json()
    first["data"] = {"k": "2"}
    ok = await client.put("/api/v1/namespaces/default/configmaps/a", json=first)
    assert ok.status_code == 200 and ok.json()["data"] == {"k": "2"}
    stale = await client.put("/api/v1/namespaces/default/configmaps/a", json=first)
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"
    renamed = await client.put("/api/v1/namespaces/default/configmaps/b", json=ok.json())
    assert renamed.status_code == 400


async def test_list_selectors_and_paging(client: httpx.AsyncClient) -> None:
    await _create_cms(client, 5)
    odd = (
        await client.get("/api/v1/namespaces/default/configmaps", params={"labelSelector": "idx=1"})
    ).json()
    assert odd["kind"] == "ConfigMapList" and [i["metadata"]["name"] for i in odd["items"]] == ["cm1", "cm3"]
    by_name = (await client.get("/api/v1/configmaps", params={"fieldSelector": "metadata.name=cm2"})).json()
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["cm2"]
    bad = await client.get("/api/v1/configmaps", params={"fieldSelector": "data.k=v"})
    assert bad.status_code == 400 and bad.json()["message"] == "field label not supported: data.k"
    assert (await client.get("/api/v1/configmaps", params={"labelSelector": "a in (b"})).status_code == 400
    names: list[str] = []
    page = (await client.get("/api/v1/namespaces/default/configmaps", params={"limit": 2})).json()
    list_rv = page["metadata"]["resourceVersion"]
    assert page["metadata"]["remainingItemCount"] == 3
    while True:
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
        page = (
            await client.get("/api/v1/namespaces/default/configmaps", params={"limit": 2, "continue": token})
        ).json()
        assert page["metadata"]["resourceVersion"] == list_rv
    assert names == [f"cm{i}" for i in range(5)]
    assert (await client.get("/api/v1/configmaps", params={"continue": "!!"})).status_code == 400


async def test_table_and_yaml_output(client: httpx.AsyncClient) -> None:
    await _create_cms(client, 2)
    table = (await client.get("/api/v1/namespaces/default/configmaps", headers={"accept": TABLE})).json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert [r["cells"][:2] for r in table["rows"]] == [["cm0", 1], ["cm1", 1]]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    one = await client.get(
        "/api/v1/namespaces/default/configmaps/cm0", headers={"accept": "application/yaml"}
    )
    assert one.headers["content-type"].startswith("application/yaml") and "name: cm0" in one.text
    assert (
        await client.get(
            "/api/v1/namespaces/default/configmaps", headers={"accept": "application/vnd.kubernetes.protobuf"}
        )
    ).status_code == 406


async def test_delete_answers_like_upstream(client: httpx.AsyncClient, cluster: Cluster) -> None:
    await _create_cms(client, 3)
    status = (await client.delete("/api/v1/namespaces/default/configmaps/cm0")).json()
    assert status["kind"] == "Status" and status["status"] == "Success" and status["details"]["name"] == "cm0"
    bad = await client.request(
        "DELETE", "/api/v1/namespaces/default/configmaps/cm1", json={"propagationPolicy": "Sometimes"}
    )
    assert bad.status_code == 422 and cluster.store.get(CONFIGMAPS, "default", "cm1") is not None
    wrong_uid = await client.request(
        "DELETE", "/api/v1/namespaces/default/configmaps/cm1", json={"preconditions": {"uid": "nope"}}
    )
    assert wrong_uid.status_code == 409
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    assert (await client.post("/api/v1/namespaces/default/pods", json=pod)).status_code == 201
    deleted_pod = (await client.delete("/api/v1/namespaces/default/pods/p")).json()
    assert deleted_pod["kind"] == "Pod"  # pods answer with the object itself
    gone = (
        await client.delete("/api/v1/namespaces/default/configmaps", params={"labelSelector": "idx=1"})
    ).json()
    assert [i["metadata"]["name"] for i in gone["items"]] == ["cm1"]
    assert [o["metadata"]["name"] for o in cluster.store.list(CONFIGMAPS, "default")] == ["cm2"]
    assert cluster.store.get(PODS, "default", "p") is None


async def test_watch_from_a_resource_version_and_gone(client: httpx.AsyncClient, cluster: Cluster) -> None:
    start = cluster.store.resource_version
    await _create_cms(client, 3)
    await client.delete("/api/v1/namespaces/default/configmaps/cm1")
    r = await client.get(
        "/api/v1/namespaces/default/configmaps",
        params={
            "watch": "1",
            "resourceVersion": str(start),
            "labelSelector": "idx=1",
            "timeoutSeconds": "0.05",
        },
    )
    events = [orjson.loads(line) for line in r.content.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "cm1"),
        ("DELETED", "cm1"),
    ]
    r = await client.get("/api/v1/watch/namespaces/default/configmaps/cm0", params={"timeoutSeconds": "0.05"})
    assert [orjson.loads(line)["object"]["metadata"]["name"] for line in r.content.splitlines()] == ["cm0"]
    ahead = await client.get("/api/v1/configmaps", params={"watch": "1", "resourceVersion": "999999"})
    assert (ahead.status_code, ahead.json()["reason"]) == (504, "Timeout")
    cluster.store._history.clear()  # as if compacted
    r = await client.get("/api/v1/configmaps", params={"watch": "true", "resourceVersion": "1"})
    event = orjson.loads(r.content)
    assert (
        event["type"] == "ERROR" and event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    )


@pytest.fixture
async def fast_bookmarks(cluster: Cluster) -> AsyncIterator[httpx.AsyncClient]:
    server = ApiServer(cluster, ServerSettings(bookmark_interval=0.02))
    transport = httpx.ASGITransport(app=server.app(None))
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator") as c:
        yield c
    server.hub.close()


async def test_bookmarks_and_initial_events(fast_bookmarks: httpx.AsyncClient, cluster: Cluster) -> None:
    await _create_cms(fast_bookmarks, 2)
    plain = await fast_bookmarks.get("/api/v1/configmaps", params={"watch": "1", "timeoutSeconds": "0.1"})
    assert {orjson.loads(line)["type"] for line in plain.content.splitlines()} == {"ADDED"}
    r = await fast_bookmarks.get(
        "/api/v1/configmaps",
        params={
            "watch": "1",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "0.1",
        },
    )
    events = [orjson.loads(line) for line in r.content.splitlines()]
    assert [e["type"] for e in events[:3]] == ["ADDED", "ADDED", "BOOKMARK"]
    end = events[2]["object"]["metadata"]
    assert end["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert end["resourceVersion"] == str(cluster.store.resource_version)
    assert len(events) > 3 and all(e["type"] == "BOOKMARK" for e in events[3:])  # periodic bookmarks
    refused = await fast_bookmarks.get(
        "/api/v1/configmaps", params={"watch": "1", "sendInitialEvents": "true"}
    )
    assert refused.status_code == 422


async def test_list_resource_versions(client: httpx.AsyncClient, cluster: Cluster) -> None:
    await _create_cms(client, 1)
    current = cluster.store.resource_version
    ok = await client.get("/api/v1/configmaps", params={"resourceVersion": str(current)})
    assert ok.json()["metadata"]["resourceVersion"] == str(current)
    future = await client.get("/api/v1/configmaps", params={"resourceVersion": str(current + 10)})
    assert (future.status_code, future.json()["reason"]) == (504, "Timeout")
    old = await client.get(
        "/api/v1/configmaps", params={"resourceVersion": "1", "resourceVersionMatch": "Exact"}
    )
    assert (old.status_code, old.json()["reason"]) == (410, "Expired")


async def test_pod_logs(client: httpx.AsyncClient, cluster: Cluster) -> None:
    spec = {"containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "nginx"}]}
    await client.post("/api/v1/namespaces/default/pods", json={"metadata": {"name": "p"}, "spec": spec})
    unscheduled = await client.get("/api/v1/namespaces/default/pods/p/log", params={"container": "a"})
    assert unscheduled.status_code == 400 and "does not have a host assigned" in unscheduled.json()["message"]
    which = await client.get("/api/v1/namespaces/default/pods/p/log")
    assert which.json()["message"] == "a container name must be specified for pod p, choose one of: [a b]"

    def bind(pod: dict[str, Any]) -> None:
        pod["spec"]["nodeName"] = "n1"

    def run(pod: dict[str, Any]) -> None:
        pod["status"] = {
            "phase": "Running",
            "containerStatuses": [
                {"name": "a", "state": {"running": {}}},
                {"name": "b", "state": {"waiting": {"reason": "ImagePullBackOff"}}},
            ],
        }

    cluster.store.mutate(PODS, "default", "p", bind)
    cluster.store.mutate(PODS, "default", "p", run, subresource="status")
    running = await client.get("/api/v1/namespaces/default/pods/p/log", params={"container": "a"})
    assert running.status_code == 200 and running.headers["content-type"].startswith("text/plain")
    waiting = await client.get("/api/v1/namespaces/default/pods/p/log", params={"container": "b"})
    assert waiting.json()["message"] == 'container "b" in pod "p" is waiting to start: ImagePullBackOff'


async def test_field_validation(client: httpx.AsyncClient, cluster: Cluster) -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx", "imagee": "x"}]},
    }
    strict = await client.post("/api/v1/namespaces/default/pods?fieldValidation=Strict", json=pod)
    assert strict.status_code == 400
    assert strict.json()["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].imagee"'
    )
    assert cluster.store.get(PODS, "default", "p") is None
    warned = await client.post("/api/v1/namespaces/default/pods", json=pod)  # Warn is the default
    assert warned.status_code == 201
    assert warned.headers.get_list("warning") == ['299 - "unknown field \\"spec.containers[0].imagee\\""']
    cm = _cm("quiet")
    cm["dat"] = {}
    ignored = await client.post("/api/v1/namespaces/default/configmaps?fieldValidation=Ignore", json=cm)
    assert ignored.status_code == 201 and "warning" not in ignored.headers
    bad = await client.post("/api/v1/namespaces/default/configmaps?fieldValidation=Loose", json=_cm("x"))
    assert bad.status_code == 400


async def test_too_many_requests(cluster: Cluster) -> None:
    server = ApiServer(cluster, ServerSettings(max_requests_in_flight=0))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=server.app(None)), base_url="http://e"
    ) as c:
        busy = await c.get("/api/v1/pods")
        assert (busy.status_code, busy.headers["retry-after"]) == (429, "1")
        assert busy.json()["reason"] == "TooManyRequests" and busy.json()["details"] == {
            "retryAfterSeconds": 1
        }
        assert (await c.get("/healthz")).status_code == 200  # health checks are never throttled
    server.hub.close()


async def test_field_validation_of_patches(client: httpx.AsyncClient) -> None:
    await _create_cms(client, 1)
    merge = {"content-type": "application/merge-patch+json"}
    strict = await client.patch(
        "/api/v1/namespaces/default/configmaps/cm0?fieldValidation=Strict",
        json={"dta": {"a": "b"}},
        headers=merge,
    )
    assert (
        strict.status_code == 400 and strict.json()["message"] == 'strict decoding error: unknown field "dta"'
    )
    strategic = {"content-type": "application/strategic-merge-patch+json"}
    directives = {"$setElementOrder/data": [], "data": {"k": "3"}}
    ok = await client.patch(
        "/api/v1/namespaces/default/configmaps/cm0?fieldValidation=Strict", json=directives, headers=strategic
    )
    assert ok.status_code == 200, ok.text
    warned = await client.patch("/api/v1/namespaces/default/configmaps/cm0", json={"dta": {}}, headers=merge)
    assert warned.status_code == 200 and warned.headers.get_list("warning") == [
        '299 - "unknown field \\"dta\\""'
    ]


async def test_self_subject_reviews(client: httpx.AsyncClient) -> None:
    access = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "delete", "resource": "nodes"}},
    }
    answer = await client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=access)
    assert answer.status_code == 201
    assert answer.json()["status"] == {"allowed": True} and answer.json()["spec"] == access["spec"]
    whoami = await client.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={})
    assert whoami.json()["status"]["userInfo"]["username"] == "system:admin"
    wrong = await client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json={"kind": "Pod"})
    assert wrong.status_code == 400
    groups = (await client.get("/apis")).json()["groups"]
    assert {"authorization.k8s.io", "authentication.k8s.io"} <= {g["name"] for g in groups}
