"""Headroom sizing: placeholders only for the pods one spot pool could lose that the free on-demand
room would not already take."""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from typing import Any

from shipshape.contracts.annotations import HEADROOM_LABEL
from shipshape.controller.headroom import (
    headroom_plan,
    placeholder_deployments,
    pods_to_cover,
    priority_class,
    spot_pods_by_pool,
    uncovered_plan,
)
from shipshape.controller.loops.headroom import _same
from shipshape.controller.packing import Room
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType, ControllerConfig, WorkloadKind, WorkloadPolicy
from shipshape.controller.state import ClusterState, PodState, WorkloadState

from .builders import node
from .decision_cases import A, workloads_on_nodes

GIB = 2**30
POOL_A = Pool("m5.large", "us-east-1a")
POOL_B = Pool("m5.large", "us-east-1b")


def ready_node(
    name: str, capacity: str, cpu: str = "4", memory: str = "16Gi", **kwargs: Any
) -> dict[str, Any]:
    body = node(name, capacity, **kwargs)
    body["status"] = {
        "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return body


def bound(name: str, node_name: str, cpu: str, memory: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
        "status": {"phase": phase},
    }


def placeholder(node_name: str) -> dict[str, Any]:
    pod = bound(f"placeholder-{node_name}", node_name, "1", "2Gi")
    pod["metadata"]["labels"] = {HEADROOM_LABEL: "true"}
    return pod


def spot_pod(name: str, pool: Pool, cpu_millis: int, memory_bytes: int) -> PodState:
    return PodState(name, CapacityType.SPOT, pool, f"{pool.zone}-node", True, None, cpu_millis, memory_bytes)


def test_spare_is_the_room_workload_pods_leave_on_schedulable_nodes_they_hold() -> None:
    cordoned = ready_node("od-cordoned", "on-demand")
    cordoned["spec"]["unschedulable"] = True
    not_ready = ready_node("od-booting", "on-demand")
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    nodes = [
        ready_node("od-1", "on-demand"),
        ready_node("spot-1", "spot", zone="us-east-1b"),
        ready_node("gpu-1", "on-demand", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
        cordoned,
        not_ready,
        ready_node("od-full", "on-demand", cpu="1"),
        ready_node("od-placeholders-only", "on-demand"),
    ]
    daemon = bound("agent-1", "od-1", "100m", "1Gi")
    daemon["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "agent", "controller": True}]
    lone_daemon = bound("agent-2", "od-placeholders-only", "100m", "1Gi")
    lone_daemon["metadata"]["ownerReferences"] = daemon["metadata"]["ownerReferences"]
    pods = [
        bound("web-1", "od-1", "500m", "1Gi"),
        daemon,
        placeholder("od-1"),  # preempted by replacements: its room counts as spare
        bound("done", "od-1", "2", "8Gi", phase="Succeeded"),
        bound("web-2", "spot-1", "1", "1Gi"),
        bound("web-3", "od-full", "1", "1Gi"),
        lone_daemon,
        placeholder("od-placeholders-only"),  # a node the autoscaler may remove: no spare
    ]
    cache = ClusterState(ControllerConfig())
    cache.replace("Node", nodes)
    cache.replace("Pod", pods)
    assert list(cache.spare_rooms()) == [Room(None, 3400, 14 * GIB, 108), Room(POOL_B, 3000, 15 * GIB, 109)]


def test_placeholders_cover_only_what_the_spare_room_cannot_take() -> None:
    pods_by_pool = {
        POOL_A: [spot_pod(f"a-{i}", POOL_A, 1000, GIB) for i in range(3)],
        POOL_B: [spot_pod("b-0", POOL_B, 2000, 4 * GIB)],
    }
    # 1.5 cores take one pod of pool a (two left: 2.5 weighed) but not pool b's (2 cores + 4 GiB: 3).
    plan = uncovered_plan(pods_by_pool, [Room(None, 1500, 8 * GIB, 10)])
    assert plan.pool == POOL_B
    assert [(s.cpu_millis, s.memory_bytes, s.count) for s in plan.placeholders] == [(2000, 4 * GIB, 1)]
    # Two cores: pool b's pod fits, and two of pool a's; pool a's third pod is the largest loss.
    plan = uncovered_plan(pods_by_pool, [Room(None, 2000, 8 * GIB, 10)])
    assert plan.pool == POOL_A
    assert [(s.cpu_millis, s.memory_bytes, s.count) for s in plan.placeholders] == [(1000, GIB, 1)]


def test_no_placeholders_when_the_room_outside_a_pool_takes_its_pods_whole() -> None:
    pods_by_pool = {POOL_A: [spot_pod(f"a-{i}", POOL_A, 500, GIB) for i in range(4)]}
    plan = uncovered_plan(pods_by_pool, [Room(None, 1000, 2 * GIB, 10), Room(POOL_B, 1000, 2 * GIB, 10)])
    assert plan.pool is None and plan.placeholders == ()
    # One pod slot short on the second node: one placeholder of that pod's shape.
    plan = uncovered_plan(pods_by_pool, [Room(None, 1000, 2 * GIB, 10), Room(POOL_B, 1000, 2 * GIB, 1)])
    assert [(s.cpu_millis, s.memory_bytes, s.count) for s in plan.placeholders] == [(500, GIB, 1)]
    # The room on the pool's own nodes goes with them: it takes none of its pods.
    plan = uncovered_plan(pods_by_pool, [Room(None, 1000, 2 * GIB, 10), Room(POOL_A, 1000, 2 * GIB, 10)])
    assert plan.pool == POOL_A
    assert [(s.cpu_millis, s.memory_bytes, s.count) for s in plan.placeholders] == [(500, GIB, 2)]


def workload(name: str, floor: int, pods: list[PodState], replicas: int | None = None) -> WorkloadState:
    return WorkloadState(
        kind=WorkloadKind.DEPLOYMENT,
        namespace="shop",
        name=name,
        replicas=len(pods) if replicas is None else replicas,
        policy=WorkloadPolicy(kind=WorkloadKind.DEPLOYMENT),
        pods=tuple(pods),
        floor=floor,
    )


def test_floor_cover_holds_room_only_for_pods_a_workload_cannot_lose() -> None:
    web = [spot_pod(f"web-{i}", POOL_A if i < 4 else POOL_B, 500, GIB) for i in range(6)]
    on_demand = PodState("web-od", CapacityType.ON_DEMAND, None, "od-node", True, None, 500, GIB)
    # 7 ready, floor 5: two may go; pool a holds four of them, pool b two.
    states = [workload("web", 5, [*web, on_demand])]
    covered = pods_to_cover(states, "floor")
    assert {pool: len(pods) for pool, pods in covered.items()} == {POOL_A: 2}
    # "pool" covers every spot pod, as before.
    everything = pods_to_cover(states, "pool")
    assert {pool: len(pods) for pool, pods in everything.items()} == {POOL_A: 4, POOL_B: 2}
    # A replica not ready (a rollout under way) leaves less slack: more to cover.
    not_ready = [replace(web[5], ready=False), *web[:5], on_demand]
    covered = pods_to_cover([workload("web", 5, not_ready)], "floor")
    assert {pool: len(pods) for pool, pods in covered.items()} == {POOL_A: 3}
    # A single replica on spot with floor 1 (no slack): its pod is covered.
    (single,) = [spot_pod("checkout-0", POOL_B, 1000, GIB)]
    covered = pods_to_cover([workload("checkout", 1, [single])], "floor")
    assert covered == {POOL_B: [single]}
    # A generous budget: nothing to cover, no placeholders.
    assert uncovered_plan(pods_to_cover([workload("batch", 2, web)], "floor"), []).placeholders == ()


def _first_fit_one_by_one(lost: list[PodState], rooms: list[Room]) -> list[tuple[int, int]]:
    """First-fit decreasing, one pod at a time: what the grouped placement must equal."""
    left_in = [[room.cpu_millis, room.memory_bytes, room.pods] for room in rooms]
    left = []
    for pod in sorted(lost, key=lambda p: (p.cpu_millis, p.memory_bytes, p.name), reverse=True):
        for slot in left_in:
            if slot[0] >= pod.cpu_millis and slot[1] >= pod.memory_bytes and slot[2] >= 1:
                slot[0] -= pod.cpu_millis
                slot[1] -= pod.memory_bytes
                slot[2] -= 1
                break
        else:
            left.append((pod.cpu_millis, pod.memory_bytes))
    return sorted(left)


def test_pods_of_one_shape_placed_together_leave_what_one_by_one_placement_leaves() -> None:
    rng = random.Random(7)
    shapes = [(0, GIB), (250, 0), (500, GIB), (1000, 2 * GIB), (2000, 8 * GIB), (1500, 512 * 2**20)]
    for _ in range(300):
        lost = [spot_pod(f"p-{i}", POOL_A, *rng.choice(shapes)) for i in range(rng.randint(0, 40))]
        rooms = [
            Room(None, rng.randint(0, 8000), rng.randint(0, 32) * GIB // 2, rng.randint(0, 12))
            for _ in range(rng.randint(0, 12))
        ]
        expected = _first_fit_one_by_one(lost, rooms)
        plan = uncovered_plan({POOL_A: lost}, rooms)
        got = sorted((s.cpu_millis, s.memory_bytes) for s in plan.placeholders for _ in range(s.count))
        assert got == expected


def test_placeholders_prefer_nodes_that_hold_placeholders_and_an_older_template_is_replaced() -> None:
    plan = uncovered_plan({POOL_A: [spot_pod("a-0", POOL_A, 500, GIB)]}, [])
    (body,) = placeholder_deployments(plan, "shipshape-system")
    pod_spec = body["spec"]["template"]["spec"]
    (term,) = pod_spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": {HEADROOM_LABEL: "true"}}
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert body["spec"]["template"]["metadata"]["labels"][HEADROOM_LABEL] == "true"
    assert _same(copy.deepcopy(body), body)
    older = copy.deepcopy(body)
    del older["spec"]["template"]["spec"]["affinity"]
    assert not _same(older, body)


def test_headroom_is_sized_from_the_largest_pool_loss() -> None:
    grouped = spot_pods_by_pool(workloads_on_nodes())
    plan = headroom_plan(grouped)
    assert plan.pool == A  # 2 cpu in pool A beat 0.25 in C and 0.5 in B
    assert (plan.cpu_millis, plan.memory_bytes) == (2000, 2 * 2**30)
    assert [(s.cpu_millis, s.memory_bytes, s.count) for s in plan.placeholders] == [
        (1000, 2**30, 1),
        (500, 2**29, 2),
    ]
    assert headroom_plan({}).pool is None


def test_placeholder_bodies() -> None:
    plan = headroom_plan(spot_pods_by_pool(workloads_on_nodes()))
    bodies = placeholder_deployments(plan, "shipshape-system")
    assert [b["spec"]["replicas"] for b in bodies] == [1, 2]
    template = bodies[1]["spec"]["template"]["spec"]
    assert template["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    required = template["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    on_demand = {"key": "node.kubernetes.io/capacity", "operator": "In", "values": ["on-demand"]}
    assert required["nodeSelectorTerms"] == [{"matchExpressions": [on_demand]}]
    gke = [[{"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]}]]
    gke_body = placeholder_deployments(plan, "shipshape-system", on_demand_terms=gke)[0]
    terms = gke_body["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": gke[0]}
    ]
    unlabelled = placeholder_deployments(plan, "shipshape-system", on_demand_terms=[[]])[0]
    assert "nodeAffinity" not in unlabelled["spec"]["template"]["spec"]["affinity"]
    assert template["priorityClassName"] == priority_class()["metadata"]["name"]
    assert priority_class()["value"] < 0 and priority_class()["preemptionPolicy"] == "Never"
