"""The in-cluster manifests (`deploy/`): every object checked against the Kubernetes OpenAPI v2 schema,
the ConfigMap's settings loaded as the controller loads them, and the kustomize base applied with
`kubectl apply --dry-run=server` to a served emulator."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from shipshape.cli.controller import load_settings
from shipshape.controller.headroom import priority_class
from shipshape.controller.webhook.registration import CONFIGURATION_NAME
from shipshape.emulator.resources import RESOURCES
from tests.emulator_fixtures import ServedEmulator

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
SWAGGER = Path(__file__).resolve().parents[3] / "src/shipshape/emulator/apiserver/openapi/v2__swagger.json.gz"
Obj = dict[str, Any]


@cache
def swagger() -> Obj:
    loaded: Obj = json.loads(gzip.decompress(SWAGGER.read_bytes()))
    return loaded


def definition_for(api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    for name, schema in swagger()["definitions"].items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group") or "", gvk["version"], gvk["kind"]) == (group, version, kind):
                return str(name)
    raise AssertionError(f"no schema for {api_version} {kind}")


def check(value: Any, schema: Obj, path: str, problems: list[str]) -> None:
    """Unknown fields, wrong types and missing required fields (what strict decoding rejects)."""
    if "$ref" in schema:
        schema = swagger()["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    kind = schema.get("type")
    if schema.get("format") == "int-or-string":
        if not isinstance(value, (int, str)):
            problems.append(f"{path}: expected an int or a string")
        return
    if kind is None and "properties" not in schema:
        return  # free-form (e.g. Quantity, RawExtension)
    if kind == "object" or "properties" in schema:
        if not isinstance(value, dict):
            problems.append(f"{path}: expected an object")
            return
        properties = schema.get("properties")
        for required in schema.get("required") or []:
            if required not in value:
                problems.append(f"{path}: missing required field {required!r}")
        for key, item in value.items():
            if properties is not None:
                if key not in properties:
                    problems.append(f"{path}: unknown field {key!r}")
                    continue
                check(item, properties[key], f"{path}.{key}", problems)
            elif isinstance(schema.get("additionalProperties"), dict):
                check(item, schema["additionalProperties"], f"{path}.{key}", problems)
        return
    types: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "integer": int,
        "boolean": bool,
        "number": (int, float),
        "array": list,
    }
    expected = types[str(kind)]
    if not isinstance(value, expected) or (kind == "integer" and isinstance(value, bool)):
        problems.append(f"{path}: expected {kind}, got {type(value).__name__}")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            check(item, schema.get("items") or {}, f"{path}[{index}]", problems)


def manifests() -> list[Obj]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    objects: list[Obj] = []
    for resource in kustomization["resources"]:
        objects.extend(doc for doc in yaml.safe_load_all((DEPLOY / resource).read_text()) if doc)
    return objects


def test_every_manifest_matches_the_openapi_schema() -> None:
    objects = manifests()
    kinds = {o["kind"] for o in objects}
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    } <= kinds
    assert {
        "ConfigMap",
        "PriorityClass",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "DaemonSet",
    } <= kinds
    problems: list[str] = []
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        check(
            obj, {"$ref": "#/definitions/" + definition_for(obj["apiVersion"], obj["kind"])}, name, problems
        )
    assert problems == []


def test_the_shipped_priority_class_is_the_one_the_controller_applies() -> None:
    applied = priority_class()
    shipped = next(
        o
        for o in manifests()
        if o["kind"] == "PriorityClass" and o["metadata"]["name"] == applied["metadata"]["name"]
    )
    assert shipped["metadata"]["name"] == applied["metadata"]["name"]
    for field in ("value", "preemptionPolicy", "globalDefault"):
        assert shipped[field] == applied[field], field
    # Below every workload (priority 0), above cluster-autoscaler's expendable cutoff (-10).
    assert -10 < shipped["value"] < 0


def test_schema_check_catches_mistakes() -> None:
    deployment = next(o for o in manifests() if o["kind"] == "Deployment")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["replica"] = 2
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8443"
    del broken["spec"]["selector"]
    problems: list[str] = []
    check(broken, {"$ref": "#/definitions/" + definition_for("apps/v1", "Deployment")}, "d", problems)
    assert len(problems) == 3, problems


def test_deployment_shape_and_configmap_settings(tmp_path: Path) -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in manifests()}
    deployment = objects[("Deployment", "shipshape-controller")]
    assert deployment["spec"]["replicas"] == 2
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--webhook-service=shipshape-webhook" in args
    assert objects[("Service", "shipshape-webhook")]["spec"]["ports"][0]["port"] == 443
    assert objects[("PodDisruptionBudget", "shipshape-controller")]["spec"]["minAvailable"] == 1
    config_file = tmp_path / "controller.yaml"
    config_file.write_text(objects[("ConfigMap", "shipshape-controller")]["data"]["controller.yaml"])
    config, loops = load_settings(config_file)
    assert config.namespace == "shipshape-system" and loops.poll_instance_metadata is False
    # Least privilege: nothing may be listed in secrets, and no wildcard anywhere.
    rules = (
        objects[("ClusterRole", "shipshape-controller")]["rules"]
        + objects[("Role", "shipshape-controller")]["rules"]
    )
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in rules)
    # Secrets: never listed or watched; reads and writes by name only (create cannot be named).
    secret_rules = [r for r in rules if "secrets" in r["resources"]]
    assert secret_rules and all(
        r["verbs"] == ["create"] or r.get("resourceNames") == ["shipshape-webhook-tls"] for r in secret_rules
    )
    assert all(not {"list", "watch"} & set(r["verbs"]) for r in secret_rules)
    webhook_rules = [
        r for r in rules if "mutatingwebhookconfigurations" in r["resources"] and "update" in r["verbs"]
    ]
    assert webhook_rules and all(r.get("resourceNames") == [CONFIGURATION_NAME] for r in webhook_rules)


RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def served_by_emulator(obj: Obj) -> bool:
    return any(rt.api_version == obj["apiVersion"] and rt.kind == obj["kind"] for rt in RESOURCES)


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_base_applies_with_server_dry_run(served_emulator: ServedEmulator, tmp_path: Path) -> None:
    kubectl = [
        "kubectl",
        "--kubeconfig",
        str(served_emulator.kubeconfig),
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    built = subprocess.run([*kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    objects = [doc for doc in yaml.safe_load_all(built.stdout) if doc]
    assert len(objects) == len(manifests())
    assert all(
        o["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "shipshape" for o in objects
    )
    for kind in ("Deployment", "DaemonSet"):
        image = next(o for o in objects if o["kind"] == kind)["spec"]["template"]["spec"]["containers"][0]
        assert image["image"] == "ghcr.io/shipshape-dev/shipshape:0.1.0", kind
    # The emulator serves no RBAC API: those objects are checked against the schema above only.
    served = [o for o in objects if served_by_emulator(o)]
    assert {o["kind"] for o in objects if not served_by_emulator(o)} <= RBAC_KINDS
    # A server-side dry run of namespaced objects needs their namespace to exist.
    created = subprocess.run(
        [*kubectl, "create", "namespace", "shipshape-system"], capture_output=True, text=True, timeout=60
    )
    assert created.returncode == 0, created.stderr
    done = subprocess.run(
        [*kubectl, "apply", "--dry-run=server", "-f", "-"],
        input=yaml.safe_dump_all(served),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == len(served), done.stdout
    assert all("(server dry run)" in line for line in lines)
