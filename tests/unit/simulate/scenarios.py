"""Small scenarios for the simulator's tests: a few nodes, a few workloads, one pool reclaim."""

from __future__ import annotations

from typing import Any

from shipshape.emulator.scenario import Scenario, parse
from tests.manifests import deployment


def _deployment(name: str, replicas: int, cpu: str = "250m") -> dict[str, Any]:
    metadata = {"namespace": "shop", "labels": {"app": name}}
    return deployment(
        name, replicas, cpu=cpu, memory="256Mi", grace_seconds=5, container=name, metadata=metadata
    )


def _pdb(name: str, min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}},
    }


def small_scenario(*, reclaim_at: str | None = "20m", seed: int = 7) -> Scenario:
    """Two spot pools (one per zone) and an on-demand pool; web (6, PDB 5), api (4) and a singleton."""
    pool = {"cpu": "4", "memory": "16Gi", "instanceType": "m5.xlarge", "maxSize": 10}
    data: dict[str, Any] = {
        "name": "small",
        "region": "us-east-1",
        "seed": seed,
        "pools": [
            # Two nodes per spot pool at all times (the webhook packs pods onto fewer nodes, and the
            # autoscaler would remove the emptied one), so that the pool reclaim takes two nodes.
            {
                **pool,
                "name": "spot-a",
                "zone": "us-east-1a",
                "capacityType": "spot",
                "initialSize": 2,
                "minSize": 2,
            },
            {
                **pool,
                "name": "spot-b",
                "zone": "us-east-1b",
                "capacityType": "spot",
                "initialSize": 2,
                "minSize": 2,
            },
            {
                **pool,
                "name": "od-a",
                "zone": "us-east-1a",
                "capacityType": "on-demand",
                "initialSize": 2,
                "minSize": 1,
            },
        ],
        "nodeBoot": {"jitter": 0.1},
        # Empty nodes only: a consolidation drain during the reclaim would create pods of the same
        # workloads after the notice, which the observer counts as replacements.
        "autoscaler": {
            "enabled": True,
            "scaleUpAfter": "10s",
            "scaleDownUnneeded": "10m",
            "scaleDownEmptyOnly": True,
        },
        "interruptions": {"enabled": True, "notice": "2m", "rateMultiplier": 0.0},
        "namespaces": ["shop"],
        "objects": [
            _deployment("web", 6),
            _pdb("web", 5),
            _deployment("api", 4),
            _deployment("checkout", 1),
        ],
    }
    if reclaim_at is not None:
        data["timeline"] = [{"at": reclaim_at, "action": "interrupt", "pool": "spot-a", "notice": "2m"}]
    return parse(data)
