from __future__ import annotations

from collections.abc import Callable

import pytest

from shipshape.emulator.controllers import deploymentutil as du
from shipshape.emulator.controllers.podutil import controller_ref, is_ready, is_terminating
from shipshape.emulator.resources import DEPLOYMENTS, PODS, REPLICASETS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj, WatchEvent

from .helpers import create, events, make_cluster, pod_template, run, update


def deployment(name: str = "web", replicas: int = 4, **spec: object) -> Obj:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": pod_template(labels),
            **spec,
        },
    }


def rolling(surge: object, unavailable: object) -> dict[str, object]:
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}


def replicasets(cluster: Cluster, name: str = "web") -> list[Obj]:
    return sorted(
        (
            rs
            for rs in cluster.store.list(REPLICASETS, "default")
            if rs["metadata"]["name"].startswith(f"{name}-")
        ),
        key=du.revision,
    )


def get(cluster: Cluster, name: str = "web") -> Obj:
    return cluster.store.must_get(DEPLOYMENTS, "default", name)


def rollout_status(d: Obj) -> str:
    """What `kubectl rollout status` concludes from a Deployment (its status viewer's logic)."""
    status = d.get("status") or {}
    if int(d["metadata"].get("generation", 1)) > int(status.get("observedGeneration") or 0):
        return "waiting for spec update to be observed"
    cond = du.get_condition(status, "Progressing")
    if cond is not None and cond.get("reason") == du.TIMED_OUT:
        return "exceeded its progress deadline"
    want = d["spec"]["replicas"]
    updated = status.get("updatedReplicas") or 0
    if updated < want:
        return "waiting: new replicas updated"
    if (status.get("replicas") or 0) > updated:
        return "waiting: old replicas pending termination"
    if (status.get("availableReplicas") or 0) < updated:
        return "waiting: updated replicas available"
    return "successfully rolled out"


def set_image(image: str) -> Callable[[Obj], None]:
    def change(d: Obj) -> None:
        d["spec"]["template"]["spec"]["containers"][0]["image"] = image

    return change


