"""Spot fallback's decisions: which stuck pods are re-decided, and the shortage back-off."""

from __future__ import annotations

from typing import Any

from shipshape.controller.fallback import ShortageTracker, allowed_pools_of, fallback_candidates
from shipshape.controller.placement import Pool
from shipshape.kube.clock import rfc3339

from .builders import deployment, pod_of, replicaset
from .decision_cases import A, B, C


def unschedulable(pod: dict[str, Any], since: float, pools: list[Pool] | None) -> dict[str, Any]:
    pod["metadata"]["name"] = "web-x"
    decision = '{"capacityType": "spot", "pool": "", "reason": "spot-share", "id": "1"}'
    pod["metadata"]["annotations"] = {"spot.shipshape.dev/decision": decision}
    if pools:
        pod["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "node.kubernetes.io/capacity", "operator": "In", "values": ["spot"]},
                                {
                                    "key": "node.kubernetes.io/instance-type",
                                    "operator": "In",
                                    "values": [p.instance_type],
                                },
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [p.zone]},
                            ]
                        }
                        for p in pools
                    ]
                }
            }
        }
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": rfc3339(since),
            }
        ],
    }
    return pod


def test_fallback_after_the_threshold_and_return_after_the_backoff() -> None:
    dep = deployment("web", 3)
    rs = replicaset(dep)
    now = 1_800_000_000.0
    stuck = unschedulable(pod_of(rs), now - 200, [A, B])
    fresh = unschedulable(pod_of(rs), now - 30, [A])
    assert allowed_pools_of(stuck) == (A, B)
    found = fallback_candidates([stuck, fresh], now, 120.0, known_pools=[A, B, C])
    assert [(f.pod, f.pools) for f in found] == [("web-x", (A, B))]
    anywhere = unschedulable(pod_of(rs), now - 500, None)
    assert fallback_candidates([anywhere], now, 120.0, known_pools=[C, A])[0].pools == (C, A)

    tracker = ShortageTracker(retry_seconds=300, max_retry_seconds=1000)
    assert tracker.mark([A, B], now) == [A, B]
    assert tracker.mark([A], now + 10) == []  # already short: not marked twice
    assert tracker.shortages(now + 299) == {A, B}
    assert tracker.shortages(now + 301) == frozenset()  # spot is tried again
    tracker.mark([A], now + 301)
    assert tracker.shortages(now + 301 + 599) == {A}  # back-off doubled
    tracker.mark([A], now + 301 + 601)
    assert tracker.shortages(now + 301 + 601 + 999) == {A}  # capped at the maximum
    tracker.capacity_seen(A)
    assert tracker.shortages(now + 1000) == frozenset()
