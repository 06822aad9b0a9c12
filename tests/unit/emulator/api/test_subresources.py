"""PATCH through the Api, scale, binding, eviction and delete options."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator.api import Api, DeleteOptions
from shipshape.emulator.resources import DEPLOYMENTS, JOBS, NODES, PDBS, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.kube import errors
from shipshape.kube import patch as kpatch

from .conftest import deployment_body, pod_body

Obj = dict[str, Any]


async def test_kubectl_shaped_patches(api: Api, cluster: Cluster) -> None:
    await api.create(DEPLOYMENTS, "default", deployment_body())
    scaled = await api.patch(DEPLOYMENTS, "default", "web", kpatch.MERGE_PATCH, {"spec": {"replicas": 5}})
    assert scaled["spec"]["replicas"] == 5 and scaled["metadata"]["generation"] == 2
    restart = {
        "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}}}}
    }
    restarted = await api.patch(DEPLOYMENTS, "default", "web", kpatch.STRATEGIC_MERGE_PATCH, restart)
    assert restarted["spec"]["template"]["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/restartedAt": "now"
    }
    assert restarted["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    undo = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:1.26"}]
    undone = await api.patch(DEPLOYMENTS, "default", "web", kpatch.JSON_PATCH, undo)
    assert undone["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.26"

    node = cluster.store.create(NODES, {"metadata": {"name": "n1"}, "spec": {}})
    cordoned = await api.patch(
        NODES, "", "n1", kpatch.STRATEGIC_MERGE_PATCH, {"spec": {"unschedulable": True}}
    )
    assert cordoned["spec"]["unschedulable"] is True
    taint = {"spec": {"taints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}]}}
    tainted = await api.patch(NODES, "", "n1", kpatch.STRATEGIC_MERGE_PATCH, taint)
    assert tainted["spec"]["taints"] == taint["spec"]["taints"]
    labelled = await api.patch(NODES, "", "n1", kpatch.MERGE_PATCH, {"metadata": {"labels": {"pool": "a"}}})
    assert labelled["metadata"]["labels"] == {"pool": "a"}
    assert node["metadata"]["uid"] == labelled["metadata"]["uid"]


async def test_invalid_patch_results_change_nothing(api: Api, cluster: Cluster) -> None:
    await api.create(DEPLOYMENTS, "default", deployment_body())
    before = cluster.store.get(DEPLOYMENTS, "default", "web")
    with pytest.raises(errors.Invalid):
        await api.patch(DEPLOYMENTS, "default", "web", kpatch.MERGE_PATCH, {"spec": {"replicas": -2}})
    with pytest.raises(kpatch.PatchFailed):
        await api.patch(
            DEPLOYMENTS, "default", "web", kpatch.JSON_PATCH, [{"op": "remove", "path": "/spec/nope"}]
        )
    with pytest.raises(errors.Conflict):
        await api.patch(
            DEPLOYMENTS,
            "default",
            "web",
            kpatch.MERGE_PATCH,
            {"metadata": {"resourceVersion": "1"}, "spec": {}},
        )
    assert cluster.store.get(DEPLOYMENTS, "default", "web") is before


async def test_scale_subresource(api: Api) -> None:
    body = deployment_body()
    body["spec"]["selector"] = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}],
    }
    body["spec"]["template"]["metadata"]["labels"] = {"app": "web", "tier": "fe"}
    await api.create(DEPLOYMENTS, "default", body)
    scale = api.get_subresource(DEPLOYMENTS, "default", "web", "scale")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 0, "selector": "app=web,tier in (be,fe)"}
    scale["spec"]["replicas"] = 4
    updated = await api.update(DEPLOYMENTS, "default", "web", scale, subresource="scale")
    assert updated["spec"]["replicas"] == 4
    assert api.get(DEPLOYMENTS, "default", "web")["spec"]["replicas"] == 4
    patched = await api.patch(
        DEPLOYMENTS, "default", "web", kpatch.MERGE_PATCH, {"spec": {"replicas": 1}}, subresource="scale"
    )
    assert patched["spec"]["replicas"] == 1
    with pytest.raises(errors.Invalid) as invalid:
        await api.update(DEPLOYMENTS, "default", "web", {"spec": {"replicas": -1}}, subresource="scale")
    assert invalid.value.message.startswith('Scale.autoscaling "web" is invalid: spec.replicas')
    with pytest.raises(errors.Conflict):
        await api.update(
            DEPLOYMENTS,
            "default",
            "web",
            {"metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]}, "spec": {"replicas": 3}},
            subresource="scale",
        )
    with pytest.raises(errors.NotFound):
        api.get_subresource(PODS, "default", "web", "scale")


async def test_binding(api: Api) -> None:
    await api.create(PODS, "default", pod_body())
    binding = {"metadata": {"name": "web"}, "target": {"kind": "Node", "name": "node-a"}}
    status = await api.create_subresource(PODS, "default", "web", "binding", binding)
    assert status["status"] == "Success"
    pod = api.get(PODS, "default", "web")
    assert pod["spec"]["nodeName"] == "node-a"
    assert [(c["type"], c["status"]) for c in pod["status"]["conditions"]] == [("PodScheduled", "True")]
    with pytest.raises(errors.Conflict) as conflict:
        await api.create_subresource(
            PODS, "default", "web", "binding", {**binding, "target": {"name": "node-b"}}
        )
    assert conflict.value.message == (
        'Operation cannot be fulfilled on pods/binding "web": pod web is already assigned to node "node-a"'
    )
    await api.create(PODS, "default", pod_body("other"))
    with pytest.raises(errors.Invalid):
        await api.create_subresource(
            PODS, "default", "other", "binding", {"target": {"kind": "Pod", "name": "x"}}
        )


async def _running_pod(api: Api, cluster: Cluster, name: str, *, ready: bool = True) -> None:
    await api.create(PODS, "default", pod_body(name, labels={"app": "web"}))
    await api.create_subresource(PODS, "default", name, "binding", {"target": {"name": "node-a"}})

    def run(pod: Obj) -> None:
        pod["status"]["phase"] = "Running"
        pod["status"]["conditions"].append({"type": "Ready", "status": "True" if ready else "False"})

    cluster.store.mutate(PODS, "default", name, run, subresource="status")


async def _pdb(api: Api, cluster: Cluster, allowed: int, *, observed: bool = True, **spec: Any) -> Obj:
    pdb_spec: Obj = {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}, **spec}
    body = {"metadata": {"name": "web"}, "spec": pdb_spec}
    pdb = await api.create(PDBS, "default", body)

    def status(p: Obj) -> None:
        p["status"] = {
            "disruptionsAllowed": allowed,
            "currentHealthy": 2,
            "desiredHealthy": 2,
            "expectedPods": 2,
            "observedGeneration": pdb["metadata"]["generation"] if observed else 0,
        }

    updated = cluster.store.mutate(PDBS, "default", "web", status, subresource="status")
    assert updated is not None
    return updated


EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1"}}


async def test_eviction_without_pdb_deletes_the_pod(api: Api, cluster: Cluster) -> None:
    await _running_pod(api, cluster, "web-1")
    result = await api.create_subresource(PODS, "default", "web-1", "eviction", EVICTION)
    assert result["status"] == "Success"
    pod = cluster.store.get(PODS, "default", "web-1")
    assert pod is not None and pod["metadata"]["deletionTimestamp"]  # graceful: bound to a node


async def test_eviction_with_budget_decrements_it(api: Api, cluster: Cluster) -> None:
    await _running_pod(api, cluster, "web-1")
    await _pdb(api, cluster, allowed=1)
    await api.create_subresource(
        PODS, "default", "web-1", "eviction", {**EVICTION, "deleteOptions": {"gracePeriodSeconds": 0}}
    )
    assert cluster.store.get(PODS, "default", "web-1") is None
    pdb = api.get(PDBS, "default", "web")
    assert pdb["status"]["disruptionsAllowed"] == 0
    assert set(pdb["status"]["disruptedPods"]) == {"web-1"}


async def test_eviction_refused_without_budget_or_with_stale_pdb(api: Api, cluster: Cluster) -> None:
    await _running_pod(api, cluster, "web-1")
    await _pdb(api, cluster, allowed=0)
    with pytest.raises(errors.TooManyRequests) as refused:
        await api.create_subresource(PODS, "default", "web-1", "eviction", EVICTION)
    assert refused.value.code == 429
    assert refused.value.message == "Cannot evict pod as it would violate the pod's disruption budget."
    assert refused.value.details is not None
    assert "needs 2 healthy pods and has 2 currently" in refused.value.details["causes"][0]["message"]
    assert cluster.store.get(PODS, "default", "web-1")["metadata"].get("deletionTimestamp") is None  # type: ignore[index]

    await api.delete(PDBS, "default", "web", DeleteOptions())
    await _pdb(api, cluster, allowed=3, observed=False)
    with pytest.raises(errors.TooManyRequests) as stale:
        await api.create_subresource(PODS, "default", "web-1", "eviction", EVICTION)
    assert "still being processed" in stale.value.details["causes"][0]["message"]  # type: ignore[index]


async def test_eviction_of_unready_pod_and_two_pdbs(api: Api, cluster: Cluster) -> None:
    await _running_pod(api, cluster, "web-1", ready=False)
    await _pdb(api, cluster, allowed=0, unhealthyPodEvictionPolicy="AlwaysAllow")
    await api.create_subresource(PODS, "default", "web-1", "eviction", EVICTION)
    assert cluster.store.get(PODS, "default", "web-1")["metadata"]["deletionTimestamp"]  # type: ignore[index]

    await _running_pod(api, cluster, "web-2")
    await api.create(
        PDBS, "default", {"metadata": {"name": "all"}, "spec": {"selector": {}, "minAvailable": 1}}
    )
    with pytest.raises(errors.InternalError, match="more than one PodDisruptionBudget"):
        await api.create_subresource(PODS, "default", "web-2", "eviction", {"metadata": {"name": "web-2"}})


async def test_delete_options(api: Api, cluster: Cluster) -> None:
    pod = await api.create(PODS, "default", pod_body())
    with pytest.raises(errors.Conflict, match="Precondition failed: UID"):
        await api.delete(PODS, "default", "web", DeleteOptions(uid="other"))
    _, removed = await api.delete(PODS, "default", "web", DeleteOptions(dry_run=True))
    assert removed and cluster.store.get(PODS, "default", "web") is not None
    _, removed = await api.delete(PODS, "default", "web", DeleteOptions(uid=pod["metadata"]["uid"]))
    assert removed and cluster.store.get(PODS, "default", "web") is None  # unbound: no grace period

    job = await api.create(
        JOBS,
        "default",
        {
            "metadata": {"name": "j"},
            "spec": {
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "b"}]}}
            },
        },
    )
    orphaned, removed = await api.delete(JOBS, "default", "j", DeleteOptions())
    assert not removed and orphaned["metadata"]["finalizers"] == ["orphan"]  # batch/v1 default: orphan
    assert orphaned["metadata"]["uid"] == job["metadata"]["uid"]


async def test_eviction_preconditions_are_checked_before_the_budget_is_spent(
    api: Api, cluster: Cluster
) -> None:
    await _running_pod(api, cluster, "web-1")
    await _pdb(api, cluster, allowed=1)
    stale = {**EVICTION, "deleteOptions": {"preconditions": {"uid": "someone-else"}}}
    with pytest.raises(errors.Conflict, match="Precondition failed"):
        await api.create_subresource(PODS, "default", "web-1", "eviction", stale)
    assert api.get(PDBS, "default", "web")["status"]["disruptionsAllowed"] == 1


@pytest.mark.parametrize(
    ("subresource", "body"),
    [
        ("binding", {"metadata": "x", "target": {"name": "n"}}),
        ("eviction", {"deleteOptions": 5}),
        ("eviction", {"deleteOptions": {"gracePeriodSeconds": "soon"}}),
        ("eviction", []),
    ],
)
async def test_malformed_subresource_bodies_are_bad_requests(api: Api, subresource: str, body: Any) -> None:
    await api.create(PODS, "default", pod_body())
    with pytest.raises(errors.BadRequest):
        await api.create_subresource(PODS, "default", "web", subresource, body)
    assert "nodeName" not in api.get(PODS, "default", "web")["spec"]
