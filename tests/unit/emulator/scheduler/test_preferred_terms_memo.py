"""The scheduler's compiled preferred node affinity terms are those compiled anew for each pod."""

from __future__ import annotations

import random
from typing import Any

from shipshape.emulator.scheduler.snapshot import pod_info
from shipshape.kube import scheduling


def pod(rng: random.Random) -> dict[str, Any]:
    preferred = [
        {
            "weight": rng.choice([0, 1, 5, 50]),
            "preference": {
                "matchExpressions": [
                    {"key": rng.choice(["zone", "pool"]), "operator": "In", "values": [rng.choice("ab")]}
                ]
            },
        }
        for _ in range(rng.randrange(3))
    ]
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "nginx"}]}
    if rng.random() < 0.8:
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def test_memoized_terms_equal_fresh_compilation() -> None:
    rng = random.Random(3)
    for _ in range(300):
        body = pod(rng)
        assert pod_info(body).preferred_node_terms == scheduling.preferred_terms(body)
