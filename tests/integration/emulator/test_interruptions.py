"""Spot interruptions on a served cluster: the notice (taint, Event, instance metadata), the node's
removal 120 s (emulated) later, and the workloads' pods recreated elsewhere by their controllers.

Notices are sent with the real `shipshape emulator interrupt` command against the served API, or
through the cloud service; random reclaims are off in the test scenario.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from shipshape.cli import emulator as emulator_cli
from shipshape.emulator.cloud.model import CloudModel
from shipshape.emulator.resources import NODES
from shipshape.emulator.store import Obj
from shipshape.kube.clock import parse_time

from .served_cluster import (
    ON_DEMAND,
    SPOT_A,
    SPOT_B,
    ServedCluster,
    Watch,
    ready_pods,
    scenario,
    serve_cluster,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

SPOT_TAINT = "emulator.shipshape.dev/spot-interruption"
METADATA_URL = "emulator.shipshape.dev/metadata-url"
NOTICE = 120.0

WORKLOADS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      nodeSelector: {node.kubernetes.io/capacity: spot}
      containers:
      - name: nginx
        image: nginx:1.27
        resources: {requests: {cpu: 100m, memory: 128Mi}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  serviceName: db
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 5
      nodeSelector: {node.kubernetes.io/capacity: spot}
      containers:
      - name: db
        image: busybox:1.36
        resources: {requests: {cpu: 200m, memory: 256Mi}}
"""


def _shipshape() -> list[str]:
    """The installed `shipshape` command of this environment."""
    return [str(Path(sys.executable).parent / "shipshape")]


class NodeWatch(Watch):
    """A watch on nodes: when (emulated) each one first carried the spot interruption taint, and
    when it was deleted."""

    def __init__(self, cluster: ServedCluster) -> None:
        super().__init__(cluster, cluster.core.list_node)

    @property
    def tainted_at(self) -> dict[str, float]:
        first: dict[str, float] = {}
        for kind, node, at in list(self.events):
            if kind != "DELETED" and any(t["key"] == SPOT_TAINT for t in node["spec"].get("taints") or []):
                first.setdefault(node["metadata"]["name"], at)
        return first

    @property
    def deleted_at(self) -> dict[str, float]:
        return {node["metadata"]["name"]: at for kind, node, at in list(self.events) if kind == "DELETED"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ServedCluster]:
    with serve_cluster(tmp_path) as served:
        yield served


def _deploy(cluster: ServedCluster) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=WORKLOADS)
    cluster.wait("web ready", lambda: len(ready_pods(cluster.pods(app="web"))) == 4, 120)
    cluster.wait("db ready", lambda: len(ready_pods(cluster.pods(app="db"))) == 2, 120)


def _spot_events(cluster: ServedCluster, node: str) -> list[Obj]:
    listed = cluster.kubectl(
        "get",
        "events",
        "-A",
        "--field-selector",
        f"involvedObject.kind=Node,involvedObject.name={node},reason=SpotInterruption",
        "-o",
        "json",
    ).stdout
    items: list[Obj] = json.loads(listed)["items"]
    return items


def _recreated_off(cluster: ServedCluster, app: str, count: int, gone: set[str]) -> list[Obj] | None:
    """All `count` pods of `app` ready, none on the nodes `gone`."""
    pods = cluster.pods(app=app)
    ready = ready_pods(pods)
    if len(pods) == count and len(ready) == count and not {p["spec"]["nodeName"] for p in ready} & gone:
        return ready
    return None


def test_pool_interruption_through_the_cli(tmp_path: Path) -> None:
    # A slower clock: the notice's 120 s leave several real seconds to look at the nodes.
    with serve_cluster(tmp_path, speed=25) as cluster:
        _pool_interruption_through_the_cli(cluster)


