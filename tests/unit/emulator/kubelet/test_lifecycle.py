"""Heartbeats, node status, graceful termination, restarts, finished pods and unreachable nodes."""

from collections.abc import Callable

import pytest

from shipshape.emulator.resources import LEASES, NODES, PODS
from shipshape.emulator.store import Obj
from shipshape.kube.clock import parse_time
from tests.unit.emulator.kubelet.builders import (
    T0,
    add_node,
    add_pod,
    cluster,
    condition,
    container,
    messages,
    pod,
    run_for,
)

approx = pytest.approx
UNREACHABLE = "emulator.shipshape.dev/unreachable"


def lease_renewed_at(c: object) -> float:
    lease = c.store.get(LEASES, "kube-node-lease", "node-a")  # type: ignore[attr-defined]
    assert lease is not None
    return parse_time(lease["spec"]["renewTime"])


def test_lease_is_created_and_renewed_every_heartbeat() -> None:
    c, _ = cluster(heartbeatSeconds=10)
    node = add_node(c)
    run_for(c, 1)
    lease = c.store.get(LEASES, "kube-node-lease", "node-a")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "node-a"
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": node["metadata"]["uid"]}
    ]
    assert lease_renewed_at(c) == approx(T0)
    run_for(c, 34)
    assert lease_renewed_at(c) == approx(T0 + 30)


def test_node_status_gets_pressure_conditions_and_heartbeats() -> None:
    c, _ = cluster(nodeStatusReportSeconds=60)
    add_node(c)
    run_for(c, 1)
    node = c.store.get(NODES, "", "node-a")
    assert node is not None
    assert [cond["type"] for cond in node["status"]["conditions"]] == [
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "Ready",
    ]
    memory = condition(node, "MemoryPressure")
    assert (memory["status"], memory["reason"]) == ("False", "KubeletHasSufficientMemory")
    run_for(c, 60)
    node = c.store.get(NODES, "", "node-a")
    assert node is not None
    assert condition(node, "Ready")["lastHeartbeatTime"] == "2026-01-01T00:01:00Z"
    assert messages(c, "node-a", "Starting") == ["Starting kubelet."]


def test_graceful_deletion_stops_containers_then_removes_the_pod() -> None:
    c, kubelet = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c)
    p = add_pod(c, annotations={"emulator.shipshape.dev/stop-seconds": "4"})
    run_for(c, 5)
    removed: list[float] = []
    c.store.subscribe(
        lambda ev: removed.append(c.now()) if ev.type == "DELETED" and ev.resource is PODS else None
    )
    c.store.delete(PODS, "default", "web", grace_seconds=30)
    deleted_at = c.now()
    run_for(c, 1)
    assert messages(c, "web", "Killing") == ["Stopping container app"]
    assert c.store.get(PODS, "default", "web") is not None
    run_for(c, 10)
    assert c.store.get(PODS, "default", "web") is None
    assert removed == [approx(deleted_at + 4)]
    assert kubelet.timeline(p["metadata"]["uid"])["terminating"] == approx((deleted_at, deleted_at + 4))


def test_grace_period_caps_the_stop_time() -> None:
    c, _ = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c)
    add_pod(c, annotations={"emulator.shipshape.dev/stop-seconds": "60"})
    run_for(c, 5)
    c.store.delete(PODS, "default", "web", grace_seconds=2)
    run_for(c, 1.9)
    assert c.store.get(PODS, "default", "web") is not None
    run_for(c, 0.2)
    assert c.store.get(PODS, "default", "web") is None


def test_exiting_container_goes_to_crash_loop_back_off() -> None:
    c, _ = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c)
    add_pod(
        c,
        annotations={
            "emulator.shipshape.dev/exit-after-seconds": "5",
            "emulator.shipshape.dev/exit-code": "1",
        },
    )
    run_for(c, 5.5)
    cs = pod(c)["status"]["containerStatuses"][0]
    # The first restart is immediate, as the kubelet's back-off starts after it.
    assert cs["restartCount"] == 1
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["lastState"]["terminated"]["reason"] == "Error"
    run_for(c, 5)
    cs = pod(c)["status"]["containerStatuses"][0]
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert cs["state"]["waiting"]["message"].startswith(
        "back-off 10s restarting failed container=app pod=web_default("
    )
    assert messages(c, "web", "BackOff")[0].startswith(
        "Back-off restarting failed container app in pod web_default("
    )
    assert pod(c)["status"]["phase"] == "Running"
    run_for(c, 10)
    assert pod(c)["status"]["containerStatuses"][0]["restartCount"] == 2


