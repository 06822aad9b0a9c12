"""The availability observer on hand-written watch events: integration over time, PDB floors, latency."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator import resources as r
from shipshape.emulator.store import Obj, Store
from shipshape.kube.clock import VirtualClock, rfc3339
from shipshape.simulate.observer import Observer, pdb_floor

T0 = 1_767_225_600.0


def _deployment(replicas: int) -> Obj:
    return {
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}},
        },
    }


def _pod(name: str, ready: bool, clock: VirtualClock, node: str = "n1") -> Obj:
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {"app": "web"},
            "creationTimestamp": rfc3339(clock.now()),
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1", "controller": True, "uid": "x"}],
        },
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _set(store: Store, rt: Any, obj: Obj) -> None:
    current = store.get(rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
    if current is None:
        store.create(rt, obj)
    else:
        merged = {**obj, "metadata": {**current["metadata"], **obj["metadata"]}}
        store.update(rt, merged, subresource="status" if rt is r.PODS else None)


@pytest.mark.parametrize(
    ("spec", "healthy"),
    [
        ({"minAvailable": "80%"}, 6),
        ({}, None),
        ({"minAvailable": "3"}, None),
        ({"maxUnavailable": "x%"}, None),
    ],
)
def test_a_pdb_floor_is_the_desired_healthy_count_or_none_for_an_unusable_budget(
    spec: Obj, healthy: int | None
) -> None:
    assert pdb_floor(spec, 7) == healthy


def test_minutes_at_zero_and_below_the_pdb_and_a_surge_does_not_raise_the_floor() -> None:
    clock = VirtualClock(T0)
    store = Store(clock)
    observer = Observer(store, clock, measure_from=T0 + 60)
    store.create(
        r.REPLICASETS,
        {
            "metadata": {
                "name": "web-1",
                "namespace": "shop",
                "ownerReferences": [{"kind": "Deployment", "name": "web", "controller": True, "uid": "d"}],
            },
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
        },
    )
    _set(store, r.DEPLOYMENTS, _deployment(3))
    store.create(
        r.PDBS,
        {
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"minAvailable": "60%", "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    for name in ("a", "b", "c"):
        _set(store, r.PODS, _pod(name, True, clock))
    clock.set(T0 + 120)  # measured from T0 + 60: one minute at 3 ready
    _set(store, r.PODS, _pod("a", False, clock))
    _set(store, r.PODS, _pod("b", False, clock))
    clock.set(T0 + 150)  # 30 s at 1 ready: below minAvailable 2, not zero
    _set(store, r.PODS, _pod("c", False, clock))
    clock.set(T0 + 165)  # 15 s at zero
    for name in ("a", "b"):
        _set(store, r.PODS, _pod(name, True, clock))
    # A surge of two: 60 % of 5 would be 3, but the floor stays 60 % of the declared 3, so the two
    # ready replicas that follow are not below it.
    _set(store, r.DEPLOYMENTS, _deployment(5))
    clock.set(T0 + 240)
    observer.finish(clock.now())
    track = observer.workloads[("shop", "Deployment", "web")]
    assert track.floor == 2 and track.pdb == "web"
    assert track.zero_seconds == pytest.approx(15.0)
    assert track.below_seconds == pytest.approx(45.0)
    assert track.measured_seconds == pytest.approx(180.0)
    assert track.min_ready == 0


def test_replacement_latency_runs_from_the_notice_to_a_new_pod_ready_elsewhere() -> None:
    clock = VirtualClock(T0)
    store = Store(clock)
    observer = Observer(store, clock, measure_from=T0)
    store.create(
        r.REPLICASETS,
        {
            "metadata": {
                "name": "web-1",
                "namespace": "shop",
                "ownerReferences": [{"kind": "Deployment", "name": "web", "controller": True, "uid": "d"}],
            },
        },
    )
    _set(store, r.DEPLOYMENTS, _deployment(1))
    store.create(r.NODES, {"metadata": {"name": "n1"}, "spec": {}})
    _set(store, r.PODS, _pod("old", True, clock, node="n1"))
    clock.set(T0 + 100)
    taint = {"key": "emulator.shipshape.dev/spot-interruption", "value": "terminate", "effect": "NoSchedule"}
    node = store.get(r.NODES, "", "n1")
    assert node is not None
    store.update(r.NODES, {**node, "spec": {"taints": [taint]}})
    clock.set(T0 + 130)
    _set(store, r.PODS, _pod("new", False, clock, node="n2"))
    clock.set(T0 + 145)
    _set(store, r.PODS, _pod("new", True, clock, node="n2"))
    assert observer.churn.notices == 1
    assert observer.latencies == [pytest.approx(45.0)]
    assert observer.unreplaced() == 0
