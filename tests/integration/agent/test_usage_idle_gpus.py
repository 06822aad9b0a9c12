"""Idle GPUs from the cluster to a change in the cluster, on the embedded defaults: the emulator's
usage model gives `idle` (one T4 at 0 % engine activity) and `busy` (one at 70 %) on spot
g4dn.xlarge nodes; a real Prometheus holds their dcgm-exporter series (backfilled by promtool from
the same model, covering the emulated hours the test runs through); the agent reads metrics.k8s.io
in 60-second buckets and, as each closes, asks Prometheus for the bucket's GPU activity;
`shipshape backend` stores it and recommends; a user approves; the agent scales `idle` to 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from shipshape.emulator import usage_history
from shipshape.emulator.resources import DEPLOYMENTS, NODES
from shipshape.emulator.scenario import parse
from shipshape.sources.prometheus import PrometheusSettings, PrometheusSource
from tests.integration.agent.backend_process import FAST_USAGE, bootstrap, fast_usage_backend, running_agent
from tests.integration.efficiency.prometheus_server import backfill, serving
from tests.integration.emulator.served_cluster import ready_pods, scenario_doc, serve_cluster
from tests.unit.emulator.usage.gpu_scenario import GPU_POOL, MODEL, SPOT_PRICE, USAGE, gpu_deployment

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("prometheus")]

HISTORY_BACK = 600.0  # emulated seconds of dcgm history before the agent starts
HISTORY_AHEAD = 3 * 3600.0  # and after (the test runs through well under an hour of it at 40x)
SAMPLE = 15.0


@pytest.mark.integration
def test_an_idle_gpu_becomes_a_scale_down_that_the_agent_applies(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'backend.db'}"
    key, cluster_id, token = bootstrap(db)
    user = {"Authorization": f"Bearer {key}"}
    doc = scenario_doc()
    doc["pools"] = [*doc["pools"], {**GPU_POOL, "maxSize": 2}]
    doc["usage"] = [*USAGE, *doc["usage"]]
    with serve_cluster(tmp_path, parse(doc, "idle GPUs")) as cluster:
        for name in ("idle", "busy"):
            cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(gpu_deployment(name)))

        def gpu_pods() -> list[dict[str, Any]] | None:
            pods = [
                p for p in ready_pods(cluster.pods()) if p["metadata"]["name"].startswith(("idle-", "busy-"))
            ]
            return pods if len(pods) == 2 else None

        pods = cluster.wait("both GPU pods running", gpu_pods, 300)
        gpu_nodes = sorted({p["spec"]["nodeName"] for p in pods})
        model = cluster.served.cluster.services["usage"]
        now = cluster.now()
        times = [now - HISTORY_BACK + SAMPLE * i for i in range(int((HISTORY_BACK + HISTORY_AHEAD) / SAMPLE))]
        om = cluster.call(lambda: usage_history.openmetrics(model, pods, gpu_nodes, times))
        history = tmp_path / "history"
        history.mkdir()
        with (
            serving(backfill(om, history), history) as prometheus,
            PrometheusSource(PrometheusSettings(prometheus, timeout_seconds=10)) as source,
            fast_usage_backend(db, tmp_path) as url,
            running_agent(
                cluster,
                url,
                token,
                tmp_path / "spool",
                FAST_USAGE,
                gpu=source,
            ),
        ):

            def recommended() -> dict[str, Any] | None:
                found = httpx.get(f"{url}/api/v1/clusters/{cluster_id}/recommendations", headers=user).json()
                return next((r for r in found if r["kind"] == "gpu-idle"), None)

            rec = cluster.wait("an idle-GPU recommendation", recommended, 1800)
            found = httpx.get(f"{url}/api/v1/clusters/{cluster_id}/recommendations", headers=user).json()
            assert [r["recommendation"]["target"]["name"] for r in found if r["kind"] == "gpu-idle"] == [
                "idle"
            ]
            body = rec["recommendation"]
            # By hand: 1 GPU x the g4dn.xlarge spot price (1 GPU a node) x 730 h a month.
            assert rec["monthly_savings_usd"] == pytest.approx(round(1 * SPOT_PRICE * 730, 2))
            evidence = body["evidence"]
            assert (evidence["idle_gpus"], evidence["gpu_model"], evidence["capacity_types"]) == (
                1,
                MODEL,
                ["spot"],
            )
            assert evidence["activity_mean"] == 0.0 and evidence["price_per_gpu_hour_usd"] == SPOT_PRICE
            assert evidence["replicas"] == 1 and evidence["recommended_replicas"] == 0
            assert evidence["hours_observed"] >= 0.05 and 0 < body["confidence"] <= 1
            nodes = {n["metadata"]["name"]: n for n in cluster.objects(NODES)}
            assert all(
                nodes[n]["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "g4dn.xlarge"
                for n in gpu_nodes
            )
            instruction = body["instruction"]
            assert instruction["type"] == "set-replicas" and instruction["replicas"] == 0
            assert instruction["target"] == {"kind": "Deployment", "namespace": "default", "name": "idle"}

            approved = httpx.post(f"{url}/api/v1/recommendations/{rec['id']}/approve", headers=user)
            assert approved.status_code == 200, approved.text

            def scaled() -> dict[str, Any] | None:
                dep = cluster.get(DEPLOYMENTS, "default", "idle")
                assert dep is not None
                return dep if dep["spec"]["replicas"] == 0 else None

            cluster.wait("idle scaled to 0 by the agent", scaled, 120)

            def reported() -> dict[str, Any] | None:
                rows = httpx.get(f"{url}/api/v1/clusters/{cluster_id}/recommendations", headers=user).json()
                row = next(r for r in rows if r["id"] == rec["id"])
                return row if row["status"] == "applied" else None

            done = cluster.wait("the scale-down reported applied", reported, 120)
            assert "set-replicas" in (done["detail"] or "")
            busy = cluster.get(DEPLOYMENTS, "default", "busy")
            assert busy is not None and busy["spec"]["replicas"] == 1
