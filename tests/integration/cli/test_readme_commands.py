"""Every row of the README's command table, run as written against the emulator, so that the table
cannot drift from the product.

`test_every_readme_flag_exists` checks each row's command and flags against the CLI itself; a row
whose command has no entry in `RUNS` fails `test_every_readme_row_has_a_run`: add a run below when
adding a row. The runs share one `shipshape emulator up` (the installed entry point, in a
subprocess, from a scratch working folder) and take emulated time at 20x.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_command
from typer.testing import CliRunner

from shipshape.cli.main import app

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
DEMO = REPO / "examples" / "scenarios" / "demo.yaml"
SHIPSHAPE = Path(sys.executable).with_name("shipshape")
FLAG = re.compile(r"(?<![\w-])(--?[a-z][\w-]*)")
LIMIT = 60.0


def readme_rows() -> list[str]:
    """Each command form in the first column of the README's table (a cell may hold several),
    `\\|` read as `|`."""
    rows = []
    for line in README.read_text().splitlines():
        if not line.startswith("| `shipshape "):
            continue
        first_cell = re.split(r"(?<!\\)\|", line)[1]
        rows += [form.replace("\\|", "|") for form in re.findall(r"`(shipshape [^`]*)`", first_cell)]
    return rows


def command_path(form: str) -> tuple[str, ...]:
    """`shipshape emulator up --scenario FILE` -> ("emulator", "up")."""
    path = []
    for word in form.split()[1:]:
        if not re.fullmatch(r"[a-z][a-z-]*", word):
            break
        path.append(word)
    return tuple(path)


def options_of(path: tuple[str, ...]) -> set[str]:
    command: Any = get_command(app)
    ctx = command.context_class(command, info_name="shipshape")
    for name in path:
        command = command.get_command(ctx, name)
        assert command is not None, f"README names `shipshape {' '.join(path)}`, which does not exist"
        ctx = command.context_class(command, info_name=name, parent=ctx)
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def test_the_readme_has_its_command_table() -> None:
    assert len(readme_rows()) >= 10


@pytest.mark.parametrize("form", readme_rows())
def test_every_readme_flag_exists(form: str) -> None:
    known = options_of(command_path(form))
    named = set(FLAG.findall(form.split("`")[0]))
    assert named <= known, f"{form}: {sorted(named - known)} are not options of the command"


# ---- the runs -----------------------------------------------------------------------------------------


def _shipshape(*args: str) -> list[str]:
    if SHIPSHAPE.exists():
        return [str(SHIPSHAPE), *args]
    return [sys.executable, "-c", "from shipshape.cli.main import app; app()", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@dataclass
class Up:
    process: subprocess.Popen[str]
    kubeconfig: Path
    url: str


def _start_up(cwd: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _shipshape("emulator", "up", "--scenario", str(DEMO), "--speed", "20", "--start", "1h", *extra),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def _ready(process: subprocess.Popen[str]) -> Up:
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline().strip()
    assert first.startswith("ready "), (first, process.stderr.read() if process.poll() is not None else "")
    url = ""
    while not url:
        line = process.stderr.readline()
        assert line, "emulator up ended before printing its URL"
        match = re.search(r"API server at (https://127\.0\.0\.1:\d+)", line)
        url = match.group(1) if match else ""
    return Up(process, Path(first.removeprefix("ready ")), url)


def _stop(process: subprocess.Popen[str], grace: float = 15) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "100"})
    assert result.exit_code == 0, (args, result.stdout, result.stderr)
    return result.stdout


def _until(check: Callable[[], bool], what: str, limit: float = LIMIT) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@dataclass
class World:
    up: Up
    scratch: Path
    others: list[Up]
    chosen_port: int
    backend_row: dict[str, Any] | None = None


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    scratch = tmp_path_factory.mktemp("readme")
    chosen = _free_port()
    processes = [
        _start_up(scratch),
        _start_up(scratch),  # the same scenario twice: never the same port or kubeconfig
        _start_up(scratch, "--port", str(chosen), "--kubeconfig", str(scratch / "mine" / "kubeconfig")),
    ]
    try:
        ups = [_ready(process) for process in processes]
        kubeconfig = ups[0].kubeconfig

        def pods_running() -> bool:
            listed = subprocess.run(
                ["kubectl", "--kubeconfig", str(kubeconfig), "get", "pods", "-n", "shop", "-o", "json"],
                capture_output=True,
                text=True,
                check=False,
            )
            items = json.loads(listed.stdout or "{}").get("items") or []
            return len(items) >= 6 and all(p["status"].get("phase") == "Running" for p in items)

        _until(pods_running, "the demo workloads to run")
        yield World(ups[0], scratch, ups[1:], chosen)
    finally:
        for process in processes:
            _stop(process)


def run_up(world: World) -> None:
    first, second, chosen = world.up, *world.others
    for up in (first, second):
        port = up.url.rsplit(":", 1)[1]
        assert up.kubeconfig == world.scratch / ".emulator" / "up" / f"demo-{port}" / "kubeconfig"
    assert first.url != second.url
    assert yaml.safe_load(first.kubeconfig.read_text()) != yaml.safe_load(second.kubeconfig.read_text())
    assert chosen.kubeconfig == world.scratch / "mine" / "kubeconfig"
    server = yaml.safe_load(chosen.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert server == chosen.url == f"https://127.0.0.1:{world.chosen_port}"


def run_interrupt(world: World) -> None:
    listed = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(world.up.kubeconfig),
            "get",
            "nodes",
            "-l",
            "node.kubernetes.io/capacity=spot",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    node = sorted(listed.stdout.split())[0]
    short = node.split(".", 1)[0]  # as the demo prints it
    out = _cli(
        "emulator", "interrupt", "--node", short, "--notice", "120s", "--kubeconfig", str(world.up.kubeconfig)
    )
    assert f"interruption notice sent to 1 node(s) of node {node}" in out


def run_shortage(world: World) -> None:
    out = _cli(
        "emulator",
        "shortage",
        "--pool",
        "spot-c5-large-b",
        "--for",
        "10m",
        "--kubeconfig",
        str(world.up.kubeconfig),
    )
    assert out.startswith("pool spot-c5-large-b has no capacity until ")


def run_startup_pods(world: World) -> None:
    chart = world.scratch / "pods.png"
    kubeconfig = str(world.up.kubeconfig)
    table = _cli(
        "startup",
        "pods",
        "--kubeconfig",
        kubeconfig,
        "-o",
        "wide",
        "--workload",
        "web",
        "--chart",
        str(chart),
    )
    assert "shop/web-" in table and chart.stat().st_size > 0
    live = json.loads(_cli("startup", "pods", "--kubeconfig", kubeconfig, "-o", "json"))
    dump = world.scratch / "kubectl.json"
    dump.write_text(
        subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "get", "pods,events,nodes", "-A", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    from_file = json.loads(_cli("startup", "pods", "--from-file", str(dump), "-o", "json"))
    assert from_file["pods"] >= live["pods"] - 2  # the cluster moves on between the two reads
    assert (
        yaml.safe_load(_cli("startup", "pods", "--from-file", str(dump), "-o", "yaml"))["pods"]
        == from_file["pods"]
    )


def run_startup_nodes(world: World) -> None:
    chart = world.scratch / "nodes.svg"
    body = json.loads(
        _cli(
            "startup", "nodes", "--kubeconfig", str(world.up.kubeconfig), "-o", "json", "--chart", str(chart)
        )
    )
    assert len(body["nodes"]) >= 6 and "<svg" in chart.read_text()
    assert "NODE" in _cli("startup", "nodes", "--kubeconfig", str(world.up.kubeconfig), "-o", "wide")


def run_node_collector(world: World) -> None:
    log = world.scratch / "host" / "var" / "log"
    log.mkdir(parents=True)
    kubelet = "ip-1 kubelet[5685]: I1128"
    (log / "messages").write_text(
        "Nov 28 02:59:07 ip-1 kernel: Linux version 5.4.219\n"
        'Nov 28 02:59:10 ip-1 containerd: time="2022-11-28T02:59:10.9Z" msg="starting containerd"\n'
        "Nov 28 02:59:14 ip-1 systemd: Starting Kubernetes Kubelet...\n"
        f'Nov 28 02:59:15 {kubelet} 02:59:15.1 5685 status.go:76] "Successfully registered node"\n'
        f'Nov 28 02:59:25 {kubelet} 02:59:25.5 5685 status.go:1] "Recording event" event="NodeReady"\n'
    )
    body = json.loads(_cli("node-collector", "--root", str(world.scratch / "host"), "--once", "--json"))
    assert {e["event"] for e in body["events"]} >= {"vm_initialized", "registered", "node_ready"}
    assert body["problems"] == [] and next(e for e in body["events"] if e["event"] == "node_ready")[
        "t"
    ] == pytest.approx(18.5)
    assert (
        json.loads(
            _cli(
                "node-collector", "--root", str(world.scratch / "host"), "--once", "--json", "--year", "2022"
            )
        )
        == body
    )


def run_startup_serve(world: World) -> None:
    port = _free_port()
    process = subprocess.Popen(
        _shipshape(
            "startup", "serve", "--kubeconfig", str(world.up.kubeconfig), "--port", str(port), "--settle", "0"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:

        def scraped() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    return b"shipshape_pod_start_total_duration_seconds_count" in response.read()
            except OSError:
                return False

        _until(scraped, "start-up histograms at /metrics")
    finally:
        _stop(process)


def run_simulate(world: World) -> None:
    config = world.scratch / "controller.yaml"
    config.write_text("spot_percentage: 80\n")
    chart = world.scratch / "simulate.svg"
    body = json.loads(
        _cli(
            "simulate",
            "--scenario",
            str(DEMO),
            "--duration",
            "30m",
            "--strategy",
            "shipshape",
            "--compare",
            "--json",
            "--chart",
            str(chart),
            "--controller-config",
            str(config),
        )
    )
    assert {s["strategy"] for s in body["strategies"]} >= {
        "on-demand",
        "shipshape",
    } and chart.stat().st_size > 0


def run_demo(world: World) -> None:
    done = subprocess.run(
        _shipshape("demo", "--speed", "100", "--exit-after-show"),
        cwd=world.scratch,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    exported = re.search(r"export KUBECONFIG=(\S+)", done.stdout)
    assert exported and "show over" in done.stdout
    assert re.search(r"dashboard: http://127\.0\.0\.1:\d+/dashboard/", done.stdout), done.stdout
    folder = Path(exported.group(1)).parent
    assert folder.parent == world.scratch / ".emulator" / "demo" and folder.name.startswith("demo-")


def run_controller(world: World) -> None:
    # Its log to a file: a pipe nobody reads fills up, and a process blocked writing its log cannot
    # stop. The grace is the controller's own stop budget (the loops' round, then the webhook drains).
    log = world.scratch / "controller.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            _shipshape(
                "controller",
                "--kubeconfig",
                str(world.up.kubeconfig),
                "--webhook-port",
                str(_free_port()),
                "--metrics-port",
                str(_free_port()),
            ),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=_env(),
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("shipshape controller ") and "webhook on port" in line, line
        finally:
            _stop(process, grace=60)
    assert process.returncode == 0, log.read_text()[-4000:]


def run_controller_uninstall(world: World) -> None:
    kubeconfig = str(world.up.kubeconfig)
    _cli("controller", "uninstall", "--kubeconfig", kubeconfig, "--dry-run")
    _cli("controller", "uninstall", "--kubeconfig", kubeconfig)
    _cli("controller", "uninstall", "--kubeconfig", kubeconfig)  # safe to run twice


def run_gpu_replay(world: World) -> None:
    from tests.unit.analyzers.gpu.builders import NODE_HEADER, POD_HEADER
    from tests.unit.analyzers.gpu.test_replay import CLUSTER, TRACE

    nodes, pods = world.scratch / "gpu-nodes.csv", world.scratch / "gpu-pods.csv"
    nodes.write_text("\n".join([NODE_HEADER, *CLUSTER]) + "\n")
    pods.write_text("\n".join([POD_HEADER, *TRACE]) + "\n")
    chart = world.scratch / "gpu.svg"
    body = json.loads(
        _cli(
            "gpu",
            "replay",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "all",
            "--seed",
            "7",
            "--json",
            "--chart",
            str(chart),
        )
    )
    assert len(body["policies"]) >= 2 and chart.stat().st_size > 0


def _backend_and_agent(world: World) -> dict[str, Any]:
    """`admin create-org`, `admin create-cluster`, `backend`, then `agent` on the emulator: the
    backend lists the cluster with the pods the agent pushed."""
    if world.backend_row is not None:
        return world.backend_row
    home = world.scratch / "backend"
    home.mkdir()

    def admin(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            _shipshape("admin", *args, "--json"),
            cwd=home,
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
            check=False,
        )
        assert done.returncode == 0, done.stderr
        created: dict[str, Any] = json.loads(done.stdout)
        return created

    org = admin("create-org", "acme")
    cluster = admin("create-cluster", "--org", org["org_id"], "emulated")
    token = home / "agent-token"
    token.write_text(cluster["agent_token"])
    port = _free_port()
    backend = subprocess.Popen(
        _shipshape("backend", "--port", str(port)),
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    agent: subprocess.Popen[str] | None = None
    base = f"http://127.0.0.1:{port}"
    try:

        def serving() -> bool:
            try:
                with urllib.request.urlopen(f"{base}/readyz", timeout=1) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        _until(serving, "the backend to serve")
        # The agent's Lease lives in shipshape-system (as in a cluster where deploy/agent/ made it).
        subprocess.run(
            ["kubectl", "--kubeconfig", str(world.up.kubeconfig), "apply", "-f", "-"],
            input=json.dumps(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shipshape-system"}}
            ),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        agent = subprocess.Popen(
            _shipshape(
                "agent",
                "--backend",
                base,
                "--token-file",
                str(token),
                "--kubeconfig",
                str(world.up.kubeconfig),
                "--spool",
                str(home / "spool"),
                "--delta-every",
                "1s",
                # its instruction loop's long poll delays stopping on SIGTERM by up to 15 s
                "--no-instructions",
            ),
            cwd=home,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        rows: list[dict[str, Any]] = []

        def pushed() -> bool:
            request = urllib.request.Request(
                f"{base}/api/v1/clusters", headers={"Authorization": f"Bearer {org['api_key']}"}
            )
            with urllib.request.urlopen(request, timeout=2) as response:
                rows[:] = json.loads(response.read())
            return bool(rows) and int(rows[0].get("pod_count") or 0) > 0

        _until(pushed, "the agent's snapshot to reach the backend")
        world.backend_row = rows[0]
        return rows[0]
    finally:
        if agent is not None:
            _stop(agent)
        _stop(backend)


def run_backend(world: World) -> None:
    assert _backend_and_agent(world)["name"] == "emulated"


def run_worker(world: World) -> None:
    nats = os.environ.get("SHIPSHAPE_TEST_NATS", "nats://127.0.0.1:4222")
    host, port = nats.removeprefix("nats://").rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        pytest.skip(f"no NATS server at {nats} (scripts/ensure-test-services.sh starts one)")
    home = world.scratch / "worker"
    home.mkdir()
    worker = subprocess.Popen(
        _shipshape("worker", "--queue", nats),
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        time.sleep(3)  # a real process that must stay up: nothing to poll but that it did not exit
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
    finally:
        _stop(worker)


def run_admin_migrate(world: World) -> None:
    home = world.scratch / "migrate"
    home.mkdir()
    done = subprocess.run(
        _shipshape("admin", "migrate", "--json"),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    migrated = json.loads(done.stdout)
    assert migrated["previous"] is None and migrated["revision"]
    assert (home / ".shipshape" / "backend.db").is_file()


def run_agent(world: World) -> None:
    assert int(_backend_and_agent(world)["node_count"]) > 0


def run_analyze(world: World) -> None:
    chart = world.scratch / "analyze.png"
    out = _cli("analyze", "--kubeconfig", str(world.up.kubeconfig), "--json", "--chart", str(chart))
    report = json.loads(out)
    assert isinstance(report, dict) and report and chart.stat().st_size > 0


def run_batch_resources(world: World) -> None:
    _cli("batch-resources", "--kubeconfig", str(world.up.kubeconfig), "--once", "--dry-run")


def run_node_notices(world: World) -> None:
    """One round on a spot node with no notice: it reads the node's metadata and changes nothing."""
    listed = subprocess.run(
        ["kubectl", "--kubeconfig", str(world.up.kubeconfig), "get", "nodes", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    node = next(
        n
        for n in json.loads(listed.stdout)["items"]
        if "emulator.shipshape.dev/metadata-url" in (n["metadata"].get("annotations") or {})
    )
    url = node["metadata"]["annotations"]["emulator.shipshape.dev/metadata-url"]
    name = node["metadata"]["name"]
    args = ["node-notices", "--node-name", name, "--kubeconfig", str(world.up.kubeconfig)]
    _cli(*args, "--cloud", "aws", "--metadata-url", url, "--interval", "2s", "--once")


RUNS: dict[tuple[str, ...], Callable[[World], None]] = {
    ("node-notices",): run_node_notices,
    ("analyze",): run_analyze,
    ("batch-resources",): run_batch_resources,
    ("controller", "uninstall"): run_controller_uninstall,
    ("gpu", "replay"): run_gpu_replay,
    ("backend",): run_backend,
    ("worker",): run_worker,
    ("admin", "create-org"): run_backend,
    ("admin", "create-cluster"): run_backend,
    ("admin", "migrate"): run_admin_migrate,
    ("agent",): run_agent,
    ("emulator", "up"): run_up,
    ("emulator", "interrupt"): run_interrupt,
    ("emulator", "shortage"): run_shortage,
    ("startup", "pods"): run_startup_pods,
    ("startup", "nodes"): run_startup_nodes,
    ("node-collector",): run_node_collector,
    ("startup", "serve"): run_startup_serve,
    ("simulate",): run_simulate,
    ("demo",): run_demo,
    ("controller",): run_controller,
}


def test_every_readme_row_has_a_run() -> None:
    missing = [form for form in readme_rows() if command_path(form) not in RUNS]
    assert not missing, f"README rows with no run in RUNS (add one): {missing}"


@pytest.mark.parametrize("form", readme_rows())
def test_readme_command_runs_as_documented(form: str, world: World) -> None:
    run = RUNS.get(command_path(form))
    if run is None:
        pytest.fail(f"no run for {form!r}")
    run(world)
