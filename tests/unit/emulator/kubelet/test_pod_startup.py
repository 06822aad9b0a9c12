"""Pod start-up on the kubelet model: timings, image cache, init containers, probes, conditions, Events."""

import json
from typing import Any

import pytest

from shipshape.emulator.kubelet import KubeletModel
from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Scenario
from shipshape.kube.clock import VirtualClock, parse_time
from tests.unit.emulator.kubelet.builders import (
    T0,
    add_node,
    add_pod,
    cluster,
    condition,
    container,
    events,
    messages,
    pod,
    run_for,
)

MB = 1_000_000
approx = pytest.approx


def uid(obj: dict[str, object]) -> str:
    return obj["metadata"]["uid"]  # type: ignore[index, no-any-return]


def test_phases_follow_the_configured_model() -> None:
    c, kubelet = cluster(
        sandboxSeconds=2,
        containerStartSeconds=1,
        bandwidthMBps=50,
        images={"app:1": "100M"},
        defaultImageSize="10M",
    )
    add_node(c)
    p = add_pod(c, containers=[container(image="app:1")])
    run_for(c, 30)
    t = kubelet.timeline(uid(p))
    assert t["sandbox"] == approx((T0, T0 + 2))
    assert t["pull:app"] == approx((T0 + 2, T0 + 4))  # 100 MB at 50 MB/s
    assert t["start:app"] == approx((T0 + 4, T0 + 5))
    assert t["startup"] == approx((T0, T0 + 5))
    status = pod(c)["status"]
    assert status["phase"] == "Running"
    assert status["podIP"].startswith("10.244.1.")
    assert status["hostIP"] == "192.168.0.10"
    assert status["startTime"] == "2026-01-01T00:00:00Z"
    assert status["qosClass"] == "BestEffort"
    (cs,) = status["containerStatuses"]
    assert cs["state"] == {"running": {"startedAt": "2026-01-01T00:00:05Z"}}
    assert cs["ready"] is True and cs["started"] is True and cs["restartCount"] == 0
    assert cs["image"] == "docker.io/library/app:1"
    assert cs["containerID"].startswith("containerd://")
    assert messages(c, "web", "Pulling") == ['Pulling image "app:1"']
    assert messages(c, "web", "Pulled") == [
        'Successfully pulled image "app:1" in 2s (2s including waiting). Image size: 100000000 bytes.'
    ]
    assert messages(c, "web", "Created") == ["Created container: app"]
    assert messages(c, "web", "Started") == ["Started container app"]
    # The SLI excludes image pulling: 5 s to running minus 2 s of pulls.
    assert kubelet.pod_start_sli_seconds == [approx(3.0)]


def test_serialized_pulls_make_the_second_pod_wait_for_the_first() -> None:
    c, kubelet = cluster(sandboxSeconds=1, bandwidthMBps=100, images={"a:1": "300M", "b:1": "100M"})
    add_node(c)
    first = add_pod(c, "first", containers=[container(image="a:1")])
    second = add_pod(c, "second", containers=[container(image="b:1")])
    run_for(c, 30)
    assert kubelet.timeline(uid(first))["pull:app"] == approx((T0 + 1, T0 + 4))
    assert kubelet.timeline(uid(second))["image:app"] == approx((T0 + 1, T0 + 5))
    assert kubelet.timeline(uid(second))["pull:app"] == approx((T0 + 4, T0 + 5))
    assert messages(c, "second", "Pulled") == [
        'Successfully pulled image "b:1" in 1s (4s including waiting). Image size: 100000000 bytes.'
    ]


def test_parallel_pulls_share_the_node_bandwidth() -> None:
    c, kubelet = cluster(
        sandboxSeconds=1, bandwidthMBps=100, serializeImagePulls=False, images={"a:1": "100M", "b:1": "100M"}
    )
    add_node(c)
    first = add_pod(c, "first", containers=[container(image="a:1")])
    second = add_pod(c, "second", containers=[container(image="b:1")])
    run_for(c, 30)
    assert kubelet.timeline(uid(first))["pull:app"] == approx((T0 + 1, T0 + 3))
    assert kubelet.timeline(uid(second))["pull:app"] == approx((T0 + 1, T0 + 3))


