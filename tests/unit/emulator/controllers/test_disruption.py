from __future__ import annotations

from shipshape.emulator.resources import DEPLOYMENTS, PDBS, PODS, REPLICASETS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj
from shipshape.kube.clock import rfc3339

from .helpers import create, events, make_cluster, pod_template, run, set_running, update
from .test_deployment import deployment
from .test_replicaset import replicaset


def pdb(name: str = "web", **spec: object) -> Obj:
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}


def numbers(cluster: Cluster, name: str = "web") -> tuple[int, int, int, int]:
    status = cluster.store.must_get(PDBS, "default", name)["status"]
    return (
        status["currentHealthy"],
        status["desiredHealthy"],
        status["expectedPods"],
        status["disruptionsAllowed"],
    )


def allowed_condition(cluster: Cluster, name: str = "web") -> tuple[str, str]:
    (cond,) = cluster.store.must_get(PDBS, "default", name)["status"]["conditions"]
    assert cond["type"] == "DisruptionAllowed"
    return cond["status"], cond["reason"]


def test_min_available_int_counts_matching_pods() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=4))
    create(cluster, PDBS, pdb(minAvailable=3))
    run(cluster, 10)
    assert numbers(cluster) == (4, 3, 4, 1)
    assert allowed_condition(cluster) == ("True", "SufficientPods")
    assert cluster.store.must_get(PDBS, "default", "web")["status"]["observedGeneration"] == 1


def test_max_unavailable_percent_uses_the_deployment_scale_and_tracks_readiness() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=4))
    create(cluster, PDBS, pdb(maxUnavailable="25%"))
    run(cluster, 10)
    assert numbers(cluster) == (4, 3, 4, 1)
    pod = cluster.store.list(PODS, "default")[0]
    set_running(cluster, pod, ready=False)
    run(cluster, 0)
    assert numbers(cluster) == (3, 3, 4, 0)
    assert allowed_condition(cluster) == ("False", "InsufficientPods")
    # Scaling the Deployment changes the expected count even before pods follow.
    update(cluster, DEPLOYMENTS, "web", lambda d: d["spec"].update(replicas=8))
    run(cluster, 0)
    assert numbers(cluster)[1:3] == (6, 8)


def test_min_available_percent_rounds_up_over_the_replicaset_scale() -> None:
    cluster, _ = make_cluster()
    create(cluster, REPLICASETS, replicaset(replicas=3))
    create(cluster, PDBS, pdb(minAvailable="50%"))
    run(cluster, 10)
    assert numbers(cluster) == (3, 2, 3, 1)


def test_unmanaged_pods_are_reported_and_no_pods_is_an_event() -> None:
    cluster, _ = make_cluster()
    create(cluster, PDBS, pdb(maxUnavailable=1))
    run(cluster, 0)
    assert events(cluster, "NoPods", "web")[0]["message"] == "No matching pods found"
    assert numbers(cluster) == (0, 0, 0, 0)
    create(
        cluster,
        PODS,
        {"metadata": {"name": "bare", "labels": {"app": "web"}}, "spec": pod_template({})["spec"]},
    )
    run(cluster, 5)
    (warning,) = events(cluster, "UnmanagedPods", "web")
    assert "(selector: app=web) were found to be unmanaged" in warning["message"]
    assert warning["type"] == "Warning"


def test_disrupted_pods_do_not_count_until_two_minutes_pass_and_vanished_ones_are_pruned() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=3))
    create(cluster, PDBS, pdb(minAvailable=2))
    run(cluster, 10)
    victim = cluster.store.list(PODS, "default")[0]["metadata"]["name"]
    stamp = rfc3339(cluster.clock.now())

    def evicted(p: Obj) -> None:
        p["status"]["disruptedPods"] = {victim: stamp, "long-gone": stamp}

    cluster.store.mutate(PDBS, "default", "web", evicted, subresource="status")
    run(cluster, 0)
    status = cluster.store.must_get(PDBS, "default", "web")["status"]
    assert status["disruptedPods"] == {victim: stamp}
    assert numbers(cluster) == (2, 2, 3, 0)
    run(cluster, 122)  # the pod was not deleted after all
    status = cluster.store.must_get(PDBS, "default", "web")["status"]
    assert "disruptedPods" not in status
    assert numbers(cluster) == (3, 2, 3, 1)


def test_percent_budget_over_a_statefulset_uses_its_scale() -> None:
    from shipshape.emulator.resources import STATEFULSETS

    from .test_statefulset import statefulset

    cluster, _ = make_cluster()
    sts = statefulset(name="web", replicas=3, podManagementPolicy="Parallel")
    create(cluster, STATEFULSETS, sts)
    create(cluster, PDBS, pdb(maxUnavailable="34%"))
    run(cluster, 10)
    # 34% of 3 rounds up to 2 unavailable: 1 must stay healthy.
    assert numbers(cluster) == (3, 1, 3, 2)
