"""The MutatingWebhookConfiguration the controller registers (or updates) with its caBundle.

`webhook_configuration` builds the body (pure); `ensure_webhook_configuration` creates it, replaces
it when what we set differs, or leaves it alone, through a small `WebhookConfigurations` interface
(`KubernetesWebhookConfigurations` adapts the official client to it).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from shipshape.controller.webhook.server import MUTATE_PATH

Obj = dict[str, Any]
CONFIGURATION_NAME = "shipshape-placement"
WEBHOOK_NAME = "placement.spot.shipshape.dev"
WORKLOADS_WEBHOOK_NAME = "workloads.spot.shipshape.dev"
CONTROLLER_LABEL = "app.kubernetes.io/name"
CONTROLLER_NAME = "shipshape-controller"


@dataclass(frozen=True, slots=True)
class ServiceTarget:
    namespace: str
    name: str
    port: int = 443


def webhook_configuration(
    *,
    ca_bundle: bytes,
    namespace: str,
    excluded_namespaces: Sequence[str] = ("kube-system",),
    url: str | None = None,
    service: ServiceTarget | None = None,
    timeout_seconds: int = 2,
    name: str = CONFIGURATION_NAME,
    namespace_selector: Mapping[str, Any] | None = None,
    object_selector: Mapping[str, Any] | None = None,
) -> Obj:
    """The configuration: failurePolicy Ignore, short timeout, own namespace excluded; two webhooks:

    - `placement.spot.shipshape.dev`: pod CREATE, the placement decision;
    - `workloads.spot.shipshape.dev`: Deployment and StatefulSet CREATE/UPDATE, admitted unchanged
      with the policy's warnings (so that `kubectl apply` prints them to whoever wrote the annotations).

    `url` is for out-of-cluster runs (the webhook on loopback); `service` for in-cluster ones.
    `namespace_selector` / `object_selector` (LabelSelectors) narrow the registration further: they
    are ANDed with the built-in exclusions (the controller's namespace, `excluded_namespaces`, the
    controller's own pods). The object selector applies to pods only (opting in is an annotation on
    the workload, which no selector can read).
    """
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url and service")
    if not 1 <= timeout_seconds <= 30:
        raise ValueError("timeoutSeconds must be between 1 and 30")
    client_config: Obj = {"caBundle": base64.b64encode(ca_bundle).decode()}
    if url is not None:
        client_config["url"] = url
    else:
        assert service is not None
        client_config["service"] = {
            "namespace": service.namespace,
            "name": service.name,
            "path": MUTATE_PATH,
            "port": service.port,
        }
    excluded = sorted({namespace, *excluded_namespaces})
    namespaces = _and_selector(
        namespace_selector,
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded},
    )
    pods = _and_selector(
        object_selector, {"key": CONTROLLER_LABEL, "operator": "NotIn", "values": [CONTROLLER_NAME]}
    )
    common: Obj = {
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "reinvocationPolicy": "Never",
        "sideEffects": "None",
        "timeoutSeconds": timeout_seconds,
        "namespaceSelector": namespaces,
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {CONTROLLER_LABEL: CONTROLLER_NAME}},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                **common,
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "objectSelector": pods,
            },
            {
                "name": WORKLOADS_WEBHOOK_NAME,
                **json.loads(json.dumps(common)),
                "rules": [
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["deployments", "statefulsets"],
                        "scope": "Namespaced",
                    }
                ],
                "objectSelector": {},
            },
        ],
    }


def _and_selector(selector: Mapping[str, Any] | None, requirement: Obj) -> Obj:
    """`selector` (a LabelSelector, or None) with one more required expression."""
    out: Obj = json.loads(json.dumps(dict(selector or {})))
    out["matchExpressions"] = [*(out.get("matchExpressions") or []), requirement]
    return out


class WebhookConfigurations(Protocol):
    """The three calls registration needs; bodies are plain JSON dicts."""

    def get(self, name: str) -> Obj | None: ...

    def create(self, body: Obj) -> Obj: ...

    def replace(self, name: str, body: Obj) -> Obj: ...


def _contains(have: Any, want: Any) -> bool:
    """Whether `have` holds everything `want` sets (the API server adds defaults of its own)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(k in have and _contains(have[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(map(_contains, have, want))
    return bool(have == want)


def ensure_webhook_configuration(
    client: WebhookConfigurations, desired: Obj
) -> Literal["created", "updated", "unchanged"]:
    """Create the configuration, or replace it when it differs from `desired`; idempotent."""
    name = desired["metadata"]["name"]
    existing = client.get(name)
    if existing is None:
        client.create(desired)
        return "created"
    wanted = {key: desired[key] for key in ("webhooks",)}
    wanted["metadata"] = {"labels": desired["metadata"].get("labels", {})}
    if _contains(existing, wanted):
        return "unchanged"
    body = json.loads(json.dumps(desired))
    body["metadata"]["resourceVersion"] = existing.get("metadata", {}).get("resourceVersion")
    client.replace(name, body)
    return "updated"


class KubernetesWebhookConfigurations:
    """`WebhookConfigurations` over the official client's AdmissionregistrationV1Api."""

    def __init__(self, api: Any) -> None:
        self._api = api

    def get(self, name: str) -> Obj | None:
        from kubernetes.client.exceptions import ApiException  # the client is heavy: load on first use

        try:
            response = self._api.read_mutating_webhook_configuration(name, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        found: Obj = json.loads(response.data)
        return found

    def create(self, body: Obj) -> Obj:
        response = self._api.create_mutating_webhook_configuration(body, _preload_content=False)
        created: Obj = json.loads(response.data)
        return created

    def replace(self, name: str, body: Obj) -> Obj:
        response = self._api.replace_mutating_webhook_configuration(name, body, _preload_content=False)
        replaced: Obj = json.loads(response.data)
        return replaced
