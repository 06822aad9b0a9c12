"""Catalog lookups, the band -> hazard conversion, boot timelines and boot logs."""

from __future__ import annotations

import math
import random
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shipshape.emulator.cloud import boot
from shipshape.emulator.scenario import NodeBoot
from shipshape.pricing import catalog

FIXTURES = Path(__file__).resolve().parents[4].parent / "shared" / "data" / "node-latency-for-k8s-fixtures"

# The milestones as awslabs/node-latency-for-k8s finds them in /var/log/messages (first match wins).
SYSLOG_EVENTS = {
    "vmInitialized": r"kernel: Linux version",
    "networkReady": r"Reached target Network\.",
    "containerdStart": r"Starting containerd container runtime",
    "cloudInitInit": r"cloud-init: Cloud-init v.* running 'init'",
    "kubeletStart": r"Starting Kubernetes Kubelet",
    "kubeletInitialized": r"Started kubelet",
    "registered": r"Successfully registered node",
    "kubeProxyStart": r"CreateContainer within sandbox .*Name:kube-proxy.* returns container id",
    "awsNodeStart": r"CreateContainer within sandbox .*Name:aws-node.* returns container id",
    "ready": r'event="NodeReady"',
}
SYSLOG_LINE = re.compile(r"^([A-Z][a-z]{2} {1,2}\d{1,2} \d\d:\d\d:\d\d) (\S+) ([\w.-]+(?:\[\d+\])?):( |$)")


def _first_times(text: str, year: int) -> dict[str, datetime]:
    found: dict[str, datetime] = {}
    for line in text.splitlines():
        match = SYSLOG_LINE.match(line)
        assert match, f"not a syslog line: {line!r}"
        for event, pattern in SYSLOG_EVENTS.items():
            if event not in found and re.search(pattern, line):
                stamp = " ".join(match.group(1).split())
                found[event] = datetime.strptime(f"{year} {stamp}", "%Y %b %d %H:%M:%S").replace(tzinfo=UTC)
    return found


def test_hazard_from_monthly_fraction() -> None:
    assert catalog.hazard_per_hour(0.0) == 0.0
    lam = catalog.hazard_per_hour(0.175)
    assert lam == pytest.approx(-math.log(1 - 0.175) / 730)
    # The defining property: a node survives a 730 h month with probability 1 - p.
    assert math.exp(-lam * 730) == pytest.approx(1 - 0.175)
    with pytest.raises(ValueError):
        catalog.hazard_per_hour(1.0)


def test_band_hazards_use_the_band_midpoints_and_grow_with_the_band() -> None:
    rates = [catalog.band_hazard_per_hour(b) for b in range(5)]
    assert rates == sorted(rates)
    assert rates[0] == pytest.approx(catalog.hazard_per_hour(0.025))
    assert rates[4] == pytest.approx(catalog.hazard_per_hour(0.25))
    with pytest.raises(ValueError):
        catalog.band_hazard_per_hour(5)


def test_catalog_prices_and_advice() -> None:
    cat = catalog.default_catalog()
    assert cat.on_demand_price("m5.large", "us-east-1") == pytest.approx(0.096, rel=0.05)
    advice = cat.spot_advice("m5.large", "us-east-1")
    assert advice is not None and 0 <= advice.band <= 4 and 0 < advice.savings_percent < 100
    spot = cat.spot_price("m5.large", "us-east-1")
    assert spot == pytest.approx(0.096 * (1 - advice.savings_percent / 100), rel=0.05)
    # A region without 2021 prices falls back to us-east-1's on-demand price.
    assert cat.on_demand_price("m5.large", "eu-central-1") == cat.on_demand_price("m5.large", "us-east-1")
    assert cat.on_demand_price("no.such", "us-east-1") is None
    assert cat.interruption_band("no.such", "us-east-1") == catalog.DEFAULT_BAND


def test_timeline_keeps_milestone_order_under_jitter_and_is_seeded() -> None:
    settings = NodeBoot(jitter=0.5)
    first = boot.draw_timeline(settings, 1000.0, random.Random(3))
    again = boot.draw_timeline(settings, 1000.0, random.Random(3))
    other = boot.draw_timeline(settings, 1000.0, random.Random(4))
    assert first == again and first != other
    for timeline in (first, other):
        assert list(timeline.times) == sorted(timeline.times)
        assert 15.0 <= timeline.ready - 1000.0 <= 45.0  # 30 s +/- 50 %
    no_jitter = boot.draw_timeline(NodeBoot(jitter=0), 0.0, random.Random(1))
    assert no_jitter.as_dict()["ready"] == 30.0
    assert no_jitter.registered == 18.0


def test_boot_log_milestones_parse_as_on_a_real_node() -> None:
    launched = datetime(2026, 3, 7, 12, 0, 0, tzinfo=UTC).timestamp()
    timeline = boot.draw_timeline(NodeBoot(), launched, random.Random(9))
    ident = boot.LogIdentity("ip-10-0-3-7.ec2.internal", "us-east-1")
    found = _first_times(boot.render_messages(ident, timeline), 2026)
    assert set(found) == set(SYSLOG_EVENTS)
    t = timeline.as_dict()
    for event, milestone in [
        ("vmInitialized", "vmInitialized"),
        ("networkReady", "networkReady"),
        ("containerdStart", "containerdStart"),
        ("kubeletStart", "kubeletStart"),
        ("registered", "registered"),
        ("ready", "ready"),
    ]:
        assert found[event].timestamp() == math.floor(t[milestone]), event
    sequence = ("vmInitialized", "networkReady", "kubeletStart", "registered", "awsNodeStart", "ready")
    order = [found[e] for e in sequence]
    assert order == sorted(order)
    cni_log = boot.render_cni_log(timeline).splitlines()
    cni_line = next(line for line in cni_log if "Successfully copied CNI plugin" in line)
    stamp = cni_line.split(" ", 1)[0]
    assert datetime.fromisoformat(stamp[:26] + "+00:00").timestamp() == pytest.approx(t["cniReady"], abs=1e-5)


def test_partial_boot_log_stops_at_the_given_time() -> None:
    timeline = boot.draw_timeline(NodeBoot(), 0.0, random.Random(2))
    ident = boot.LogIdentity("ip-10-0-3-7.ec2.internal", "us-east-1")
    partial = boot.render_messages(ident, timeline, until=timeline.registered - 0.5)
    assert "Starting Kubernetes Kubelet" in partial
    assert "Successfully registered node" not in partial and "NodeReady" not in partial


@pytest.mark.skipif(not FIXTURES.exists(), reason="shared data sets not present")
def test_the_same_patterns_find_the_milestones_of_the_real_fixture() -> None:
    text = (FIXTURES / "test" / "normal" / "var" / "log" / "messages").read_text()
    found = _first_times(text, 2022)
    assert found["vmInitialized"].strftime("%H:%M:%S") == "02:59:07"
    assert found["registered"].strftime("%H:%M:%S") == "02:59:15"
    assert found["ready"].strftime("%H:%M:%S") == "02:59:25"
