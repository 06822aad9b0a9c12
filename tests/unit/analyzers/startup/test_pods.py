from __future__ import annotations

import pytest

from shipshape.analyzers.startup import model
from shipshape.analyzers.startup.events import go_duration, parse_pulled
from shipshape.analyzers.startup.pods import analyze_pods, workload_of

from .builders import T0, C, PodPlan, event, pod_and_events


def one(plan: PodPlan, extra_events: list[dict[str, object]] | None = None) -> model.PodTimeline:
    pod, events = pod_and_events(plan)
    (timeline,) = analyze_pods([pod], events + (extra_events or []))
    return timeline


def test_pulled_message_forms() -> None:
    full = parse_pulled(
        'Successfully pulled image "nginx:1.27" in 1.234s (5.678s including waiting).'
        " Image size: 72099410 bytes."
    )
    assert full is not None
    assert (full.image, full.present, full.pull, full.total, full.size) == (
        "nginx:1.27",
        False,
        1.234,
        5.678,
        72099410,
    )
    old = parse_pulled('Successfully pulled image "busybox" in 850ms')
    assert old is not None and old.pull == pytest.approx(0.85) and old.total == pytest.approx(0.85)
    present = parse_pulled('Container image "busybox" already present on machine')
    assert present is not None and present.present
    assert parse_pulled("Pulling image busybox") is None
    assert go_duration("1m2.5s") == pytest.approx(62.5)
    assert go_duration("12µs") == pytest.approx(12e-6)


def test_phases_of_a_pod_that_pulls_its_image() -> None:
    plan = PodPlan(
        name="web-6b7f9c8d5-abcde",
        created=0.0,
        scheduled=1.25,
        sandbox=3.0,
        initialized=1.0,
        containers_ready=12.0,
        ready=12.0,
        containers=[C("app", started=8.1, pull_start=3.2, wait=0.0, pull=4.5)],
    )
    timeline = one(plan)
    phases = timeline.phases
    assert timeline.outcome == model.READY
    assert timeline.workload == model.WorkloadRef("Deployment", "web")
    assert phases[model.SCHEDULING] == pytest.approx(1.25, abs=1e-3)
    assert phases[model.SANDBOX] == pytest.approx(1.75, abs=1e-3)
    assert phases[model.IMAGE_PULL] == pytest.approx(4.5)
    assert phases[model.IMAGE_PULL_WAIT] == pytest.approx(0.0)
    assert phases[model.INIT_CONTAINERS] == 0.0
    # started is truncated to 8 s: 8 - 3 - 4.5
    assert phases[model.CONTAINER_START] == pytest.approx(0.5)
    assert phases[model.PROBE_WAIT] == pytest.approx(4.0)
    assert timeline.end_to_end == pytest.approx(12.0)
    assert timeline.sli == pytest.approx(8.0 - 4.5)
    assert timeline.images_prepulled is False
    measured = sum(v for k, v in phases.items() if v is not None and k != model.ADMISSION)
    assert measured == pytest.approx(timeline.end_to_end, abs=1.0)


def test_pull_wait_is_separated_from_the_pull() -> None:
    plan = PodPlan(
        name="p",
        created=0.0,
        scheduled=0.5,
        sandbox=1.0,
        initialized=0.0,
        containers_ready=20.0,
        ready=20.0,
        containers=[C("app", started=15.2, pull_start=1.3, wait=9.0, pull=4.0)],
    )
    timeline = one(plan)
    assert timeline.phases[model.IMAGE_PULL_WAIT] == pytest.approx(9.0)
    assert timeline.phases[model.IMAGE_PULL] == pytest.approx(4.0)
    (container,) = timeline.containers
    assert container.pull_start == pytest.approx(T0 + 1.3, abs=1.0)


def test_unscheduled_pod_says_why() -> None:
    message = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available."
    plan = PodPlan(
        name="p",
        created=0.0,
        containers=[C("app", started=None)],
        failed_scheduling=[(0.2, message, 4)],
    )
    timeline = one(plan)
    assert timeline.outcome == model.UNSCHEDULED
    assert timeline.phases[model.SCHEDULING] is None
    assert "Insufficient cpu" in timeline.missing[model.SCHEDULING]
    assert timeline.scheduling_attempts == 4
    for phase in model.POD_PHASES:
        assert phase in timeline.missing
    assert timeline.end_to_end is None


def test_expired_events_are_reported_not_guessed() -> None:
    plan = PodPlan(
        name="p",
        created=0.0,
        scheduled=1.0,
        sandbox=2.0,
        initialized=0.0,
        containers_ready=9.0,
        ready=9.0,
        containers=[C("app", started=7.0, pull_start=2.0, pull=4.0, events=False)],
    )
    pod, _ = pod_and_events(plan)
    (timeline,) = analyze_pods([pod], [])
    assert timeline.phases[model.IMAGE_PULL] is None
    assert "no Pulled event for app" in timeline.missing[model.IMAGE_PULL]
    assert timeline.phases[model.CONTAINER_START] == pytest.approx(5.0)
    assert any("includes image pulls" in note for note in timeline.notes)
    assert timeline.sli is None and "unknown" in timeline.missing["sli"]
    assert timeline.phases[model.SCHEDULING] == pytest.approx(1.0)  # from the PodScheduled condition
    assert model.ADMISSION in timeline.missing


