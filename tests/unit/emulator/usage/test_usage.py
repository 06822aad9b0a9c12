import statistics

import pytest

from shipshape.emulator import usage
from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import UsageProfile
from shipshape.emulator.store import Obj
from shipshape.kube.clock import VirtualClock

DAY = 86400.0
MIDNIGHT = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def running_pod(
    name: str, containers: list[Obj], labels: dict[str, str] | None = None, node: str = "n1"
) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {}},
        "spec": {"nodeName": node, "containers": containers},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": c["name"], "state": {"running": {"startedAt": "x"}}} for c in containers
            ],
        },
    }


def app(
    name: str = "app", requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> Obj:
    return {"name": name, "image": "x", "resources": {"requests": requests or {}, "limits": limits or {}}}


def model(*profiles: UsageProfile, seed: int = 7) -> tuple[Cluster, usage.UsageModel]:
    c = Cluster(VirtualClock(MIDNIGHT))
    m = usage.UsageModel(list(profiles), seed)
    c.add(m)
    return c, m


def test_steady_usage_is_the_mean_share_of_requests_within_jitter() -> None:
    _, m = model(UsageProfile(pattern="steady", cpu=0.5, memory=0.25))
    pod = running_pod("web", [app(requests={"cpu": "1", "memory": "1Gi"})])
    samples = [m.pod_usage(pod, MIDNIGHT + i * 60)[0] for i in range(100)]
    for name, cpu, memory in samples:
        assert name == "app"
        assert 500 * 0.95 <= cpu <= 500 * 1.05
        assert 2**30 * 0.25 * 0.98 <= memory <= 2**30 * 0.25 * 1.02
    assert len({cpu for _, cpu, _ in samples}) > 1  # jitter varies by minute


def test_usage_is_deterministic_for_a_seed_and_time() -> None:
    pod = running_pod("web", [app(requests={"cpu": "1", "memory": "1Gi"})])
    profile = UsageProfile(pattern="bursty")
    _, a = model(profile, seed=3)
    _, b = model(profile, seed=3)
    _, other = model(profile, seed=4)
    times = [MIDNIGHT + i * 60 for i in range(50)]
    assert [a.pod_usage(pod, t) for t in times] == [b.pod_usage(pod, t) for t in times]
    assert [a.pod_usage(pod, t) for t in times] != [other.pod_usage(pod, t) for t in times]


def test_diurnal_peaks_at_midday_and_troughs_at_midnight() -> None:
    _, m = model(UsageProfile(pattern="diurnal", cpu=0.5, amplitude=0.4, period=DAY))
    pod = running_pod("web", [app(requests={"cpu": "2", "memory": "1Gi"})])
    trough = m.pod_usage(pod, MIDNIGHT)[0][1]
    peak = m.pod_usage(pod, MIDNIGHT + DAY / 2)[0][1]
    assert trough == pytest.approx(1000 * 0.6, rel=0.06)
    assert peak == pytest.approx(1000 * 1.4, rel=0.06)
    next_trough = m.pod_usage(pod, MIDNIGHT + DAY)[0][1]
    assert next_trough == pytest.approx(trough, rel=0.11)


def test_bursty_keeps_the_mean_but_has_bursts() -> None:
    _, m = model(UsageProfile(pattern="bursty", cpu=0.5, amplitude=0.3))
    pod = running_pod("web", [app(requests={"cpu": "1"})])
    cpus = [m.pod_usage(pod, MIDNIGHT + i * 60)[0][1] for i in range(2000)]
    assert statistics.mean(cpus) == pytest.approx(500, rel=0.1)
    assert max(cpus) > 500 * 3  # a burst: 1 + 0.3 x 9 = 3.7 x the mean
    assert min(cpus) < 500 * 0.75


def test_fallbacks_limits_then_best_effort_and_caps() -> None:
    _, m = model(UsageProfile(cpu=2.0, memory=2.0))
    limited = running_pod("lim", [app(limits={"cpu": "500m", "memory": "256Mi"})])
    ((_, cpu, memory),) = m.pod_usage(limited, MIDNIGHT)
    assert cpu == 500 and memory == 256 * 2**20  # twice the limit-as-request, capped at the limit
    best_effort = running_pod("be", [app()])
    ((_, cpu, memory),) = m.pod_usage(best_effort, MIDNIGHT)
    assert cpu == pytest.approx(2 * usage.BEST_EFFORT_CPU_MILLIS, rel=0.06)
    assert memory == pytest.approx(2 * usage.BEST_EFFORT_MEMORY_BYTES, rel=0.03)


def test_profiles_match_by_namespace_and_labels() -> None:
    batch = UsageProfile(selector={"tier": "batch"}, cpu=0.9)
    elsewhere = UsageProfile(namespace="other", cpu=0.1)
    _, m = model(elsewhere, batch)
    assert usage.profile_for(running_pod("b", [app()], {"tier": "batch"}), m.profiles) is batch
    assert usage.profile_for(running_pod("w", [app()], {"tier": "web"}), m.profiles) is usage.DEFAULT_PROFILE


def test_only_running_containers_have_usage() -> None:
    _, m = model()
    pod = running_pod("web", [app("a", {"cpu": "1"}), app("b", {"cpu": "1"})])
    pod["status"]["containerStatuses"][1]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    assert [name for name, _, _ in m.pod_usage(pod)] == ["a"]
    pod["status"]["phase"] = "Pending"
    assert m.pod_usage(pod) == []


def test_node_usage_is_its_running_pods_plus_system_overhead() -> None:
    c, m = model(UsageProfile(cpu=0.5, memory=0.5))
    c.store.create(NODES, {"metadata": {"name": "n1"}})
    first = c.store.create(PODS, running_pod("a", [app(requests={"cpu": "1", "memory": "1Gi"})]))
    second = c.store.create(PODS, running_pod("b", [app(requests={"cpu": "2", "memory": "2Gi"})]))
    c.store.create(PODS, running_pod("elsewhere", [app(requests={"cpu": "4"})], node="n2"))
    pending = running_pod("pending", [app(requests={"cpu": "4"})])
    pending["status"]["phase"] = "Pending"
    c.store.create(PODS, pending)
    cpu, memory = m.node_usage("n1")
    pods = [u for p in (first, second) for u in m.pod_usage(p)]
    assert cpu == usage.SYSTEM_CPU_MILLIS + sum(u[1] for u in pods)
    assert memory == usage.SYSTEM_MEMORY_BYTES + sum(u[2] for u in pods)
    assert cpu == pytest.approx(100 + 1500, rel=0.05)
    assert m.node_usage("missing") == (0, 0)


def test_pods_run_by_the_kubelet_get_usage_once_their_containers_run() -> None:
    from shipshape.emulator.kubelet import KubeletModel
    from shipshape.emulator.scenario import Kubelet

    c = Cluster(VirtualClock(MIDNIGHT))
    kubelet_settings = Kubelet.model_validate({"sandboxSeconds": 1, "preloadedImages": ["nginx:1.25"]})
    c.add(KubeletModel(kubelet_settings))
    m = usage.UsageModel([UsageProfile(cpu=0.5, memory=0.5)], seed=1)
    c.add(m)
    node_status = {
        "allocatable": {"cpu": "2", "memory": "4Gi"},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    c.store.create(NODES, {"metadata": {"name": "n1"}, "status": node_status})
    pod = running_pod("web", [app(requests={"cpu": "1", "memory": "1Gi"})])
    del pod["status"], pod["metadata"]["uid"]
    c.store.create(PODS, pod)
    stored = c.store.get(PODS, "default", "web")
    assert stored is not None and m.pod_usage(stored) == []
    c.engine.run_until(MIDNIGHT + 10)
    stored = c.store.get(PODS, "default", "web")
    assert stored is not None
    ((name, cpu, _),) = m.pod_usage(stored)
    assert name == "app" and cpu == pytest.approx(500, rel=0.06)
    assert m.node_usage("n1")[0] == usage.SYSTEM_CPU_MILLIS + cpu
