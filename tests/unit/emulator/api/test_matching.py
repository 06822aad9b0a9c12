"""Which webhooks a request reaches (pure matching) and pure defaulting details."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator import defaults
from shipshape.emulator.admission import Attributes, webhooks
from shipshape.emulator.resources import DAEMONSETS, DEPLOYMENTS, NAMESPACES, NODES, PODS, ResourceType

Obj = dict[str, Any]


def attrs(
    rt: ResourceType, operation: str = "CREATE", subresource: str = "", labels: Obj | None = None
) -> Attributes:
    obj = {"metadata": {"name": "x", "labels": labels or {}}}
    return Attributes(operation, rt, "default" if rt.namespaced else "", "x", obj, subresource=subresource)


def rule(**fields: Any) -> Obj:
    return {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"], **fields}


@pytest.mark.parametrize(
    ("the_rule", "request_attrs", "exact", "expected"),
    [
        (rule(resources=["pods"]), attrs(PODS), False, True),
        (rule(resources=["pods"]), attrs(PODS, "UPDATE", "status"), False, False),
        (rule(resources=["pods/status"]), attrs(PODS, "UPDATE", "status"), False, True),
        (rule(resources=["*/status"]), attrs(DEPLOYMENTS, "UPDATE", "status"), False, True),
        (rule(resources=["*"]), attrs(PODS, "CREATE", "binding"), False, False),
        (rule(resources=["*/*"]), attrs(PODS, "CREATE", "binding"), False, True),
        (rule(operations=["UPDATE"]), attrs(PODS), False, False),
        (rule(apiGroups=["apps"]), attrs(PODS), False, False),
        (
            rule(apiGroups=["apps"], apiVersions=["v1beta1"], resources=["deployments"]),
            attrs(DEPLOYMENTS),
            False,
            True,
        ),
        (
            rule(apiGroups=["apps"], apiVersions=["v1beta1"], resources=["deployments"]),
            attrs(DEPLOYMENTS),
            True,
            False,
        ),
        (rule(scope="Namespaced"), attrs(NODES), False, False),
        (rule(scope="Cluster"), attrs(NODES), False, True),
        (rule(scope="Cluster"), attrs(PODS), False, False),
    ],
)
def test_rule_matching(the_rule: Obj, request_attrs: Attributes, exact: bool, expected: bool) -> None:
    assert webhooks.rule_matches(the_rule, request_attrs, exact=exact) is expected


def test_namespace_selector_applies_to_namespaces_themselves_and_not_to_nodes() -> None:
    hook = webhooks.Webhook(
        "c",
        0,
        {"rules": [rule()], "namespaceSelector": {"matchLabels": {"env": "prod"}}},
        webhooks.VALIDATING,
    )
    assert webhooks.matches(hook, attrs(NAMESPACES, labels={"env": "prod"}), None)
    assert not webhooks.matches(hook, attrs(NAMESPACES, labels={"env": "dev"}), None)
    assert webhooks.matches(hook, attrs(NODES), None)  # cluster-scoped: namespaceSelector has no effect
    assert not webhooks.matches(hook, attrs(PODS), {"env": "dev"})


def test_denial_status_defaults() -> None:
    silent = webhooks.denial("w.example.com", None)
    assert (silent.code, silent.message) == (
        400,
        'admission webhook "w.example.com" denied the request without explanation',
    )
    low = webhooks.denial("w.example.com", {"code": 200, "reason": "NoWay"})
    assert (low.code, low.message) == (400, 'admission webhook "w.example.com" denied the request: NoWay')


def test_probe_daemonset_and_image_defaults() -> None:
    pod: Obj = {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.local:5000/app@sha256:abc",
                    "readinessProbe": {"httpGet": {"port": 80}},
                }
            ],
            "volumes": [{"name": "cfg", "configMap": {"name": "x"}}, {"name": "scratch"}],
        }
    }
    defaults.pod(pod)
    container = pod["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "IfNotPresent"  # by digest
    assert container["readinessProbe"] == {
        "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert pod["spec"]["volumes"] == [
        {"name": "cfg", "configMap": {"name": "x", "defaultMode": 420}},
        {"name": "scratch", "emptyDir": {}},
    ]
    assert defaults.image_pull_policy("registry.local:5000/app") == "Always"  # a port is not a tag
    ds: Obj = {"spec": {"template": {"spec": {"containers": []}}}}
    defaults.apply_defaults(DAEMONSETS, ds)
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    assert ds["spec"]["revisionHistoryLimit"] == 10
