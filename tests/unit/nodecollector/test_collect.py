"""The node collector on the real EKS boot logs of awslabs/node-latency-for-k8s (see PROVENANCE.md
next to them) and on the same logs re-shaped as a journald-only host would keep them."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shipshape.analyzers.startup import nodes
from shipshape.nodecollector import parsers
from shipshape.nodecollector.collect import CollectError, collect
from shipshape.nodecollector.timeline import SYSTEM_LOG, match_events

FIXTURES = (
    Path(__file__).resolve().parents[3].parent / "shared" / "data" / "node-latency-for-k8s-fixtures" / "test"
)

# The expected first-match times for test/normal, from the fixtures' PROVENANCE.md.
EXPECTED = {
    nodes.VM_INITIALIZED: "2022-11-28T02:59:07Z",
    nodes.NETWORK_START: "2022-11-28T02:59:10Z",
    nodes.NETWORK_READY: "2022-11-28T02:59:10Z",
    nodes.CONTAINERD_START: "2022-11-28T02:59:10Z",
    nodes.CONTAINERD_READY: "2022-11-28T02:59:10Z",
    nodes.CLOUD_INIT_START: "2022-11-28T02:59:10Z",
    nodes.CLOUD_INIT_CONFIG: "2022-11-28T02:59:11Z",
    nodes.CLOUD_INIT_FINAL: "2022-11-28T02:59:11Z",
    nodes.CLOUD_INIT_FINISH: "2022-11-28T02:59:14Z",
    nodes.KUBELET_START: "2022-11-28T02:59:14Z",
    nodes.KUBELET_INITIALIZED: "2022-11-28T02:59:14Z",
    nodes.REGISTERED: "2022-11-28T02:59:15Z",
    nodes.KUBE_PROXY_START: "2022-11-28T02:59:16Z",
    nodes.CNI_INIT_START: "2022-11-28T02:59:16Z",
    nodes.CNI_START: "2022-11-28T02:59:19Z",
    nodes.NODE_READY: "2022-11-28T02:59:25Z",
    nodes.CNI_READY: "2022-11-28T02:59:22Z",
}


def _second(value: float) -> str:
    return datetime.fromtimestamp(math.floor(value), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _case(name: str) -> Path:
    path = FIXTURES / name
    if not path.is_dir():
        pytest.skip(f"fixture {path} not available")
    return path


def test_normal_boot_matches_the_expected_event_times() -> None:
    timeline = collect(_case("normal"), year=2022)
    times = {name: _second(event.time) for name, event in timeline.events.items()}
    for name, expected in EXPECTED.items():
        assert times[name] == expected, name
    # the kubelet's own stamp refines the syslog second
    assert timeline.events[nodes.NODE_READY].time == pytest.approx(
        datetime(2022, 11, 28, 2, 59, 25, 526964, tzinfo=UTC).timestamp()
    )
    assert timeline.events[nodes.NODE_READY].precise
    first_pod = timeline.events[nodes.FIRST_POD_STARTED]
    assert "default/inflate-75b4f74469-rzknj" in first_pod.line
    assert first_pod.time == pytest.approx(datetime(2022, 11, 28, 2, 59, 32, 711626, tzinfo=UTC).timestamp())
    assert timeline.missing == {}


def test_not_ready_reports_node_ready_missing_instead_of_guessing() -> None:
    timeline = collect(_case("not-ready"), year=2022)
    assert nodes.NODE_READY not in timeline.events
    assert "NodeReady" in timeline.missing[nodes.NODE_READY]
    assert _second(timeline.events[nodes.REGISTERED].time) == EXPECTED[nodes.REGISTERED]


def test_no_cni_reports_the_cni_log_missing() -> None:
    timeline = collect(_case("no-cni"), year=2022)
    assert nodes.CNI_READY not in timeline.events
    assert timeline.missing[nodes.CNI_READY] == "no aws-node log on this host"
    # the aws-node container was still created: the containerd line is in the system log
    assert _second(timeline.events[nodes.CNI_START].time) == EXPECTED[nodes.CNI_START]
    assert _second(timeline.events[nodes.NODE_READY].time) == EXPECTED[nodes.NODE_READY]


def _as_journal_export(messages: Path, modern_systemd: bool) -> list[str]:
    """The syslog lines as `journalctl -o json` would print them on a journald-only host."""
    exported = []
    for line in parsers.parse_syslog(messages.read_text().splitlines(), year=2022):
        message = line.message
        if modern_systemd and line.ident == "systemd":
            message = message.replace(
                "Started containerd container runtime",
                "Started containerd.service - containerd container runtime",
            )
            message = message.replace(
                "Starting Kubernetes Kubelet", "Starting kubelet.service - Kubernetes Kubelet"
            )
            message = message.replace("Reached target Network.", "Reached target network.target - Network.")
        entry = {
            "__REALTIME_TIMESTAMP": str(round(line.time * 1_000_000)),
            "_HOSTNAME": "ip-192-168-29-250",
            "SYSLOG_IDENTIFIER": line.ident,
            "MESSAGE": message,
        }
        if line.ident == "kernel":
            entry["_TRANSPORT"] = "kernel"
            del entry["SYSLOG_IDENTIFIER"]
        exported.append(json.dumps(entry))
    return exported


@pytest.mark.parametrize("modern_systemd", [False, True])
def test_journald_only_host(tmp_path: Path, modern_systemd: bool) -> None:
    normal = _case("normal")
    export = tmp_path / "journal.json"
    export.write_text("\n".join(_as_journal_export(normal / "var/log/messages", modern_systemd)) + "\n")
    host = tmp_path / "host"
    (host / "var/log").mkdir(parents=True)
    timeline = collect(host, journal_export=export)
    times = {name: _second(event.time) for name, event in timeline.events.items()}
    for name, expected in EXPECTED.items():
        if name == nodes.CNI_READY:
            continue
        assert times[name] == expected, name
    assert timeline.missing[nodes.CNI_READY] == "no aws-node log on this host"


def test_invalid_journal_export_is_a_clear_error(tmp_path: Path) -> None:
    export = tmp_path / "journal.json"
    export.write_text('{"__REALTIME_TIMESTAMP": "1669604347000000", "MESSAGE": "ok"}\nnot json\n')
    with pytest.raises(CollectError, match="line 2 is not JSON"):
        collect(tmp_path, journal_export=export)


def test_host_without_logs_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CollectError, match="no system log"):
        collect(tmp_path)


def test_syslog_year_rolls_over_and_continuations_are_skipped() -> None:
    lines = [
        "Dec 31 23:59:59 host kernel: Linux version 6.1",
        "  a continuation line",
        "Jan  1 00:00:03 host systemd: Reached target Network.",
    ]
    parsed = list(parsers.parse_syslog(lines, year=2025))
    assert [line.ident for line in parsed] == ["kernel", "systemd"]
    assert parsed[1].time - parsed[0].time == pytest.approx(4.0)
    assert datetime.fromtimestamp(parsed[1].time, UTC).year == 2026


def test_precise_time_only_when_it_agrees_with_the_syslog_second() -> None:
    lines = [
        'Nov 28 02:59:14 h kubelet: I1128 02:59:14.598227    5685 server.go:1181] "Started kubelet"',
        'Nov 28 02:59:20 h kubelet: I1128 02:59:14.100000    5685 server.go:1181] "late flush"',
    ]
    first, second = parsers.parse_syslog(lines, year=2022)
    assert first.precise and first.time % 1 == pytest.approx(0.598227, abs=1e-6)
    assert not second.precise and second.time % 1 == 0


def test_first_match_wins_and_rules_are_per_program() -> None:
    lines = [
        parsers.LogLine(1.0, "systemd", "Started kubelet.service - Kubernetes Kubelet.", "journal"),
        parsers.LogLine(2.0, "kubelet", 'I0101 server.go] "Started kubelet"', "journal"),
        parsers.LogLine(3.0, "kubelet", 'I0101 server.go] "Started kubelet"', "journal"),
    ]
    timeline = match_events({SYSTEM_LOG: lines})
    assert timeline.events[nodes.KUBELET_INITIALIZED].time == 2.0


def test_cri_log_lines() -> None:
    (line,) = parsers.parse_cri_log(
        [
            "2022-11-28T02:59:22.101379451Z stdout F"
            ' {"msg":"Successfully copied CNI plugin binary and config file."}'
        ],
        source="aws-node",
    )
    assert line.time == pytest.approx(datetime(2022, 11, 28, 2, 59, 22, 101379, tzinfo=UTC).timestamp())
