"""Answers that must match kube-apiserver's, seen through the official Python client and kubectl."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.emulator_fixtures import ServedEmulator

pytestmark = pytest.mark.integration


@pytest.fixture
def core(served_emulator: ServedEmulator) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(config_file=str(served_emulator.kubeconfig))
    yield client.CoreV1Api(api)
    api.close()


def _answer(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str]:
    return exc.value.status, json.loads(exc.value.body).get("reason", "")


def _pod(name: str, image: str = "nginx:1.27") -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "web"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image=image)]),
    )


def test_stale_update_of_an_invalid_object_is_409_not_422(core: client.CoreV1Api) -> None:
    stale = core.create_namespaced_pod("default", _pod("web"))
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"v": "2"}}})
    stale.spec.containers[0].image = ""  # invalid as well: the precondition is checked first
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_pod("web", "default", stale)
    assert _answer(conflict) == (409, "Conflict")
    # A patch carrying the stale resourceVersion is the same update.
    stale_patch = {"metadata": {"resourceVersion": stale.metadata.resource_version}, "spec": {}}
    with pytest.raises(ApiException) as patched:
        core.patch_namespaced_pod("web", "default", stale_patch)
    assert _answer(patched) == (409, "Conflict")


@pytest.mark.parametrize(
    "selector", ["app=web,", "-app=web", "app=-web", "app in (web", "a/b/c=1", "app>web", ",", "!app=web"]
)
def test_unparsable_label_selector_is_400(core: client.CoreV1Api, selector: str) -> None:
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod("default", label_selector=selector)
    assert _answer(bad) == (400, "BadRequest")


@pytest.mark.parametrize("selector", ["metadata.name", "spec.nope=1", "=web"])
def test_unparsable_or_unsupported_field_selector_is_400(core: client.CoreV1Api, selector: str) -> None:
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod("default", field_selector=selector)
    assert _answer(bad) == (400, "BadRequest")


def test_upstream_selector_forms_select(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", _pod("web"))
    for selector in ("app in (web,db)", "app==web", "!tier", "app,app notin ()", "app!=db"):
        listed = core.list_namespaced_pod("default", label_selector=selector).items
        assert [p.metadata.name for p in listed] == ["web"], selector


def test_dry_run_create_returns_no_resource_version_and_stores_nothing(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", _pod("web"), dry_run="All")
    assert created.metadata.resource_version is None
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert core.list_namespaced_pod("default").items == []


def test_create_with_a_resource_version_is_refused_after_validation(core: client.CoreV1Api) -> None:
    body = _pod("web")
    body.metadata.resource_version = "7"
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", body)
    assert _answer(refused) == (500, "")
    assert "resourceVersion should not be set" in json.loads(refused.value.body)["message"]
    invalid = _pod("Bad_Name")
    invalid.metadata.resource_version = "7"
    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod("default", invalid)
    assert _answer(rejected) == (422, "Invalid")


def test_delete_preconditions_answer_before_admission(core: client.CoreV1Api) -> None:
    # `default` may not be deleted (NamespaceLifecycle, 403), but a failed precondition answers first.
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-its-uid"))
    with pytest.raises(ApiException) as conflict:
        core.delete_namespace("default", body=options)
    assert _answer(conflict) == (409, "Conflict")
    with pytest.raises(ApiException) as forbidden:
        core.delete_namespace("default")
    assert _answer(forbidden) == (403, "Forbidden")


def test_kubectl_sees_the_same_answers(served_emulator: ServedEmulator, tmp_path: Path) -> None:
    base = ["kubectl", "--kubeconfig", str(served_emulator.kubeconfig), "--cache-dir", str(tmp_path)]

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], input=stdin, capture_output=True, text=True, timeout=30)

    bad = run("get", "pods", "-l", "app=web,")
    assert bad.returncode != 0 and "BadRequest" in bad.stderr, bad.stderr
    dry = run("run", "web", "--image=nginx:1.27", "--dry-run=server", "-o", "json")
    assert dry.returncode == 0, dry.stderr
    assert "resourceVersion" not in json.loads(dry.stdout)["metadata"]
    assert run("get", "pod", "web").returncode != 0  # nothing stored


def test_replace_names_its_object_twice(core: client.CoreV1Api, served_emulator: ServedEmulator) -> None:
    core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="a")))
    nameless = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "data": {"k": "v"}}
    with pytest.raises(ApiException) as missing:
        core.replace_namespaced_config_map("a", "default", nameless)
    assert _answer(missing) == (400, "BadRequest")
    assert "the name of the object () does not match the name on the URL (a)" in missing.value.body
    elsewhere = {**nameless, "metadata": {"name": "a", "namespace": "kube-system"}}
    with pytest.raises(ApiException) as moved:
        core.replace_namespaced_config_map("a", "default", elsewhere)
    assert _answer(moved) == (400, "BadRequest")
    assert "namespace of the object (kube-system) does not match the namespace on the request" in (
        moved.value.body
    )
    assert core.read_namespaced_config_map("a", "default").data is None  # nothing changed