def test_crash_looping_pod_is_not_ready_with_the_reason() -> None:
    plan = PodPlan(
        name="p",
        created=0.0,
        scheduled=1.0,
        sandbox=2.0,
        initialized=0.0,
        containers=[C("app", started=3.0, restarts=5, waiting_reason="CrashLoopBackOff")],
    )
    pod, events = pod_and_events(plan)
    pod["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {
            "exitCode": 1,
            "startedAt": "2026-01-01T00:00:03Z",
            "finishedAt": "2026-01-01T00:00:04Z",
        }
    }
    (timeline,) = analyze_pods([pod], events)
    assert timeline.outcome == model.CRASH_LOOPING
    assert timeline.ready is None
    assert "crash-looping: app (5 restarts)" in timeline.missing["ready"]
    assert timeline.phases[model.PROBE_WAIT] is None


def test_init_containers_and_their_pulls() -> None:
    plan = PodPlan(
        name="p",
        created=0.0,
        scheduled=0.5,
        sandbox=1.0,
        initialized=14.0,
        containers_ready=16.0,
        ready=16.0,
        init=[C("migrate", started=4.0, finished=14.0, pull_start=1.0, pull=2.5)],
        containers=[C("app", started=15.0)],
    )
    timeline = one(plan)
    # 14 - 1 - 2.5 (pull) = 10.5
    assert timeline.phases[model.INIT_CONTAINERS] == pytest.approx(10.5)
    assert timeline.phases[model.IMAGE_PULL] == pytest.approx(2.5)
    assert timeline.phases[model.CONTAINER_START] == pytest.approx(1.0)
    # SLI excludes the pull window (2.5 s) and the init run time (10 s)
    assert timeline.sli == pytest.approx(15.0 - 2.5 - 10.0)


def test_admission_from_the_deployment_scale_up() -> None:
    plan = PodPlan(
        name="web-6b7f9c8d5-x1",
        created=10.0,
        scheduled=10.5,
        sandbox=11.0,
        initialized=10.0,
        containers_ready=13.0,
        ready=13.0,
        containers=[C("app", started=12.0)],
    )
    extra = [
        event(
            "Deployment",
            "default",
            "web",
            "ScalingReplicaSet",
            "Scaled up replica set web-6b7f9c8d5 from 0 to 3",
            4.0,
            component="deployment-controller",
        ),
        event(
            "ReplicaSet",
            "default",
            "web-6b7f9c8d5",
            "SuccessfulCreate",
            "Created pod: web-6b7f9c8d5-x1",
            11.0,
            component="replicaset-controller",
        ),
    ]
    timeline = one(plan, extra)
    assert timeline.phases[model.ADMISSION] == pytest.approx(7.0)
    other = one(plan)
    assert other.phases[model.ADMISSION] is None
    assert "events expired" in other.missing[model.ADMISSION]


@pytest.mark.parametrize(
    ("owner", "expected"),
    [
        (("ReplicaSet", "web-6b7f9c8d5"), model.WorkloadRef("Deployment", "web")),
        (("ReplicaSet", "standalone"), model.WorkloadRef("ReplicaSet", "standalone")),
        (("StatefulSet", "db"), model.WorkloadRef("StatefulSet", "db")),
        (("DaemonSet", "aws-node"), model.WorkloadRef("DaemonSet", "aws-node")),
        (None, model.WorkloadRef("Pod", "p")),
    ],
)
def test_workload_from_owner_chain(owner: tuple[str, str] | None, expected: model.WorkloadRef) -> None:
    pod, _ = pod_and_events(PodPlan(name="p", created=0.0, owner=owner))
    assert workload_of(pod)[0] == expected


def test_events_of_an_earlier_pod_with_the_same_name_are_ignored() -> None:
    plan = PodPlan(
        name="db-0",
        uid="new",
        created=100.0,
        scheduled=101.0,
        sandbox=102.0,
        initialized=100.0,
        containers_ready=104.0,
        ready=104.0,
        owner=("StatefulSet", "db"),
        containers=[C("db", started=103.0)],
    )
    pod, events = pod_and_events(plan)
    for body in events:
        body["involvedObject"]["uid"] = "new"
    stale = event(
        "Pod", "default", "db-0", "Scheduled", "Successfully assigned default/db-0 to x", 1.0, uid="old"
    )
    (timeline,) = analyze_pods([pod], [stale, *events])
    assert timeline.scheduled == pytest.approx(T0 + 101.0)
