"""The admission policies' CEL, evaluated with a CEL interpreter (cel-python) on the requests the
controller and the node poller make, and on the ones the policies exist to refuse. The emulator
serves no admission-policy API; this checks what each expression says, in the shape of the API
server's admission request (`request`, `object`, `oldObject`, `variables`)."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
import yaml

from shipshape.controller.guards import GUARD_LABEL
from shipshape.controller.headroom import PRIORITY_CLASS
from shipshape.controller.process import TLS_SECRET

from .chart import DEPLOY, Obj

NAMESPACE = "shipshape-system"
CONTROLLER = f"system:serviceaccount:{NAMESPACE}:shipshape-controller"
POLLER = f"system:serviceaccount:{NAMESPACE}:shipshape-node-notices"
NODE_NAME = "authentication.kubernetes.io/node-name"
ENV = celpy.Environment()


def policies() -> dict[str, Obj]:
    path = DEPLOY / "admission-policies" / "validatingadmissionpolicy.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    return ENV.program(ENV.compile(expression)).evaluate(activation)


def admitted(
    policy: str,
    *,
    user: str,
    operation: str,
    resource: str,
    new: Obj | None,
    old: Obj | None = None,
    namespace: str = "",
    extra: dict[str, list[str]] | None = None,
) -> bool:
    """Whether the policy lets the request through (True also when it does not match the request)."""
    spec = policies()[policy]
    rules = spec["matchConstraints"]["resourceRules"]
    if not any(resource in r["resources"] and operation in r["operations"] for r in rules):
        return True
    request = {
        "operation": operation,
        "resource": {"resource": resource},
        "namespace": namespace,
        "userInfo": {"username": user, "extra": extra or {}},
    }
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
    }
    if not all(bool(evaluate(c["expression"], activation)) for c in spec.get("matchConditions") or []):
        return True
    variables: dict[str, Any] = {}
    for variable in spec.get("variables") or []:
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()}
        )
        variables[variable["name"]] = evaluate(variable["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    return all(bool(evaluate(v["expression"], activation)) for v in spec["validations"])


def pdb(name: str, labels: dict[str, str] | None = None) -> Obj:
    metadata: Obj = {"name": name, "namespace": "web"}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata, "spec": {"minAvailable": 1}}


GUARD = pdb("api-shipshape-guard", {GUARD_LABEL: "api"})
OTHER = pdb("api", {"app": "api"})
UNLABELLED = pdb("api")


@pytest.mark.parametrize(
    ("operation", "new", "old", "allowed"),
    [
        ("CREATE", GUARD, None, True),
        ("UPDATE", GUARD, GUARD, True),
        ("DELETE", None, GUARD, True),
        ("CREATE", OTHER, None, False),
        ("CREATE", UNLABELLED, None, False),
        ("UPDATE", OTHER, GUARD, False),  # dropping the label
        ("UPDATE", GUARD, OTHER, False),  # taking over someone's PDB by labelling it
        ("DELETE", None, OTHER, False),
        ("DELETE", None, UNLABELLED, False),
    ],
)
def test_the_controller_writes_only_guard_pdbs(
    operation: str, new: Obj | None, old: Obj | None, allowed: bool
) -> None:
    request = {"operation": operation, "resource": "poddisruptionbudgets", "new": new, "old": old}
    assert admitted("shipshape-controller-writes", user=CONTROLLER, namespace="web", **request) is allowed
    # Anyone else (a user, Helm, another controller) is not concerned by the policy.
    assert admitted("shipshape-controller-writes", user="kubernetes-admin", namespace="web", **request)


@pytest.mark.parametrize(
    ("operation", "name", "namespace", "allowed"),
    [
        ("CREATE", TLS_SECRET, NAMESPACE, True),
        ("UPDATE", TLS_SECRET, NAMESPACE, True),
        ("CREATE", "aws-credentials", NAMESPACE, False),
        ("CREATE", TLS_SECRET, "default", False),
        ("DELETE", "aws-credentials", NAMESPACE, False),
    ],
)
def test_the_controller_writes_only_its_certificate_secret(
    operation: str, name: str, namespace: str, allowed: bool
) -> None:
    secret = {"metadata": {"name": name, "namespace": namespace}, "type": "kubernetes.io/tls"}
    new, old = (
        (None, secret) if operation == "DELETE" else (secret, secret if operation == "UPDATE" else None)
    )
    assert (
        admitted(
            "shipshape-controller-writes",
            user=CONTROLLER,
            operation=operation,
            resource="secrets",
            new=new,
            old=old,
            namespace=namespace,
        )
        is allowed
    )


def test_the_controller_writes_only_the_headroom_priority_class() -> None:
    def create(name: str) -> bool:
        return admitted(
            "shipshape-controller-writes",
            user=CONTROLLER,
            operation="CREATE",
            resource="priorityclasses",
            new={"metadata": {"name": name}, "value": -1},
        )

    assert create(PRIORITY_CLASS) and not create("system-cluster-critical-2")


def test_a_node_poller_patches_only_its_own_node() -> None:
    node = {"metadata": {"name": "ip-10-0-1-7.ec2.internal"}}

    def update(resource: str, extra: dict[str, list[str]] | None, user: str = POLLER) -> bool:
        return admitted(
            "shipshape-node-notices-own-node",
            user=user,
            operation="UPDATE",
            resource=resource,
            new=node,
            old=node,
            extra=extra,
        )

    for resource in ("nodes", "nodes/status"):
        assert update(resource, {NODE_NAME: ["ip-10-0-1-7.ec2.internal"]})
        assert not update(resource, {NODE_NAME: ["ip-10-0-2-9.ec2.internal"]})
        assert not update(resource, None)  # a token without a bound node
        assert update(resource, None, user=CONTROLLER)  # the controller's queue taints: not this policy