def test_image_cache_hits_and_pull_policies() -> None:
    c, kubelet = cluster(sandboxSeconds=1, preloadedImages=["busybox:1.36"], images={"app:1": "100M"})
    add_node(c)
    add_pod(c, "preloaded", containers=[container(image="busybox:1.36")])
    add_pod(c, "first", containers=[container(image="app:1")])
    run_for(c, 10)
    add_pod(c, "second", containers=[container(image="app:1")])
    add_pod(c, "always", containers=[container(image="app:1", imagePullPolicy="Always")])
    add_pod(c, "never", containers=[container(image="other:2", imagePullPolicy="Never")])
    run_for(c, 10)
    assert messages(c, "preloaded", "Pulled") == ['Container image "busybox:1.36" already present on machine']
    assert messages(c, "second", "Pulled") == ['Container image "app:1" already present on machine']
    assert messages(c, "second", "Pulling") == []
    assert messages(c, "always", "Pulling") == ['Pulling image "app:1"']
    assert messages(c, "never", "ErrImageNeverPull") == [
        'Container image "other:2" is not present with pull policy of Never'
    ]
    never = pod(c, "never")["status"]
    assert never["phase"] == "Pending"
    assert never["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImageNeverPull"
    assert "docker.io/library/app:1" in kubelet.images_on("node-a")
    node_images = c.store.get(NODES, "", "node-a")["status"]["images"]  # type: ignore[index]
    assert any("docker.io/library/app:1" in image["names"] for image in node_images)


def test_init_containers_run_in_order_before_the_containers() -> None:
    c, kubelet = cluster(
        sandboxSeconds=1, containerStartSeconds=0, preloadedImages=["busybox:1", "nginx:1.25"]
    )
    add_node(c)
    p = add_pod(
        c,
        init=[container("migrate", "busybox:1"), container("warm", "busybox:1")],
        annotations={"emulator.shipshape.dev/init-seconds": json.dumps({"migrate": 5})},
    )
    run_for(c, 3)
    status = pod(c)["status"]
    assert status["phase"] == "Pending"
    init_cond = condition(pod(c), "Initialized")
    assert init_cond["status"] == "False"
    assert init_cond["reason"] == "ContainersNotInitialized"
    assert init_cond["message"] == "containers with incomplete status: [migrate warm]"
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    run_for(c, 10)
    t = kubelet.timeline(uid(p))
    assert t["init:migrate"] == approx((T0 + 1, T0 + 6))
    assert t["init:warm"] == approx((T0 + 6, T0 + 7))  # default 1 s
    assert t["start:app"][0] == approx(T0 + 7)
    status = pod(c)["status"]
    assert [s["state"]["terminated"]["reason"] for s in status["initContainerStatuses"]] == ["Completed"] * 2
    assert condition(pod(c), "Initialized")["lastTransitionTime"] == "2026-01-01T00:00:07Z"
    assert status["phase"] == "Running"


def test_readiness_probe_gates_ready_with_initial_delay_and_period() -> None:
    c, kubelet = cluster(sandboxSeconds=1, containerStartSeconds=1, preloadedImages=["nginx:1.25"])
    add_node(c)
    probe = {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 5, "periodSeconds": 3}
    p = add_pod(
        c,
        containers=[container(readinessProbe=probe, ports=[{"name": "http", "containerPort": 8080}])],
        annotations={"emulator.shipshape.dev/ready-after-seconds": "8"},
    )
    run_for(c, 6)
    assert condition(pod(c), "Ready")["status"] == "False"
    assert condition(pod(c), "Ready")["message"] == "containers with unready status: [app]"
    run_for(c, 20)
    # Running at 2 s, the app answers from 10 s: the probe at 7 s fails, the one at 10 s succeeds.
    t = kubelet.timeline(uid(p))
    assert t["start:app"][1] == approx(T0 + 2)
    assert t["ready"] == approx((T0 + 2, T0 + 10))
    ready = condition(pod(c), "Ready")
    assert ready["status"] == "True"
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:10Z"
    failures = messages(c, "web", "Unhealthy")
    ip = pod(c)["status"]["podIP"]
    refused = f"dial tcp {ip}:8080: connect: connection refused"
    assert failures == [f'Readiness probe failed: Get "http://{ip}:8080/healthz": {refused}']


def test_startup_probe_holds_started_and_readiness() -> None:
    c, kubelet = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c)
    startup = {"tcpSocket": {"port": 80}, "periodSeconds": 2, "failureThreshold": 10}
    p = add_pod(
        c,
        containers=[container(startupProbe=startup)],
        annotations={"emulator.shipshape.dev/ready-after-seconds": "5"},
    )
    run_for(c, 3)
    cs = pod(c)["status"]["containerStatuses"][0]
    assert cs["started"] is False and cs["ready"] is False
    run_for(c, 10)
    assert kubelet.timeline(uid(p))["ready"][1] == approx(T0 + 6)  # probes at 0, 2, 4 fail, 6 succeeds
    assert len(messages(c, "web", "Unhealthy")) == 1  # repeats are aggregated into one Event's count
    cs = pod(c)["status"]["containerStatuses"][0]
    assert cs["started"] is True and cs["ready"] is True


