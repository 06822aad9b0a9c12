"""Workload states and nodes shared by the tests of the loops' pure decision modules."""

from __future__ import annotations

from typing import Any

from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType, WorkloadKind, WorkloadPolicy
from shipshape.controller.state import PodState, WorkloadState

from .builders import node

A = Pool("m5.large", "us-east-1a")
B = Pool("m5.large", "us-east-1b")
C = Pool("c5.large", "us-east-1a")
POLICY = WorkloadPolicy(WorkloadKind.DEPLOYMENT, on_demand_base=2, spot_percentage=75, max_pool_share=1.0)
OD = CapacityType.ON_DEMAND
SPOT = CapacityType.SPOT


def pods(od: int, spot_pools: list[Pool], ready: bool = True) -> tuple[PodState, ...]:
    made = [PodState(f"od-{i}", OD, None, f"od-node-{i}", ready) for i in range(od)]
    made += [PodState(f"spot-{i}", SPOT, pool, f"{pool}-n{i}", ready) for i, pool in enumerate(spot_pools)]
    return tuple(made)


def state(
    members: tuple[PodState, ...],
    replicas: int | None = None,
    floor: int | None = None,
    policy: WorkloadPolicy = POLICY,
) -> WorkloadState:
    n = len(members) if replicas is None else replicas
    return WorkloadState(
        WorkloadKind.DEPLOYMENT, "shop", "web", n, policy, members, floor=n - 1 if floor is None else floor
    )


def split_of(members: list[PodState]) -> tuple[int, int]:
    return sum(1 for p in members if p.capacity is OD), sum(1 for p in members if p.capacity is SPOT)


def cluster_nodes() -> list[dict[str, Any]]:
    return [
        node("a1", "spot", A.instance_type, A.zone),
        node("a2", "spot", A.instance_type, A.zone),
        node("c1", "spot", C.instance_type, C.zone),
        node("b1", "spot", B.instance_type, B.zone),
        node("od1", "on-demand", "m5.large", "us-east-1a"),
    ]


def workloads_on_nodes() -> list[WorkloadState]:
    web = WorkloadState(
        WorkloadKind.DEPLOYMENT,
        "shop",
        "web",
        4,
        POLICY,
        (
            PodState("w0", OD, None, "od1", True, cpu_millis=500, memory_bytes=2**29),
            PodState("w1", SPOT, A, "a1", True, cpu_millis=500, memory_bytes=2**29),
            PodState("w2", SPOT, A, "a2", True, cpu_millis=500, memory_bytes=2**29),
            PodState("w3", SPOT, B, "b1", True, cpu_millis=500, memory_bytes=2**29),
        ),
        floor=3,
    )
    lone = WorkloadState(
        WorkloadKind.DEPLOYMENT,
        "shop",
        "lone",
        1,
        WorkloadPolicy(WorkloadKind.DEPLOYMENT),
        (PodState("l0", SPOT, C, "c1", True, cpu_millis=250, memory_bytes=2**28),),
        floor=0,
    )
    db = WorkloadState(
        WorkloadKind.STATEFULSET,
        "shop",
        "db",
        2,
        WorkloadPolicy(WorkloadKind.STATEFULSET),
        (
            PodState("db-0", OD, None, "od1", True, 0),
            PodState("db-1", SPOT, A, "a2", True, 1, cpu_millis=1000, memory_bytes=2**30),
        ),
        floor=1,
    )
    return [web, lone, db]


def by_name(nodes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Nodes by name, as `ClusterState.nodes_by_name` hands them to the decisions."""
    return {str(n["metadata"]["name"]): n for n in nodes}
