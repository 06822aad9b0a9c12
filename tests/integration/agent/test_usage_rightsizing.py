"""Usage from the cluster to a change in the cluster, on the embedded defaults: the emulator's usage
model (a steady profile without jitter: every web container uses 20 % of its CPU request and 25 %
of its memory request), the agent reading metrics.k8s.io every 30 emulated seconds in 60-second
buckets, `shipshape backend` storing them and recommending; a user approves; the agent applies the
requests in the emulator and reports back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from shipshape.analyzers.efficiency.analysis import CPU_HOUR_LIST_PRICE, GIB_HOUR_LIST_PRICE
from shipshape.backend.analysis import node_prices
from shipshape.emulator.resources import DEPLOYMENTS, NODES
from tests.integration.agent.backend_process import FAST_USAGE, bootstrap, fast_usage_backend, running_agent
from tests.integration.emulator.served_cluster import scenario, serve_cluster
from tests.manifests import deployment

MIB = 2**20


@pytest.mark.integration
def test_usage_becomes_a_right_sizing_that_the_agent_applies(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'backend.db'}"
    key, cluster_id, token = bootstrap(db)
    user = {"Authorization": f"Bearer {key}"}
    known = scenario(usage=[{"pattern": "steady", "cpu": 0.2, "memory": 0.25, "jitter": False}])
    with serve_cluster(tmp_path, known) as cluster:
        web = deployment("web", 2, cpu="1", memory="1Gi", grace_seconds=2, container="app")
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(web))
        with (
            fast_usage_backend(db, tmp_path) as url,
            running_agent(
                cluster,
                url,
                token,
                tmp_path / "spool",
                FAST_USAGE,
            ),
        ):

            def recommended() -> dict[str, Any] | None:
                found = httpx.get(f"{url}/api/v1/clusters/{cluster_id}/recommendations", headers=user).json()
                return next((r for r in found if r["kind"] == "right-sizing"), None)

            rec = cluster.wait("a right-sizing recommendation for web", recommended, 900)
            # By hand: CPU p95 of a steady 0.2 x 1 core = 200m; memory: the peak, 0.25 x 1 GiB =
            # 256 MiB, plus 15 % = 294.4 MiB, rounded up to 295 MiB (request and limit).
            instruction = rec["recommendation"]["instruction"]
            assert instruction["target"] == {"kind": "Deployment", "namespace": "default", "name": "web"}
            assert instruction["containers"] == {
                "app": {"requests": {"cpu": "200m", "memory": "295Mi"}, "limits": {"memory": "295Mi"}}
            }
            evidence = rec["recommendation"]["evidence"]["containers"]["app"]
            assert evidence["memory_peak_bytes"] == 256 * MIB and evidence["cpu_strategy_cores"] == 0.2
            assert evidence["pods"] == 2 and evidence["samples"] >= 2 * 3

            # Savings by hand, from each pod's node price as it runs (spot price on spot nodes): the
            # node's price split between its cores and GiB in Kubecost's list-price ratio.
            nodes = {n["metadata"]["name"]: n for n in cluster.objects(NODES)}
            prices = node_prices(list(nodes.values()))
            expected = 0.0
            for pod in cluster.pods(app="web"):
                node = nodes[pod["spec"]["nodeName"]]
                cores = float(node["status"]["capacity"]["cpu"])
                gib = int(node["status"]["capacity"]["memory"].removesuffix("Ki")) / 2**20
                weight_cpu, weight_memory = cores * CPU_HOUR_LIST_PRICE, gib * GIB_HOUR_LIST_PRICE
                price = prices[node["metadata"]["name"]]
                per_core = price * weight_cpu / (weight_cpu + weight_memory) / cores
                per_gib = price * weight_memory / (weight_cpu + weight_memory) / gib
                expected += ((1 - 0.2) * per_core + (1024 - 295) / 1024 * per_gib) * 730
            assert rec["monthly_savings_usd"] == pytest.approx(expected, abs=0.02)

            approved = httpx.post(f"{url}/api/v1/recommendations/{rec['id']}/approve", headers=user)
            assert approved.status_code == 200, approved.text

            def resources() -> dict[str, Any] | None:
                dep = cluster.get(DEPLOYMENTS, "default", "web")
                assert dep is not None
                found: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]["resources"]
                return found if found.get("requests", {}).get("cpu") == "200m" else None

            applied = cluster.wait("web's requests changed by the agent", resources, 120)
            assert applied == {"requests": {"cpu": "200m", "memory": "295Mi"}, "limits": {"memory": "295Mi"}}

            def reported() -> dict[str, Any] | None:
                rows = httpx.get(f"{url}/api/v1/clusters/{cluster_id}/recommendations", headers=user).json()
                row = next(r for r in rows if r["id"] == rec["id"])
                return row if row["status"] == "applied" else None

            done = cluster.wait("the right-sizing reported applied", reported, 120)
            assert "applied set-container-requests to Deployment/default/web" in (done["detail"] or "")
