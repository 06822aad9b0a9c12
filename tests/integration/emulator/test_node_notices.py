"""The node-side notice poller against the emulator's per-node instance metadata, for every cloud.

The poller runs as on a node: it detects the cloud from its Node's providerID, reads the metadata at
the node's URL in the cloud's real format (IMDSv2 tokens, `Metadata-Flavor: Google` and
`wait_for_change`, Azure's `Metadata: true` and StartRequests), and publishes the notice on its Node
through the real API server: taint, condition and Event, once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from shipshape.cli.main import app
from shipshape.contracts import notices as contract
from shipshape.controller.notices import notices_from_taints
from shipshape.emulator.resources import EVENTS, NODES
from shipshape.kube.clock import parse_time
from shipshape.nodecollector.notices import detect, publish
from shipshape.nodecollector.notices.poller import NoticePoller
from tests.integration.emulator.served_cluster import SPOT_A, ServedCluster, scenario, serve_cluster

pytestmark = pytest.mark.integration


def metadata_url(cluster: ServedCluster, node: str) -> str:
    return f"{cluster.served.cluster.services['metadata_url']}/{node}"


def poller_for(cluster: ServedCluster, node: str, http: httpx.Client) -> NoticePoller:
    body = cluster.get(NODES, "", node)
    assert body is not None
    source = detect.detect(http, metadata_url(cluster, node), body["spec"]["providerID"], time.monotonic)
    return NoticePoller(source, publish.NodeWriter(cluster.api_client, node), cluster.now, interval=1.0)


def notice_state(cluster: ServedCluster, node: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    body = cluster.get(NODES, "", node) or {}
    taints = [
        t for t in body.get("spec", {}).get("taints") or [] if t["key"].startswith("spot.shipshape.dev/")
    ]
    conditions = [
        c for c in body.get("status", {}).get("conditions") or [] if c["type"] == contract.CONDITION
    ]
    events = [
        e
        for e in cluster.objects(EVENTS, "default")
        if e["involvedObject"].get("name") == node and e["reason"] == contract.CONDITION
    ]
    return taints, conditions, len(events)


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_the_poller_publishes_each_clouds_notice_once(tmp_path: Path, cloud: str) -> None:
    # A slower clock than usual: GCP and Azure give 30 s of notice, and the test reads it within them.
    with (
        serve_cluster(tmp_path, scenario(cloud=cloud), speed=10) as cluster,
        httpx.Client(timeout=10) as http,
    ):
        node = cluster.nodes_of(SPOT_A)[0]
        poller = poller_for(cluster, node, http)
        assert poller.source.cloud == cloud  # from the providerID
        assert poller.round() == []  # nothing to say yet
        cloud_model = cluster.served.cluster.services["cloud"]
        if cloud == "aws":  # a rebalance recommendation first: PreferNoSchedule, nothing drained
            cluster.call(lambda: cloud_model.rebalance(node=node))
            assert [n.kind.value for n in poller.round()] == ["rebalance"]
            assert [(t["key"], t["value"], t["effect"]) for t in notice_state(cluster, node)[0]] == [
                (contract.REBALANCE_TAINT, "aws-metadata", "PreferNoSchedule")
            ]
        cluster.call(lambda: cloud_model.interrupt(node=node))
        issued = cluster.now()
        published = poller.round()
        assert [n.cloud for n in published if n.kind.value == "interruption"] == [cloud]
        taints, conditions, events = notice_state(cluster, node)
        notice_taints = [t for t in taints if t["key"] == contract.NOTICE_TAINT]
        assert [(t["value"], t["effect"]) for t in notice_taints] == [(f"{cloud}-metadata", "NoSchedule")]
        # timeAdded is the deadline minus the cloud's lead: about when the notice was issued.
        assert abs(parse_time(notice_taints[0]["timeAdded"]) - issued) <= 3.0
        (read,) = notices_from_taints([cluster.get(NODES, "", node)], cluster.now(), 120.0)
        inst = cluster.call(lambda: cloud_model.instance_for(node))
        assert abs(read.deadline - inst.notice.action_time) <= 3.0  # the cloud's own lead (120 s / 30 s)
        assert inst.notice.action_time - inst.notice.issued == contract.LEAD_SECONDS[cloud]
        assert [c["status"] for c in conditions] == ["True"] and events == 1
        if cloud == "azure":  # the Preempt event was approved once published
            assert inst.event_approved
        # Polled again, and by a restarted poller: nothing is written twice.
        before = cluster.get(NODES, "", node)
        assert poller.round() == []
        restarted = poller_for(cluster, node, http)
        assert len(restarted.round()) >= 1  # seen again, found on the node
        after = cluster.get(NODES, "", node)
        assert after is not None and before is not None
        assert after["spec"]["taints"] == before["spec"]["taints"]
        assert notice_state(cluster, node)[1:] == (conditions, 1)


def test_the_command_publishes_and_refuses_bad_input(tmp_path: Path) -> None:
    with serve_cluster(tmp_path, scenario(cloud="gcp")) as cluster:
        node = cluster.nodes_of(SPOT_A)[1]
        cloud_model = cluster.served.cluster.services["cloud"]
        # A long notice: the instance outlives the command's start-up.
        cluster.call(lambda: cloud_model.interrupt(node=node, notice=3600))
        base = [str(Path(sys.executable).parent / "shipshape"), "node-notices"]
        base += ["--kubeconfig", str(cluster.served.kubeconfig)]
        env = {**os.environ, "NODE_NAME": node}
        done = subprocess.run(
            [*base, "--metadata-url", metadata_url(cluster, node), "--once"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        taints, conditions, events = notice_state(cluster, node)
        assert [t["value"] for t in taints] == ["gcp-metadata"] and len(conditions) == 1 and events == 1
        runner = CliRunner()
        for args, message in (
            (["--cloud", "oracle"], "--cloud must be one of"),
            (["--interval", "soon"], "--interval"),
            (["--metadata-url", "169.254.169.254"], "--metadata-url must be"),
            (["--node-name", "no-such-node"], "node no-such-node not found"),
        ):
            bad = runner.invoke(app, [*base[1:], *args, "--once"], env={"NODE_NAME": node})
            assert bad.exit_code == 2, (args, bad.output)
            (line,) = bad.stderr.strip().splitlines()
            assert line.startswith("error: ") and message in line
