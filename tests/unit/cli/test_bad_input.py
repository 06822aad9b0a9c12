"""Every command given the mistakes users make: one `error:` line on stderr, a non-zero exit (2 for
usage and input errors, 1 for what the command talks to), no traceback, and nothing started.

Most cases run in-process through typer's runner; those whose point is what reaches the terminal
(logging, urllib3's retry warnings, a server that cannot start) run the installed `shipshape`.
What takes the network (an API server that is not there, ports in use) is in
tests/integration/cli/test_bad_input_network.py.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shipshape.cli.main import app
from tests.unit.analyzers.startup.builders import C, PodPlan, pod_and_events

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "scenarios" / "demo.yaml"
SHIPSHAPE = Path(sys.executable).with_name("shipshape")

SCENARIO = """\
name: tiny
pools:
  - {name: od, instanceType: m5.large, zone: us-east-1a, capacityType: on-demand, cpu: "2",
     memory: 8Gi, minSize: 1, initialSize: 1, maxSize: 2}
"""
BAD_MANIFEST = (
    SCENARIO
    + """\
objects:
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: Bad_Name}
    spec:
      replicas: 1
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: other}}
        spec: {containers: [{name: c, image: nginx}]}
"""
)


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def _run(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    command = (
        [str(SHIPSHAPE)]
        if SHIPSHAPE.exists()
        else [sys.executable, "-c", "from shipshape.cli.main import app; app()"]
    )
    done = subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={"COLUMNS": "80", "PATH": ""},
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {
        "broken-yaml": tmp_path / "broken.kubeconfig",
        "not-a-mapping": tmp_path / "scalar.kubeconfig",
        "wrong-shape": tmp_path / "shape.kubeconfig",
        "non-utf8": tmp_path / "latin1.yaml",
        "bad-manifest": tmp_path / "bad-manifest.yaml",
        "snapshot": tmp_path / "snapshot.json",
    }
    out["broken-yaml"].write_text("clusters: [\n")
    out["not-a-mapping"].write_text("hello\n")
    out["wrong-shape"].write_text("clusters: 3\ncontexts: {a: 1}\ncurrent-context: a\n")
    out["non-utf8"].write_bytes("name: caf\xe9\n".encode("latin-1"))
    out["bad-manifest"].write_text(BAD_MANIFEST)
    out["snapshot"].write_text('{"pods": [], "events": [], "nodes": []}')
    return out


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    """A node's log tree with a syslog that dates itself (containerd stamps)."""
    log = tmp_path / "host" / "var" / "log"
    log.mkdir(parents=True)
    (log / "messages").write_text(
        "Nov 28 02:59:07 ip-1 kernel: Linux version 5.4\n"
        'Nov 28 02:59:10 ip-1 containerd: time="2022-11-28T02:59:10.9Z" msg="starting containerd"\n'
    )
    return tmp_path / "host"