def test_new_deployment_gets_a_hashed_replicaset_and_completes() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=3))
    run(cluster, 0)
    (rs,) = replicasets(cluster)
    pod_hash = rs["metadata"]["labels"][du.HASH_LABEL]
    assert rs["metadata"]["name"] == f"web-{pod_hash}"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", du.HASH_LABEL: pod_hash}
    assert rs["spec"]["template"]["metadata"]["labels"] == {"app": "web", du.HASH_LABEL: pod_hash}
    annotations = rs["metadata"]["annotations"]
    assert annotations[du.REVISION] == "1"
    assert annotations[du.DESIRED_REPLICAS] == "3" and annotations[du.MAX_REPLICAS] == "4"
    (scaled,) = events(cluster, "ScalingReplicaSet", "web")
    assert scaled["message"] == f"Scaled up replica set web-{pod_hash} from 0 to 3"
    assert scaled["source"]["component"] == "deployment-controller"

    run(cluster, 10)
    d = get(cluster)
    assert d["metadata"]["annotations"][du.REVISION] == "1"
    status = d["status"]
    assert {
        k: status.get(k) for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")
    } == {
        "replicas": 3,
        "updatedReplicas": 3,
        "readyReplicas": 3,
        "availableReplicas": 3,
    }
    assert "unavailableReplicas" not in status
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Available"]["reason"] == "MinimumReplicasAvailable"
    assert conditions["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert conditions["Progressing"]["message"] == f'ReplicaSet "web-{pod_hash}" has successfully progressed.'
    assert rollout_status(d) == "successfully rolled out"


def test_hash_is_stable_and_sensitive_to_template_and_collisions() -> None:
    template = pod_template({"app": "web"})
    assert du.compute_hash(template) == du.compute_hash(pod_template({"app": "web"}))
    assert du.compute_hash(template) != du.compute_hash(pod_template({"app": "api"}))
    assert du.compute_hash(template, 1) != du.compute_hash(template)
    assert set(du.compute_hash(template)) <= set("bcdfghjklmnpqrstvwxz2456789")


@pytest.mark.parametrize(
    ("replicas", "surge", "unavailable", "want_surge", "want_unavailable"),
    [
        (4, 1, 1, 1, 1),
        (10, "25%", "25%", 3, 2),  # surge rounds up, unavailable down
        (5, 0, "10%", 0, 1),  # both zero after rounding: one may be unavailable
        (3, 2, 0, 2, 0),
    ],
)
def test_rolling_update_respects_surge_and_unavailability_in_every_state(
    replicas: int, surge: object, unavailable: object, want_surge: int, want_unavailable: int
) -> None:
    cluster, _ = make_cluster(nodes=("n1", "n2", "n3"))
    d = deployment(replicas=replicas, strategy=rolling(surge, unavailable))
    assert du.resolve_fenceposts(d) == (want_surge, want_unavailable) or want_surge == 0
    create(cluster, DEPLOYMENTS, d)
    run(cluster, 20)
    assert rollout_status(get(cluster)) == "successfully rolled out"

    violations: list[str] = []
    seen_totals: list[int] = []

    def check(_: WatchEvent) -> None:
        pods = [p for p in cluster.store.list(PODS, "default") if not is_terminating(p)]
        available = sum(1 for p in pods if is_ready(p))
        seen_totals.append(len(pods))
        if len(pods) > replicas + want_surge:
            violations.append(f"{len(pods)} pods > {replicas} + {want_surge}")
        if available < replicas - want_unavailable:
            violations.append(f"{available} available < {replicas} - {want_unavailable}")

    cluster.store.subscribe(check)
    update(cluster, DEPLOYMENTS, "web", set_image("nginx:1.28"))
    run(cluster, 120)
    assert violations == []
    d = get(cluster)
    assert rollout_status(d) == "successfully rolled out"
    assert d["metadata"]["annotations"][du.REVISION] == "2"
    old, new = replicasets(cluster)
    assert old["spec"]["replicas"] == 0 and new["spec"]["replicas"] == replicas
    images = {p["spec"]["containers"][0]["image"] for p in cluster.store.list(PODS, "default")}
    assert images == {"nginx:1.28"}
    # The rollout did go above the desired count when a surge was allowed.
    assert max(seen_totals) == replicas + want_surge or want_surge == 0


def test_recreate_never_runs_old_and_new_pods_together() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=3, strategy={"type": "Recreate"}))
    run(cluster, 20)
    (first,) = replicasets(cluster)
    overlaps: list[tuple[int, int]] = []

    def check(_: WatchEvent) -> None:
        owners = {controller_ref(p)["uid"] for p in cluster.store.list(PODS, "default")}  # type: ignore[index]
        if len(owners) > 1:
            overlaps.append((len(owners), cluster.store.resource_version))

    cluster.store.subscribe(check)
    update(cluster, DEPLOYMENTS, "web", set_image("nginx:1.28"))
    run(cluster, 60)
    assert overlaps == []
    d = get(cluster)
    assert rollout_status(d) == "successfully rolled out"
    old, new = replicasets(cluster)
    assert old["metadata"]["uid"] == first["metadata"]["uid"] and old["spec"]["replicas"] == 0
    assert new["spec"]["replicas"] == 3
    messages = [e["message"] for e in events(cluster, "ScalingReplicaSet", "web")]
    assert f"Scaled down replica set {first['metadata']['name']} from 3 to 0" in messages
    assert f"Scaled up replica set {new['metadata']['name']} from 0 to 3" in messages


