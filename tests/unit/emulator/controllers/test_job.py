from __future__ import annotations

from shipshape.emulator.resources import JOBS, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj

from .helpers import create, events, make_cluster, pod_template, pods_of, run


def job(name: str = "batch", **spec: object) -> Obj:
    return {"metadata": {"name": name}, "spec": {"template": pod_template({}, restartPolicy="Never"), **spec}}


def finish(cluster: Cluster, pod: Obj, phase: str) -> None:
    def change(new: Obj) -> None:
        new["status"]["phase"] = phase
        new["status"]["conditions"] = [{"type": "Ready", "status": "False"}]

    cluster.store.mutate(PODS, "default", pod["metadata"]["name"], change, subresource="status")


def running(cluster: Cluster, owner: Obj) -> list[Obj]:
    return [p for p in pods_of(cluster, owner) if p["status"].get("phase") == "Running"]


def status(cluster: Cluster, name: str = "batch") -> Obj:
    return cluster.store.must_get(JOBS, "default", name)["status"]


def conditions(cluster: Cluster, name: str = "batch") -> dict[str, str]:
    return {
        c["type"]: c["reason"] for c in status(cluster, name).get("conditions", []) if c["status"] == "True"
    }


def test_runs_parallel_pods_until_completions_are_reached() -> None:
    cluster, _ = make_cluster()
    j = create(cluster, JOBS, job(completions=3, parallelism=2))
    run(cluster, 5)
    assert len(running(cluster, j)) == 2
    assert status(cluster)["active"] == 2 and status(cluster)["ready"] == 2
    pod = running(cluster, j)[0]
    assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "batch"
    for p in running(cluster, j):
        finish(cluster, p, "Succeeded")
    run(cluster, 5)
    assert status(cluster)["succeeded"] == 2
    assert len(running(cluster, j)) == 1  # only one more completion is needed
    finish(cluster, running(cluster, j)[0], "Succeeded")
    run(cluster, 1)
    st = status(cluster)
    assert st["succeeded"] == 3 and "active" not in st and st["completionTime"]
    assert conditions(cluster) == {
        "SuccessCriteriaMet": "CompletionsReached",
        "Complete": "CompletionsReached",
    }
    assert events(cluster, "Completed", "batch")[0]["message"] == "Job completed"
    assert all("finalizers" not in p["metadata"] for p in pods_of(cluster, j))


def test_failed_pods_are_retried_with_backoff_until_the_limit() -> None:
    cluster, _ = make_cluster()
    j = create(cluster, JOBS, job(backoffLimit=2))
    run(cluster, 5)
    created: list[float] = [cluster.clock.now()]
    for _ in range(3):
        (pod,) = running(cluster, j)
        finish(cluster, pod, "Failed")
        failed_at = cluster.clock.now()
        while not running(cluster, j) and cluster.clock.now() - failed_at < 100:
            run(cluster, 1)
            if "Failed" in conditions(cluster):
                break
        created.append(cluster.clock.now() - failed_at)
    # Replacements came 10 s then 20 s (+2 s to start) after each failure; the third failure ends it.
    assert created[1:3] == [12.0, 22.0]
    assert status(cluster)["failed"] == 3
    assert conditions(cluster) == {"FailureTarget": "BackoffLimitExceeded", "Failed": "BackoffLimitExceeded"}
    (warning,) = events(cluster, "BackoffLimitExceeded", "batch")
    assert warning["message"] == "Job has reached the specified backoff limit"


def test_active_deadline_fails_the_job_and_stops_its_pods() -> None:
    cluster, _ = make_cluster()
    j = create(cluster, JOBS, job(activeDeadlineSeconds=30, parallelism=2, completions=4))
    run(cluster, 29)
    assert len(running(cluster, j)) == 2
    run(cluster, 2)
    assert conditions(cluster)["Failed"] == "DeadlineExceeded"
    assert all(p["metadata"].get("deletionTimestamp") for p in pods_of(cluster, j))
    assert "failed" not in status(cluster)  # pods stopped by the controller are not failures


def test_ttl_after_finished_deletes_the_job_and_its_pods() -> None:
    cluster, _ = make_cluster()
    j = create(cluster, JOBS, job(ttlSecondsAfterFinished=60))
    run(cluster, 5)
    finish(cluster, running(cluster, j)[0], "Succeeded")
    run(cluster, 59)
    assert cluster.store.get(JOBS, "default", "batch") is not None
    run(cluster, 2)
    assert cluster.store.get(JOBS, "default", "batch") is None
    assert pods_of(cluster, j) == []


def test_suspended_job_creates_no_pods_until_resumed() -> None:
    cluster, _ = make_cluster()
    j = create(cluster, JOBS, job(suspend=True))
    run(cluster, 10)
    assert pods_of(cluster, j) == []
    assert conditions(cluster) == {"Suspended": "JobSuspended"}
    cluster.store.mutate(JOBS, "default", "batch", lambda o: o["spec"].update(suspend=False))
    run(cluster, 5)
    assert len(running(cluster, j)) == 1


def test_indexed_job_runs_each_index_once_and_reports_completed_indexes() -> None:
    from shipshape.emulator.controllers.job import format_indexes, parse_indexes

    assert format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}

    cluster, _ = make_cluster()
    j = create(cluster, JOBS, job(completions=4, parallelism=2, completionMode="Indexed"))
    run(cluster, 5)

    def by_index() -> dict[str, Obj]:
        return {
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p
            for p in running(cluster, j)
        }

    pods = by_index()
    assert sorted(pods) == ["0", "1"]
    pod = pods["1"]
    assert pod["metadata"]["name"].startswith("batch-1-")
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"
    assert pod["spec"]["hostname"] == "batch-1"
    (env,) = pod["spec"]["containers"][0]["env"]
    assert env["name"] == "JOB_COMPLETION_INDEX"
    finish(cluster, pods["1"], "Succeeded")
    finish(cluster, pods["0"], "Failed")
    run(cluster, 5)
    assert status(cluster)["completedIndexes"] == "1" and status(cluster)["succeeded"] == 1
    run(cluster, 10)  # the failed index 0 comes back after its backoff, next to index 2
    assert sorted(by_index()) == ["0", "2"]
    for p in by_index().values():
        finish(cluster, p, "Succeeded")
    run(cluster, 5)
    (last,) = by_index().values()
    finish(cluster, last, "Succeeded")
    run(cluster, 1)
    st = status(cluster)
    assert st["completedIndexes"] == "0-3" and st["succeeded"] == 4
    assert conditions(cluster)["Complete"] == "CompletionsReached"