# ---- --chart into a folder that does not exist: refused before any work ----------------------------


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig of an API server that is not there; unit tests never try it (no network)."""
    path = tmp_path / "unreachable.kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
    )
    return path


@pytest.mark.parametrize("command", [["startup", "pods"], ["startup", "nodes"]])
def test_chart_into_a_missing_folder_is_refused_before_reading_the_cluster(
    command: list[str], unreachable_kubeconfig: Path, tmp_path: Path
) -> None:
    chart = tmp_path / "missing" / "chart.png"
    code, out, err = _cli(*command, "--kubeconfig", str(unreachable_kubeconfig), "--chart", str(chart))
    assert code == 2 and out == ""
    assert _one_error_line(err) == f"error: --chart: the folder {chart.parent} does not exist"


def test_simulate_chart_into_a_missing_folder_is_refused_before_the_run(tmp_path: Path) -> None:
    chart = tmp_path / "missing" / "chart.svg"
    started = time.monotonic()
    code, out, err = _cli("simulate", "--scenario", str(DEMO), "--duration", "30d", "--chart", str(chart))
    assert time.monotonic() - started < 10  # a 30-day run takes minutes: it never began
    assert code == 2 and out == ""
    assert _one_error_line(err) == f"error: --chart: the folder {chart.parent} does not exist"


# ---- scenario files ------------------------------------------------------------------------------


def test_simulate_refuses_a_scenario_whose_manifest_is_invalid(files: dict[str, Path]) -> None:
    code, out, err = _cli("simulate", "--scenario", str(files["bad-manifest"]), "--duration", "1h")
    assert code == 2 and out.strip() == ""
    line = _one_error_line(err)
    assert "the scenario's objects cannot be created" in line and '"Bad_Name" is invalid' in line


@pytest.mark.parametrize(
    "command",
    [["simulate", "--duration", "1h"], ["emulator", "up"], ["demo", "--exit-after-show"]],
    ids=["simulate", "emulator-up", "demo"],
)
def test_a_scenario_that_is_not_utf8_is_refused(command: list[str], files: dict[str, Path]) -> None:
    code, _, err = _cli(*command, "--scenario", str(files["non-utf8"]))
    assert code == 2
    assert _one_error_line(err) == f"error: {files['non-utf8']}: not a YAML text file (not UTF-8 at byte 9)"


# ---- kubeconfigs that are not kubeconfigs ------------------------------------------------------------


KUBECONFIG_COMMANDS = {
    "startup-pods": ["startup", "pods"],
    "startup-nodes": ["startup", "nodes"],
    "startup-serve": ["startup", "serve", "--port", "0"],
    "interrupt": ["emulator", "interrupt", "--pool", "p"],
    "shortage": ["emulator", "shortage", "--pool", "p", "--for", "1m"],
}


@pytest.mark.parametrize("kind", ["broken-yaml", "not-a-mapping", "wrong-shape"])
@pytest.mark.parametrize("command", list(KUBECONFIG_COMMANDS), ids=list(KUBECONFIG_COMMANDS))
def test_a_garbage_kubeconfig_is_one_line_and_exit_2(command: str, kind: str, files: dict[str, Path]) -> None:
    code, out, err = _cli(*KUBECONFIG_COMMANDS[command], "--kubeconfig", str(files[kind]))
    assert code == 2 and out == ""
    assert str(files[kind].name) in _one_error_line(err)


@pytest.mark.parametrize("kind", ["broken-yaml", "not-a-mapping"])
def test_node_collector_with_a_garbage_kubeconfig(kind: str, files: dict[str, Path], host_root: Path) -> None:
    code, _, err = _cli(
        "node-collector", "--root", str(host_root), "--node-name", "n1", "--kubeconfig", str(files[kind])
    )
    assert code == 2
    assert f"{files[kind].name} is not a valid kubeconfig" in _one_error_line(err)


@pytest.mark.parametrize("kind", ["broken-yaml", "not-a-mapping"])
def test_controller_with_a_garbage_kubeconfig(kind: str, files: dict[str, Path]) -> None:
    code, out, err = _run("controller", "--kubeconfig", str(files[kind]))
    assert code == 2 and out == ""
    assert f"{files[kind].name} is not a valid kubeconfig" in _one_error_line(err)


# ---- an API server that is down: one line, no retry warnings -----------------------------------------


# ---- nothing matched -----------------------------------------------------------------------------------


def test_startup_pods_says_when_nothing_matched(files: dict[str, Path], tmp_path: Path) -> None:
    code, out, err = _cli("startup", "pods", "--from-file", str(files["snapshot"]))
    assert code == 2 and out == ""
    assert _one_error_line(err).startswith(f"error: {files['snapshot']} holds no pods, events or nodes")

    pod, events = pod_and_events(
        PodPlan(
            name="web-6b7f9c8d5-x",
            created=0.0,
            scheduled=0.5,
            sandbox=1.0,
            ready=3.0,
            containers=[C("app", started=2.0)],
        )
    )
    listing = tmp_path / "pods.json"
    listing.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod, *events]}))
    code, out, err = _cli("startup", "pods", "--from-file", str(listing), "--workload", "nope")
    assert code == 1 and out == ""
    assert _one_error_line(err) == "error: no pod matches workload nope (1 pods read; workloads: web)"


def test_serve_reports_an_outage_once_not_every_retry() -> None:
    from shipshape.analyzers.startup import live
    from shipshape.analyzers.startup.prometheus import StartupMetrics
    from shipshape.cli import startup

    class Feed:
        def __init__(self) -> None:
            self.messages: queue.Queue[tuple[str, str, object]] = queue.Queue()

    feed = Feed()
    down = "cannot reach the API server at https://127.0.0.1:1: connection refused"
    for _ in range(5):
        feed.messages.put(("error", "pods", down))
    feed.messages.put(("replace", "pods", []))
    feed.messages.put(("error", "pods", down))
    stop = threading.Event()
    lines: list[str] = []

    def report(line: str) -> None:
        lines.append(line)
        if len(lines) == 3:
            stop.set()

    worker = threading.Thread(
        target=startup.run_live,
        args=(feed, live.LiveStartup(StartupMetrics())),
        kwargs={"stop": stop, "tick": 0.01, "report": report},
    )
    worker.start()
    worker.join(10)
    stop.set()
    assert lines == [
        f"[yellow]pods watch failed, retrying:[/yellow] {down}",
        "pods watch is back",
        f"[yellow]pods watch failed, retrying:[/yellow] {down}",
    ]
