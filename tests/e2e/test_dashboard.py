"""The dashboard in a real headless browser (Debian's chromium, driven by Playwright): log in, open
the cluster, the charts draw the cluster's data, approve a recommendation, and see the agent apply it
in the emulator."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from matplotlib import image

from shipshape.emulator.resources import DEPLOYMENTS
from tests.integration.agent.backend_process import (
    backend_process,
    bootstrap,
    free_port,
    on_demand_only_unless_tolerated,
    running_agent,
)
from tests.integration.emulator.served_cluster import serve_cluster
from tests.manifests import deployment

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SPOT_COLOUR = (0xF0, 0xA2, 0x02)
ON_DEMAND_COLOUR = (0x12, 0x32, 0x4F)
COST_SERIES_COLOUR = (0x2A, 0x9D, 0x8F)


def _has_colour(png: Path, rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    """How many pixels of the screenshot are (about) this colour."""
    pixels = (image.imread(str(png))[..., :3] * 255).astype(np.int16)
    return int((np.abs(pixels - np.array(rgb)).max(axis=2) <= tolerance).sum())


def _chart_total(page: Any, canvas_id: str) -> float:
    return float(
        page.evaluate(
            """id => Chart.getChart(document.getElementById(id)).data.datasets
                 .flatMap(d => d.data).reduce((a, b) => a + (b || 0), 0)""",
            canvas_id,
        )
    )


@pytest.mark.e2e
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed (make test installs it)")
def test_log_in_see_the_cluster_approve_and_the_agent_applies(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    db = f"sqlite:///{tmp_path / 'backend.db'}"
    key, cluster_id, token = bootstrap(db)
    port = free_port()
    with serve_cluster(tmp_path, on_demand_only_unless_tolerated()) as cluster:
        web = deployment("web", 3, cpu="500m", memory="512Mi", grace_seconds=2)
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(web))
        with (
            backend_process(port, db, tmp_path, analysis_seconds="0") as url,
            running_agent(cluster, url, token, tmp_path / "spool"),
            sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(f"{url}/")
            # A wrong key is refused on the page.
            page.fill("#api-key", "ssk_000000000000_" + "x" * 43)
            page.click("#login-form button")
            expect(page.locator("#login-error")).to_have_text("That key is not valid.")
            page.fill("#api-key", key)
            page.click("#login-form button")
            row = page.locator(f'#clusters-table tr[data-cluster="{cluster_id}"]')
            expect(row).to_contain_text("prod")
            row.click()

            expect(page.locator("#cluster-name")).to_have_text("prod", timeout=15_000)
            # Charts hold the cluster's data: six nodes, web's three replicas on demand.
            page.wait_for_function("Chart.getChart(document.getElementById('chart-pools')) !== undefined")
            assert _chart_total(page, "chart-pools") == 6
            assert _chart_total(page, "chart-workloads") >= 3
            assert _chart_total(page, "chart-startup") >= 3
            assert _chart_total(page, "chart-nodes") > 0
            # The cost series holds the points the workers wrote after applying the agent's pushes.
            page.wait_for_function(
                """() => { const c = Chart.getChart(document.getElementById('chart-series-cost'));
                           return c !== undefined && c.data.datasets.length > 0; }"""
            )
            points = page.evaluate(
                "Chart.getChart(document.getElementById('chart-series-cost')).data.datasets[0].data"
            )
            assert points and all(p["y"] > 0 for p in points), points
            shot = tmp_path / "cluster.png"
            page.screenshot(path=str(shot), full_page=True)
            assert _has_colour(shot, SPOT_COLOUR) > 500, "no spot bars drawn"
            assert _has_colour(shot, ON_DEMAND_COLOUR) > 500, "no on-demand bars drawn"
            # The cost chart has no legend: only its points and line are drawn in its colour.
            series_shot = tmp_path / "series.png"
            page.locator("#chart-series-cost").screenshot(path=str(series_shot))
            assert _has_colour(series_shot, COST_SERIES_COLOUR, tolerance=12) > 20, "no cost series drawn"

            # The recommendation appears once the workers analyzed the pushes; approve it.
            recommendation = page.locator("#recommendations-table tr", has_text="Deployment/default/web")
            for _ in range(30):
                if recommendation.count():
                    break
                page.wait_for_timeout(1000)
                page.evaluate("route()")
            expect(recommendation).to_contain_text("open")
            recommendation.locator("button.approve").click()
            expect(recommendation).to_contain_text("approved")

            cluster.wait(
                "web opted in by the agent",
                lambda: (
                    (cluster.get(DEPLOYMENTS, "default", "web") or {})
                    .get("metadata", {})
                    .get("annotations", {})
                    .get("spot.shipshape.dev/enabled")
                    == "true"
                ),
                60,
            )
            for _ in range(30):
                page.evaluate("route()")
                page.wait_for_timeout(500)
                if "applied" in (recommendation.text_content() or ""):
                    break
            expect(recommendation).to_contain_text("applied")
            page.screenshot(path=str(tmp_path / "applied.png"), full_page=True)
            browser.close()
