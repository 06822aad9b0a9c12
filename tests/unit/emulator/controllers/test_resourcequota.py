from __future__ import annotations

from shipshape.emulator.resources import BY_KEY, PODS
from shipshape.emulator.store import Obj

from .helpers import create, make_cluster, pod_template, run

QUOTAS = BY_KEY["resourcequotas"]


def pod(name: str) -> Obj:
    container = {
        "name": "app",
        "image": "nginx:1.27",
        "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
    }
    return {"metadata": {"name": name}, "spec": pod_template({}, containers=[container])["spec"]}


def test_used_follows_pods_that_come_finish_and_go() -> None:
    cluster, _ = make_cluster()
    create(
        cluster,
        QUOTAS,
        {"metadata": {"name": "compute"}, "spec": {"hard": {"pods": "10", "requests.cpu": "2"}}},
    )
    run(cluster, 0)
    status = cluster.store.must_get(QUOTAS, "default", "compute")["status"]
    assert status == {"hard": {"pods": "10", "requests.cpu": "2"}, "used": {"pods": "0", "requests.cpu": "0"}}
    for name in ("a", "b", "c"):
        create(cluster, PODS, pod(name))
    run(cluster, 5)
    assert cluster.store.must_get(QUOTAS, "default", "compute")["status"]["used"] == {
        "pods": "3",
        "requests.cpu": "750m",
    }

    def finished(p: Obj) -> None:
        p["status"]["phase"] = "Succeeded"

    cluster.store.mutate(PODS, "default", "a", finished, subresource="status")
    cluster.store.delete(PODS, "default", "b", grace_seconds=0)
    run(cluster, 1)
    assert cluster.store.must_get(QUOTAS, "default", "compute")["status"]["used"] == {
        "pods": "1",
        "requests.cpu": "250m",
    }
