"""The interruption handler cordons and drains a noticed node through evictions that honour PDBs."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator.cloud import nodes
from shipshape.emulator.cloud.handler import evict_in_store
from shipshape.emulator.resources import PDBS, PODS
from shipshape.kube import errors

from .builders import SPOT_A, Env, add_running, scenario, start


def _handler_env(with_api: bool) -> Env:
    sc = scenario([{**SPOT_A, "initialSize": 1}], interruptions={"enabled": False, "handler": True})
    return start(sc, with_api=with_api)


def _pdb(env: Env, allowed: int) -> None:
    env.cluster.store.create(
        PDBS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {
                "observedGeneration": 1,
                "disruptionsAllowed": allowed,
                "currentHealthy": 2 + allowed,
                "desiredHealthy": 2,
                "expectedPods": 2 + allowed,
            },
        },
    )


def _terminating(env: Env, names: list[str]) -> list[str]:
    out = []
    for name in names:
        pod = env.cluster.store.get(PODS, "default", name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            out.append(name)
    return out


@pytest.mark.parametrize("with_api", [True, False], ids=["api-eviction", "store-fallback"])
def test_drain_on_notice_evicts_within_the_budget_and_skips_daemonsets(with_api: bool) -> None:
    env = _handler_env(with_api)
    (node,) = env.nodes_of("spot-a")
    web = [f"web-{i}" for i in range(3)]
    for name in web:
        add_running(env, name, node, cpu="100m", labels={"app": "web"})
    add_running(env, "batch", node, cpu="100m", labels={"app": "batch"})
    add_running(env, "agent", node, cpu="50m", owner_kind="DaemonSet")
    _pdb(env, allowed=1)

    env.cloud.interrupt(node=node, notice=120)
    env.cluster.engine.settle()
    current = env.node(node)
    assert current is not None
    assert current["spec"]["unschedulable"] is True
    keys = {t["key"] for t in current["spec"]["taints"]}
    assert {nodes.NTH_SPOT_TAINT, nodes.SPOT_INTERRUPTION_TAINT} <= keys
    assert _terminating(env, ["batch"]) == ["batch"]
    assert len(_terminating(env, web)) == 1  # the PDB allows one disruption
    assert _terminating(env, ["agent"]) == []
    # Refused evictions are retried (429) but the budget stays spent.
    env.run(60)
    assert len(_terminating(env, web)) == 1
    pdb = env.cluster.store.get(PDBS, "default", "web")
    assert pdb is not None and pdb["status"]["disruptionsAllowed"] == 0


def test_a_budget_freed_later_lets_the_retry_through() -> None:
    env = _handler_env(with_api=False)
    (node,) = env.nodes_of("spot-a")
    web = [f"web-{i}" for i in range(3)]
    for name in web:
        add_running(env, name, node, cpu="100m", labels={"app": "web"})
    _pdb(env, allowed=0)
    env.cloud.interrupt(node=node, notice=120)
    env.run(20)
    assert _terminating(env, web) == []

    def free(pdb: dict[str, Any]) -> None:
        pdb["status"]["disruptionsAllowed"] = 1

    env.cluster.store.mutate(PDBS, "default", "web", free, subresource="status")
    env.run(6)
    assert len(_terminating(env, web)) == 1


def test_without_the_handler_nothing_is_drained() -> None:
    env = start(scenario([{**SPOT_A, "initialSize": 1}], interruptions={"enabled": False}))
    (node,) = env.nodes_of("spot-a")
    add_running(env, "batch", node)
    env.cloud.interrupt(node=node, notice=120)
    env.run(60)
    assert _terminating(env, ["batch"]) == []
    current = env.node(node)
    assert current is not None and not current["spec"].get("unschedulable")


def test_store_eviction_refuses_pods_under_two_budgets() -> None:
    env = _handler_env(with_api=False)
    (node,) = env.nodes_of("spot-a")
    add_running(env, "web-0", node, labels={"app": "web"})
    _pdb(env, allowed=5)
    env.cluster.store.create(
        PDBS,
        {
            "metadata": {"name": "web-2", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1},
        },
    )
    error = evict_in_store(env.cluster.store, "default", "web-0")
    assert isinstance(error, errors.InternalError)
    assert _terminating(env, ["web-0"]) == []
