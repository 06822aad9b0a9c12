"""The scheduler model in a cluster on virtual time: binding, failures, preemption, re-queueing."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator.api import Api
from shipshape.emulator.resources import EVENTS, NODES, PDBS, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scheduler import SchedulerModel
from shipshape.kube.clock import VirtualClock
from tests.unit.emulator.scheduler.builders import node, pod, taint

Obj = dict[str, Any]


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster(VirtualClock())
    Api(c)
    c.add(SchedulerModel())
    return c


def _pod(c: Cluster, name: str) -> Obj:
    found = c.store.get(PODS, "default", name)
    assert found is not None
    return found


def _condition(p: Obj, kind: str) -> Obj | None:
    return next((x for x in p.get("status", {}).get("conditions", []) if x["type"] == kind), None)


def _events(c: Cluster, reason: str) -> list[Obj]:
    return [e for e in c.store.list(EVENTS) if e["reason"] == reason]


def _run(c: Cluster, seconds: float = 0.0) -> None:
    c.engine.run_until(c.clock.now() + seconds)


def test_publishes_itself_and_binds_with_condition_and_event(cluster: Cluster) -> None:
    assert isinstance(cluster.services["scheduler"], SchedulerModel)
    cluster.store.create(NODES, node("n1"))
    cluster.store.create(PODS, pod("web"))
    _run(cluster)
    bound = _pod(cluster, "web")
    assert bound["spec"]["nodeName"] == "n1"
    condition = _condition(bound, "PodScheduled")
    assert condition is not None and condition["status"] == "True"
    [event] = _events(cluster, "Scheduled")
    assert event["message"] == "Successfully assigned default/web to n1"
    assert event["source"]["component"] == "default-scheduler"
    assert event["involvedObject"]["name"] == "web"


def test_ignores_other_schedulers_and_bound_pods(cluster: Cluster) -> None:
    cluster.store.create(NODES, node("n1"))
    cluster.store.create(PODS, pod("custom", spec={"schedulerName": "my-scheduler"}))
    _run(cluster)
    assert "nodeName" not in _pod(cluster, "custom")["spec"]


def test_failure_message_condition_and_event(cluster: Cluster) -> None:
    for name in ("small-1", "small-2"):
        cluster.store.create(NODES, node(name, cpu="2"))
        cluster.store.create(PODS, pod(f"on-{name}", cpu="1", node_name=name))
    cluster.store.create(NODES, node("spot-1", taints=[taint("node.kubernetes.io/capacity", "spot")]))
    cluster.store.create(NODES, node("gpu-1", labels={"role": "gpu"}))
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "role", "operator": "NotIn", "values": ["gpu"]}]}
                    ]
                }
            }
        }
    }
    cluster.store.create(PODS, pod("big", cpu="1500m", spec=spec))
    _run(cluster)
    expected = (
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {node.kubernetes.io/capacity: spot}, 2 Insufficient cpu. "
        "preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling.."
    )
    condition = _condition(_pod(cluster, "big"), "PodScheduled")
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        expected,
    )
    [event] = _events(cluster, "FailedScheduling")
    assert event["type"] == "Warning"
    assert event["message"] == expected


def test_least_vs_most_allocated_scoring() -> None:
    from shipshape.emulator.scenario import SchedulerSettings

    placements = {}
    for scoring in ("LeastAllocated", "MostAllocated"):
        c = Cluster(VirtualClock())
        c.add(SchedulerModel(SchedulerSettings(scoring=scoring)))
        c.store.create(NODES, node("busy", cpu="4", memory="8Gi"))
        c.store.create(NODES, node("idle", cpu="4", memory="8Gi"))
        c.store.create(PODS, pod("existing", cpu="2", memory="4Gi", node_name="busy"))
        c.store.create(PODS, pod("new", cpu="500m", memory="512Mi"))
        _run(c)
        placements[scoring] = _pod(c, "new")["spec"]["nodeName"]
    assert placements == {"LeastAllocated": "idle", "MostAllocated": "busy"}


def test_spread_max_skew_one_over_zones(cluster: Cluster) -> None:
    for zone in ("a", "b", "c"):
        for i in range(2):
            cluster.store.create(NODES, node(f"{zone}{i}", zone=zone))
    constraint = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    for i in range(6):
        cluster.store.create(
            PODS, pod(f"web-{i}", labels={"app": "web"}, spec={"topologySpreadConstraints": [constraint]})
        )
        _run(cluster)
    zones = [_pod(cluster, f"web-{i}")["spec"]["nodeName"][0] for i in range(6)]
    assert sorted(zones) == ["a", "a", "b", "b", "c", "c"]


def test_preemption_of_low_priority_placeholder(cluster: Cluster) -> None:
    cluster.store.create(NODES, node("od-1", cpu="2"))
    cluster.store.create(PODS, pod("placeholder", cpu="1500m", priority=-10))
    _run(cluster)
    assert _pod(cluster, "placeholder")["spec"]["nodeName"] == "od-1"
    replacement = pod("replacement", cpu="1", priority=0)
    cluster.store.create(PODS, replacement)
    _run(cluster)
    preemptor = _pod(cluster, "replacement")
    assert preemptor["status"]["nominatedNodeName"] == "od-1"
    assert "nodeName" not in preemptor["spec"]
    victim = _pod(cluster, "placeholder")
    assert victim["metadata"].get("deletionTimestamp")
    disruption = _condition(victim, "DisruptionTarget")
    assert disruption is not None and disruption["reason"] == "PreemptionByScheduler"
    [event] = _events(cluster, "Preempted")
    assert event["message"] == f"Preempted by pod {preemptor['metadata']['uid']} on node od-1"
    # The kubelet finishes the victim's termination; the preemptor lands on the nominated node.
    _run(cluster, 5)
    assert "nodeName" not in _pod(cluster, "replacement")["spec"]
    cluster.store.remove(PODS, "default", "placeholder")
    _run(cluster, 30)
    assert _pod(cluster, "replacement")["spec"]["nodeName"] == "od-1"


def test_preemption_policy_never_and_equal_priority(cluster: Cluster) -> None:
    cluster.store.create(NODES, node("n1", cpu="1"))
    cluster.store.create(PODS, pod("low", cpu="800m", priority=-10))
    _run(cluster)
    cluster.store.create(PODS, pod("polite", cpu="500m", priority=100, spec={"preemptionPolicy": "Never"}))
    _run(cluster)
    condition = _condition(_pod(cluster, "polite"), "PodScheduled")
    assert condition is not None
    assert condition["message"].endswith("preemption: not eligible due to preemptionPolicy=Never..")
    assert not _pod(cluster, "low")["metadata"].get("deletionTimestamp")


def test_preemption_prefers_victims_whose_eviction_respects_a_pdb(cluster: Cluster) -> None:
    cluster.store.create(NODES, node("n1", cpu="2"))
    cluster.store.create(NODES, node("n2", cpu="2"))
    cluster.store.create(
        PODS, pod("guarded", cpu="1500m", priority=-5, labels={"app": "guarded"}, node_name="n1")
    )
    cluster.store.create(PODS, pod("free", cpu="1500m", priority=-5, labels={"app": "free"}, node_name="n2"))
    cluster.store.create(
        PDBS,
        {
            "metadata": {"name": "guarded", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
            "status": {"disruptionsAllowed": 0},
        },
    )
    cluster.store.create(PODS, pod("important", cpu="1", priority=1000))
    _run(cluster)
    assert _pod(cluster, "important")["status"]["nominatedNodeName"] == "n2"
    assert _pod(cluster, "free")["metadata"].get("deletionTimestamp")
    assert not _pod(cluster, "guarded")["metadata"].get("deletionTimestamp")


def test_backoff_then_reactivation_on_node_add(cluster: Cluster) -> None:
    scheduler = cluster.services["scheduler"]
    cluster.store.create(PODS, pod("waiting", cpu="1"))
    _run(cluster)
    assert _condition(_pod(cluster, "waiting"), "PodScheduled") is not None
    assert (
        _pod(cluster, "waiting")["status"]["conditions"][0]["message"]
        == "no nodes available to schedule pods"
    )
    attempts = scheduler.attempts
    _run(cluster, 60)
    assert scheduler.attempts == attempts  # unschedulable pods wait for an event, not a poll
    cluster.store.create(NODES, node("n1"))
    _run(cluster)
    assert _pod(cluster, "waiting")["spec"]["nodeName"] == "n1"


def test_node_add_during_backoff_waits_for_the_backoff() -> None:
    c = Cluster(VirtualClock())
    scheduler = SchedulerModel()
    c.add(scheduler)
    c.store.create(NODES, node("small", cpu="500m"))
    c.store.create(PODS, pod("waiting", cpu="1"))
    _run(c)  # attempt 1 fails at t0: backoff 1 s
    c.store.create(NODES, node("big", cpu="4"))
    _run(c, 0.5)
    assert "nodeName" not in _pod(c, "waiting")["spec"]
    assert scheduler.queue.where(("default", "waiting")) == "backoff"
    _run(c, 0.6)
    assert _pod(c, "waiting")["spec"]["nodeName"] == "big"


def test_irrelevant_node_update_does_not_requeue() -> None:
    c = Cluster(VirtualClock())
    scheduler = SchedulerModel()
    c.add(scheduler)
    c.store.create(NODES, node("small", cpu="500m"))
    c.store.create(PODS, pod("waiting", cpu="1"))
    _run(c)

    def heartbeat(n: Obj) -> None:
        n["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:00:10Z"

    c.store.mutate(NODES, "", "small", heartbeat, subresource="status")
    _run(c, 20)
    assert scheduler.queue.where(("default", "waiting")) == "unschedulable"

    def grow(n: Obj) -> None:
        n["status"]["allocatable"]["cpu"] = "2"

    c.store.mutate(NODES, "", "small", grow, subresource="status")
    _run(c)
    assert _pod(c, "waiting")["spec"]["nodeName"] == "small"


def test_priority_orders_the_queue(cluster: Cluster) -> None:
    cluster.store.create(NODES, node("n1", cpu="1"))
    cluster.store.create(PODS, pod("low", cpu="1", priority=1))
    cluster.store.create(PODS, pod("high", cpu="1", priority=100))
    _run(cluster)
    assert _pod(cluster, "high")["spec"]["nodeName"] == "n1"
    assert "nodeName" not in _pod(cluster, "low")["spec"]


def test_scheduling_gates_hold_a_pod_until_removed(cluster: Cluster) -> None:
    cluster.store.create(NODES, node("n1"))
    cluster.store.create(PODS, pod("gated", spec={"schedulingGates": [{"name": "example.com/wait"}]}))
    _run(cluster, 5)
    assert "nodeName" not in _pod(cluster, "gated")["spec"]

    def ungate(p: Obj) -> None:
        del p["spec"]["schedulingGates"]

    cluster.store.mutate(PODS, "default", "gated", ungate)
    _run(cluster)
    assert _pod(cluster, "gated")["spec"]["nodeName"] == "n1"


def test_clears_weaker_nominations_on_the_preempted_node(cluster: Cluster) -> None:
    cluster.store.create(NODES, node("n1", cpu="2"))
    cluster.store.create(PODS, pod("placeholder", cpu="1500m", priority=-10, node_name="n1"))
    weaker = pod("weaker", cpu="1", priority=-5)
    weaker["status"]["nominatedNodeName"] = "n1"
    cluster.store.create(PODS, weaker)
    cluster.store.create(PODS, pod("strong", cpu="1", priority=100))
    _run(cluster)
    assert _pod(cluster, "strong")["status"]["nominatedNodeName"] == "n1"
    assert "nominatedNodeName" not in _pod(cluster, "weaker")["status"]
