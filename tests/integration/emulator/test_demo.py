"""`shipshape demo`: the narrated show in a subprocess, with kubectl pointed at it while it runs, and
a right-sizing recommendation approved through the backend's API and applied by the agent."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from shipshape.cli import demo
from shipshape.contracts.annotations import (
    DECISION,
    EMULATOR_POOL_LABEL,
    EMULATOR_SPOT_INTERRUPTION_TAINT,
    RESTART_NOTE,
    SURGE_NOTE,
    DecisionRecord,
    RestartNote,
    SurgeNote,
)

REPO = Path(__file__).resolve().parents[3]
SCENARIO = REPO / "examples" / "scenarios" / "demo.yaml"
SHOW_LIMIT_SECONDS = 90.0
DASHBOARD_LINE = r"dashboard: (http://127\.0\.0\.1:\d+)/dashboard/ +\(log in with the API key (\S+)\)"


def _command(*args: str) -> list[str]:
    return [sys.executable, "-c", "from shipshape.cli.main import app; app()", "demo", *args]


def _environment() -> dict[str, str]:
    # Wide lines so that the narration is not wrapped; no colour codes in what the test reads.
    return {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


class Kubectl:
    def __init__(self, kubeconfig: Path, cache: Path) -> None:
        self.base = ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache)]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=20)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.base, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


def _lines(stream: Any, into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line.rstrip("\n"))
    into.put(None)


def _finish(watch: subprocess.Popen[str] | None) -> str:
    """What a `kubectl get --watch` printed; it ends by itself when the server goes away."""
    if watch is None:
        return ""
    try:
        out, _ = watch.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        watch.kill()
        out, _ = watch.communicate()
    return out


def _approve_rightsizing(url: str, headers: dict[str, str], workload: str) -> dict[str, Any]:
    """Approve the open right-sizing recommendation of `workload` through the backend's API."""
    (cluster,) = httpx.get(f"{url}/api/v1/clusters", headers=headers).json()
    listed = httpx.get(f"{url}/api/v1/clusters/{cluster['id']}/recommendations", headers=headers).json()
    (found,) = [
        r
        for r in listed
        if r["kind"] == "right-sizing"
        and r["status"] == "open"
        and r["recommendation"]["evidence"]["workload"] == workload
    ]
    answer = httpx.post(f"{url}/api/v1/recommendations/{found['id']}/approve", headers=headers)
    assert answer.status_code == 200, answer.text
    return dict(found)


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_demo_show_with_kubectl_during_the_run(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    kubectl = Kubectl(workdir / "kubeconfig", tmp_path / "kube-cache")
    process = subprocess.Popen(
        _command(
            "--scenario",
            str(SCENARIO),
            "--speed",
            "30",
            "--port",
            "0",
            "--workdir",
            str(workdir),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_environment(),
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True).start()
    output: list[str] = []
    nodes_seen: subprocess.CompletedProcess[str] | None = None
    clusters_seen: tuple[int, list[str]] | None = None
    backend: tuple[str, dict[str, str]] | None = None
    approved: dict[str, Any] | None = None
    watch: subprocess.Popen[str] | None = None
    deadline = time.monotonic() + SHOW_LIMIT_SECONDS
    try:
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            output.append(line)
            if line.startswith("right-sizing: approve one in the dashboard") and backend is not None:
                # What a newcomer does in the dashboard: approve the over-requested api's right-sizing.
                approved = _approve_rightsizing(*backend, "Deployment/shop/api")
            if "right-sizing applied" in line:
                process.send_signal(signal.SIGINT)  # the show is over and followed: stop it
            if line.startswith("ready: API server at https://") and watch is None:
                watch = kubectl.start("get", "nodes", "--watch", "--output-watch-events")
                nodes_seen = kubectl.run("get", "nodes", "-L", "node.kubernetes.io/capacity")
            board = re.match(
                r"dashboard: (http://127\.0\.0\.1:\d+)/dashboard/ +\(log in with the API key (\S+)\)", line
            )
            if board is not None:
                backend = (board.group(1), {"Authorization": f"Bearer {board.group(2)}"})
                # While the demo runs, its backend answers with the key it printed.
                listed = httpx.get(
                    f"{board.group(1)}/api/v1/clusters", headers={"Authorization": f"Bearer {board.group(2)}"}
                )
                clusters_seen = (listed.status_code, [c["name"] for c in listed.json()])
                page = httpx.get(f"{board.group(1)}/dashboard/")
                assert page.status_code == 200 and "chart.umd.min.js" in page.text
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        watched = _finish(watch)
    text = "\n".join(output)
    assert code == 0, text
    assert watch is not None and nodes_seen is not None, text
    assert clusters_seen == (200, ["demo"]), text

    # kubectl listed the six nodes of the scenario, spot and on-demand, while the demo ran.
    assert nodes_seen.returncode == 0, nodes_seen.stderr
    rows = [row.split() for row in nodes_seen.stdout.strip().splitlines()]
    assert rows[0][:2] == ["NAME", "STATUS"] and rows[0][-1] == "CAPACITY"
    assert Counter(row[-1] for row in rows[1:]) == {"spot": 4, "on-demand": 2}
    # They may still be booting, or be cordoned by the scenario's interruption handler.
    assert {row[1].split(",")[0] for row in rows[1:]} <= {"Ready", "NotReady"}

    # The narration: ready, the controller up, workloads up with its decisions, the interruption,
    # what the controller did, replacements, new nodes, availability and cost.
    assert re.search(r"placement controller running: webhook registered on port \d+, leader elected", text)
    assert "all Deployments available" in text
    decided = re.search(r"Deployment/web\s+│\s+6\s+│\s+1\s+│\s+5\s+│", text)
    assert decided is not None, text  # base 1 on-demand, the other five on spot
    assert re.search(r"StatefulSet/db\s+│\s+2\s+│\s+1\s+│\s+1\s+│", text), text
    interrupted = re.search(r"spot interruption: pool (\S+), 2 node\(s\) \(([^)]*)\), 2-minute notice", text)
    assert interrupted is not None, text
    pool, nodes = interrupted.group(1), interrupted.group(2).split(", ")
    assert re.search(r"replacements landed: [1-9]\d* pod\(s\) running elsewhere", text), text
    for node in nodes:
        assert f"node {node} terminated" in text
    joined = re.findall(rf"node (\S+) joined pool {re.escape(pool)}", text)
    assert len(joined) == 2 and not set(joined) & set(nodes)
    assert f"pool {pool} back to size" in text
    # The controller acted before the nodes went: a surge or a surge restart, and no workload fell
    # below its floor (an independent count from the emulator's watch stream).
    assert re.search(r"controller (surged|restarted) Deployment/\S+", text), text
    assert "no outage: every workload kept at least its floor" in text, text
    assert re.search(r"cost so far: \d+\.\d{4} USD, \d+% less than the same nodes on demand", text), text
    # Right-sizing from the usage the agent collected: api uses 8 % of its 250m CPU and a quarter of
    # its 256Mi (the scenario's usage profile), so the backend recommends ~21m (the 95th percentile of
    # 20m with the emulator's ±5 % jitter) and 100Mi (the analyzer's floor: 64Mi + 15 % is less).
    assert re.search(r"Deployment/shop/api\s+│ api: cpu 250m → 2\dm, memory 256Mi → 100Mi", text), text
    assert approved is not None, text
    instruction = approved["recommendation"]["instruction"]
    assert instruction["type"] == "set-container-requests"
    assert instruction["containers"]["api"]["requests"]["memory"] == "100Mi"
    applied = re.search(r"right-sizing applied by the agent: Deployment shop/api now requests (.*)", text)
    assert applied is not None, text
    assert applied.group(1) == f"api: cpu {instruction['containers']['api']['requests']['cpu']}, memory 100Mi"
    assert "show over" in text and text.rstrip().endswith("stopped")

    # The watch kubectl held open saw the reclaimed nodes go and their replacements come.
    events = [line.split()[:2] for line in watched.splitlines()[1:] if line.strip()]
    deleted = {demo.short_node(name) for kind, name in events if kind == "DELETED"}
    added = {demo.short_node(name) for kind, name in events if kind == "ADDED"}
    assert set(nodes) <= deleted, watched
    assert set(joined) <= added, watched


@pytest.mark.integration
def test_demo_port_taken(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        done = subprocess.run(
            _command("--scenario", str(SCENARIO), "--port", str(port), "--workdir", str(tmp_path / "demo")),
            capture_output=True,
            text=True,
            env=_environment(),
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: cannot serve on port {port}: the port is in use")


@pytest.mark.integration
def test_demo_bad_scenario(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\npools: []\n")
    done = subprocess.run(
        _command("--scenario", str(broken), "--workdir", str(tmp_path / "demo")),
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "pools" in done.stderr


# ---- the pure views the narration is built on ----------------------------------------------------------


def _deployment(name: str, replicas: int, available: int, *, observed: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "generation": 1},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": available,
        },
    }


def test_statefulsets_ready_needs_every_replica_ready() -> None:
    ready = {"spec": {"replicas": 2}, "status": {"readyReplicas": 2}}
    starting = {"spec": {"replicas": 2}, "status": {"readyReplicas": 1}}
    assert demo.statefulsets_ready([ready]) and not demo.statefulsets_ready([ready, starting])
    assert demo.statefulsets_ready([])


def test_rollout_progress_counts_available_replicas_up_to_desired() -> None:
    assert demo.rollout_progress([_deployment("a", 3, 3), _deployment("b", 2, 1)]) == (4, 5, False)
    assert demo.rollout_progress([_deployment("a", 3, 3), _deployment("b", 2, 2)]) == (5, 5, True)
    # A status not yet observed for the current generation is not "available".
    assert demo.rollout_progress([_deployment("a", 1, 1, observed=0)]) == (1, 1, False)


def _pod(name: str, node: str, owner: tuple[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "labels": {}}
    if owner is not None:
        md["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
        if owner[0] == "ReplicaSet":
            md["labels"]["pod-template-hash"] = owner[1].rsplit("-", 1)[1]
    md.update(extra)
    return {"metadata": md, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_owner_and_placement_views() -> None:
    web = _pod("web-1", "n1", ("ReplicaSet", "web-5d8f7c"))
    agent = _pod("agent-x", "n1", ("DaemonSet", "agent"))
    db = _pod("db-0", "n2", ("StatefulSet", "db"))
    leaving = _pod("web-2", "n2", ("ReplicaSet", "web-5d8f7c"), deletionTimestamp="2026-01-01T00:00:00Z")
    assert demo.owner_of(web) == "Deployment/web"
    assert demo.owner_of(db) == "StatefulSet/db"
    assert demo.owner_of(_pod("bare", "n1")) == "Pod/bare"
    counts = demo.pods_per_pool([web, agent, db, leaving], {"n1": "spot-a", "n2": "od-a"})
    assert counts == {"spot-a": 1, "od-a": 1}


def _pool(name: str, capacity: str, ready: int, price: float = 0.1) -> dict[str, Any]:
    return {
        "name": name,
        "capacityType": capacity,
        "instanceType": "m5.large",
        "zone": "us-east-1a",
        "ready": ready,
        "booting": 0,
        "pricePerHour": price,
        "onDemandPricePerHour": 0.1,
    }


def test_busiest_spot_pool_and_pool_rows() -> None:
    pools = [_pool("spot-a", "spot", 2), _pool("spot-b", "spot", 2), _pool("od", "on-demand", 1)]
    assert demo.busiest_spot_pool(pools, Counter({"spot-b": 3, "spot-a": 1, "od": 9})) == "spot-b"
    assert demo.busiest_spot_pool(pools, Counter()) == "spot-a"
    assert demo.busiest_spot_pool([_pool("od", "on-demand", 1)], Counter()) is None
    ready = {"type": "Ready", "status": "True"}
    nodes = [
        {"metadata": {"labels": {EMULATOR_POOL_LABEL: "spot-a"}}, "status": {"conditions": [ready]}},
        {"metadata": {"labels": {EMULATOR_POOL_LABEL: "spot-a"}}, "status": {"conditions": []}},
    ]
    rows = {row.pool: row for row in demo.pool_rows(pools, nodes)}
    assert (rows["spot-a"].ready, rows["spot-a"].nodes) == (1, 2)
    assert (rows["od"].ready, rows["od"].nodes) == (0, 0)


def test_on_demand_equivalent() -> None:
    pools = [_pool("spot-a", "spot", 1, price=0.03), _pool("od", "on-demand", 1, price=0.1)]
    cost = {"byPool": {"spot-a": {"nodeHours": 2.0}, "od": {"nodeHours": 1.0}}}
    assert demo.on_demand_equivalent(cost, pools) == pytest.approx(0.3)


def test_noticed_nodes_are_those_with_the_interruption_taint() -> None:
    tainted = {
        "metadata": {"name": "a"},
        "spec": {
            "taints": [
                {"key": EMULATOR_SPOT_INTERRUPTION_TAINT, "value": "terminate", "effect": "NoSchedule"}
            ]
        },
    }
    other = {"metadata": {"name": "b"}, "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}
    bare = {"metadata": {"name": "c"}, "spec": {}}
    assert demo.noticed_nodes([tainted, other, bare]) == {"a"}


def _decided(name: str, node: str, owner: tuple[str, str], decision: dict[str, Any]) -> dict[str, Any]:
    record = DecisionRecord(id=name, **decision)
    pod = _pod(name, node, owner, uid=name, annotations={DECISION: record.dump()})
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return pod


def test_placement_rows_count_where_decided_pods_run_and_why() -> None:
    rs = ("ReplicaSet", "web-5d8f7c")
    pods = [
        _decided("web-1", "od1", rs, {"capacity_type": "on-demand", "reason": "on-demand-base"}),
        _decided("web-2", "s1", rs, {"capacity_type": "spot", "pool": "m5.large/a", "reason": "spot-share"}),
        _decided("web-3", "s2", rs, {"capacity_type": "spot", "pool": "c5.large/b", "reason": "spot-share"}),
        # Not decided by the controller (not opted in): not a row.
        _pod("other-1", "s1", ("ReplicaSet", "other-7b9c")),
    ]
    rows = demo.placement_rows(pods, {"od1": "on-demand", "s1": "spot", "s2": "spot"})
    assert rows == [
        demo.PlacementRow(
            workload="Deployment/web",
            pods=3,
            on_demand=1,
            spot=2,
            pools=("c5.large/b", "m5.large/a"),
            reasons=("spot-share", "on-demand-base"),
        )
    ]


def test_lowest_ready_follows_pod_events() -> None:
    rs = ("ReplicaSet", "web-5d8f7c")
    pods = [
        _decided(f"web-{i}", "n", rs, {"capacity_type": "spot", "reason": "spot-share"}) for i in range(3)
    ]
    tracker = demo.LowestReady(pods, ["Deployment/web"])
    assert tracker.lowest == {"Deployment/web": 3}
    tracker.observe("DELETED", pods[0])
    unready = {**pods[1], "status": {"phase": "Running", "conditions": []}}
    tracker.observe("MODIFIED", unready)
    replacement = _decided("web-9", "n", rs, {"capacity_type": "on-demand", "reason": "on-demand-base"})
    tracker.observe("ADDED", replacement)
    tracker.observe(
        "ADDED", _decided("web-10", "n", rs, {"capacity_type": "on-demand", "reason": "on-demand-base"})
    )
    # 3 -> 2 (deleted) -> 1 (unready) -> 2 -> 3: the lowest stays 1.
    assert tracker.lowest == {"Deployment/web": 1}


def test_workload_floors_take_the_strictest_selecting_pdb() -> None:
    web = {
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 6, "template": {"metadata": {"labels": {"app": "web"}}}},
    }
    single = {
        "kind": "Deployment",
        "metadata": {"name": "one", "namespace": "shop"},
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "one"}}}},
    }
    pdbs = [
        {
            "metadata": {"namespace": "shop"},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "web"}}},
        },
        {
            "metadata": {"namespace": "shop"},
            "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}},
        },
        {
            "metadata": {"namespace": "else"},
            "spec": {"minAvailable": 6, "selector": {"matchLabels": {"app": "web"}}},
        },
    ]
    assert demo.workload_floors([web, single], pdbs) == {"Deployment/web": (6, 4), "Deployment/one": (1, 1)}


