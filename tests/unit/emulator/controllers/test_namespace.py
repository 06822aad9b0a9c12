from __future__ import annotations

import contextlib

from shipshape.emulator.resources import CONFIGMAPS, DEPLOYMENTS, NAMESPACES, PODS, REPLICASETS
from shipshape.emulator.store import Obj

from .helpers import create, make_cluster, run
from .test_deployment import deployment


def test_terminating_namespace_is_emptied_then_finalized_and_removed() -> None:
    cluster, fake = make_cluster()
    fake.terminate_after = 10.0
    create(cluster, NAMESPACES, {"metadata": {"name": "team"}}, namespace="")
    create(cluster, DEPLOYMENTS, deployment(replicas=2), namespace="team")
    create(cluster, CONFIGMAPS, {"metadata": {"name": "settings"}}, namespace="team")
    create(cluster, CONFIGMAPS, {"metadata": {"name": "untouched"}}, namespace="default")
    run(cluster, 10)
    assert len(cluster.store.list(PODS, "team")) == 2

    def terminate(ns: Obj) -> None:
        ns["status"] = {"phase": "Terminating"}

    cluster.store.mutate(NAMESPACES, "", "team", terminate, subresource="status")
    run(cluster, 1)
    ns = cluster.store.must_get(NAMESPACES, "", "team")
    conditions = {c["type"]: c for c in ns["status"]["conditions"]}
    remaining = conditions["NamespaceContentRemaining"]
    assert (remaining["status"], remaining["reason"]) == ("True", "SomeResourcesRemain")
    assert remaining["message"] == "Some resources are remaining: pods has 2 resource instances"
    assert conditions["NamespaceDeletionContentFailure"]["reason"] == "ContentDeleted"
    assert ns["spec"]["finalizers"] == ["kubernetes"]
    assert cluster.store.list(DEPLOYMENTS, "team") == cluster.store.list(REPLICASETS, "team") == []
    assert cluster.store.list(CONFIGMAPS, "team") == []

    run(cluster, 15)
    assert cluster.store.get(NAMESPACES, "", "team") is None
    assert cluster.store.list(PODS, "team") == []
    assert [c["metadata"]["name"] for c in cluster.store.list(CONFIGMAPS, "default")] == ["untouched"]


def test_creations_refused_by_a_terminating_namespace_record_no_event() -> None:
    from shipshape.emulator.controllers.base import namespace_terminating
    from shipshape.kube import errors

    refused = errors.Forbidden(
        'pods "web-x" is forbidden: unable to create new content in namespace team '
        "because it is being terminated"
    )
    assert namespace_terminating(refused)
    assert not namespace_terminating(errors.Forbidden('pods "web-x" is forbidden: exceeded quota: compute'))


def test_deleting_a_namespace_through_the_api_empties_and_removes_it() -> None:
    from shipshape.emulator.api import DeleteOptions

    cluster, _ = make_cluster()
    create(cluster, NAMESPACES, {"metadata": {"name": "team"}}, namespace="")
    create(cluster, DEPLOYMENTS, deployment(replicas=2), namespace="team")
    run(cluster, 10)
    coro = cluster.services["api"].delete(NAMESPACES, "", "team", DeleteOptions())
    with contextlib.suppress(StopIteration):
        coro.send(None)
    assert cluster.store.must_get(NAMESPACES, "", "team")["status"]["phase"] == "Terminating"
    run(cluster, 10)
    assert cluster.store.get(NAMESPACES, "", "team") is None
    assert cluster.store.list(PODS, "team") == cluster.store.list(DEPLOYMENTS, "team") == []
