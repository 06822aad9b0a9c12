"""Acceptance: node start-up from the API objects alone, and with the node collector run on the
emulator's boot logs and published as the node annotation (as its DaemonSet would), against the
boot timeline the emulator's cloud drew (its ground truth), in virtual time."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from shipshape.analyzers.startup import model, nodes
from shipshape.analyzers.startup.analysis import NodeReport, analyze_node_startup, analyze_pod_startup
from shipshape.cli import startup as startup_cli
from shipshape.emulator import assembly
from shipshape.emulator.resources import EVENTS, NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Scenario
from shipshape.kube import patch
from shipshape.kube.clock import VirtualClock
from shipshape.nodecollector import publish
from shipshape.nodecollector.collect import timeline_from_text
from shipshape.nodecollector.timeline import NodeLogTimeline

T0 = 1_767_225_600.0
YEAR = 2026
AGENT_IMAGE = "registry.example/node-agent:1"

# the cloud's boot milestones -> node start-up events
MILESTONES = {
    "vmInitialized": nodes.VM_INITIALIZED,
    "cloudInitStart": nodes.CLOUD_INIT_LOCAL,
    "networkReady": nodes.NETWORK_READY,
    "containerdStart": nodes.CONTAINERD_START,
    "kubeletStart": nodes.KUBELET_START,
    "registered": nodes.REGISTERED,
    "cniReady": nodes.CNI_READY,
    "ready": nodes.NODE_READY,
}


def scenario() -> Scenario:
    return Scenario.model_validate(
        {
            "name": "node-boot",
            "seed": 5,
            "pools": [
                {
                    "name": "spot-a",
                    "instanceType": "m5.xlarge",
                    "zone": "us-east-1a",
                    "capacityType": "spot",
                    "cpu": "4",
                    "memory": "16Gi",
                    "minSize": 0,
                    "initialSize": 0,
                    "maxSize": 3,
                }
            ],
            "autoscaler": {"enabled": False},
            "interruptions": {"enabled": False},
            "nodeBoot": {"cloudInitStart": 12.0, "kubeletStart": 25.0, "registered": 27.0, "cniReady": 36.0,
                         "ready": 40.0},
            "kubelet": {"preloadedImages": [AGENT_IMAGE]},
            "objects": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "metadata": {"name": "node-agent", "namespace": "kube-system"},
                    "spec": {
                        "selector": {"matchLabels": {"app": "node-agent"}},
                        "template": {
                            "metadata": {"labels": {"app": "node-agent"}},
                            # tolerates everything, like CNI and logging agents: lands on booting nodes
                            "spec": {"tolerations": [{"operator": "Exists"}],
                                     "containers": [{"name": "agent", "image": AGENT_IMAGE}]},
                        },
                    },
                }
            ],
        }
    )  # fmt: skip


@dataclass
class Booted:
    cluster: Cluster
    names: list[str]
    truth: dict[str, dict[str, float]]
    collected: dict[str, NodeLogTimeline]


def collector_on(cluster: Cluster, name: str) -> NodeLogTimeline:
    """What `shipshape node-collector` finds in the node's logs: the same parsing, on the logs the
    emulator writes for the node (its /var/log/messages and the aws-node container log)."""
    cloud = cluster.services["cloud"]
    return timeline_from_text(cloud.boot_log(name), year=YEAR, cni_log=cloud.cni_log(name))


def publish_annotation(cluster: Cluster, name: str, timeline: NodeLogTimeline) -> None:
    """The collector's merge patch of the node annotation, through the API's patch semantics."""
    api = cluster.services["api"]
    asyncio.run(api.patch(NODES, "", name, patch.MERGE_PATCH, publish.annotation_patch(timeline)))


@pytest.fixture(scope="module")
def booted() -> Booted:
    clock = VirtualClock(T0)
    cluster = assembly.build(scenario(), clock)
    asyncio.run(assembly.apply_objects(cluster))
    cloud = cluster.services["cloud"]
    cloud.set_desired("spot-a", 3)  # three instances launched now, booting in emulated time
    cluster.engine.run_until(T0 + 120.0)
    assert not cluster.engine.errors
    names = sorted(node["metadata"]["name"] for node in cluster.store.list(NODES))
    assert len(names) == 3
    truth = {name: cloud.boot_timeline(name) for name in names}
    return Booted(cluster, names, truth, {name: collector_on(cluster, name) for name in names})


def report(cluster: Cluster, **options: Any) -> NodeReport:
    store = cluster.store
    return analyze_node_startup(store.list(NODES), store.list(PODS), store.list(EVENTS), **options)


def test_api_only_timeline_matches_the_boot_within_a_second(booted: Booted) -> None:
    timelines = {t.name: t for t in report(booted.cluster).timelines}
    for name in booted.names:
        timeline, truth = timelines[name], booted.truth[name]
        for milestone in ("registered", "ready"):
            event = MILESTONES[milestone]
            assert timeline.sources[event] == "api"
            # API timestamps are truncated to the second
            assert truth[milestone] - 1.0 < timeline.events[event] <= truth[milestone], milestone
        assert nodes.VM_INITIALIZED in timeline.missing  # only the node itself knows
        assert timeline.time_to_ready == pytest.approx(truth["ready"] - truth["registered"], abs=1.0)


def test_collector_timeline_on_the_emulated_logs_matches_the_boot(booted: Booted) -> None:
    for name in booted.names:
        collected, truth = booted.collected[name], booted.truth[name]
        assert nodes.NODE_READY not in collected.missing
        for milestone, event in MILESTONES.items():
            found = collected.events[event]
            if found.precise:
                assert found.time == pytest.approx(truth[milestone], abs=1e-3), milestone
            else:
                assert truth[milestone] - 1.0 < found.time <= truth[milestone], milestone


def test_published_annotation_drives_the_node_report(booted: Booted, tmp_path: Path) -> None:
    cluster = booted.cluster
    for name in booted.names:
        publish_annotation(cluster, name, booted.collected[name])
    launches = {name: booted.truth[name]["launched"] for name in booted.names}
    timelines = {t.name: t for t in report(cluster, launch_times=launches).timelines}
    for name in booted.names:
        timeline, truth = timelines[name], booted.truth[name]
        assert timeline.sources[nodes.VM_INITIALIZED] == "log"
        assert timeline.sources[nodes.INSTANCE_CREATED] == "cloud"
        for milestone, event in MILESTONES.items():
            assert timeline.events[event] == pytest.approx(truth[milestone], abs=1.0), milestone
        # launch -> Ready, and the segments add up to it
        assert timeline.time_to_ready == pytest.approx(truth["ready"] - truth["launched"], abs=1.0)
        segments = [timeline.segments[s] for s in nodes.SEGMENT_NAMES if s != "first pod"]
        assert sum(v for v in segments if v is not None) == pytest.approx(timeline.time_to_ready, abs=1e-6)
        assert timeline.segments["cloud-init"] == pytest.approx(
            truth["kubeletStart"] - truth["cloudInitStart"], abs=1.0
        )

    # `shipshape startup nodes` on a snapshot of the cluster reads the annotation too
    store = cluster.store
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps({"nodes": store.list(NODES), "pods": store.list(PODS), "events": []}))
    result = CliRunner().invoke(startup_cli.app, ["nodes", "--from-file", str(snapshot), "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    for node in body["nodes"]:
        truth = booted.truth[node["name"]]
        assert node["origin"] == nodes.VM_INITIALIZED
        assert node["events"][nodes.KUBELET_START]["source"] == "log"
        assert node["timeToReady"] == pytest.approx(truth["ready"] - truth["vmInitialized"], abs=1.0)


def test_collector_gauges_expose_each_event(booted: Booted) -> None:
    name = booted.names[0]
    collected, truth = booted.collected[name], booted.truth[name]
    metrics = publish.CollectorMetrics(name)
    metrics.update(collected)
    samples = {
        (s.name, s.labels["event"]): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
    }
    offset = "shipshape_node_startup_event_seconds"
    assert samples[(offset, nodes.VM_INITIALIZED)] == 0.0
    assert samples[(offset, nodes.NODE_READY)] == pytest.approx(
        truth["ready"] - truth["vmInitialized"], abs=1.0
    )
    stamp = samples[("shipshape_node_startup_event_timestamp_seconds", nodes.KUBELET_START)]
    assert truth["kubeletStart"] - 1.0 < stamp <= truth["kubeletStart"]


def test_pods_on_a_booting_node_wait_for_its_network(booted: Booted) -> None:
    """A DaemonSet that tolerates every taint lands on nodes before their CNI is ready: its pods'
    sandboxes wait for the network, the CNI diagnosis names the nodes, and no other rule fires."""
    cluster = booted.cluster
    store = cluster.store
    for name in booted.names:
        publish_annotation(cluster, name, booted.collected[name])
    node_report = report(cluster)
    agents = [p for p in store.list(PODS) if p["metadata"]["namespace"] == "kube-system"]
    assert len(agents) == len(booted.names)
    pods = analyze_pod_startup(
        agents,
        store.list(EVENTS),
        store.list(NODES),
        node_timelines={t.name: t for t in node_report.timelines},
        webhook_configurations=[],
    )
    assert {f.rule for f in pods.findings} == {"cni-not-ready-on-new-node"}
    assert {f.subjects[0] for f in pods.findings} == set(booted.names)
    kubelet = cluster.services["kubelet"]
    for timeline in pods.timelines:
        truth = kubelet.timeline(timeline.uid)
        waited_from, network_ready = truth["network-wait"]
        assert network_ready == pytest.approx(booted.truth[timeline.node]["ready"], abs=1e-6)
        assert timeline.sandbox_errors and "cni plugin not initialized" in timeline.sandbox_errors[0]
        # scheduled -> sandbox ready covers the wait for the network and the sandbox itself
        assert timeline.phases[model.SANDBOX] == pytest.approx(
            truth["sandbox"][1] - truth["scheduled"][1], abs=1.0
        )
        assert (timeline.phases[model.SANDBOX] or 0.0) >= network_ready - waited_from