def _pool_interruption_through_the_cli(cluster: ServedCluster) -> None:
    _deploy(cluster)
    doomed, survivors = set(cluster.nodes_of(SPOT_A)), set(cluster.nodes_of(SPOT_B))
    before = {p["metadata"]["name"]: p for p in cluster.pods(app="web") + cluster.pods(app="db")}
    assert {p["spec"]["nodeName"] for p in before.values()} & doomed, "some pods run on the doomed pool"
    nodes = NodeWatch(cluster)
    try:
        command = [*_shipshape(), "emulator", "interrupt", "--pool", SPOT_A]
        cli = subprocess.Popen(
            [*command, "--kubeconfig", str(cluster.served.kubeconfig)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # Look as soon as the watch shows the notice, not when the command has exited: what
            # must be seen while the nodes exist comes first (the metadata endpoint, describe node).
            cluster.wait("the notice on the pool's nodes", lambda: doomed <= set(nodes.tainted_at), 600)
            actions: dict[str, Obj] = {}
            for name in sorted(doomed | survivors):
                node = cluster.get(NODES, "", name)
                assert node is not None
                url = node["metadata"]["annotations"][METADATA_URL]
                token = httpx.put(
                    f"{url}/latest/api/token",
                    headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
                    timeout=10,
                ).text  # IMDSv2: a session token first
                answer = httpx.get(
                    f"{url}/latest/meta-data/spot/instance-action",
                    headers={"X-aws-ec2-metadata-token": token},
                    timeout=10,
                )
                if name in survivors:
                    assert answer.status_code == 404
                    assert not [t for t in node["spec"].get("taints") or [] if t["key"] == SPOT_TAINT]
                    continue
                assert answer.status_code == 200
                actions[name] = answer.json()
                taints = node["spec"]["taints"]
                assert {"key": SPOT_TAINT, "value": "terminate", "effect": "NoSchedule"} in taints
            described = cluster.kubectl("describe", "node", sorted(doomed)[0]).stdout
            assert f"{SPOT_TAINT}=terminate:NoSchedule" in described
            assert re.search(r"Warning\s+SpotInterruption\s+", described)
        finally:
            stdout, stderr = cli.communicate(timeout=60)
        assert cli.returncode == 0, stderr
        lines = stdout.strip().splitlines()
        (terminate_at,) = {action["time"] for action in actions.values()}
        assert lines[0] == (
            f"interruption notice sent to 2 node(s) of pool {SPOT_A}; "
            f"they terminate at {terminate_at} (notice 120s):"
        )
        assert {line.strip() for line in lines[1:]} == doomed
        assert all(action["action"] == "terminate" for action in actions.values())

        # The instances terminate when the notice runs out, and their nodes go.
        cluster.wait("the doomed nodes deleted", lambda: doomed <= set(nodes.deleted_at), NOTICE + 60)
    finally:
        nodes.stop()
    assert not {n["metadata"]["name"] for n in cluster.objects(NODES)} & doomed
    for name in doomed:
        (event,) = _spot_events(cluster, name)  # Events outlive their node
        assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Node"
        assert event["message"].endswith(
            f"received an interruption notice: it will be terminated at {terminate_at}"
        )
        noticed = parse_time(event["firstTimestamp"])
        assert NOTICE - 1 <= parse_time(terminate_at) - noticed <= NOTICE + 1
        assert nodes.deleted_at[name] >= parse_time(terminate_at) - 1, "a node went before its notice ran out"
        # The watch notes times a little late (it is a client), so this bound is loose.
        assert nodes.deleted_at[name] - nodes.tainted_at[name] <= NOTICE + 30, "a node outlived its notice"

    # Their pods are recreated by their controllers elsewhere (the pool also launches replacement
    # instances, which may take some of them).
    web = cluster.wait("web recreated", lambda: _recreated_off(cluster, "web", 4, doomed), 180)
    db = cluster.wait("db recreated", lambda: _recreated_off(cluster, "db", 2, doomed), 180)
    lost = {name for name, p in before.items() if p["spec"]["nodeName"] in doomed}
    assert not lost & {p["metadata"]["name"] for p in web}  # a ReplicaSet's replacements are new pods
    assert sorted(p["metadata"]["name"] for p in db) == ["db-0", "db-1"]  # same identities, new pods
    old_uids = {p["metadata"]["uid"] for p in before.values()}
    moved_db = [p for p in db if before[p["metadata"]["name"]]["spec"]["nodeName"] in doomed]
    assert all(p["metadata"]["uid"] not in old_uids for p in moved_db)


def test_interrupt_cli_refuses_bad_targets(cluster: ServedCluster) -> None:
    kubeconfig = str(cluster.served.kubeconfig)
    runner = CliRunner()

    def interrupt(*args: str) -> Result:
        return runner.invoke(emulator_cli.app, ["interrupt", *args, "--kubeconfig", kubeconfig])

    on_demand = interrupt("--pool", ON_DEMAND)
    assert on_demand.exit_code == 1
    assert on_demand.output.strip() == (
        f"error: pool '{ON_DEMAND}' is on-demand: only spot instances get interruption notices"
    )
    unknown = interrupt("--pool", "nope")
    assert unknown.exit_code == 1 and "unknown pool 'nope'" in unknown.output
    both = interrupt("--pool", SPOT_A, "--zone", "us-east-1a")
    assert both.exit_code == 2 and "give exactly one of --node, --pool or --zone" in both.output
    bad_notice = interrupt("--pool", SPOT_A, "--notice", "soon")
    assert bad_notice.exit_code == 2 and "--notice" in bad_notice.output
    # Nothing was noticed.
    for node in cluster.objects(NODES):
        assert not [t for t in node["spec"].get("taints") or [] if t["key"] == SPOT_TAINT]
    assert not cluster.core.list_event_for_all_namespaces(field_selector="reason=SpotInterruption").items


def test_interruption_handler_drains_before_the_node_goes(tmp_path: Path) -> None:
    sc = scenario(interruptions={"rateMultiplier": 0, "handler": True})
    with serve_cluster(tmp_path, sc) as cluster:
        _deploy(cluster)
        cloud: CloudModel = cluster.served.cluster.services["cloud"]
        hosts = [p["spec"]["nodeName"] for p in cluster.pods(app="web")]
        target = max(sorted(set(hosts)), key=hosts.count)
        deletions = NodeWatch(cluster)
        try:
            sent_at = cluster.now()
            assert cluster.call(lambda: cloud.interrupt(node=target)) == [target]

            def drained() -> bool:
                node = cluster.get(NODES, "", target)
                return (
                    node is not None
                    and node["spec"].get("unschedulable") is True
                    and any(
                        t["key"] == "aws-node-termination-handler/spot-itn"
                        for t in node["spec"].get("taints") or []
                    )
                    and _recreated_off(cluster, "web", 4, {target}) is not None
                )

            cluster.wait("the handler cordoned and drained the node", drained, 90)
            assert target not in deletions.deleted_at, "replacements were ready before the node went"
            cluster.wait("the node deleted", lambda: target in deletions.deleted_at, NOTICE + 60)
        finally:
            deletions.stop()
        assert deletions.deleted_at[target] >= sent_at + NOTICE - 1
