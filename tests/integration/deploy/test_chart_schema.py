"""Checks of the chart that need no helm: values.yaml satisfies values.schema.json (the schema helm
enforces at install), and every `.Values.…` path a template reads exists in values.yaml (a typo there
renders as empty, silently)."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from .chart import CHART

Obj = dict[str, Any]
TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
}


def validate(value: Any, schema: Obj, root: Obj, path: str, problems: list[str]) -> None:
    """The draft-07 keywords values.schema.json uses: $ref, type, enum, required, properties,
    additionalProperties, items, minimum, maximum, minLength, pattern."""
    if "$ref" in schema:
        schema = root["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} is not one of {schema['enum']}")
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        fits = [
            k
            for k in names
            if isinstance(value, TYPES[k]) and not (isinstance(value, bool) and k in ("integer", "number"))
        ]
        if not fits:
            problems.append(f"{path}: expected {kinds}, got {type(value).__name__}")
            return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        problems.extend(
            f"{path}: missing {key!r}" for key in schema.get("required") or [] if key not in value
        )
        for key, item in value.items():
            if key in properties:
                validate(item, properties[key], root, f"{path}.{key}", problems)
            elif schema.get("additionalProperties") is False:
                problems.append(f"{path}: unknown key {key!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                validate(item, schema["additionalProperties"], root, f"{path}.{key}", problems)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            validate(item, schema["items"], root, f"{path}[{index}]", problems)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{path}: below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{path}: above {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{path}: shorter than {schema['minLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{path}: {value!r} does not match {schema['pattern']}")


def schema() -> Obj:
    loaded: Obj = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def values() -> Obj:
    loaded: Obj = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def test_default_values_satisfy_the_schema() -> None:
    problems: list[str] = []
    validate(values(), schema(), schema(), "values", problems)
    assert problems == []


def test_the_schema_rejects_bad_values() -> None:
    bad = values()
    bad["nodeNotices"]["cloud"] = "aws2"
    bad["controller"]["replicas"] = 0
    bad["controller"]["dryRun"] = "yes"
    bad["controller"]["webhookObjectSelector"] = {"matchLabels": {"a": "b"}, "matchLabel": {}}
    problems: list[str] = []
    validate(bad, schema(), schema(), "values", problems)
    assert sorted(problems) == [
        "values.controller.dryRun: expected boolean, got str",
        "values.controller.replicas: below 1",
        "values.controller.webhookObjectSelector: unknown key 'matchLabel'",
        "values.nodeNotices.cloud: 'aws2' is not one of ['auto', 'aws', 'gcp', 'azure']",
    ]


def test_every_value_a_template_reads_exists() -> None:
    defaults = values()
    missing: list[str] = []
    read = 0
    for template in sorted((CHART / "templates").iterdir()):
        text = template.read_text()
        # `$c := .Values.controller` then `$c.x`: resolve the aliases each template sets.
        aliases = dict(re.findall(r"\$(\w+) := \.Values\.([\w.]+)", text))
        paths = re.findall(r"\.Values\.([\w.]+)", text)
        for alias, prefix in aliases.items():
            paths += [f"{prefix}.{rest}" for rest in re.findall(rf"\${alias}\.([\w.]+)", text)]
        for path in paths:
            read += 1
            node: Any = defaults
            for part in path.split("."):
                if not isinstance(node, dict) or part not in node:
                    missing.append(f"{template.name}: .Values.{path}")
                    break
                node = node[part]
    assert read > 50 and missing == []
