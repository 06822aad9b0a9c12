"""`podutil.rank_for_deletion` reads each pod once; it must order pods exactly as upstream's
`ActivePodsWithRanks.Less` read from the pods at every comparison (the reference below)."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Mapping
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.kube.clock import rfc3339

NOW = 1_800_000_000.0


def _reference_less(pa: Mapping[str, Any], ca: int, pb: Mapping[str, Any], cb: int, now: float) -> bool:
    node_a = (pa.get("spec") or {}).get("nodeName") or ""
    node_b = (pb.get("spec") or {}).get("nodeName") or ""
    if node_a != node_b and (not node_a or not node_b):
        return not node_a
    order = {"Pending": 0, "Unknown": 1, "Running": 2}
    ord_a, ord_b = order.get(podutil.phase(pa), 0), order.get(podutil.phase(pb), 0)
    if ord_a != ord_b:
        return ord_a < ord_b
    if podutil.is_ready(pa) != podutil.is_ready(pb):
        return not podutil.is_ready(pa)
    if podutil.deletion_cost(pa) != podutil.deletion_cost(pb):
        return podutil.deletion_cost(pa) < podutil.deletion_cost(pb)
    if ca != cb:
        return ca > cb
    uid_a, uid_b = str(pa["metadata"].get("uid", "")), str(pb["metadata"].get("uid", ""))
    if podutil.is_ready(pa) and podutil.is_ready(pb):
        since_a, since_b = podutil.ready_since(pa), podutil.ready_since(pb)
        if since_a != since_b:
            if since_a is None or since_b is None:
                return since_a is None
            diff = podutil._log_rank(since_a, now) - podutil._log_rank(since_b, now)
            return uid_a < uid_b if diff == 0 else diff < 0
    if podutil.max_restarts(pa) != podutil.max_restarts(pb):
        return podutil.max_restarts(pa) > podutil.max_restarts(pb)
    created_a, created_b = podutil.creation_time(pa), podutil.creation_time(pb)
    if created_a != created_b:
        if not created_a or not created_b:
            return not created_a
        diff = podutil._log_rank(created_a, now) - podutil._log_rank(created_b, now)
        return uid_a < uid_b if diff == 0 else diff < 0
    return False


def _reference_rank(
    pods: list[dict[str, Any]], related: Iterable[Mapping[str, Any]], now: float
) -> list[Any]:
    per_node: dict[str, int] = {}
    for pod in related:
        if podutil.is_active(pod):
            node = (pod.get("spec") or {}).get("nodeName") or ""
            per_node[node] = per_node.get(node, 0) + 1
    ranked = [(p, per_node.get((p.get("spec") or {}).get("nodeName") or "", 0)) for p in pods]

    def compare(a: tuple[dict[str, Any], int], b: tuple[dict[str, Any], int]) -> int:
        if _reference_less(a[0], a[1], b[0], b[1], now):
            return -1
        return 1 if _reference_less(b[0], b[1], a[0], a[1], now) else 0

    return [p for p, _ in sorted(ranked, key=functools.cmp_to_key(compare))]


def _pod(rng: random.Random, i: int) -> dict[str, Any]:
    ready = rng.random() < 0.7
    conditions = []
    if rng.random() < 0.9:
        since = NOW - rng.choice([0, 1, 2, 30, 31, 600, 4000, 4100, 90000])
        conditions.append(
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": rfc3339(since)}
        )
    metadata: dict[str, Any] = {"name": f"p{i}", "namespace": "ns", "uid": f"{rng.randrange(10**6):06d}"}
    if rng.random() < 0.9:
        metadata["creationTimestamp"] = rfc3339(NOW - rng.choice([5, 6, 100, 3600, 3700, 86400]))
    cost = rng.choice([None, None, "0", "5", "-3", "x", str(2**31)])
    if cost is not None:
        metadata["annotations"] = {podutil.POD_DELETION_COST: cost}
    if rng.random() < 0.1:
        metadata["deletionTimestamp"] = rfc3339(NOW)
    spec: dict[str, Any] = {}
    if rng.random() < 0.85:
        spec["nodeName"] = f"n{rng.randrange(6)}"
    status: dict[str, Any] = {
        "phase": rng.choice(["Pending", "Running", "Running", "Unknown", "Succeeded"]),
        "conditions": conditions,
    }
    if rng.random() < 0.5:
        status["containerStatuses"] = [{"restartCount": rng.choice([0, 0, 1, 3])}]
    return {"metadata": metadata, "spec": spec, "status": status}


def test_rank_for_deletion_matches_the_comparison_read_from_the_pods() -> None:
    rng = random.Random(14)
    for _ in range(2000):
        pods = [_pod(rng, i) for i in range(rng.randrange(1, 30))]
        related = pods + [_pod(rng, 100 + i) for i in range(rng.randrange(0, 10))]
        now = NOW + rng.choice([0.0, 0.5, 7.0])
        expected = _reference_rank(pods, related, now)
        assert [p["metadata"]["name"] for p in podutil.rank_for_deletion(pods, related, now)] == [
            p["metadata"]["name"] for p in expected
        ]
