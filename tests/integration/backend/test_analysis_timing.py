"""When the workers analyse a cluster: after a push that changed it, at most once per
`analysis_seconds`, and a change that lands inside that window is analysed when it ends."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shipshape.backend import analysis, service
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import repository as repo
from shipshape.backend.worker_health import WorkerMetrics
from shipshape.backend.workers import analysis_wait
from tests.integration.backend.conftest import Harness, Tenant, delta, harness

Obj = dict[str, Any]


def _node(name: str, capacity: str) -> Obj:
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "node.kubernetes.io/capacity": capacity,
                "node.kubernetes.io/instance-type": "m5.xlarge",
            },
        },
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}},
    }


def _on_demand_workload(name: str) -> list[tuple[str, str, Obj]]:
    """A Deployment of 3 replicas wholly on the on-demand node: what spot adoption recommends."""
    owner = {"kind": "Deployment", "name": name, "controller": True}
    objects: list[tuple[str, str, Obj]] = [
        ("ADDED", "deployments", {"metadata": {"name": name, "namespace": "shop"}, "spec": {"replicas": 3}}),
        (
            "ADDED",
            "replicasets",
            {"metadata": {"name": f"{name}-1", "namespace": "shop", "ownerReferences": [owner]}},
        ),
    ]
    for i in range(3):
        pod = {
            "metadata": {
                "name": f"{name}-1-{i}",
                "namespace": "shop",
                "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-1", "controller": True}],
            },
            "spec": {
                "nodeName": "od-0",
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
            },
            "status": {"phase": "Running"},
        }
        objects.append(("ADDED", "pods", pod))
    return objects


def _snapshot_with(name: str) -> Obj:
    objects: dict[str, list[Obj]] = {"nodes": [_node("od-0", "on-demand"), _node("spot-0", "spot")]}
    for _, kind, obj in _on_demand_workload(name):
        objects.setdefault(kind, []).append(obj)
    return {
        "schema": "shipshape.dev/snapshot/v1",
        "sequence": 1,
        "taken_at": datetime.now(UTC).isoformat(),
        "objects": objects,
    }


async def _recommended(h: Harness, t: Tenant) -> set[str]:
    answer = await h.client.get(
        f"/api/v1/clusters/{t.cluster_id}/recommendations", headers={"Authorization": f"Bearer {t.api_key}"}
    )
    assert answer.status_code == 200, answer.text
    return {r["recommendation"]["target"]["name"] for r in answer.json()}


async def _until_recommended(h: Harness, t: Tenant, name: str, within: float) -> float:
    began = asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() - began < within:
        if name in await _recommended(h, t):
            return asyncio.get_running_loop().time() - began
        await asyncio.sleep(0.05)
    raise AssertionError(f"no recommendation for {name} within {within} s")


@pytest.mark.integration
async def test_a_change_inside_the_analysis_window_is_analysed_when_it_ends(sqlite_url: str) -> None:
    async with harness(BackendSettings(db=sqlite_url, analysis_seconds=2.0)) as h:
        t = h.tenant("acme")
        assert (await h.push(t.agent_token, _snapshot_with("web"))).status_code == 202
        await _until_recommended(h, t, "web", 10.0)
        # Right after that analysis: this change falls inside the window, and no push follows it.
        assert (await h.push(t.agent_token, delta(2, 1, _on_demand_workload("api")))).status_code == 202
        await h.settled(t.cluster_id, 2)
        await _until_recommended(h, t, "api", 8.0)
        assert h.workers.analyses == 2


@pytest.mark.integration
@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no per-thread nice values here")
async def test_analyses_run_at_their_own_nice_value_and_applies_at_the_processs(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An analysis gives way to the applies when the CPUs are busy: its thread alone is niced."""
    process_nice = os.getpriority(os.PRIO_PROCESS, 0)
    wanted = min(19, process_nice + 5)
    seen: dict[str, set[int]] = {"analysis": set(), "apply": set()}

    def watched(what: str, original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen[what].add(os.getpriority(os.PRIO_PROCESS, 0))  # on Linux: the calling thread's
            return original(*args, **kwargs)

        return call

    monkeypatch.setattr(analysis, "analyze_cluster", watched("analysis", analysis.analyze_cluster))
    monkeypatch.setattr(repo, "apply_cluster", watched("apply", repo.apply_cluster))
    async with harness(BackendSettings(db=sqlite_url, analysis_nice=wanted)) as h:
        t = h.tenant("acme")
        assert (await h.push(t.agent_token, _snapshot_with("web"))).status_code == 202
        await _until_recommended(h, t, "web", 10.0)
    assert seen == {"analysis": {wanted}, "apply": {process_nice}}
    assert os.getpriority(os.PRIO_PROCESS, 0) == process_nice


@pytest.mark.integration
async def test_worker_processes_analyse_each_cluster_state_once(database_url: str) -> None:
    """A second worker process (sharing the database, not the memory) neither repeats an analysis of
    the state the first analysed, nor analyses inside the first one's window: it looks again when
    that window ends."""
    async with harness(BackendSettings(db=database_url, analysis_seconds=60.0)) as h:
        other = service.workers_for(h.backend, WorkerMetrics())
        t = h.tenant("acme")
        assert (await h.push(t.agent_token, _snapshot_with("web"))).status_code == 202
        await _until_recommended(h, t, "web", 10.0)
        assert h.workers.analyses == 1
        assert not await asyncio.to_thread(other.analyze_if_due, t.cluster_id)
        assert other.analyses == 0 and t.cluster_id not in other._deferred  # nothing new to analyse

        assert (await h.push(t.agent_token, delta(2, 1, _on_demand_workload("api")))).status_code == 202
        await h.settled(t.cluster_id, 2)
        began = time.monotonic()
        assert not await asyncio.to_thread(other.analyze_if_due, t.cluster_id)
        # Due when the first process's window ends, not now.
        assert began + 50 < other._deferred[t.cluster_id] < began + 61
        assert other.analyses == 0 and h.workers.analyses == 1

        assert await asyncio.to_thread(other.analyze_if_due, t.cluster_id, True)
        assert "api" in await _recommended(h, t)


def test_analysis_wait() -> None:
    at = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
    state = repo.AnalysisState("org", applied_sequence=5, analyzed_at=at, analyzed_sequence=4)
    assert analysis_wait(state, at + timedelta(seconds=4), 10.0) == 6.0
    assert analysis_wait(state, at + timedelta(seconds=12), 10.0) == 0.0
    assert analysis_wait(replace(state, analyzed_sequence=5), at + timedelta(seconds=12), 10.0) is None
    assert analysis_wait(replace(state, analyzed_at=None, analyzed_sequence=None), at, 10.0) == 0.0
