from __future__ import annotations

from collections.abc import Callable

from shipshape.emulator.api import SYSTEM, Api, UserInfo
from shipshape.emulator.resources import PODS, REPLICASETS, ResourceType
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj
from shipshape.kube import errors

from .helpers import (
    FakeKubelet,
    create,
    events,
    make_cluster,
    pod_template,
    pods_of,
    run,
    set_running,
    update,
)


def replicaset(name: str = "web", replicas: int = 3, **spec: object) -> Obj:
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


def test_creates_pods_from_template_and_reports_status() -> None:
    cluster, _ = make_cluster()
    rs = create(cluster, REPLICASETS, replicaset(replicas=3))
    run(cluster, 0)
    pods = pods_of(cluster, rs)
    assert len(pods) == 3
    for pod in pods:
        md = pod["metadata"]
        assert md["name"].startswith("web-") and len(md["name"]) == len("web-") + 5
        assert md["labels"] == {"app": "web"}
        (ref,) = md["ownerReferences"]
        assert ref == {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web",
            "uid": rs["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    created = events(cluster, "SuccessfulCreate", "web")
    assert sorted(e["message"] for e in created) == sorted(
        f"Created pod: {p['metadata']['name']}" for p in pods
    )
    assert all(e["source"]["component"] == "replicaset-controller" for e in created)

    status = cluster.store.must_get(REPLICASETS, "default", "web")["status"]
    assert status["replicas"] == 3 and "readyReplicas" not in status
    run(cluster, 5)
    status = cluster.store.must_get(REPLICASETS, "default", "web")["status"]
    assert status == {
        "replicas": 3,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "observedGeneration": 1,
    }


def test_replaces_deleted_pods_and_scales_down() -> None:
    cluster, _ = make_cluster()
    rs = create(cluster, REPLICASETS, replicaset(replicas=2))
    run(cluster, 5)
    victim = pods_of(cluster, rs)[0]
    cluster.store.delete(PODS, "default", victim["metadata"]["name"])
    run(cluster, 0)
    live = [p for p in pods_of(cluster, rs) if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 2 and victim["metadata"]["name"] not in {p["metadata"]["name"] for p in live}

    update(cluster, REPLICASETS, "web", lambda o: o["spec"].update(replicas=0))
    run(cluster, 5)
    assert pods_of(cluster, rs) == []
    assert len(events(cluster, "SuccessfulDelete", "web")) == 2
    assert cluster.store.must_get(REPLICASETS, "default", "web")["status"]["replicas"] == 0


class SlowAdmissionApi(Api):
    """Creations complete `delay` seconds after submission, like admission webhooks on the wire."""

    def __init__(self, cluster: Cluster, delay: float) -> None:
        super().__init__(cluster)
        self.delay = delay
        self.in_flight = 0
        self.users: set[str] = set()

    def submit_create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Obj,
        *,
        on_done: Callable[[Obj | None, errors.ApiError | None], None] | None = None,
        user: UserInfo = SYSTEM,
    ) -> None:
        self.in_flight += 1
        self.users.add(user.username)

        def finish() -> None:
            self.in_flight -= 1
            super(SlowAdmissionApi, self).submit_create(rt, namespace, body, on_done=on_done, user=user)

        self.cluster.engine.call_later(self.delay, finish)


def test_burst_of_syncs_never_over_creates_while_creations_are_in_flight() -> None:
    cluster, _ = make_cluster()
    slow = SlowAdmissionApi(cluster, delay=3.0)
    rs = create(cluster, REPLICASETS, replicaset(replicas=5))
    # Many resyncs while the first creations are still being admitted.
    for i in range(10):
        update(
            cluster,
            REPLICASETS,
            "web",
            lambda o, i=i: o["metadata"].setdefault("annotations", {}).update(n=str(i)),
        )
        run(cluster, 0.2)
        assert slow.in_flight + len(pods_of(cluster, rs)) <= 5
    run(cluster, 10)
    assert len(pods_of(cluster, rs)) == 5
    assert slow.in_flight == 0
    assert slow.users == {"system:serviceaccount:kube-system:replicaset-controller"}


def test_failed_creation_sets_replica_failure_and_slow_start_stops() -> None:
    cluster, _ = make_cluster()

    class Refusing(Api):
        calls = 0

        def submit_create(self, rt, namespace, body, *, on_done=None, user=SYSTEM):  # type: ignore[no-untyped-def]
            Refusing.calls += 1
            if on_done is not None:
                on_done(None, errors.Forbidden('pods "web-" is forbidden: exceeded quota: compute'))

    Refusing(cluster)
    create(cluster, REPLICASETS, replicaset(replicas=8))
    run(cluster, 0)
    assert Refusing.calls < 3  # each sync's first batch of one failed: the other pods were not tried
    status = cluster.store.must_get(REPLICASETS, "default", "web")["status"]
    (cond,) = status["conditions"]
    assert cond["type"] == "ReplicaFailure" and cond["reason"] == "FailedCreate"
    assert "exceeded quota" in cond["message"]
    (warning,) = events(cluster, "FailedCreate", "web")
    assert warning["type"] == "Warning" and warning["message"].startswith("Error creating: ")
    # Retries back off exponentially instead of hot-looping.
    before = Refusing.calls
    run(cluster, 60)
    assert before < Refusing.calls < before + 20


def test_scale_down_ranking_follows_upstream_order() -> None:
    cluster, _ = make_cluster(nodes=("n1", "n2"), kubelet=FakeKubelet(("n1", "n2"), bind=False))
    rs = create(cluster, REPLICASETS, replicaset(replicas=7))
    run(cluster, 0)
    names = sorted(p["metadata"]["name"] for p in pods_of(cluster, rs))
    unassigned, pending, not_ready, cheap, doubled, restarted, plain = names

    def bind(name: str, node: str, annotations: dict[str, str] | None = None) -> Obj:
        def change(pod: Obj) -> None:
            pod["spec"]["nodeName"] = node
            if annotations:
                pod["metadata"]["annotations"] = annotations

        return update(cluster, PODS, name, change)

    bind(pending, "n1")
    set_running(cluster, bind(not_ready, "n1"), ready=False)
    run(cluster, 100)
    set_running(cluster, bind(cheap, "n2", {"controller.kubernetes.io/pod-deletion-cost": "-5"}))
    set_running(cluster, bind(doubled, "n1"))
    set_running(cluster, bind(restarted, "n2"), restarts=4)
    set_running(cluster, bind(plain, "n2"))
    # n1 holds pending, not_ready, doubled; n2 holds cheap, restarted, plain.

    expected_order = [unassigned, pending, not_ready, cheap]
    for count, name in enumerate(expected_order, start=1):
        update(cluster, REPLICASETS, "web", lambda o, n=7 - count: o["spec"].update(replicas=n))
        run(cluster, 0)
        deleting = {
            p["metadata"]["name"] for p in pods_of(cluster, rs) if p["metadata"].get("deletionTimestamp")
        } | (set(names) - {p["metadata"]["name"] for p in pods_of(cluster, rs)})
        assert name in deleting, (name, deleting)
        assert len(deleting) == count
    # Left: doubled (n1, alone now), restarted and plain (n2, two pods): the doubled-up n2 pods go first,
    # and between them the one with more restarts.
    update(cluster, REPLICASETS, "web", lambda o: o["spec"].update(replicas=2))
    run(cluster, 0)
    restarted_pod = cluster.store.get(PODS, "default", restarted)
    assert restarted_pod is None or restarted_pod["metadata"].get("deletionTimestamp")
    for keep in (doubled, plain):
        kept = cluster.store.must_get(PODS, "default", keep)
        assert not kept["metadata"].get("deletionTimestamp")


def test_adopts_matching_orphans_and_releases_pods_that_stop_matching() -> None:
    cluster, _ = make_cluster()
    orphan = create(
        cluster,
        PODS,
        {"metadata": {"name": "stray", "labels": {"app": "web"}}, "spec": pod_template({})["spec"]},
    )
    rs = create(cluster, REPLICASETS, replicaset(replicas=2))
    run(cluster, 0)
    adopted = cluster.store.must_get(PODS, "default", orphan["metadata"]["name"])
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
    assert len(pods_of(cluster, rs)) == 2

    update(cluster, PODS, "stray", lambda p: p["metadata"].update(labels={"app": "debug"}))
    run(cluster, 0)
    released = cluster.store.must_get(PODS, "default", "stray")
    assert "ownerReferences" not in released["metadata"]
    assert len(pods_of(cluster, rs)) == 2  # a replacement was created


def test_available_replicas_wait_for_min_ready_seconds() -> None:
    cluster, _ = make_cluster()
    create(cluster, REPLICASETS, replicaset(replicas=2, minReadySeconds=10))
    run(cluster, 3)
    status = cluster.store.must_get(REPLICASETS, "default", "web")["status"]
    assert status["readyReplicas"] == 2 and "availableReplicas" not in status
    run(cluster, 8)
    assert "availableReplicas" not in cluster.store.must_get(REPLICASETS, "default", "web")["status"]
    run(cluster, 2)
    assert cluster.store.must_get(REPLICASETS, "default", "web")["status"]["availableReplicas"] == 2


class RefusingLaterApi(Api):
    """Admission that answers `delay` seconds later, refusing pods while `refuse` is set (a dead webhook)."""

    def __init__(self, cluster: Cluster, delay: float) -> None:
        super().__init__(cluster)
        self.delay = delay
        self.refuse = True
        self.calls = 0

    def submit_create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Obj,
        *,
        on_done: Callable[[Obj | None, errors.ApiError | None], None] | None = None,
        user: UserInfo = SYSTEM,
    ) -> None:
        self.calls += 1

        def finish() -> None:
            if self.refuse:
                if on_done is not None:
                    on_done(
                        None,
                        errors.InternalError('Internal error occurred: failed calling webhook "placement"'),
                    )
            else:
                super(RefusingLaterApi, self).submit_create(rt, namespace, body, on_done=on_done, user=user)

        self.cluster.engine.call_later(self.delay, finish)


def test_late_creation_failures_show_as_a_condition_and_are_retried_with_backoff() -> None:
    cluster, _ = make_cluster()
    api = RefusingLaterApi(cluster, delay=1.0)
    rs = create(cluster, REPLICASETS, replicaset(replicas=2))
    run(cluster, 5)
    status = cluster.store.must_get(REPLICASETS, "default", "web")["status"]
    (cond,) = status["conditions"]
    assert (cond["type"], cond["reason"]) == ("ReplicaFailure", "FailedCreate")
    assert cond["message"].startswith("Internal error occurred: failed calling webhook")
    run(cluster, 60)
    # One pod per try (slow start), tries spaced by a growing backoff: far fewer than one per second.
    assert 3 < api.calls < 20
    api.refuse = False
    run(cluster, 120)
    assert len(pods_of(cluster, rs)) == 2
    assert "conditions" not in cluster.store.must_get(REPLICASETS, "default", "web")["status"]


def test_a_replicaset_being_deleted_adopts_nothing_and_creates_nothing() -> None:
    cluster, _ = make_cluster()
    create(cluster, REPLICASETS, replicaset(replicas=1))
    run(cluster, 5)
    cluster.store.delete(REPLICASETS, "default", "web", propagation="Foreground")
    cluster.store.create(
        PODS,
        {
            "metadata": {"name": "stray", "namespace": "default", "labels": {"app": "web"}},
            "spec": pod_template({})["spec"],
        },
    )
    run(cluster, 0)
    stray = cluster.store.get(PODS, "default", "stray")
    assert stray is not None and "ownerReferences" not in stray["metadata"]
    assert len(events(cluster, "SuccessfulCreate", "web")) == 1
