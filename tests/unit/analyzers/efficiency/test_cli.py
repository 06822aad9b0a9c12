"""`shipshape analyze --snapshot`: table, JSON, chart, and one clear error line for bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shipshape.analyzers.efficiency.snapshot import usage_to_json
from shipshape.analyzers.efficiency.usage import Window
from shipshape.cli.main import app
from shipshape.emulator import usage_history
from tests.unit.analyzers.efficiency.scenario import running_cluster


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cluster, model, pods, nodes = running_cluster()
    window = Window(cluster.clock.now(), 300.0, 12 * 24)
    usage = usage_history.record(model, pods, [n["metadata"]["name"] for n in nodes], window)
    path = tmp_path_factory.mktemp("snapshot") / "snapshot.json"
    path.write_text(json.dumps({"pods": pods, "nodes": nodes, "usage": usage_to_json(usage)}))
    return path


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["analyze", *args], env={"COLUMNS": "240"})


def test_json_report_prices_nodes_from_the_catalog(snapshot: Path, tmp_path: Path) -> None:
    chart = tmp_path / "efficiency.svg"
    result = run("--snapshot", str(snapshot), "--json", "--chart", str(chart))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["source"] == "emulator" and report["oomReplayKills"] == 0
    web = next(f for f in report["findings"] if f["target"] == "default/Deployment/web/app")
    assert web["monthlySavings"] > 0 and web["instruction"]["kind"] == "Deployment"
    assert web["confidenceLevel"] == "low" and web["lacking"] == ["history: 24.0 h of the 168 h wanted"]
    node = next(f for f in report["findings"] if f["kind"] == "colocation")
    assert set(node["instruction"]["resources"]) == {"shipshape.dev/batch-cpu", "shipshape.dev/batch-memory"}
    assert chart.read_text().lstrip().startswith("<?xml")


def test_table_by_default(snapshot: Path) -> None:
    result = run("--snapshot", str(snapshot), "--strategy", "vpa")
    assert result.exit_code == 0, result.output
    assert "Findings (emulator, vpa strategy)" in result.output and "Deployment/web/app" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give exactly one of --kubeconfig or --snapshot"),
        (("--snapshot", "/no/such/file"), "cannot read /no/such/file"),
        (("--snapshot", "SNAP", "--strategy", "magic"), "--strategy magic: one of simple, vpa"),
        (("--snapshot", "SNAP", "--step", "soon"), "--step: invalid duration"),
        (
            ("--snapshot", "SNAP", "--cpu-percentile", "120"),
            "--cpu-percentile: cpu_percentile must be within",
        ),
        (("--snapshot", "SNAP", "--chart", "x.gif"), "must end in .png or .svg"),
    ],
)
def test_bad_input_is_one_clear_error(snapshot: Path, args: tuple[str, ...], message: str) -> None:
    result = run(*(str(snapshot) if a == "SNAP" else a for a in args))
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_a_malformed_usage_section_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    usage = {"start": 0, "step": 60, "steps": 2, "containers": [{"namespace": "a"}]}
    path.write_text(json.dumps({"pods": [], "nodes": [], "usage": usage}))
    result = run("--snapshot", str(path))
    assert result.exit_code == 2
    assert "snapshot.usage.containers[0] needs namespace, pod and container names" in result.output