def test_rollout_restart_and_undo_reuse_revisions_as_kubectl_expects() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=2))
    run(cluster, 20)
    (rs1,) = replicasets(cluster)

    def restart(d: Obj) -> None:
        d["spec"]["template"]["metadata"]["annotations"] = {
            "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:01:00Z"
        }

    update(cluster, DEPLOYMENTS, "web", restart)
    run(cluster, 60)
    rs1_now, rs2 = replicasets(cluster)
    assert rs2["metadata"]["annotations"][du.REVISION] == "2"
    assert rs2["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
    assert rs1_now["spec"]["replicas"] == 0 and rs2["spec"]["replicas"] == 2
    assert rollout_status(get(cluster)) == "successfully rolled out"

    # `kubectl rollout undo` copies revision 1's template (without the hash label) back, in Go's
    # serialisation: a null creationTimestamp in the template's metadata.
    def undo(d: Obj) -> None:
        template = du.without_hash(rs1["spec"]["template"])
        template["metadata"]["creationTimestamp"] = None
        d["spec"]["template"] = template

    update(cluster, DEPLOYMENTS, "web", undo)
    run(cluster, 60)
    rs1_back = cluster.store.must_get(REPLICASETS, "default", rs1["metadata"]["name"])
    assert rs1_back["metadata"]["annotations"][du.REVISION] == "3"
    assert rs1_back["metadata"]["annotations"][du.REVISION_HISTORY] == "1"
    assert rs1_back["spec"]["replicas"] == 2
    assert get(cluster)["metadata"]["annotations"][du.REVISION] == "3"
    assert len(replicasets(cluster)) == 2  # no third ReplicaSet was made


def test_revision_history_limit_deletes_the_oldest_unused_replicasets() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=1, revisionHistoryLimit=2))
    run(cluster, 20)
    for version in range(1, 6):
        update(cluster, DEPLOYMENTS, "web", set_image(f"nginx:1.{version}"))
        run(cluster, 30)
    rss = replicasets(cluster)
    assert [du.revision(rs) for rs in rss] == [4, 5, 6]
    assert [rs["spec"]["replicas"] for rs in rss] == [0, 0, 1]


def test_paused_deployment_does_not_roll_out_until_resumed() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=2))
    run(cluster, 20)
    update(cluster, DEPLOYMENTS, "web", lambda d: d["spec"].update(paused=True))
    update(cluster, DEPLOYMENTS, "web", set_image("nginx:1.28"))
    run(cluster, 30)
    assert len(replicasets(cluster)) == 1
    progressing = du.get_condition(get(cluster)["status"], "Progressing")
    assert progressing is not None
    assert (progressing["status"], progressing["reason"]) == ("Unknown", "DeploymentPaused")
    # Scaling still applies while paused.
    update(cluster, DEPLOYMENTS, "web", lambda d: d["spec"].update(replicas=3))
    run(cluster, 10)
    assert replicasets(cluster)[0]["spec"]["replicas"] == 3

    update(cluster, DEPLOYMENTS, "web", lambda d: d["spec"].update(paused=False))
    run(cluster, 60)
    assert len(replicasets(cluster)) == 2
    assert rollout_status(get(cluster)) == "successfully rolled out"


def test_scaling_mid_rollout_is_proportional() -> None:
    cluster, fake = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=10, strategy=rolling(3, 2)))
    run(cluster, 20)
    fake.start_after = 1_000  # new pods never become ready: the rollout stalls half way
    update(cluster, DEPLOYMENTS, "web", set_image("nginx:1.28"))
    run(cluster, 5)
    old, new = replicasets(cluster)
    assert (old["spec"]["replicas"], new["spec"]["replicas"]) == (8, 5)
    update(cluster, DEPLOYMENTS, "web", lambda d: d["spec"].update(replicas=20))
    run(cluster, 1)
    old, new = replicasets(cluster)
    # 13 pods spread 8:5 become 23 (20 + surge 3): old 8 -> 14, new 5 -> 9 (leftover to the largest).
    assert old["spec"]["replicas"] + new["spec"]["replicas"] == 23
    assert (old["spec"]["replicas"], new["spec"]["replicas"]) == (14, 9)


def test_progress_deadline_exceeded_is_reported() -> None:
    cluster, fake = make_cluster()
    create(cluster, DEPLOYMENTS, deployment(replicas=1, progressDeadlineSeconds=30))
    run(cluster, 10)
    fake.start_after = 10_000
    update(cluster, DEPLOYMENTS, "web", set_image("nginx:1.28"))
    run(cluster, 20)
    assert rollout_status(get(cluster)).startswith("waiting")
    run(cluster, 30)
    cond = du.get_condition(get(cluster)["status"], "Progressing")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert rollout_status(get(cluster)) == "exceeded its progress deadline"
