"""Server-side apply (the supported subset): ownership, removal of unapplied fields, conflicts."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator.api import Api
from shipshape.emulator.resources import DEPLOYMENTS, PODS
from shipshape.kube import errors
from shipshape.kube import patch as kpatch

from .conftest import deployment_body

Obj = dict[str, Any]


def test_field_set_round_trips_through_fields_v1() -> None:
    config = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["x"]},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "main", "image": "nginx"}]}}},
    }
    fields = kpatch.field_set(config)
    assert ("f:spec", "f:replicas") in fields
    assert ("f:metadata", "f:labels", "f:app") in fields
    assert ("f:metadata", "f:finalizers", 'v:"x"') in fields
    assert ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"main"}', "f:image") in fields
    assert ("f:apiVersion",) not in fields and ("f:metadata", "f:name") not in fields
    assert kpatch.from_fields_v1(kpatch.to_fields_v1(fields)) == fields


async def test_apply_creates_then_updates_and_removes_fields_no_longer_applied(api: Api) -> None:
    config = deployment_body()
    config["metadata"]["labels"] = {"team": "a", "tier": "fe"}
    created = await api.patch(DEPLOYMENTS, "default", "web", kpatch.APPLY_PATCH, config, field_manager="ci")
    assert created["metadata"]["labels"] == {"team": "a", "tier": "fe"}
    (entry,) = created["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["fieldsType"]) == ("ci", "Apply", "FieldsV1")
    assert "f:replicas" in entry["fieldsV1"]["f:spec"]

    # Another writer adds a label with a merge patch: it is not the applier's to remove.
    await api.patch(
        DEPLOYMENTS, "default", "web", kpatch.MERGE_PATCH, {"metadata": {"labels": {"owner": "ops"}}}
    )
    config["metadata"]["labels"] = {"team": "a"}
    del config["spec"]["replicas"]
    updated = await api.patch(DEPLOYMENTS, "default", "web", kpatch.APPLY_PATCH, config, field_manager="ci")
    assert updated["metadata"]["labels"] == {"team": "a", "owner": "ops"}
    assert updated["spec"]["replicas"] == 1  # removed by the applier, then defaulted


async def test_apply_conflicts_with_another_applier_unless_forced(api: Api) -> None:
    await api.patch(
        DEPLOYMENTS, "default", "web", kpatch.APPLY_PATCH, deployment_body(replicas=2), field_manager="ci"
    )
    scaler = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 5},
    }
    with pytest.raises(kpatch.ApplyConflict) as conflict:
        await api.patch(DEPLOYMENTS, "default", "web", kpatch.APPLY_PATCH, scaler, field_manager="autoscaler")
    assert conflict.value.code == 409
    assert conflict.value.message == 'Apply failed with 1 conflict: conflict with "ci": .spec.replicas'
    assert api.get(DEPLOYMENTS, "default", "web")["spec"]["replicas"] == 2

    forced = await api.patch(
        DEPLOYMENTS, "default", "web", kpatch.APPLY_PATCH, scaler, field_manager="autoscaler", force=True
    )
    assert forced["spec"]["replicas"] == 5
    owners = {e["manager"]: e["fieldsV1"] for e in forced["metadata"]["managedFields"]}
    assert "f:replicas" not in owners["ci"]["f:spec"] and "f:replicas" in owners["autoscaler"]["f:spec"]
    # The same value applied by both is shared ownership, not a conflict.
    same = await api.patch(DEPLOYMENTS, "default", "web", kpatch.APPLY_PATCH, scaler, field_manager="other")
    assert same["spec"]["replicas"] == 5


async def test_apply_removes_list_items_it_no_longer_applies(api: Api) -> None:
    config = deployment_body()
    containers = config["spec"]["template"]["spec"]["containers"]
    containers.append({"name": "side", "image": "envoy"})
    await api.patch(DEPLOYMENTS, "default", "web", kpatch.APPLY_PATCH, config, field_manager="me")
    containers.pop()
    containers[0]["image"] = "nginx:2"
    updated = await api.patch(DEPLOYMENTS, "default", "web", kpatch.APPLY_PATCH, config, field_manager="me")
    assert [(c["name"], c["image"]) for c in updated["spec"]["template"]["spec"]["containers"]] == [
        ("main", "nginx:2")
    ]


async def test_apply_rejects_managed_fields_in_the_configuration(api: Api) -> None:
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "managedFields": []},
        "spec": {"containers": [{"name": "main", "image": "a"}]},
    }
    with pytest.raises(errors.BadRequest, match="managedFields must be nil"):
        await api.patch(PODS, "default", "p", kpatch.APPLY_PATCH, pod, field_manager="me")
