"""NodeFingerprints gives the answers of comparing full `node_fingerprint`s, version after version."""

from __future__ import annotations

import random
from typing import Any

from shipshape.emulator.controllers.daemonset import NodeFingerprints, node_fingerprint
from shipshape.emulator.resources import NODES
from shipshape.emulator.store import Store
from shipshape.kube.clock import VirtualClock


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"pool": "a"}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_incremental_fingerprints_match_full_recomputation() -> None:
    rng = random.Random(7)
    store = Store(VirtualClock())
    names = [f"n{i}" for i in range(4)]
    for name in names:
        store.create(NODES, node(name))
    incremental = NodeFingerprints()
    full: dict[str, Any] = {}
    for _ in range(600):
        name = rng.choice(names)
        roll = rng.random()
        if roll < 0.5:  # a status write: labels and spec shared with the version before
            ready = rng.choice(["True", "True", "False", "Unknown"])
            status = {"conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": str(roll)}]}
            store.write_status(NODES, "", name, status)
        elif roll < 0.7:

            def relabel(new: dict[str, Any]) -> None:
                new["metadata"]["labels"]["pool"] = rng.choice("ab")

            store.mutate(NODES, "", name, relabel)
        elif roll < 0.9:

            def taint(new: dict[str, Any]) -> None:
                new["spec"]["taints"] = rng.choice([[], [{"key": "k", "effect": "NoSchedule"}]])
                new["spec"]["unschedulable"] = rng.random() < 0.5

            store.mutate(NODES, "", name, taint)
        obj = store.get(NODES, "", name)
        assert obj is not None
        fingerprint = node_fingerprint(obj)
        expected = full.get(name) != fingerprint
        full[name] = fingerprint
        assert incremental.changed(obj) == expected
        if rng.random() < 0.05:
            incremental.forget(name)
            full.pop(name)


def test_remembered_should_run_answers_match_fresh_ones() -> None:
    from shipshape.emulator.controllers.daemonset import DaemonSetController, should_run

    rng = random.Random(17)
    store = Store(VirtualClock())
    names = [f"n{i}" for i in range(4)]
    for name in names:
        store.create(NODES, node(name))
    ds: dict[str, Any] = {
        "metadata": {"name": "agent", "namespace": "default", "uid": "u1", "resourceVersion": "1"},
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": {"pool": "a"},
                    "tolerations": [{"key": "ok", "operator": "Exists"}],
                    "containers": [{"name": "c", "image": "agent"}],
                }
            }
        },
    }
    controller = DaemonSetController()
    for _ in range(600):
        name = rng.choice(names)
        roll = rng.random()
        if roll < 0.5:
            store.write_status(NODES, "", name, {"conditions": [{"type": "Ready", "status": str(roll)}]})
        elif roll < 0.75:

            def relabel(new: dict[str, Any]) -> None:
                new["metadata"]["labels"]["pool"] = rng.choice("ab")

            store.mutate(NODES, "", name, relabel)
        else:  # a spec write that keeps the labels object
            current = store.get(NODES, "", name)
            assert current is not None
            key = rng.choice(["ok", "bad"])
            taints = rng.choice([[], [{"key": key, "effect": "NoSchedule"}]])
            store.update(
                NODES,
                {**current, "metadata": {**current["metadata"]}, "spec": {"taints": taints}},
                copy=False,
            )
        for other in names:
            obj = store.get(NODES, "", other)
            assert obj is not None
            assert controller._should_run(ds, obj) == should_run(ds, obj)
