"""The Helm chart (`deploy/helm/shipshape`): rendered with the real helm, every object checked against the
Kubernetes OpenAPI v2 schema, the values switching what they say, RBAC as narrow as the code needs, the
kustomize base equal to the chart's defaults. Without helm the values and templates are checked
against the chart's schema instead (`test_chart_schema.py`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from shipshape.cli.controller import load_settings
from shipshape.controller.guards import GUARD_LABEL
from shipshape.controller.headroom import priority_class
from shipshape.controller.leader import LEASE_NAME
from shipshape.controller.process import TLS_SECRET
from shipshape.controller.webhook.registration import CONFIGURATION_NAME, CONTROLLER_LABEL, CONTROLLER_NAME
from tests.integration.controller.test_deploy import check, definition_for

from .chart import CHART, DEPLOY, Obj, by_key, helm_binary, helm_template, kustomize, render

HELM = helm_binary()
pytestmark = pytest.mark.skipif(
    HELM is None, reason="helm is not installed (scripts/ensure-helm.sh fetches it; `make test` runs it)"
)
VAP_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def helm() -> str:
    assert HELM is not None
    return HELM


def container(obj: Obj) -> Obj:
    first: Obj = obj["spec"]["template"]["spec"]["containers"][0]
    return first


def check_admission_policy(obj: Obj, problems: list[str]) -> None:
    """admissionregistration.k8s.io/v1 is newer than the bundled swagger: the fields the API requires."""
    spec = obj.get("spec") or {}
    name = f"{obj['kind']}/{obj['metadata']['name']}"
    if obj["apiVersion"] != "admissionregistration.k8s.io/v1":
        problems.append(f"{name}: apiVersion {obj['apiVersion']}")
    if obj["kind"] == "ValidatingAdmissionPolicyBinding":
        if not spec.get("policyName") or not set(spec.get("validationActions") or []) <= {
            "Deny",
            "Warn",
            "Audit",
        }:
            problems.append(f"{name}: policyName and validationActions")
        return
    allowed = {"failurePolicy", "matchConstraints", "matchConditions", "variables", "validations"}
    problems.extend(f"{name}: unknown field spec.{key}" for key in spec.keys() - allowed)
    for rule in spec["matchConstraints"]["resourceRules"]:
        if not {"apiGroups", "apiVersions", "operations", "resources"} <= rule.keys():
            problems.append(f"{name}: incomplete resource rule {rule}")
    for validation in spec["validations"]:
        if not validation.get("expression") or validation.keys() - {"expression", "message", "reason"}:
            problems.append(f"{name}: validation {validation}")


def test_default_render_matches_the_schema_and_has_every_part() -> None:
    objects = render(helm())
    kinds = {o["kind"] for o in objects}
    assert kinds == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "PriorityClass",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "DaemonSet",
        *VAP_KINDS,
    }
    problems: list[str] = []
    for obj in objects:
        if obj["kind"] in VAP_KINDS:
            check_admission_policy(obj, problems)
            continue
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        check(
            obj, {"$ref": "#/definitions/" + definition_for(obj["apiVersion"], obj["kind"])}, name, problems
        )
    assert problems == []
    namespaced = [
        o for o in objects if o["kind"] not in {"ClusterRole", "ClusterRoleBinding", "PriorityClass"}
    ]
    # Everything in the release's namespace, but the read of cluster-autoscaler's status (kube-system).
    assert all(
        o["metadata"].get("namespace")
        == ("kube-system" if o["metadata"]["name"].endswith("autoscaler-status") else "shipshape-system")
        for o in namespaced
        if o["kind"] not in VAP_KINDS
    )


def test_controller_deployment_daemonset_and_config(tmp_path: Path) -> None:
    objects = by_key(render(helm(), namespace="spot-ops"))
    deployment = objects[("Deployment", "shipshape-controller")]
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    # The webhook configuration's objectSelector skips the controller's own pods by this label.
    assert deployment["spec"]["template"]["metadata"]["labels"][CONTROLLER_LABEL] == CONTROLLER_NAME
    args = container(deployment)["args"]
    assert args[0] == "controller" and "--webhook-service=shipshape-webhook" in args
    assert "--identity=$(POD_NAME)" in args and "--dry-run" not in args
    assert spec["priorityClassName"] == "shipshape-controller"
    assert objects[("PriorityClass", "shipshape-controller")]["value"] > 0
    security = container(deployment)["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"] and security["runAsUser"] == 65532
    assert {"name": "tmp", "mountPath": "/tmp"} in container(deployment)["volumeMounts"]
    assert objects[("Service", "shipshape-webhook")]["spec"]["ports"][0]["port"] == 443
    assert objects[("PodDisruptionBudget", "shipshape-controller")]["spec"]["minAvailable"] == 1
    # The headroom class is the one the controller applies (so it never rewrites it).
    shipped = objects[("PriorityClass", "shipshape-headroom")]
    applied = priority_class()
    assert {k: shipped[k] for k in ("value", "preemptionPolicy", "globalDefault", "description")} == {
        k: applied[k] for k in ("value", "preemptionPolicy", "globalDefault", "description")
    }
    config_file = tmp_path / "controller.yaml"
    config_file.write_text(objects[("ConfigMap", "shipshape-controller")]["data"]["controller.yaml"])
    config, loops = load_settings(config_file)
    assert config.namespace == "spot-ops" and loops.poll_instance_metadata is False
    daemonset = objects[("DaemonSet", "shipshape-node-notices")]
    pod = daemonset["spec"]["template"]["spec"]
    assert container(daemonset)["args"][:2] == ["node-notices", "--node-name=$(NODE_NAME)"]
    assert container(daemonset)["env"] == [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert "hostNetwork" not in pod and pod["serviceAccountName"] == "shipshape-node-notices"


def test_values_switch_flags_config_and_objects(tmp_path: Path) -> None:
    selector = {
        "matchExpressions": [{"key": "spot.shipshape.dev/enabled", "operator": "In", "values": ["true"]}]
    }
    role = "arn:aws:iam::111122223333:role/shipshape-controller"
    values = {
        "image": {"repository": "registry.example/shipshape", "tag": "1.2.3"},
        "controller": {
            "replicas": 3,
            "dryRun": True,
            "rebalanceEvictions": False,
            "noticeQueueUrl": "https://sqs.us-east-1.amazonaws.com/111122223333/shipshape",
            "webhookNamespaceSelector": selector,
            "webhookObjectSelector": {"matchLabels": {"team": "web"}},
            "capacityLabels": {"example.com/lifecycle": {"spot": "spot", "on-demand": "normal"}},
        },
        "serviceAccount": {"controller": {"annotations": {"eks.amazonaws.com/role-arn": role}}},
        "nodeNotices": {"cloud": "aws", "hostNetwork": True, "interval": "5s"},
        "metrics": {"serviceMonitor": {"enabled": True}},
        "logLevel": "debug",
    }
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    objects = by_key(render(helm(), "-f", str(values_file)))
    deployment = objects[("Deployment", "shipshape-controller")]
    args = container(deployment)["args"]
    assert deployment["spec"]["replicas"] == 3
    assert container(deployment)["image"] == "registry.example/shipshape:1.2.3"
    assert {"--dry-run", "--no-rebalance-evictions", "--log-level=debug"} <= set(args)
    assert f"--notice-queue-url={values['controller']['noticeQueueUrl']}" in args  # type: ignore[index]
    config = yaml.safe_load(objects[("ConfigMap", "shipshape-controller")]["data"]["controller.yaml"])
    assert config["webhook_namespace_selector"] == selector
    assert config["webhook_object_selector"] == {"matchLabels": {"team": "web"}}
    assert config["capacity_labels"] == {"example.com/lifecycle": {"spot": "spot", "on-demand": "normal"}}
    account = objects[("ServiceAccount", "shipshape-controller")]
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": role}
    daemonset = objects[("DaemonSet", "shipshape-node-notices")]
    assert daemonset["spec"]["template"]["spec"]["hostNetwork"] is True
    assert daemonset["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert {"--cloud=aws", "--interval=5s"} <= set(container(daemonset)["args"])
    assert objects[("ServiceMonitor", "shipshape-controller")]["spec"]["endpoints"][0]["port"] == "metrics"
    # A changed configuration rolls the controller's replicas.
    default = by_key(render(helm()))[("Deployment", "shipshape-controller")]
    annotation = "checksum/config"
    assert (
        deployment["spec"]["template"]["metadata"]["annotations"][annotation]
        != default["spec"]["template"]["metadata"]["annotations"][annotation]
    )
    # Off: no DaemonSet, and nothing of the node poller left (account, role, policy).
    off = by_key(render(helm(), "--set", "nodeNotices.enabled=false"))
    assert not [key for key in off if "node-notices" in key[1]]


def test_batch_resources_switch_the_loop_on_and_grant_what_it_uses() -> None:
    def rules(objects: dict[tuple[str, str], Obj]) -> list[Obj]:
        return rules_of(objects, ("ClusterRole", "shipshape-controller"))

    default = by_key(render(helm()))
    assert "nodes/status" not in {r for rule in rules(default) for r in rule["resources"]}
    assert not [rule for rule in rules(default) if "metrics.k8s.io" in rule["apiGroups"]]
    on = by_key(render(helm(), "--set", "controller.batchResources=true"))
    config = yaml.safe_load(on[("ConfigMap", "shipshape-controller")]["data"]["controller.yaml"])
    assert config["loops"]["batch_resources"] == {"enabled": True}
    assert config["loops"]["poll_instance_metadata"] is False  # the rest of loops: kept
    assert verbs(rules(on), "nodes/status", named=False) == {"patch"}
    metrics = [rule for rule in rules(on) if "metrics.k8s.io" in rule["apiGroups"]]
    assert [(sorted(r["resources"]), sorted(r["verbs"])) for r in metrics] == [
        (["nodes", "pods"], ["get", "list"])
    ]


def test_helm_lint_is_clean() -> None:
    done = subprocess.run(
        [helm(), "lint", "--strict", "--namespace", "shipshape-system", str(CHART)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "0 chart(s) failed" in done.stdout, done.stdout + done.stderr


def test_bad_values_are_rejected_by_the_schema() -> None:
    for setting, field in (
        ("nodeNotices.cloud=aws2", "nodeNotices.cloud"),
        ("controller.replicas=0", "controller.replicas"),
        ("controller.webhookObjectSelector.matchExpressions[0].operator=Equals", "operator"),
    ):
        done = helm_template(helm(), "--set", setting, ok=False)
        assert done.returncode != 0 and field in done.stderr, (setting, done.stderr)


def test_admission_policies_follow_the_kubernetes_version() -> None:
    assert not VAP_KINDS & {o["kind"] for o in render(helm(), "--kube-version", "1.29.0")}
    assert {o["kind"] for o in render(helm(), "--kube-version", "1.30.0")} >= VAP_KINDS
    assert not VAP_KINDS & {
        o["kind"] for o in render(helm(), "--set", "validatingAdmissionPolicy.enabled=false")
    }
    forced = render(helm(), "--kube-version", "1.29.0", "--set", "validatingAdmissionPolicy.enabled=true")
    assert {o["kind"] for o in forced} >= VAP_KINDS


def rules_of(objects: dict[tuple[str, str], Obj], *names: tuple[str, str]) -> list[Obj]:
    return [rule for name in names for rule in objects[name]["rules"]]


def verbs(rules: list[Obj], resource: str, *, named: bool) -> set[str]:
    return {
        verb
        for rule in rules
        if resource in rule["resources"] and bool(rule.get("resourceNames")) == named
        for verb in rule["verbs"]
    }


def test_rbac_grants_only_what_the_code_uses() -> None:
    objects = by_key(render(helm(), "--namespace", "shipshape-system"))
    controller = rules_of(objects, ("ClusterRole", "shipshape-controller"), ("Role", "shipshape-controller"))
    assert all(
        "*" not in r["verbs"] and "*" not in r["resources"] and "*" not in r["apiGroups"] for r in controller
    )
    # Secrets: never listed or watched; only the certificate by name (create cannot be named: the
    # admission policy limits it).
    assert verbs(controller, "secrets", named=False) == {"create"}
    assert verbs(controller, "secrets", named=True) == {"get", "update", "patch"}
    assert {n for r in controller if "secrets" in r["resources"] for n in r.get("resourceNames", [])} == {
        TLS_SECRET
    }
    assert verbs(controller, "mutatingwebhookconfigurations", named=False) == {"create"}
    named_webhook = [
        r for r in controller if "mutatingwebhookconfigurations" in r["resources"] and r.get("resourceNames")
    ]
    assert [r["resourceNames"] for r in named_webhook] == [[CONFIGURATION_NAME]]
    assert {"update", "patch", "delete"} <= set(named_webhook[0]["verbs"])
    assert verbs(controller, "leases", named=False) == {"create"}
    assert {n for r in controller if "leases" in r["resources"] for n in r.get("resourceNames", [])} == {
        LEASE_NAME
    }
    assert verbs(controller, "statefulsets", named=False) == {"get", "list", "watch"}
    assert verbs(controller, "pods/eviction", named=False) == {"create"}
    node = objects[("ClusterRole", "shipshape-node-notices")]["rules"]
    assert verbs(node, "nodes", named=False) == {"get", "patch"}
    assert verbs(node, "nodes/status", named=False) == {"get", "patch"}
    assert verbs(node, "events", named=False) == {"create"}
    assert {r for rule in node for r in rule["resources"]} == {"nodes", "nodes/status", "events"}


def test_admission_policies_limit_the_writes_rbac_cannot() -> None:
    objects = by_key(render(helm(), namespace="spot-ops"))
    writes = objects[("ValidatingAdmissionPolicy", "shipshape-controller-writes")]["spec"]
    assert writes["matchConditions"][0]["expression"] == (
        'request.userInfo.username == "system:serviceaccount:spot-ops:shipshape-controller"'
    )
    expressions = " ".join(v["expression"] for v in writes["validations"])
    assert f"'{GUARD_LABEL}'" in expressions and f"'{TLS_SECRET}'" in expressions
    assert "'shipshape-headroom'" in expressions and '"spot-ops"' in expressions
    resources = {r for rule in writes["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert resources == {"poddisruptionbudgets", "secrets", "priorityclasses"}
    own_node = objects[("ValidatingAdmissionPolicy", "shipshape-node-notices-own-node")]["spec"]
    assert "authentication.kubernetes.io/node-name" in own_node["validations"][0]["expression"]
    for name in ("shipshape-controller-writes", "shipshape-node-notices-own-node"):
        binding = objects[("ValidatingAdmissionPolicyBinding", name)]["spec"]
        assert binding == {"policyName": name, "validationActions": ["Deny"]}


HELM_ONLY_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}


def normalised(obj: Obj) -> Obj:
    """An object without what only Helm sets (release labels, the config checksum)."""
    copy: Any = json.loads(json.dumps(obj))
    for metadata in (copy["metadata"], (copy.get("spec") or {}).get("template", {}).get("metadata")):
        if not metadata:
            continue
        labels = metadata.get("labels") or {}
        for key in [k for k in labels if k in HELM_ONLY_LABELS or k.startswith("helm.sh/")]:
            del labels[key]
        annotations = metadata.get("annotations") or {}
        annotations.pop("checksum/config", None)
        if "annotations" in metadata and not annotations:
            del metadata["annotations"]
    if copy["kind"] == "ConfigMap":
        copy["data"] = {k: yaml.safe_load(v) for k, v in copy["data"].items()}
    return copy  # type: ignore[no-any-return]


def test_kustomize_base_equals_the_chart_defaults() -> None:
    chart = {key: normalised(o) for key, o in by_key(render(helm())).items()}
    base = {key: normalised(o) for key, o in by_key(kustomize(DEPLOY)).items()}
    policies = {key: normalised(o) for key, o in by_key(kustomize(DEPLOY / "admission-policies")).items()}
    assert set(base) - set(chart) == {("Namespace", "shipshape-system")}
    assert set(chart) == (set(base) - {("Namespace", "shipshape-system")}) | set(policies)
    for key, obj in chart.items():
        assert (base.get(key) or policies[key]) == obj, key
