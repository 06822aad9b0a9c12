"""OpenAPI documents: `/openapi/v2` and `/openapi/v3[/<group-version>]`, from upstream's published specs.

Shipped files (see PROVENANCE.md): the v3 documents of core/v1, apps/v1 and batch/v1, and the v2
swagger of all groups. Group-versions without a v3 document (policy, coordination, events.k8s.io,
scheduling, admissionregistration) get one derived from the v2 swagger, with their paths and the
schemas those paths reach, in OpenAPI 3.0 form.
"""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources
from typing import Any

import orjson

from shipshape.emulator.apiserver.openapi import gnostic

Doc = dict[str, Any]

_V3_FILES = {
    "api/v1": "v3__api__v1_openapi.json.gz",
    "apis/apps/v1": "v3__apis__apps__v1_openapi.json.gz",
    "apis/batch/v1": "v3__apis__batch__v1_openapi.json.gz",
}
_V2_FILE = "v2__swagger.json.gz"
_HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch")


def _read(name: str) -> bytes:
    return gzip.decompress(resources.files(__name__).joinpath(name).read_bytes())


def v3_path_for(api_version: str) -> str:
    """The v3 index key of a group/version: "api/v1", "apis/apps/v1"."""
    return f"apis/{api_version}" if "/" in api_version else f"api/{api_version}"


class OpenApiDocs:
    """Loads documents lazily and keeps their encoded bytes (they are large and never change)."""

    def __init__(self, served_api_versions: list[str]) -> None:
        self._served = [v3_path_for(v) for v in served_api_versions]
        self._v2: bytes | None = None
        self._v2_doc: Doc | None = None
        self._v2_pb: bytes | None = None
        self._v3: dict[str, bytes] = {}

    # ---- v2 ------------------------------------------------------------------------------
    def v2(self) -> bytes:
        if self._v2 is None:
            self._v2 = _read(_V2_FILE)
        return self._v2

    def v2_protobuf(self) -> bytes:
        """The v2 document as gnostic's protobuf `openapi_v2.Document` (built once)."""
        if self._v2_pb is None:
            self._v2_pb = gnostic.encode_document(self._v2_parsed())
        return self._v2_pb

    def _v2_parsed(self) -> Doc:
        if self._v2_doc is None:
            self._v2_doc = orjson.loads(self.v2())
        return self._v2_doc

    # ---- v3 ------------------------------------------------------------------------------
    def available(self) -> list[str]:
        """Group-versions with a v3 document: shipped, or derivable from the v2 swagger."""
        return [p for p in self._served if p in _V3_FILES or self._derivable(p)]

    def _derivable(self, path: str) -> bool:
        prefix = "/" + path + "/"
        return any(key.startswith(prefix) for key in self._v2_parsed()["paths"])

    def v3(self, path: str) -> bytes | None:
        path = path.strip("/")
        if path not in self._served:
            return None
        cached = self._v3.get(path)
        if cached is None:
            if path in _V3_FILES:
                cached = _read(_V3_FILES[path])
            elif self._derivable(path):
                cached = orjson.dumps(derive_v3(self._v2_parsed(), path))
            else:
                return None
            self._v3[path] = cached
        return cached

    def v3_hash(self, path: str) -> str:
        data = self.v3(path) or b""
        return hashlib.sha512(data).hexdigest().upper()

    def v3_index(self) -> Doc:
        return {
            "paths": {
                path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={self.v3_hash(path)}"}
                for path in self.available()
            }
        }


# ---- v2 -> v3 --------------------------------------------------------------------------------


def _schema_of_param(param: Doc) -> Doc:
    schema: Doc = {}
    for key in ("type", "format", "items", "enum", "default", "uniqueItems", "minimum", "maximum"):
        if key in param:
            schema[key] = param[key]
    return schema


def _convert_param(param: Doc) -> Doc:
    out: Doc = {"name": param["name"], "in": param["in"]}
    for key in ("description", "required"):
        if key in param:
            out[key] = param[key]
    out["schema"] = _schema_of_param(param)
    return out


