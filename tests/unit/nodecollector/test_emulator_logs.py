"""The collector on the boot logs the emulator's cloud model writes, against the boot timeline
the emulator drew (its ground truth)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from shipshape.analyzers.startup import nodes
from shipshape.emulator.cloud import boot
from shipshape.emulator.scenario import NodeBoot
from shipshape.nodecollector.collect import collect, timeline_from_text

# emulator milestone -> node start-up event
MILESTONE_EVENTS = {
    "vmInitialized": nodes.VM_INITIALIZED,
    "cloudInitStart": nodes.CLOUD_INIT_LOCAL,
    "networkReady": nodes.NETWORK_READY,
    "containerdStart": nodes.CONTAINERD_START,
    "kubeletStart": nodes.KUBELET_START,
    "registered": nodes.REGISTERED,
    "cniReady": nodes.CNI_READY,
    "ready": nodes.NODE_READY,
}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parsed_timeline_matches_the_emulated_boot(tmp_path: Path, seed: int) -> None:
    timeline = boot.draw_timeline(NodeBoot(), 1_767_225_600.0, random.Random(seed))
    identity = boot.LogIdentity(node_name="ip-10-0-1-2.ec2.internal", region="us-east-1")
    pod_logs = tmp_path / "var/log/pods/kube-system_aws-node-abcde/aws-node"
    pod_logs.mkdir(parents=True)
    (tmp_path / "var/log/messages").write_text(boot.render_messages(identity, timeline))
    (pod_logs / "0.log").write_text(boot.render_cni_log(timeline))

    parsed = collect(tmp_path, year=2026)

    for milestone, event in MILESTONE_EVENTS.items():
        found = parsed.events[event]
        truth = timeline.at(milestone)
        if found.precise:
            assert found.time == pytest.approx(truth, abs=1e-3), milestone
        else:  # syslog stamps are truncated to the second
            assert truth - 1.0 < found.time <= truth, milestone
    assert nodes.NODE_READY not in parsed.missing


def test_boot_cut_short_reports_ready_missing() -> None:
    timeline = boot.draw_timeline(NodeBoot(), 1_767_225_600.0, random.Random(7))
    identity = boot.LogIdentity(node_name="ip-10-0-1-3.ec2.internal", region="us-east-1")
    messages = boot.render_messages(identity, timeline, until=timeline.registered)
    parsed = timeline_from_text(messages, year=2026, cni_log="")
    assert nodes.REGISTERED in parsed.events
    assert "NodeReady" in parsed.missing[nodes.NODE_READY]
    assert "Successfully copied CNI" in parsed.missing[nodes.CNI_READY]
