"""`shipshape gpu replay` end to end on small CSV files: JSON shape, table, chart, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shipshape.cli.main import app

from .builders import NODE_HEADER, POD_HEADER
from .test_replay import CLUSTER, TRACE


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    node_file = tmp_path / "nodes.csv"
    node_file.write_text("\n".join([NODE_HEADER, *CLUSTER]) + "\n")
    pod_file = tmp_path / "pods.csv"
    pod_file.write_text("\n".join([POD_HEADER, *TRACE]) + "\n")
    return node_file, pod_file


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["gpu", "replay", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_document(files: tuple[Path, Path]) -> None:
    nodes, pods = files
    code, out, _ = run("--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd,first-fit", "--json")
    assert code == 0
    body = json.loads(out)
    assert body["cluster"] == {"nodes": 2, "gpus": 3}
    assert [p["policy"] for p in body["policies"]] == ["fgd", "first-fit"]
    for policy in body["policies"]:
        arrived = [p["arrived_pct"] for p in policy["points"]]
        assert {50, 80, 90, 95, 100, 110, 120, 130} <= set(arrived)
        assert set(policy["points"][0]) == {"arrived_pct", "gpu_alloc_pct", "frag_gpu_pct"}


def test_table_and_svg_chart(files: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = files
    chart = tmp_path / "alloc.svg"
    code, out, _ = run("--nodes", str(nodes), "--pods", str(pods), "--seed", "7", "--chart", str(chart))
    assert code == 0
    for policy in (
        "random",
        "dotprod",
        "gpu-clustering",
        "gpu-packing",
        "best-fit",
        "fgd",
        "first-fit",
        "spread",
    ):
        assert policy in out
    assert "fgd-cpu" in out and "seed 7" in out
    svg = chart.read_text()
    assert 'id="alloc-fgd-cpu"' in svg and 'id="frag-best-fit"' in svg
    assert "arrived workload" in svg


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "tetris"], "unknown policy 'tetris'"),
        (["--chart", "out.pdf"], "--chart: the file must end in .png or .svg, not 'out.pdf'"),
        (["--ties", "coin"], "ties must be one of first, random"),
        (["--inflation", "0"], "inflation must be in (0, 10]"),
    ],
)
def test_bad_options_fail_with_one_line(files: tuple[Path, Path], extra: list[str], message: str) -> None:
    nodes, pods = files
    code, out, err = run("--nodes", str(nodes), "--pods", str(pods), *extra)
    assert code == 2
    text = (out + err).strip()
    assert message in text and len(text.splitlines()) == 1 and "Traceback" not in text


def test_bad_files_fail_with_one_line(files: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = files
    code, out, err = run("--nodes", str(tmp_path / "missing.csv"), "--pods", str(pods))
    assert code == 2 and f"--nodes: no such file: {tmp_path / 'missing.csv'}" in out + err
    broken = tmp_path / "broken.csv"
    broken.write_text(POD_HEADER + "\np,1000,10,1,2000,\n")
    code, out, err = run("--nodes", str(nodes), "--pods", str(broken))
    text = (out + err).strip()
    assert code == 2
    assert text == "error: --pods broken.csv row 2: gpu_milli must be 1..1000 with num_gpu 1, got 2000"
