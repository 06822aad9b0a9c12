"""The webhook and the loops' decisions together, over the cache, as the loops will drive them."""

from __future__ import annotations

import base64
import json
from collections import Counter
from typing import Any

import jsonpatch

from shipshape.controller.deletion_cost import removal_order
from shipshape.controller.fallback import ShortageTracker, fallback_candidates
from shipshape.controller.placement import Pool, desired_split
from shipshape.controller.policy import resolve_policy
from shipshape.controller.rebalance import Direction, next_move
from shipshape.controller.state import read_decision
from shipshape.controller.webhook.admission import PodPlacer
from shipshape.kube.clock import rfc3339

from .builders import Harness, deployment, namespace, node, pod_of, replicaset, review

A = Pool("m5.large", "us-east-1a")
B = Pool("m5.large", "us-east-1b")
NODE_OF = {None: "od-1", str(A): "a-1", str(B): "b-1"}


class Cluster:
    """Just enough of a cluster: the ReplicaSet creates pods through the webhook, pods bind and get ready."""

    def __init__(self, replicas: int, annotations: dict[str, str], pools: list[Pool]) -> None:
        self.h = Harness()
        self.annotations = {"spot.shipshape.dev/enabled": "true", **annotations}
        self.dep = deployment("web", replicas, self.annotations)
        self.rs = replicaset(self.dep)
        self.h.add(namespace("shop"), self.dep, self.rs, node("od-1", "on-demand"))
        for pool in pools:
            self.h.add(node(NODE_OF[str(pool)], "spot", pool.instance_type, pool.zone))
        self.serial = 0

    def create(self, *, schedulable: bool = True) -> dict[str, Any]:
        pod = pod_of(self.rs)
        answer = self.h.placer.review(review(pod))["response"]
        pod = dict(jsonpatch.apply_patch(pod, json.loads(base64.b64decode(answer["patch"]))))
        self.serial += 1
        pod["metadata"]["name"] = f"web-abc12-{self.serial}"
        decision = read_decision(pod)
        assert decision is not None
        if schedulable or decision.capacity_type == "on-demand":
            where = NODE_OF[decision.pool or None] if decision.capacity_type == "spot" else "od-1"
            pod["spec"]["nodeName"] = where
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        else:
            pod["status"] = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "lastTransitionTime": rfc3339(self.h.clock.now()),
                    }
                ],
            }
        self.h.cache.apply({"type": "ADDED", "object": pod})
        return pod

    def delete(self, name: str) -> None:
        pod = self.h.cache.get("Pod", "shop", name)
        assert pod is not None
        self.h.cache.apply({"type": "DELETED", "object": pod})

    def scale(self, replicas: int) -> None:
        self.dep = deployment("web", replicas, self.annotations)
        self.h.add(self.dep)

    def split(self) -> tuple[int, int]:
        ref = self.h.cache.workload_of(pod_of(self.rs))
        assert ref is not None
        counts = self.h.cache.group_counts(ref.group, self.h.clock.now())
        return counts.on_demand, counts.spot

    def state(self) -> Any:
        ref = self.h.cache.workload_of(pod_of(self.rs))
        assert ref is not None
        policy = resolve_policy(ref.kind, ref.annotations, {}, self.h.config).policy
        assert policy is not None
        return self.h.cache.workload_state(ref, policy)


def test_split_holds_across_scale_down_and_up() -> None:
    policy_notes = {"spot.shipshape.dev/on-demand-base": "2", "spot.shipshape.dev/spot-percentage": "75"}
    cluster = Cluster(10, policy_notes, [A, B])
    for _ in range(10):
        cluster.create()
    assert cluster.split() == (4, 6)

    state = cluster.state()
    view = cluster.h.cache.placement_view(cluster.h.clock.now(), cluster.h.risk)
    order = removal_order(state.pods, state.policy, view.pool_risk)
    costs = {name: rank for rank, name in enumerate(order)}
    cluster.scale(6)
    for name in sorted(costs, key=costs.__getitem__)[:4]:  # the ReplicaSet deletes the cheapest first
        cluster.delete(name)
    target = desired_split(6, state.policy)
    assert cluster.split() == (target.on_demand, target.spot)
    spot_pools = Counter(p.pool for p in cluster.state().pods if p.pool is not None)
    assert max(spot_pools.values()) - min(spot_pools.values()) <= 1

    cluster.scale(12)
    for _ in range(6):
        cluster.create()
    target = desired_split(12, state.policy)
    assert cluster.split() == (target.on_demand, target.spot)


def test_spot_shortage_falls_back_to_on_demand_and_returns() -> None:
    cluster = Cluster(4, {"spot.shipshape.dev/on-demand-base": "1"}, [A])
    tracker = ShortageTracker(retry_seconds=300, max_retry_seconds=3600)
    h = cluster.h
    h.placer = PodPlacer(h.cache, h.config, h.risk, h.clock, h.metrics, shortages=tracker.shortages)
    pending = [cluster.create(schedulable=False) for _ in range(4)]
    assert sum(1 for p in pending if "nodeName" not in p["spec"]) == 3  # three spot pods find no capacity

    h.clock.advance(h.config.fallback_after_seconds + 1)
    found = fallback_candidates(h.cache.objects("Pod"), h.clock.now(), h.config.fallback_after_seconds, [A])
    assert len(found) == 3
    for fallback in found:  # the loop: mark the shortage, delete the pod, its ReplicaSet recreates it
        tracker.mark(fallback.pools, h.clock.now())
        cluster.delete(fallback.pod)
    replacements = [cluster.create() for _ in range(3)]
    assert {getattr(read_decision(p), "reason", None) for p in replacements} == {"spot-fallback"}
    assert cluster.split() == (4, 0)
    assert (
        next_move(
            cluster.state(), h.cache.placement_view(h.clock.now(), h.risk, tracker.shortages(h.clock.now()))
        )
        is None
    )

    h.clock.advance(301)  # the back-off ends: spot is tried again, one pod at a time
    for _ in range(3):
        view = h.cache.placement_view(h.clock.now(), h.risk, tracker.shortages(h.clock.now()))
        move = next_move(cluster.state(), view)
        assert move is not None and move.direction is Direction.TO_SPOT
        cluster.delete(move.pod)
        cluster.create()
    assert cluster.split() == (1, 3)
    view = h.cache.placement_view(h.clock.now(), h.risk, tracker.shortages(h.clock.now()))
    assert next_move(cluster.state(), view) is None
