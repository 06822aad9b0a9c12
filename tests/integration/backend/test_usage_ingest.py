"""Usage reports through the API into the stored series, on SQLite and PostgreSQL: one report per
bucket, replays not counted twice, bad reports refused with nothing stored, and the efficiency
analysis turning the stored usage into a right-sizing recommendation, and GPU lines into an
idle-GPU one."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import repository as repo
from shipshape.backend.store.models import UsageGpuChunk
from shipshape.pricing.catalog import default_catalog
from tests.integration.backend.conftest import Harness, harness

T0 = 1_767_225_600
MIB = 2**20


def _objects() -> dict[str, list[dict[str, Any]]]:
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}}
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"web-7d9f-{s}",
                "namespace": "shop",
                "labels": {"pod-template-hash": "7d9f"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d9f", "controller": True}],
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "app", "image": "nginx", "resources": resources}],
            },
            "status": {"phase": "Running"},
        }
        for s in ("a", "b")
    ]
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "labels": {
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "node.kubernetes.io/capacity": "on-demand",
            },
        },
        "status": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {"cpu": "4", "memory": "16Gi"}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "generation": 2},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "app", "resources": resources}]}},
        },
    }
    return {"pods": pods, "nodes": [node], "deployments": [deployment]}


def _report(start: int, bucket: int = 300, cpu: float = 0.2) -> dict[str, Any]:
    return {
        "schema": "shipshape.dev/usage/v1",
        "bucket_start": datetime.fromtimestamp(start, UTC).isoformat(),
        "bucket_seconds": bucket,
        "taken_at": datetime.fromtimestamp(start + bucket, UTC).isoformat(),
        "pods": [
            {
                "namespace": "shop",
                "name": f"web-7d9f-{s}",
                "workload": {"kind": "Deployment", "name": "web"},
                "containers": [
                    {"name": "app", "samples": 10, "cpu_mean": cpu, "cpu_max": cpu, "memory_max": 256 * MIB}
                ],
            }
            for s in ("a", "b")
        ],
        "nodes": [{"name": "n1", "samples": 10, "cpu_mean": 0.6, "cpu_max": 0.7, "memory_max": 3 * 2**30}],
    }


async def _usage(h: Harness, api_key: str, cluster_id: str) -> list[dict[str, Any]]:
    response = await h.client.get(
        f"/api/v1/clusters/{cluster_id}/usage", headers={"Authorization": f"Bearer {api_key}"}
    )
    assert response.status_code == 200, response.text
    return list(response.json())


async def _until(what: str, check: Any, within: float = 20.0) -> Any:
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {within} s: {what}")


@pytest.mark.integration
async def test_usage_reports_are_stored_once_per_bucket_and_recommended_on(database_url: str) -> None:
    settings = BackendSettings(
        db=database_url, analysis_seconds=0, usage_analysis_seconds=0, usage_min_history_hours=0
    )
    async with harness(settings) as h:
        t = h.tenant("acme")
        snapshot = {
            "schema": "shipshape.dev/snapshot/v1",
            "sequence": 1,
            "taken_at": datetime.now(UTC).isoformat(),
            "objects": _objects(),
        }
        assert (await h.push(t.agent_token, snapshot, "seq-1")).status_code == 202
        await h.settled(t.cluster_id, 1)

        for i in range(12):
            answer = await h.push(t.agent_token, _report(T0 + 300 * i), f"usage-{T0 + 300 * i}")
            assert answer.status_code == 202 and not answer.json()["duplicate"], answer.text
        replay = await h.push(t.agent_token, _report(T0), f"usage-{T0}")
        assert replay.status_code == 202 and replay.json()["duplicate"]
        # refused, and nothing stored: a key that is not the bucket's, a bucket that does not divide
        # the step, a report that breaks the contract
        for body, key, problem in [
            (_report(T0 + 3600), "usage-1", "Idempotency-Key of its bucket"),
            (_report(T0 + 3600, bucket=120), f"usage-{T0 + 3600}", "does not divide"),
            ({**_report(T0 + 3600), "pods": [{"namespace": "shop"}]}, f"usage-{T0 + 3600}", "pods.0"),
        ]:
            refused = await h.push(t.agent_token, body, key)
            assert refused.status_code == 422 and problem in refused.text, refused.text
        as_user = await h.push(t.api_key, _report(T0 + 7200), f"usage-{T0 + 7200}")
        assert as_user.status_code == 403

        async def all_stored() -> list[dict[str, Any]] | None:
            rows = await _usage(h, t.api_key, t.cluster_id)
            return rows if rows and rows[0]["buckets"] == 12 else None

        (row,) = await _until("12 buckets stored", all_stored)
        assert (row["workload_kind"], row["workload_name"], row["container"]) == ("Deployment", "web", "app")
        assert row["samples"] == 12 * 20 and row["pods_last"] == 2  # the replay was not counted
        assert row["memory_max_bytes"] == 256 * MIB and row["cpu_max_cores"] == pytest.approx(0.2)
        assert row["first_sample_at"].startswith("2026-01-01T00:00:00")
        assert row["last_sample_at"].startswith("2026-01-01T01:00:00")

        headers = {"Authorization": f"Bearer {t.api_key}"}

        async def recommended() -> dict[str, Any] | None:
            found = await h.client.get(f"/api/v1/clusters/{t.cluster_id}/recommendations", headers=headers)
            return next((r for r in found.json() if r["kind"] == "right-sizing"), None)

        h.workers.analyze_usage_if_due(t.cluster_id, force=True)
        rec = await _until("a right-sizing recommendation", recommended)
        instruction = rec["recommendation"]["instruction"]
        assert instruction["containers"]["app"]["requests"] == {"cpu": "200m", "memory": "295Mi"}
        assert instruction["precondition"] == {"generation": 2, "resource_version": None}
        assert rec["monthly_savings_usd"] > 0 and rec["status"] == "open"

        # another tenant sees none of it
        other = h.tenant("other")
        denied = await h.client.get(
            f"/api/v1/clusters/{t.cluster_id}/usage", headers={"Authorization": f"Bearer {other.api_key}"}
        )
        assert denied.status_code == 404

        # retention: counted back from the cluster's newest sample (the cluster's clock, not ours)
        later = T0 + 48 * 3600
        moved = _report(later)
        moved["pods"] = [
            {**moved["pods"][0], "name": "api-0", "workload": {"kind": "StatefulSet", "name": "api"}}
        ]
        assert (await h.push(t.agent_token, moved, f"usage-{later}")).status_code == 202

        async def both() -> list[dict[str, Any]] | None:
            rows = await _usage(h, t.api_key, t.cluster_id)
            return rows if len(rows) == 2 else None

        await _until("the later report stored", both)
        with h.backend.transaction() as session:
            removed = repo.expire_usage(session, timedelta(hours=24))
        assert removed == 3  # web's chunk and summary, the node's old chunk
        (kept,) = await _usage(h, t.api_key, t.cluster_id)
        assert kept["workload_name"] == "api"


def _gpu_objects() -> dict[str, list[dict[str, Any]]]:
    """`infer` (2 replicas, 1 GPU each) on two spot g4dn.xlarge nodes (1 T4 each)."""
    objects = _objects()
    for pod in objects["pods"]:
        pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    for node in objects["nodes"]:
        node["metadata"]["labels"].update(
            {
                "node.kubernetes.io/instance-type": "g4dn.xlarge",
                "node.kubernetes.io/capacity": "spot",
                "nvidia.com/gpu.product": "Tesla-T4",
            }
        )
        node["status"]["capacity"]["nvidia.com/gpu"] = "1"
        node["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    second = {**objects["nodes"][0], "metadata": {**objects["nodes"][0]["metadata"], "name": "n2"}}
    objects["nodes"].append(second)
    objects["pods"][1]["spec"]["nodeName"] = "n2"
    return objects


def _gpu_report(start: int, activity: float) -> dict[str, Any]:
    body = _report(start)
    body["gpus"] = [
        {
            "namespace": "shop",
            "name": f"web-7d9f-{s}",
            "workload": {"kind": "Deployment", "name": "web"},
            "devices": 1,
            "model": "Tesla-T4",
            "samples": 10,
            "activity_mean": activity,
            "activity_max": activity,
        }
        for s in ("a", "b")
    ]
    return body


@pytest.mark.integration
async def test_gpu_lines_are_stored_per_workload_and_recommended_on(database_url: str) -> None:
    settings = BackendSettings(
        db=database_url, analysis_seconds=0, usage_analysis_seconds=0, usage_min_history_hours=0
    )
    async with harness(settings) as h:
        t = h.tenant("acme")
        snapshot = {
            "schema": "shipshape.dev/snapshot/v1",
            "sequence": 1,
            "taken_at": datetime.now(UTC).isoformat(),
            "objects": _gpu_objects(),
        }
        assert (await h.push(t.agent_token, snapshot, "seq-1")).status_code == 202
        await h.settled(t.cluster_id, 1)
        for i in range(12):
            answer = await h.push(t.agent_token, _gpu_report(T0 + 300 * i, 0.0), f"usage-{T0 + 300 * i}")
            assert answer.status_code == 202, answer.text
        bad = _gpu_report(T0 + 3600, 0.0)
        bad["gpus"][0]["activity_mean"] = 2.0
        refused = await h.push(t.agent_token, bad, f"usage-{T0 + 3600}")
        assert refused.status_code == 422 and "gpus.0.activity_mean" in refused.text

        async def all_stored() -> list[dict[str, Any]] | None:
            rows = await _usage(h, t.api_key, t.cluster_id)
            return rows if rows and rows[0]["buckets"] == 12 else None

        await _until("12 buckets stored", all_stored)
        with h.backend.transaction() as session:
            (chunk,) = session.scalars(select(UsageGpuChunk)).all()
            assert (chunk.workload_kind, chunk.workload_name, chunk.model) == (
                "Deployment",
                "web",
                "Tesla-T4",
            )

        headers = {"Authorization": f"Bearer {t.api_key}"}

        async def recommended() -> dict[str, Any] | None:
            found = await h.client.get(f"/api/v1/clusters/{t.cluster_id}/recommendations", headers=headers)
            return next((r for r in found.json() if r["kind"] == "gpu-idle"), None)

        h.workers.analyze_usage_if_due(t.cluster_id, force=True)
        rec = await _until("an idle-GPU recommendation", recommended)
        spot = default_catalog().spot_price("g4dn.xlarge", "us-east-1")
        assert spot is not None
        # by hand: 2 idle replicas x 1 GPU x the spot price of a one-GPU node x 730 h
        assert rec["monthly_savings_usd"] == pytest.approx(round(2 * spot * 730, 2))
        instruction = rec["recommendation"]["instruction"]
        assert instruction["type"] == "set-replicas" and instruction["replicas"] == 0
        assert instruction["precondition"] == {"generation": 2, "resource_version": None}
        assert rec["recommendation"]["evidence"]["hours_observed"] == 1.0

        # retention drops the GPU chunk with the rest
        later = T0 + 48 * 3600
        assert (await h.push(t.agent_token, _report(later), f"usage-{later}")).status_code == 202

        async def moved() -> list[dict[str, Any]] | None:
            rows = await _usage(h, t.api_key, t.cluster_id)
            return rows if rows and rows[0]["buckets"] == 13 else None

        await _until("the later report stored", moved)
        with h.backend.transaction() as session:
            repo.expire_usage(session, timedelta(hours=24))
            assert session.scalars(select(UsageGpuChunk)).all() == []
