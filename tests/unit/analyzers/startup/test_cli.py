"""`shipshape startup ...` and `shipshape node-collector` end to end on a snapshot file (against a
cluster: tests/integration/analyzers/startup/test_cli_cluster.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shipshape.analyzers.startup import live, nodes
from shipshape.analyzers.startup.analysis import Snapshot
from shipshape.analyzers.startup.prometheus import StartupMetrics
from shipshape.cli.main import app

from .builders import C, PodPlan, event, node, pod_and_events

FIXTURES = (
    Path(__file__).resolve().parents[4].parent / "shared" / "data" / "node-latency-for-k8s-fixtures" / "test"
)


def snapshot() -> dict[str, Any]:
    pods, events = [], []
    for i in range(3):
        plan = PodPlan(
            name=f"web-6b7f9c8d5-{i}",
            created=0.0,
            scheduled=0.5,
            sandbox=1.0,
            initialized=0.0,
            containers_ready=33.0,
            ready=33.0,
            containers=[C("app", started=2.0 + i, readiness_delay=30)],
        )
        pod, pod_events = pod_and_events(plan)
        pods.append(pod)
        events.extend(pod_events)
    events.append(event("Node", "", "node-a", "NodeReady", "Node node-a status is now: NodeReady", -590.0))
    return {"pods": pods, "events": events, "nodes": [node("node-a", ready=-590.0)]}


def test_pods_from_file_json_and_chart(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot()))
    chart = tmp_path / "pods.svg"
    result = CliRunner().invoke(
        app, ["startup", "pods", "--from-file", str(path), "--json", "--chart", str(chart)]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["pods"] == 3
    assert [f["rule"] for f in body["findings"]] == ["readiness-initial-delay"]
    assert "default/web-6b7f9c8d5-0" in chart.read_text()


def test_pods_table(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot()))
    result = CliRunner().invoke(app, ["startup", "pods", "--from-file", str(path)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "Slowest 3 pods" in result.output
    assert "Readiness held back by initialDelaySeconds" in result.output
    # the SLI stops when containers start: the 30 s readiness delay does not count against the SLO
    assert "met, p99 4.0 s over 3 pods" in result.output


def test_bad_snapshot_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text('{"pods": 3}')
    result = CliRunner().invoke(app, ["startup", "pods", "--from-file", str(path)])
    assert result.exit_code == 2
    assert "snapshot.pods must be a list" in result.output


def test_serve_observes_each_pod_once() -> None:
    metrics = StartupMetrics()
    data = Snapshot.from_json(snapshot())
    state = live.LiveStartup(metrics, settle=5.0)

    def relist() -> None:
        state.replace(live.NODES, data.nodes)
        state.replace(live.EVENTS, data.events)
        state.replace(live.PODS, data.pods)

    relist()
    assert state.flush(0.0) == {"pods": 0, "nodes": 0}  # settling
    assert state.flush(5.0) == {"pods": 3, "nodes": 1}
    relist()
    assert state.flush(20.0) == {"pods": 0, "nodes": 0}
    assert (
        b'shipshape_pod_start_total_duration_seconds_count{namespace="default"} 3.0' in metrics.exposition()
    )


def test_node_collector_once_json() -> None:
    root = FIXTURES / "normal"
    if not root.is_dir():
        pytest.skip("fixtures not available")
    result = CliRunner().invoke(
        app, ["node-collector", "--root", str(root), "--once", "--json", "--year", "2022"]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    ready = next(e for e in body["events"] if e["event"] == nodes.NODE_READY)
    assert ready["time"] == "2022-11-28T02:59:25.526964Z" and ready["t"] == pytest.approx(18.526964)
    assert body["missing"] == {}


def test_node_collector_without_logs_fails_clearly(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["node-collector", "--root", str(tmp_path), "--once"])
    assert result.exit_code == 2
    assert "no system log" in result.output