def test_pod_rejected_when_it_does_not_fit() -> None:
    c, _ = cluster()
    add_node(c, cpu="1")
    add_pod(c, containers=[container(resources={"requests": {"cpu": "2"}})])
    run_for(c, 5)
    status = pod(c)["status"]
    assert status["phase"] == "Failed"
    assert status["reason"] == "OutOfcpu"
    assert status["message"] == (
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000"
    )
    assert messages(c, "web", "OutOfcpu") == [status["message"].removeprefix("Pod was rejected: ")]


def test_pods_wait_for_the_network_unless_host_network() -> None:
    c, kubelet = cluster(sandboxSeconds=1, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c, ready=False)
    normal = add_pod(c, "normal")
    host = add_pod(c, "host", hostNetwork=True)
    run_for(c, 10)
    assert pod(c, "host")["status"]["phase"] == "Running"
    assert pod(c, "host")["status"]["podIP"] == "192.168.0.10"
    assert pod(c, "normal")["status"]["phase"] == "Pending"
    assert messages(c, "normal", "NetworkNotReady")

    def mark_ready(node: dict[str, object]) -> None:
        condition(node, "Ready")["status"] = "True"

    assert messages(c, "node-a", "NodeReady") == []
    c.store.mutate(NODES, "", "node-a", mark_ready, subresource="status")
    run_for(c, 5)
    assert messages(c, "node-a", "NodeReady") == ["Node node-a status is now: NodeReady"]
    assert pod(c, "normal")["status"]["phase"] == "Running"
    assert kubelet.timeline(uid(normal))["network-wait"] == approx((T0, T0 + 10))
    assert kubelet.timeline(uid(host))["sandbox"] == approx((T0, T0 + 1))


def test_pool_bandwidth_overrides_the_kubelet_default() -> None:
    scenario = Scenario.model_validate(
        {
            "pools": [
                {
                    "name": "slow",
                    "instanceType": "m5.large",
                    "zone": "us-east-1a",
                    "capacityType": "spot",
                    "cpu": "2",
                    "memory": "8Gi",
                    "bandwidthMBps": 10,
                }
            ],
            "kubelet": {"sandboxSeconds": 0, "images": {"app:1": "50M"}},
        }
    )
    c = Cluster(VirtualClock(T0), scenario)
    kubelet = KubeletModel()
    c.add(kubelet)
    add_node(c, labels={"emulator.shipshape.dev/pool": "slow"})
    p = add_pod(c, containers=[container(image="app:1")])
    run_for(c, 20)
    start, end = kubelet.timeline(uid(p))["pull:app"]
    assert end - start == approx(5.0)  # 50 MB at the pool's 10 MB/s


def test_conditions_keep_their_transition_times() -> None:
    c, _ = cluster(sandboxSeconds=1, containerStartSeconds=1, preloadedImages=["nginx:1.25"])
    add_node(c)
    add_pod(c)
    run_for(c, 10)
    p = pod(c)
    assert [cond["type"] for cond in p["status"]["conditions"]] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    assert condition(p, "PodReadyToStartContainers")["lastTransitionTime"] == "2026-01-01T00:00:01Z"
    assert condition(p, "Initialized")["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert condition(p, "Ready")["lastTransitionTime"] == "2026-01-01T00:00:02Z"
    assert parse_time(p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]) == T0 + 2


