"""`autoscaler.node_facts` lent an older version's facts equals the facts read afresh, over random
node versions that share some of their parts with the version before (as status reports do)."""

from __future__ import annotations

import copy
import random
from typing import Any

from shipshape.emulator.cloud import nodes
from shipshape.emulator.cloud.autoscaler import node_facts
from shipshape.emulator.cloud.scaledown import SCALE_DOWN_DISABLED


def _changed(node: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A new version of the node: parts replaced at random, the rest shared with `node`."""
    md, spec, status = node["metadata"], node["spec"], node["status"]
    new_md = {**md}
    new_spec = spec
    new_status = {**status}
    part = rng.randrange(6)
    if part == 0:
        new_md["labels"] = {**md.get("labels", {}), "x": str(rng.randrange(3))}
    elif part == 1:
        taints = [{"key": nodes.TO_BE_DELETED_TAINT, "effect": "NoSchedule"}] if rng.random() < 0.5 else []
        new_spec = {**spec, "taints": taints, "unschedulable": rng.random() < 0.3}
    elif part == 2:
        new_md["annotations"] = {SCALE_DOWN_DISABLED: rng.choice(["true", "false"])}
    elif part == 3:
        new_status["allocatable"] = {"cpu": rng.choice(["1930m", "3920m"]), "memory": "7Gi", "pods": "29"}
    ready = rng.choice(["True", "False", "Unknown"])
    new_status["conditions"] = [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready", "status": ready, "lastHeartbeatTime": str(rng.random())},
    ]
    return {**node, "metadata": new_md, "spec": new_spec, "status": new_status}


def test_facts_lent_by_the_version_before_equal_facts_read_afresh() -> None:
    rng = random.Random(14)
    node: dict[str, Any] = {
        "metadata": {"name": "n1", "labels": {"pool": "a"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"}, "conditions": []},
    }
    facts = node_facts(node)
    for _ in range(3000):
        node = _changed(node, rng)
        kept = node_facts(node, facts)
        fresh = node_facts(copy.deepcopy(node))
        assert kept.obj is node
        assert (kept.allocatable, kept.static_key, kept.ready, kept.to_be_deleted) == (
            fresh.allocatable,
            fresh.static_key,
            fresh.ready,
            fresh.to_be_deleted,
        )
        assert (kept.unschedulable, kept.disabled) == (fresh.unschedulable, fresh.disabled)
        facts = kept
