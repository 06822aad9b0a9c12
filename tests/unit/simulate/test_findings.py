"""The simulate report says when a scenario is too small to rank strategies by cost: its on-demand
pools' minimum size already holds every workload, so spot nodes only add to a floor paid anyway."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from shipshape.cli.main import app
from shipshape.emulator import scenario
from shipshape.simulate import findings
from shipshape.simulate.run import StrategyResult

EXAMPLES = Path(__file__).parents[3] / "examples" / "scenarios"


def _baseline(total: float, seconds: float) -> StrategyResult:
    return StrategyResult(
        strategy="on-demand",
        description="baseline",
        seed=1,
        duration_seconds=seconds,
        wall_seconds=1.0,
        cost={"total": total, "seconds": seconds},
        cost_series=[],
        workloads=[],
        replacement_latencies=[],
        unreplaced=0,
        nodes_added=0,
        nodes_removed=0,
        notices=0,
        engine_errors=0,
    )


def test_demo_scenario_is_held_by_its_on_demand_floor() -> None:
    demo = scenario.load(EXAMPLES / "demo.yaml")
    found = findings.findings(demo, [_baseline(13.6, 86040.0)])
    assert [f.code for f in found] == ["on-demand-floor"]
    message = found[0].message
    assert "2 nodes, 7.8 CPU" in message and "(6.5 CPU" in message
    # 2 x m5.xlarge on-demand (0.192/h) and one m5.large + one c5.large spot node at least, all day.
    assert "No strategy can save more than 20.6%" in message, message


def test_reference_scenario_outgrows_its_floor() -> None:
    assert findings.findings(scenario.load(EXAMPLES / "reference.yaml")) == []


def test_simulate_report_carries_the_finding(tmp_path: Path) -> None:
    args = ["simulate", "--scenario", str(EXAMPLES / "demo.yaml"), "--duration", "10m", "--compare"]
    as_json = CliRunner().invoke(app, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    body = json.loads(as_json.stdout)
    assert [f["code"] for f in body["findings"]] == ["on-demand-floor"]
    assert "No strategy can save more than" in body["findings"][0]["message"]
    shown = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "finding (on-demand-floor)" in shown.output
