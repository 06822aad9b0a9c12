"""`shipshape startup pods|nodes`: names never cut at any width, `-o wide|json|yaml` as kubectl, and
`--from-file` reading what users have (kubectl's List, single objects, JSON lines, YAML, several
files, the snapshot format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from shipshape.cli import output
from shipshape.cli.main import app
from tests.unit.analyzers.startup.builders import C, PodPlan, event, node, pod_and_events

NODE = "ip-192-168-129-250.us-west-2.compute.internal"
OTHER_NODE = "ip-192-168-7-4.us-west-2.compute.internal"
POD = "payments-api-gateway-with-a-long-name-7c9f8d6b5-x2x4z"


def _objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    pods, events = [], []
    for i, (name, on) in enumerate([(POD, NODE), ("web-6b7f9c8d5-a", OTHER_NODE)]):
        plan = PodPlan(
            name=name,
            namespace="payments-production",
            node=on,
            created=0.0,
            scheduled=0.5,
            sandbox=1.0,
            containers_ready=3.0 + i,
            ready=3.0 + i,
            containers=[C("app", started=2.0 + i)],
            owner=("ReplicaSet", name.rsplit("-", 1)[0]),
            template_hash=name.rsplit("-", 2)[1],
        )
        pod, pod_events = pod_and_events(plan)
        pods.append(pod)
        events.extend(pod_events)
    nodes = []
    for name, ready in ((NODE, -590.0), (OTHER_NODE, -560.0)):
        nodes.append(node(name, ready=ready))
        events.append(event("Node", "", name, "NodeReady", f"Node {name} status is now: NodeReady", ready))
    return pods, events, nodes


def _listing(kinds: tuple[str, ...] = ("pods", "events", "nodes")) -> dict[str, Any]:
    """What `kubectl get pods,events,nodes -A -o json` prints: one List, kinds mixed."""
    pods, events, nodes = _objects()
    chosen = {"pods": pods, "events": events, "nodes": nodes}
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [obj for k in kinds for obj in chosen[k]],
    }


def _invoke(*args: str, columns: int = 80) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def listing(tmp_path: Path) -> Path:
    path = tmp_path / "all.json"
    path.write_text(json.dumps(_listing()))
    return path


@pytest.mark.parametrize("columns", [80, 160])
@pytest.mark.parametrize("wide", [False, True])
def test_pod_and_node_names_are_never_cut_or_wrapped(listing: Path, columns: int, wide: bool) -> None:
    extra = ["-o", "wide"] if wide else []
    code, out, err = _invoke("startup", "pods", "--from-file", str(listing), *extra, columns=columns)
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith(f"payments-production/{POD}")]
    assert len(rows) == 1 and NODE in rows[0].split()
    assert "…" not in out
    code, out, err = _invoke("startup", "nodes", "--from-file", str(listing), *extra, columns=columns)
    assert code == 0, err
    for name in (NODE, OTHER_NODE):
        assert next(line.split()[0] for line in out.splitlines() if name in line) == name
    assert "…" not in out


def test_wide_adds_every_phase_column(listing: Path) -> None:
    _, plain, _ = _invoke("startup", "pods", "--from-file", str(listing))
    _, wide, _ = _invoke("startup", "pods", "--from-file", str(listing), "-o", "wide")
    header = next(line for line in plain.splitlines() if line.startswith("POD"))
    wide_header = next(line for line in wide.splitlines() if line.startswith("POD"))
    assert header.split() == ["POD", "NODE", "TO-READY", "DOMINANT"]
    assert {"SCHEDULING", "IMAGE-PULL", "CONTAINER-START"} <= set(wide_header.split())
    _, nodes_wide, _ = _invoke("startup", "nodes", "--from-file", str(listing), "-o", "wide")
    assert "REGISTERED" in nodes_wide and "1ST-POD" in nodes_wide


@pytest.mark.parametrize("command", ["pods", "nodes"])
def test_json_and_yaml_are_the_same_report(listing: Path, command: str) -> None:
    code, as_json, _ = _invoke("startup", command, "--from-file", str(listing), "-o", "json")
    assert code == 0
    code, as_yaml, _ = _invoke("startup", command, "--from-file", str(listing), "-o", "yaml")
    assert code == 0
    assert yaml.safe_load(as_yaml) == json.loads(as_json)
    _, legacy, _ = _invoke("startup", command, "--from-file", str(listing), "--json")
    assert json.loads(legacy) == json.loads(as_json)


def test_columns_pad_to_the_widest_cell_and_never_cut() -> None:
    lines = output.columns(["NAME", "N"], [["a-very-long-name-indeed", "1"], ["b", "10"]], right=[1])
    assert lines == [
        "NAME                       N",
        "a-very-long-name-indeed    1",
        "b                         10",
    ]


# ---- --from-file: the formats users have ---------------------------------------------------------------


def _pods_read(*files: Path) -> int:
    code, out, err = _invoke(
        "startup", "pods", *(a for f in files for a in ("--from-file", str(f))), "-o", "json"
    )
    assert code == 0, err
    count: int = json.loads(out)["pods"]
    return count


def test_from_file_reads_kubectl_list_json_and_yaml(tmp_path: Path) -> None:
    as_json = tmp_path / "all.json"
    as_json.write_text(json.dumps(_listing()))
    as_yaml = tmp_path / "all.yaml"
    as_yaml.write_text(yaml.safe_dump(_listing()))
    assert _pods_read(as_json) == 2
    assert _pods_read(as_yaml) == 2


def test_from_file_reads_one_kind_per_file_and_single_objects(tmp_path: Path) -> None:
    pods, _, _ = _objects()
    paths = []
    for kinds in (("pods",), ("events",), ("nodes",)):
        path = tmp_path / f"{kinds[0]}.json"
        path.write_text(json.dumps(_listing(kinds)))
        paths.append(path)
    assert _pods_read(*paths) == 2
    single = tmp_path / "pod.json"
    single.write_text(json.dumps(pods[0]))
    assert _pods_read(single, paths[1], paths[2]) == 1


def test_from_file_reads_json_lines_and_yaml_documents(tmp_path: Path) -> None:
    pods, events, nodes = _objects()
    lines = tmp_path / "objects.jsonl"
    lines.write_text("\n".join(json.dumps(obj) for obj in [*pods, *events, *nodes]) + "\n")
    assert _pods_read(lines) == 2
    documents = tmp_path / "objects.yaml"
    documents.write_text(yaml.safe_dump_all([*pods, *events, *nodes]))
    assert _pods_read(documents) == 2


def test_from_file_still_reads_the_snapshot_format(tmp_path: Path) -> None:
    pods, events, nodes = _objects()
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps({"pods": pods, "events": events, "nodes": nodes}))
    assert _pods_read(snapshot) == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"kind": "List", "items": [{"kind": "Deployment", "metadata": {"name": "a"}}]}',
            "holds no pods, events or nodes (found 1 Deployment)",
        ),
        ("{not json\n", "is neither JSON nor YAML"),
        ("", "is empty"),
    ],
)
def test_from_file_that_holds_nothing_usable(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "input.json"
    path.write_text(content)
    code, out, err = _invoke("startup", "pods", "--from-file", str(path))
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_simulate_tables_keep_strategy_and_workload_names_whole() -> None:
    scenario = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "demo.yaml"
    code, out, err = _invoke(
        "simulate", "--scenario", str(scenario), "--duration", "10m", "--strategy", "spot-naive"
    )
    assert code == 0, err
    assert "…" not in out
    rows = {line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")}
    assert {"spot-naive", "shop/Deployment/checkout", "shop/Deployment/web", "shop/StatefulSet/db"} <= rows
