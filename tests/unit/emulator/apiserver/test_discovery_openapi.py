"""Discovery documents, content negotiation and OpenAPI documents."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from shipshape.emulator.apiserver import codec, discovery
from shipshape.emulator.apiserver.openapi import OpenApiDocs
from shipshape.emulator.resources import groups
from shipshape.kube import errors

KUBECTL_DISCOVERY_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
)
KUBECTL_TABLE_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
    "application/json"
)


def _by_name(resources: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in resources}


def test_core_resource_list() -> None:
    doc = discovery.api_resource_list("v1")
    assert doc is not None and doc["groupVersion"] == "v1"
    res = _by_name(doc["resources"])
    assert res["pods"]["shortNames"] == ["po"] and res["pods"]["categories"] == ["all"]
    assert res["pods"]["namespaced"] and not res["nodes"]["namespaced"]
    assert res["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert res["pods/eviction"]["group"] == "policy" and res["pods/eviction"]["kind"] == "Eviction"
    assert discovery.api_resource_list("nope/v1") is None


def test_apps_scale_subresource_and_groups() -> None:
    doc = discovery.api_resource_list("apps/v1")
    assert doc is not None
    scale = _by_name(doc["resources"])["deployments/scale"]
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    names = [g["name"] for g in discovery.api_group_list()["groups"]]
    assert "apps" in names and "metrics.k8s.io" in names and "" not in names
    group = discovery.api_group("policy")
    assert group is not None and group["preferredVersion"] == {"groupVersion": "policy/v1", "version": "v1"}


def test_aggregated_discovery() -> None:
    assert discovery.wants_aggregated(KUBECTL_DISCOVERY_ACCEPT) == "v2"
    assert discovery.wants_aggregated("application/json") is None
    core = discovery.aggregated(core=True)
    assert core["kind"] == "APIGroupDiscoveryList" and len(core["items"]) == 1
    pods = next(r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    assert pods["scope"] == "Namespaced" and pods["responseKind"] == {
        "group": "",
        "version": "v1",
        "kind": "Pod",
    }
    assert {s["subresource"] for s in pods["subresources"]} == {"status", "binding", "eviction", "log"}
    named = discovery.aggregated(core=False)
    apps = next(i for i in named["items"] if i["metadata"]["name"] == "apps")
    assert apps["versions"][0]["freshness"] == "Current"


def test_version_info() -> None:
    info = discovery.version_info("v1.32.3")
    assert (info["major"], info["minor"], info["gitVersion"]) == ("1", "32", "v1.32.3")


def test_negotiation() -> None:
    assert codec.negotiate(KUBECTL_TABLE_ACCEPT) == codec.Wanted(codec.JSON, "Table")
    assert codec.negotiate(None) == codec.Wanted()
    assert codec.negotiate("application/yaml") == codec.Wanted(codec.YAML)
    assert (
        codec.negotiate("application/json;as=Unknown;g=meta.k8s.io;v=v1, application/json") == codec.Wanted()
    )
    with pytest.raises(codec.NotAcceptable):
        codec.negotiate("application/vnd.kubernetes.protobuf")


def test_body_decoding() -> None:
    assert codec.loads_body(b"metadata: {name: a}", "application/yaml") == {"metadata": {"name": "a"}}
    with pytest.raises(errors.BadRequest):
        codec.loads_body(b"{not json", "application/json")
    with pytest.raises(errors.BadRequest):
        codec.loads_body(b"[1, 2]", "application/json")
    with pytest.raises(errors.UnsupportedMediaType):
        codec.loads_body(b"\xa1\x01", "application/cbor")


@pytest.fixture(scope="module")
def docs() -> OpenApiDocs:
    return OpenApiDocs(list(groups()))


def test_v3_index_lists_every_served_group_version(docs: OpenApiDocs) -> None:
    index = docs.v3_index()["paths"]
    for path in ("api/v1", "apis/apps/v1", "apis/batch/v1", "apis/policy/v1", "apis/coordination.k8s.io/v1"):
        assert index[path]["serverRelativeURL"].startswith(f"/openapi/v3/{path}?hash=")
    assert docs.v3("apis/nothing/v1") is None


def test_shipped_v3_document(docs: OpenApiDocs) -> None:
    raw = docs.v3("api/v1")
    assert raw is not None
    doc = orjson.loads(raw)
    assert doc["openapi"].startswith("3.") and "io.k8s.api.core.v1.Pod" in doc["components"]["schemas"]


def test_derived_v3_document_keeps_what_kubectl_reads(docs: OpenApiDocs) -> None:
    raw = docs.v3("apis/policy/v1")
    assert raw is not None and b"#/definitions/" not in raw
    doc = orjson.loads(raw)
    schemas = doc["components"]["schemas"]
    pdb = schemas["io.k8s.api.policy.v1.PodDisruptionBudget"]
    assert {"group": "policy", "kind": "PodDisruptionBudget", "version": "v1"} in pdb[
        "x-kubernetes-group-version-kind"
    ]
    # Every reference resolves inside the document.
    for ref in {part.split('"')[0] for part in raw.decode().split('"$ref":"')[1:]}:
        kind, _, name = ref.removeprefix("#/components/").partition("/")
        assert name in doc["components"][kind], ref
    patch = doc["paths"]["/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "PodDisruptionBudget"
    params = [
        p.get("name") or doc["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]]["name"]
        for p in patch["parameters"]
    ]
    assert "fieldValidation" in params
    assert "application/merge-patch+json" in patch["requestBody"]["content"]


def test_v2_protobuf_document(docs: OpenApiDocs) -> None:
    from shipshape.emulator.apiserver.protobuf import wire_fields

    encoded = docs.v2_protobuf()
    top = {number: value for number, _, value in wire_fields(encoded)}
    assert top[1] == b"2.0"
    definitions = top[9]
    assert isinstance(definitions, bytes)
    names = []
    for _, _, named in wire_fields(definitions):
        assert isinstance(named, bytes)
        names.append(dict((n, v) for n, _, v in wire_fields(named))[1])
    assert b"io.k8s.api.core.v1.Pod" in names
    assert len(names) == len(orjson.loads(docs.v2())["definitions"])