def test_job_pod_succeeds_and_frees_its_resources() -> None:
    c, _ = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c, cpu="1")
    job_container = container(resources={"requests": {"cpu": "1"}})
    add_pod(
        c,
        "job",
        containers=[job_container],
        restartPolicy="Never",
        annotations={"emulator.shipshape.dev/exit-after-seconds": "3"},
    )
    run_for(c, 5)
    status = pod(c, "job")["status"]
    assert status["phase"] == "Succeeded"
    assert status["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert condition(pod(c, "job"), "Ready")["reason"] == "PodCompleted"
    assert status["podIP"]  # a finished pod keeps reporting the IP it had
    add_pod(c, "next", containers=[job_container])
    run_for(c, 2)
    assert pod(c, "next")["status"]["phase"] == "Running"


def test_liveness_failures_restart_the_container() -> None:
    c, _ = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c)
    liveness = {"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 2}
    add_pod(
        c,
        containers=[container(livenessProbe=liveness)],
        annotations={"emulator.shipshape.dev/ready-after-seconds": "100"},
    )
    run_for(c, 5)
    assert messages(c, "web", "Killing") == ["Container app failed liveness probe, will be restarted"]
    assert pod(c)["status"]["containerStatuses"][0]["restartCount"] >= 1


def test_unreachable_node_stops_heartbeats_and_pod_progress() -> None:
    c, _ = cluster(heartbeatSeconds=10, sandboxSeconds=1, images={"app:1": "1000M"})
    add_node(c)
    run_for(c, 1)
    add_pod(c, containers=[container(image="app:1")])
    run_for(c, 2)

    def cut(node: dict[str, object]) -> None:
        node["metadata"]["annotations"] = {UNREACHABLE: "true"}  # type: ignore[index]

    c.store.mutate(NODES, "", "node-a", cut)
    last_renewal = lease_renewed_at(c)
    run_for(c, 60)
    assert lease_renewed_at(c) == last_renewal
    assert pod(c)["status"]["phase"] == "Pending"
    assert messages(c, "web", "Pulled") == []

    def restore(node: dict[str, object]) -> None:
        node["metadata"]["annotations"] = {}  # type: ignore[index]

    c.store.mutate(NODES, "", "node-a", restore)
    run_for(c, 30)
    assert lease_renewed_at(c) > last_renewal + 60
    assert pod(c)["status"]["phase"] == "Running"


def test_deleted_node_stops_its_kubelet() -> None:
    c, kubelet = cluster(heartbeatSeconds=10)
    add_node(c)
    run_for(c, 1)
    c.store.delete(NODES, "", "node-a")
    run_for(c, 1)
    renewed = lease_renewed_at(c)
    run_for(c, 60)
    assert lease_renewed_at(c) == renewed
    assert "node-a" not in kubelet.agents


def test_invalid_annotation_gets_a_warning_and_the_default() -> None:
    c, _ = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["busybox:1", "nginx:1.25"])
    add_node(c)
    add_pod(
        c, init=[container("init", "busybox:1")], annotations={"emulator.shipshape.dev/init-seconds": "soon"}
    )
    run_for(c, 5)
    (warning,) = messages(c, "web", "InvalidAnnotation")
    assert "emulator.shipshape.dev/init-seconds" in warning and "'soon'" in warning
    assert pod(c)["status"]["phase"] == "Running"


def test_pre_stop_sleep_delays_the_stop_and_the_grace_period_kills() -> None:
    c, _ = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["nginx:1.25", "envoy:1"])
    add_node(c)
    hook = {"preStop": {"sleep": {"seconds": 5}}}
    add_pod(c, containers=[container(lifecycle=hook), container("proxy", "envoy:1", lifecycle={})])
    run_for(c, 2)
    last: list[Obj] = []
    c.store.subscribe(lambda ev: last.append(ev.object) if ev.resource is PODS else None)
    c.store.delete(PODS, "default", "web", grace_seconds=30)
    deleted_at = c.now()
    run_for(c, 5.5)
    assert c.store.get(PODS, "default", "web") is not None  # preStop 5 s + stop 1 s
    run_for(c, 1)
    assert c.store.get(PODS, "default", "web") is None
    final = {s["name"]: s["state"]["terminated"] for s in last[-1]["status"]["containerStatuses"]}
    assert final["app"]["exitCode"] == 0 and final["proxy"]["exitCode"] == 0
    assert parse_time(final["app"]["finishedAt"]) == int(deleted_at + 6)
    assert parse_time(final["proxy"]["finishedAt"]) == int(deleted_at + 1)

    add_pod(c, "short", containers=[container(lifecycle=hook)])
    run_for(c, 2)
    c.store.delete(PODS, "default", "short", grace_seconds=3)
    run_for(c, 5)
    killed = last[-1]["status"]
    assert killed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert killed["phase"] == "Failed"


def test_running_pods_keep_running_when_the_node_comes_back() -> None:
    c, _ = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c)
    add_pod(c)
    run_for(c, 5)
    before = pod(c)["status"]["containerStatuses"][0]

    def set_unreachable(value: str) -> Callable[[Obj], None]:
        def change(node: Obj) -> None:
            node["metadata"]["annotations"] = {UNREACHABLE: value}

        return change

    c.store.mutate(NODES, "", "node-a", set_unreachable("true"))
    run_for(c, 60)
    c.store.mutate(NODES, "", "node-a", set_unreachable("false"))
    run_for(c, 5)
    after = pod(c)["status"]["containerStatuses"][0]
    assert after["containerID"] == before["containerID"]
    assert after["state"] == before["state"]
    assert after["restartCount"] == 0
    assert condition(pod(c), "Ready")["status"] == "True"
    assert len(messages(c, "web", "Started")) == 1

    # The node's Ready condition, set Unknown by the node lifecycle controller meanwhile, is posted again.
    def lost(node: Obj) -> None:
        for ctype in ("Ready", "MemoryPressure"):
            condition(node, ctype).update(status="Unknown", reason="NodeStatusUnknown")

    c.store.mutate(NODES, "", "node-a", lost, subresource="status")
    run_for(c, 60)
    node = c.store.get(NODES, "", "node-a")
    assert node is not None
    ready = condition(node, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    memory = condition(node, "MemoryPressure")
    assert (memory["status"], memory["reason"]) == ("False", "KubeletHasSufficientMemory")
