"""The official Python client against the served emulator (HTTPS, token, real wire format)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from shipshape.emulator.resources import CONFIGMAPS
from tests.emulator_fixtures import ServedEmulator

pytestmark = pytest.mark.integration


@pytest.fixture
def api_client(served_emulator: ServedEmulator) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(served_emulator.kubeconfig))
    yield api
    api.close()


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


def _cm(name: str, **labels: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data={"k": "v"})


def _status(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str]:
    import json

    body = json.loads(exc.value.body)
    return exc.value.status, body["reason"]


def test_crud(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map("default", _cm("a", app="x"))
    assert created.metadata.uid and created.metadata.resource_version
    read = core.read_namespaced_config_map("a", "default")
    read.data = {"k": "2"}
    replaced = core.replace_namespaced_config_map("a", "default", read)
    assert replaced.data == {"k": "2"}
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("a", "default", read)  # stale resourceVersion
    assert _status(conflict) == (409, "Conflict")
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map("default", _cm("a"))
    assert _status(exists) == (409, "AlreadyExists")
    status = core.delete_namespaced_config_map("a", "default")  # this client returns the raw Status
    assert (status["kind"], status["status"], status["details"]["name"]) == ("Status", "Success", "a")
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("a", "default")
    assert _status(missing) == (404, "NotFound")
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="nginx")]),
    )
    assert core.create_namespaced_pod("default", pod).spec.containers[0].image == "nginx"
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == ["p"]


def test_list_selectors_and_paging(core: client.CoreV1Api) -> None:
    for i in range(7):
        core.create_namespaced_config_map("default", _cm(f"cm{i}", parity=str(i % 2)))
    odd = core.list_namespaced_config_map("default", label_selector="parity=1")
    assert [c.metadata.name for c in odd.items] == ["cm1", "cm3", "cm5"]
    named = core.list_config_map_for_all_namespaces(
        field_selector="metadata.name=cm4,metadata.namespace=default"
    )
    assert [c.metadata.name for c in named.items] == ["cm4"]
    names: list[str] = []
    token = None
    while True:
        page = core.list_namespaced_config_map("default", limit=3, _continue=token)
        names += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"cm{i}" for i in range(7)]


def test_watch_from_list_version_and_live(core: client.CoreV1Api, served_emulator: ServedEmulator) -> None:
    core.create_namespaced_config_map("default", _cm("before", team="a"))
    listed = core.list_namespaced_config_map("default")
    core.create_namespaced_config_map("default", _cm("after-list", team="a"))
    seen: list[tuple[str, str]] = []
    started = threading.Event()

    def consume() -> None:
        w = watch.Watch()
        stream = w.stream(
            core.list_namespaced_config_map,
            "default",
            label_selector="team=a",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        )
        started.set()
        for event in stream:
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 3:
                w.stop()

    reader = threading.Thread(target=consume)
    reader.start()
    assert started.wait(5)
    core.create_namespaced_config_map("default", _cm("ignored", team="b"))
    core.create_namespaced_config_map("default", _cm("live", team="a"))
    core.delete_namespaced_config_map("live", "default")
    reader.join(10)
    assert seen == [("ADDED", "after-list"), ("ADDED", "live"), ("DELETED", "live")]


def test_watch_of_a_compacted_version_is_gone(
    core: client.CoreV1Api, served_emulator: ServedEmulator
) -> None:
    core.create_namespaced_config_map("default", _cm("a"))
    served_emulator.call(lambda: served_emulator.cluster.store._history.clear())  # as etcd compaction would
    with pytest.raises(ApiException) as gone:
        for _ in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version="1"):
            pass
    assert gone.value.status == 410


def test_invalid_object_is_422_with_causes(core: client.CoreV1Api) -> None:
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="Bad_Name"), spec=client.V1PodSpec(containers=[]))
    with pytest.raises(ApiException) as invalid:
        core.create_namespaced_pod("default", pod)
    assert _status(invalid) == (422, "Invalid")
    assert "details" in invalid.value.body


def test_oversized_request_is_413(core: client.CoreV1Api, served_emulator: ServedEmulator) -> None:
    huge = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="huge"), data={"k": "x" * (3 * 1024 * 1024 + 1)}
    )
    with pytest.raises(ApiException) as too_large:
        core.create_namespaced_config_map("default", huge)
    assert too_large.value.status == 413
    assert (
        served_emulator.call(lambda: served_emulator.cluster.store.get(CONFIGMAPS, "default", "huge")) is None
    )


def test_wrong_token_is_401(served_emulator: ServedEmulator) -> None:
    configuration = client.Configuration()
    configuration.host = served_emulator.url
    configuration.ssl_ca_cert = str(served_emulator.ca_path)
    configuration.api_key = {"authorization": "Bearer not-the-token"}
    with client.ApiClient(configuration) as api, pytest.raises(ApiException) as denied:
        client.CoreV1Api(api).list_namespace()
    assert denied.value.status == 401


def test_malformed_json_is_400_and_changes_nothing(served_emulator: ServedEmulator) -> None:
    headers = {"Authorization": f"Bearer {served_emulator.token}", "Content-Type": "application/json"}
    before = served_emulator.call(lambda: served_emulator.cluster.store.resource_version)
    tls = ssl.create_default_context(cafile=str(served_emulator.ca_path))
    with httpx.Client(base_url=served_emulator.url, verify=tls, headers=headers) as http:
        response = http.post("/api/v1/namespaces/default/configmaps", content=b'{"metadata": {"name": ')
    body: dict[str, Any] = response.json()
    assert (response.status_code, body["kind"], body["reason"]) == (400, "Status", "BadRequest")
    assert served_emulator.call(lambda: served_emulator.cluster.store.resource_version) == before