def test_controller_actions_are_reported_once_each() -> None:
    web = {
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "annotations": {SURGE_NOTE: SurgeNote(surge=2, since=1, deadline=2).dump()},
        },
    }
    one = {
        "kind": "Deployment",
        "metadata": {"name": "one", "annotations": {RESTART_NOTE: RestartNote(nodes=("n1",), at=1.0).dump()}},
    }
    seen: set[tuple[str, str]] = set()
    lines = demo.controller_actions([web, one], seen)
    assert lines[0].startswith("controller surged Deployment/web: +2 replica(s)")
    assert lines[1].startswith("controller restarted Deployment/one")
    assert demo.controller_actions([web, one], seen) == []
    # A second restart (another notice) is reported again.
    one["metadata"]["annotations"][RESTART_NOTE] = RestartNote(nodes=("n2",), at=2.0).dump()
    assert len(demo.controller_actions([web, one], seen)) == 1
    # A note that is not a record of its schema is left out, not a crash.
    one["metadata"]["annotations"][RESTART_NOTE] = '{"at": "t3"}'
    web["metadata"]["annotations"][SURGE_NOTE] = "[]"
    assert demo.controller_actions([web, one], seen) == []


def test_hourly_rates_price_running_nodes_both_ways() -> None:
    pools = [_pool("spot-a", "spot", 2, price=0.03), _pool("od", "on-demand", 1, price=0.1)]
    now, on_demand = demo.hourly_rates(pools)
    assert now == pytest.approx(2 * 0.03 + 0.1)
    assert on_demand == pytest.approx(3 * 0.1)


def test_rightsizing_views_pick_actionable_recommendations_largest_saving_first() -> None:
    def rec(title: str, status: str, saving: float | None, instruction: bool = True) -> dict[str, Any]:
        body = {"instruction": {"type": "set-container-requests"} if instruction else None}
        return {
            "kind": "right-sizing",
            "title": title,
            "status": status,
            "monthly_savings_usd": saving,
            "recommendation": body,
        }

    small, large = rec("small", "open", 1.0), rec("large", "applied", 9.0)
    daemonset = rec("daemonset", "open", 50.0, instruction=False)  # advisory: nothing to approve
    listed = [
        small,
        large,
        daemonset,
        rec("dismissed", "dismissed", 99.0),
        {**small, "kind": "spot-adoption"},
    ]
    assert demo.rightsizing_of(listed) == [large, small]
