"""Node updates that keep status parts leave the snapshot as a snapshot built anew from the nodes."""

from __future__ import annotations

import random
from typing import Any

from shipshape.emulator.scheduler.snapshot import ClusterSnapshot


def image(name: str, size: int) -> dict[str, Any]:
    return {"names": [f"docker.io/library/{name}:1", f"{name}:1"], "sizeBytes": size}


def test_kept_status_parts_match_a_fresh_snapshot() -> None:
    rng = random.Random(9)
    snapshot = ClusterSnapshot()
    nodes: dict[str, dict[str, Any]] = {}
    for _ in range(500):
        name = f"n{rng.randrange(5)}"
        before = nodes.get(name)
        status: dict[str, Any] = dict(before["status"]) if before is not None else {}
        roll = rng.random()
        if before is None or roll < 0.2:
            status["capacity"] = {"cpu": str(rng.choice([2, 4])), "memory": "8Gi", "pods": "110"}
        if before is None or roll < 0.4:
            status["allocatable"] = {"cpu": rng.choice(["1900m", "3900m"]), "memory": "7Gi"}
        if before is None or roll < 0.6:
            status["images"] = [image(rng.choice("abcdef"), rng.randrange(1, 100)) for _ in range(3)]
        status["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": str(roll)}]
        node = {"metadata": {"name": name, "labels": {"pool": "p"}}, "spec": {}, "status": status}
        if rng.random() < 0.05:
            snapshot.remove_node(name)
            nodes.pop(name, None)
            continue
        snapshot.set_node(node)
        nodes[name] = node
        fresh = ClusterSnapshot()
        for body in nodes.values():
            fresh.set_node(body)
        assert snapshot.image_nodes == fresh.image_nodes
        for other in nodes:
            got, want = snapshot.nodes[other], fresh.nodes[other]
            assert (got.allocatable, got.allowed_pods, got.images) == (
                want.allocatable,
                want.allowed_pods,
                want.images,
            )