def _request_body(param: Doc, consumes: list[str]) -> Doc:
    body: Doc = {"content": {ct: {"schema": param.get("schema", {})} for ct in consumes or ["*/*"]}}
    if param.get("required"):
        body["required"] = True
    return body


def _convert_operation(op: Doc, v2_params: dict[str, Doc]) -> Doc:
    out: Doc = {
        k: v for k, v in op.items() if k not in ("consumes", "produces", "schemes", "parameters", "responses")
    }
    params: list[Doc] = []
    for param in op.get("parameters", []):
        ref = param.get("$ref", "")
        resolved = v2_params.get(ref.removeprefix("#/parameters/")) if ref else param
        if resolved is not None and resolved.get("in") == "body":
            out["requestBody"] = _request_body(resolved, op.get("consumes", []))
        elif ref:
            params.append({"$ref": ref.replace("#/parameters/", "#/components/parameters/")})
        else:
            params.append(_convert_param(param))
    if params:
        out["parameters"] = params
    responses: Doc = {}
    for code, response in op.get("responses", {}).items():
        converted: Doc = {"description": response.get("description", "")}
        if "schema" in response:
            produces = [ct for ct in op.get("produces", ["application/json"]) if "protobuf" not in ct]
            converted["content"] = {ct: {"schema": response["schema"]} for ct in produces}
        responses[code] = converted
    out["responses"] = responses
    return out


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            found.add(ref.removeprefix("#/definitions/"))
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def derive_v3(swagger: Doc, path: str) -> Doc:
    """An OpenAPI 3.0 document for one group-version ("apis/policy/v1") of a Swagger 2.0 document."""
    prefix = "/" + path.strip("/") + "/"
    v2_params: dict[str, Doc] = swagger.get("parameters", {})
    paths: Doc = {}
    used_params: set[str] = set()
    for key, item in swagger["paths"].items():
        if not key.startswith(prefix):
            continue
        new_item: Doc = {}
        for method, op in item.items():
            if method in _HTTP_METHODS:
                new_item[method] = _convert_operation(op, v2_params)
        shared = []
        for param in item.get("parameters", []):
            ref = param.get("$ref", "")
            if ref:
                used_params.add(ref.removeprefix("#/parameters/"))
                shared.append({"$ref": ref.replace("#/parameters/", "#/components/parameters/")})
            else:
                shared.append(_convert_param(param))
        if shared:
            new_item["parameters"] = shared
        for op in new_item.values():
            if isinstance(op, dict):
                for param in op.get("parameters", []):
                    ref = param.get("$ref", "")
                    if ref:
                        used_params.add(ref.removeprefix("#/components/parameters/"))
        paths[key] = new_item
    components_params = {
        name: _convert_param(v2_params[name])
        for name in sorted(used_params)
        if name in v2_params and v2_params[name].get("in") != "body"
    }
    # Every definition the paths reach, transitively.
    definitions: Doc = swagger.get("definitions", {})
    wanted: set[str] = set()
    _refs(paths, wanted)
    pending = list(wanted)
    while pending:
        name = pending.pop()
        found: set[str] = set()
        _refs(definitions.get(name, {}), found)
        for ref in found - wanted:
            wanted.add(ref)
            pending.append(ref)
    doc: Doc = {
        "openapi": "3.0.0",
        "info": dict(swagger.get("info", {"title": "Kubernetes", "version": "unversioned"})),
        "paths": paths,
        "components": {
            "schemas": {name: definitions[name] for name in sorted(wanted) if name in definitions},
            "parameters": components_params,
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "description": "Bearer Token authentication",
                    "name": "authorization",
                    "in": "header",
                }
            },
        },
    }
    text = orjson.dumps(doc).replace(b'"#/definitions/', b'"#/components/schemas/')
    result: Doc = orjson.loads(text)
    return result
