"""Unknown-field detection for `fieldValidation` (Strict / Warn / Ignore), from the OpenAPI schemas.

Walks a request body against its kind's schema in the group-version's OpenAPI v3 document and
reports fields the schema does not declare, named as upstream's strict decoder names them
(`spec.containers[0].imagee`). Maps (`additionalProperties`), opaque values (`IntOrString`,
`Quantity`, `RawExtension`) and `x-kubernetes-preserve-unknown-fields` are not descended into.
"""

from __future__ import annotations

from typing import Any

import orjson

from shipshape.emulator.apiserver.openapi import OpenApiDocs, v3_path_for
from shipshape.emulator.resources import ResourceType

Schema = dict[str, Any]
_REF = "#/components/schemas/"


class FieldChecker:
    def __init__(self, docs: OpenApiDocs) -> None:
        self.docs = docs
        self._schemas: dict[str, dict[str, Schema]] = {}  # v3 path -> components.schemas
        self._roots: dict[str, tuple[dict[str, Schema], Schema] | None] = {}

    def _root(self, rt: ResourceType) -> tuple[dict[str, Schema], Schema] | None:
        if rt.key in self._roots:
            return self._roots[rt.key]
        path = v3_path_for(rt.api_version)
        schemas = self._schemas.get(path)
        if schemas is None:
            raw = self.docs.v3(path)
            schemas = orjson.loads(raw).get("components", {}).get("schemas", {}) if raw else {}
            self._schemas[path] = schemas
        found = None
        for schema in schemas.values():
            for gvk in schema.get("x-kubernetes-group-version-kind") or []:
                if (gvk.get("group"), gvk.get("version"), gvk.get("kind")) == (rt.group, rt.version, rt.kind):
                    found = (schemas, schema)
                    break
            if found:
                break
        self._roots[rt.key] = found
        return found

    def unknown_fields(self, rt: ResourceType, body: dict[str, Any]) -> list[str]:
        """Paths of the fields in `body` that the kind's schema does not declare."""
        root = self._root(rt)
        if root is None:
            return []
        schemas, schema = root
        out: list[str] = []
        _walk(schemas, schema, body, "", out)
        return out


def _resolve(schemas: dict[str, Schema], schema: Schema) -> Schema:
    for _ in range(20):
        ref = schema.get("$ref")
        if ref is None and len(schema.get("allOf") or []) == 1:
            ref = schema["allOf"][0].get("$ref")
        if not ref or not ref.startswith(_REF):
            return schema
        schema = schemas.get(ref[len(_REF) :], {})
    return schema


def _walk(schemas: dict[str, Schema], schema: Schema, value: Any, path: str, out: list[str]) -> None:
    schema = _resolve(schemas, schema)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties is not None:
            for key, item in value.items():
                if key.startswith("$"):  # strategic merge patch directives ($patch, $setElementOrder/...)
                    continue
                child = properties.get(key)
                where = f"{path}.{key}" if path else key
                if child is None:
                    out.append(where)
                elif item is not None:
                    _walk(schemas, child, item, where, out)
        elif isinstance(additional, dict):
            for key, item in value.items():
                if item is not None:
                    _walk(schemas, additional, item, f"{path}[{key}]", out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            if item is not None:
                _walk(schemas, schema["items"], item, f"{path}[{i}]", out)
