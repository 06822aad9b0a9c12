"""The node-side poller as the controller's only notice source, on a GCP cluster (30 s of notice).

The emulated cloud does not taint noticed nodes here (`interruptions.nodeTaint: false`): a preemption
shows only in each node's metadata (`instance/preempted`). A poller per node (what the DaemonSet
runs) publishes it on the Node, and the controller surges the Deployment from that taint, with the
deadline the cloud gave (30 s after the notice, not the 120 s of AWS).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from shipshape.contracts import notices as contract
from shipshape.controller.surge import SURGE_NOTE
from shipshape.emulator.resources import DEPLOYMENTS, NODES
from shipshape.nodecollector.notices import detect, publish
from shipshape.nodecollector.notices.poller import NoticePoller
from tests.integration.emulator.served_cluster import (
    SPOT_A,
    SPOT_B,
    ServedCluster,
    ready_pods,
    scenario,
    serve_cluster,
)

from .harness import controller, managed_deployment

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

WEB = managed_deployment("web", 4)


@contextmanager
def node_pollers(cluster: ServedCluster, nodes: list[str]) -> Iterator[None]:
    """One poller per node, on their own threads, as the DaemonSet's pods would run."""
    stop = threading.Event()
    threads = []
    with httpx.Client(timeout=10) as http:
        for node in nodes:
            body = cluster.get(NODES, "", node)
            assert body is not None
            base = f"{cluster.served.cluster.services['metadata_url']}/{node}"
            source = detect.detect(http, base, body["spec"]["providerID"], time.monotonic)
            poller = NoticePoller(source, publish.NodeWriter(cluster.api_client, node), cluster.now, 2.0)
            thread = threading.Thread(
                target=poller.run,
                args=(stop.is_set, lambda s: stop.wait(cluster.clock.real_seconds(s))),
                name=f"node-notices-{node}",
            )
            thread.start()
            threads.append(thread)
        try:
            yield
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)


def test_a_preemption_only_the_metadata_tells_is_acted_on_with_the_clouds_deadline(tmp_path: Path) -> None:
    sc = scenario(cloud="gcp", interruptions={"rateMultiplier": 0, "nodeTaint": False})
    with serve_cluster(tmp_path, sc, speed=10) as cluster, controller(cluster, tmp_path / "c"):
        cluster.kubectl("apply", "-f", "-", stdin=WEB)
        cluster.wait("every replica ready", lambda: len(ready_pods(cluster.pods(app="web"))) == 4, 120)
        spot_nodes = cluster.nodes_of(SPOT_A) + cluster.nodes_of(SPOT_B)
        on_spot = [p for p in cluster.pods(app="web") if p["spec"]["nodeName"] in spot_nodes]
        assert on_spot
        node = on_spot[0]["spec"]["nodeName"]
        cloud = cluster.served.cluster.services["cloud"]
        with node_pollers(cluster, spot_nodes):
            cluster.call(lambda: cloud.interrupt(node=node))
            inst = cluster.call(lambda: cloud.instance_for(node))
            assert inst.notice.action_time - inst.notice.issued == 30.0

            def surged() -> dict[str, object] | None:
                dep = cluster.get(DEPLOYMENTS, "default", "web")
                raw = ((dep or {}).get("metadata", {}).get("annotations") or {}).get(SURGE_NOTE)
                return json.loads(raw) if raw else None

            note = cluster.wait("the surge for the preemption", surged, 30)
            assert note["nodes"] == [node]
            # The deadline the controller planned with is GCP's, read back from the poller's taint.
            assert abs(float(note["deadline"]) - inst.notice.action_time) <= 3.0
            found = cluster.get(NODES, "", node)
            assert found is not None
            assert [(t["key"], t["value"]) for t in found["spec"]["taints"]] == [
                (contract.NOTICE_TAINT, "gcp-metadata")
            ]  # the poller's alone: the cloud itself tainted nothing