def test_start_sli_histogram_labels_the_first_network_pod() -> None:
    c, kubelet = cluster(sandboxSeconds=1, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c)
    add_pod(c, "host", hostNetwork=True)
    add_pod(c, "first")
    add_pod(c, "second")
    run_for(c, 10)
    sample = kubelet.registry.get_sample_value
    assert sample("kubelet_pod_start_sli_duration_seconds_count", {"first_network_pod": "true"}) == 1
    assert sample("kubelet_pod_start_sli_duration_seconds_count", {"first_network_pod": ""}) == 2
    assert kubelet.pod_start_sli_seconds == [approx(1.0)] * 3


def test_missing_image_fails_to_pull_and_backs_off() -> None:
    c, _ = cluster(sandboxSeconds=0, missingImages=["typo/app:1"])
    add_node(c)
    add_pod(c, containers=[container(image="typo/app:1")])
    run_for(c, 0.5)
    waiting = pod(c)["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ErrImagePull"
    assert waiting["message"].endswith(
        'failed to resolve reference "docker.io/typo/app:1": docker.io/typo/app:1: not found'
    )
    run_for(c, 1)
    waiting = pod(c)["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "typo/app:1"'}
    assert messages(c, "web", "Failed")[1:] == ["Error: ErrImagePull", "Error: ImagePullBackOff"]
    run_for(c, 60)
    # Tries at 0, 10, 30 s (back-off 10 s, then 20 s, then 40 s): one aggregated Pulling event.
    (pulling,) = [e for e in events(c, "web", "Pulling")]
    assert pulling["count"] == 3
    assert pod(c)["status"]["phase"] == "Pending"


def test_sidecar_starts_before_the_containers_and_counts_for_readiness() -> None:
    c, kubelet = cluster(sandboxSeconds=0, containerStartSeconds=1, preloadedImages=["nginx:1.25", "envoy:1"])
    add_node(c)
    sidecar = container(
        "proxy", "envoy:1", restartPolicy="Always", readinessProbe={"tcpSocket": {"port": 15000}}
    )
    p = add_pod(c, init=[sidecar], annotations={"emulator.shipshape.dev/ready-after-seconds": '{"proxy": 4}'})
    run_for(c, 10)
    t = kubelet.timeline(uid(p))
    assert t["start:proxy"] == approx((T0, T0 + 1))
    assert t["start:app"] == approx((T0 + 1, T0 + 2))
    status = pod(c)["status"]
    proxy = status["initContainerStatuses"][0]
    assert "running" in proxy["state"] and proxy["started"] is True
    # The proxy answers 4 s after it started (at 5 s); its probe runs every 10 s from 1 s: ready at 11 s.
    assert condition(pod(c), "Ready")["status"] == "False"
    assert condition(pod(c), "Ready")["message"] == "containers with unready status: [proxy]"
    run_for(c, 2)
    assert condition(pod(c), "Ready")["status"] == "True"
    assert kubelet.timeline(uid(p))["ready"][1] == approx(T0 + 11)


def test_readiness_gates_hold_ready_until_their_condition_is_true() -> None:
    c, _ = cluster(sandboxSeconds=0, containerStartSeconds=0, preloadedImages=["nginx:1.25"])
    add_node(c)
    add_pod(c, readinessGates=[{"conditionType": "example.com/lb-ready"}])
    run_for(c, 5)
    ready = condition(pod(c), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert (
        ready["message"]
        == 'corresponding condition of pod readiness gate "example.com/lb-ready" does not exist.'
    )
    assert condition(pod(c), "ContainersReady")["status"] == "True"

    def gate_open(obj: dict[str, Any]) -> None:
        obj["status"]["conditions"].append({"type": "example.com/lb-ready", "status": "True"})

    c.store.mutate(PODS, "default", "web", gate_open, subresource="status")
    run_for(c, 1)
    assert condition(pod(c), "Ready")["status"] == "True"
    assert condition(pod(c), "example.com/lb-ready")["status"] == "True"
