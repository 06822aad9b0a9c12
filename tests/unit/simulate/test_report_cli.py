"""The simulator's report (JSON schema, charts) and the `shipshape simulate` command's errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from shipshape.cli.main import app
from shipshape.simulate import report
from shipshape.simulate.run import StrategyResult, WorkloadFigures

from .scenarios import small_scenario

RUNNER = CliRunner()


def _result(strategy: str, cost: float, zero: float, below: float | None) -> StrategyResult:
    return StrategyResult(
        strategy=strategy,
        description=f"{strategy} placement",
        seed=3,
        duration_seconds=7200.0,
        wall_seconds=1.5,
        cost={"total": cost, "nodeHours": 10.0, "byCapacityType": {}},
        cost_series=[(0.0, 0.0), (3600.0, cost / 2), (7200.0, cost)],
        workloads=[
            WorkloadFigures("shop/Deployment/web", 6, "web", 5, zero, below, 110.0, 3, 2.0),
            WorkloadFigures("shop/Deployment/solo", 1, None, None, zero, None, 110.0, 0, 2.0),
        ],
        replacement_latencies=[10.0, 20.0, 30.0],
        unreplaced=1,
        nodes_added=2,
        nodes_removed=2,
        notices=2,
        engine_errors=0,
        savings_vs_on_demand=None,
    )


def test_json_report_schema() -> None:
    body = report.report_json(
        [_result("on-demand", 4.0, 0.0, 0.0), _result("spot-naive", 1.0, 5.5, 11.0)], "x"
    )
    assert body["schema"] == report.SCHEMA and body["scenario"] == "x"
    naive = body["strategies"][1]
    assert set(naive) >= {
        "strategy",
        "seed",
        "durationSeconds",
        "wallSeconds",
        "cpuSeconds",
        "cost",
        "availability",
        "replacementLatency",
        "nodeChurn",
        "costSeries",
    }
    assert naive["cost"]["total"] == 1.0
    assert naive["availability"]["zeroReadyMinutes"] == 11.0  # both workloads
    assert naive["availability"]["belowMinAvailableMinutes"] == 11.0  # only web has a PDB
    web, solo = naive["availability"]["workloads"][0], naive["availability"]["workloads"][1]
    assert web["minAvailable"] == 5 and web["availability"] == pytest.approx(1 - 11.0 / 110.0)
    assert solo["belowMinAvailableMinutes"] is None and solo["availability"] == pytest.approx(1 - 5.5 / 110.0)
    assert naive["replacementLatency"] == {
        "count": 3,
        "p50Seconds": 20.0,
        "p99Seconds": 29.8,
        "maxSeconds": 30.0,
        "unreplaced": 1,
    }
    assert naive["costSeries"][-1] == [7200.0, 1.0]
    json.dumps(body)  # serialisable as is


def _bar_width(svg: str, gid: str) -> float:
    """The width of a bar drawn as a path `M x0 y0 L x1 y0 L x1 y1 L x0 y1 z` in the SVG."""
    match = re.search(rf'<g id="{re.escape(gid)}">\s*<path d="M ([0-9.]+) [0-9.]+\s*L ([0-9.]+) ', svg)
    assert match is not None, gid
    return float(match.group(2)) - float(match.group(1))


def test_svg_chart_names_strategies_and_workloads(tmp_path: Path) -> None:
    path = tmp_path / "chart.svg"
    report.write_chart([_result("on-demand", 4.0, 0.0, 0.0), _result("shipshape", 1.0, 0.0, 0.0)], path)
    svg = path.read_text()
    for text in ("Compute cost over time", "Availability per workload", "shop/Deployment/web", "on-demand"):
        assert text in svg
    for gid in ("cost-on-demand", "cost-shipshape", "availability-shipshape-shop_Deployment_solo"):
        assert f'id="{gid}"' in svg
    assert "cost-spot-naive" not in svg


def test_availability_bars_are_as_long_as_the_minutes_lost(tmp_path: Path) -> None:
    path = tmp_path / "chart.svg"
    # web has a PDB: 55 minutes below it; solo has none: 11 minutes at zero ready replicas.
    report.write_chart([_result("spot-naive", 1.0, 11.0, 55.0)], path)
    svg = path.read_text()
    web = _bar_width(svg, "availability-spot-naive-shop_Deployment_web")
    solo = _bar_width(svg, "availability-spot-naive-shop_Deployment_solo")
    assert web / solo == pytest.approx(5.0, rel=1e-3)


def test_png_chart_is_a_png(tmp_path: Path) -> None:
    path = tmp_path / "chart.png"
    report.write_chart([_result("shipshape", 1.0, 0.0, 0.0)], path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chart_refuses_other_suffixes(tmp_path: Path) -> None:
    with pytest.raises(report.ChartError, match=r"\.png or \.svg"):
        report.write_chart([_result("shipshape", 1.0, 0.0, 0.0)], tmp_path / "chart.pdf")


def _scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    scenario = small_scenario()
    path.write_text(yaml.safe_dump(scenario.model_dump(by_alias=True, exclude_none=True)))
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "cheapest"], "unknown strategy 'cheapest'"),
        (["--duration", "soon"], "--duration"),
        (["--duration", "0s"], "must be positive"),
        (["--chart", "out.gif"], "must end in .png or .svg"),
        (["--warmup", "later"], "--warmup"),
    ],
)
def test_cli_refuses_bad_flags(tmp_path: Path, args: list[str], message: str) -> None:
    result = RUNNER.invoke(app, ["simulate", "--scenario", str(_scenario_file(tmp_path)), *args])
    assert result.exit_code == 2
    assert message in result.output


def test_cli_refuses_bad_scenarios(tmp_path: Path) -> None:
    missing = RUNNER.invoke(app, ["simulate", "--scenario", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "cannot read scenario" in missing.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: []\n")
    invalid = RUNNER.invoke(app, ["simulate", "--scenario", str(bad)])
    assert invalid.exit_code == 2 and "invalid scenario" in invalid.output


def test_cli_json_and_chart(tmp_path: Path) -> None:
    chart = tmp_path / "out.svg"
    args = ["simulate", "--scenario", str(_scenario_file(tmp_path)), "--duration", "30m", "--seed", "5"]
    result = RUNNER.invoke(app, [*args, "--strategy", "spot-naive", "--json", "--chart", str(chart)])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert [s["strategy"] for s in body["strategies"]] == ["spot-naive"]
    assert body["strategies"][0]["seed"] == 5
    assert body["strategies"][0]["cost"]["savingsVsOnDemand"] is None
    assert "cost-spot-naive" in chart.read_text()


def test_cli_compare_prints_every_strategy(tmp_path: Path) -> None:
    args = ["simulate", "--scenario", str(_scenario_file(tmp_path)), "--duration", "15m", "--compare"]
    result = RUNNER.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in ("on-demand", "spot-naive", "capacity-type", "shipshape", "Strategies side by side"):
        assert name in result.output


def test_cli_runs_shipshape_with_a_controller_config(tmp_path: Path) -> None:
    args = ["simulate", "--scenario", str(_scenario_file(tmp_path)), "--duration", "40m", "--json"]
    default = RUNNER.invoke(app, [*args, "--strategy", "shipshape"])
    assert default.exit_code == 0, default.output
    # By default spot pods sit on the pool reclaimed at 20 minutes and are replaced.
    assert json.loads(default.stdout)["strategies"][0]["replacementLatency"]["count"] > 0
    on_demand_only = tmp_path / "controller.yaml"
    on_demand_only.write_text(
        "spot_percentage: 0\nsingle_replica_deployment: on-demand\nloops: {headroom_enabled: false}\n"
    )
    configured = RUNNER.invoke(
        app, [*args, "--strategy", "shipshape", "--controller-config", str(on_demand_only)]
    )
    assert configured.exit_code == 0, configured.output
    body = json.loads(configured.stdout)["strategies"][0]
    assert body["replacementLatency"]["count"] == 0  # nothing of the workloads' ran on spot
    assert body["availability"]["zeroReadyMinutes"] == 0


def test_cli_refuses_a_bad_controller_config(tmp_path: Path) -> None:
    bad = tmp_path / "controller.yaml"
    bad.write_text("spot_percentage: 150\n")
    args = ["simulate", "--scenario", str(_scenario_file(tmp_path)), "--controller-config", str(bad)]
    result = RUNNER.invoke(app, args)
    assert result.exit_code == 2 and "spot_percentage" in result.output


def test_cli_refuses_the_batch_resources_loop_which_is_not_simulated(tmp_path: Path) -> None:
    config = tmp_path / "controller.yaml"
    config.write_text("loops:\n  batch_resources:\n    enabled: true\n")
    args = ["simulate", "--scenario", str(_scenario_file(tmp_path)), "--controller-config", str(config)]
    result = RUNNER.invoke(app, args)
    assert result.exit_code == 2 and "loops.batch_resources.enabled" in result.output
