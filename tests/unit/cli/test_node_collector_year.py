"""`shipshape node-collector --root DIR --once --json` on copied logs (fresh modification times): the
syslog's year comes from the logs themselves, a year that cannot be known is refused with a pointer
to `--year`, impossible timelines are flagged, and a missing Node Ready fails the run.

The real EKS boot logs of awslabs/node-latency-for-k8s (see their PROVENANCE.md) are used where the
shared data folder is present; the year rules are also checked on synthetic lines."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shipshape.cli.main import app
from shipshape.nodecollector import years


def _fixtures() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "data" / "node-latency-for-k8s-fixtures" / "test"
        if candidate.is_dir():
            return candidate
    return None


FIXTURES = _fixtures()
needs_fixtures = pytest.mark.skipif(FIXTURES is None, reason="node-latency-for-k8s fixtures not available")


def _copy(case: str, tmp_path: Path, *, keep_containerd_dates: bool = True, cni: bool = True) -> Path:
    """The case's log tree copied as a user would (`cp -r`: every file modified now)."""
    assert FIXTURES is not None
    root = tmp_path / case
    shutil.copytree(FIXTURES / case, root)
    messages = root / "var" / "log" / "messages"
    if not keep_containerd_dates:
        kept = [line for line in messages.read_text().splitlines(keepends=True) if 'time="20' not in line]
        messages.write_text("".join(kept))
    if not cni:
        shutil.rmtree(root / "var" / "log" / "pods", ignore_errors=True)
    return root


def _collect(root: Path, *extra: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["node-collector", "--root", str(root), "--once", "--json", *extra])
    return result.exit_code, result.stdout, result.stderr


def _event(body: dict[str, object], name: str) -> str:
    events = body["events"]
    assert isinstance(events, list)
    return str(next(e["time"] for e in events if e["event"] == name))


@needs_fixtures
def test_copied_logs_are_dated_by_the_containerd_stamps_inside_them(tmp_path: Path) -> None:
    code, out, err = _collect(_copy("normal", tmp_path))
    assert code == 0, err
    body = json.loads(out)
    assert _event(body, "node_ready") == "2022-11-28T02:59:25.526964Z"  # not 2026, the copy's year
    assert _event(body, "cni_ready").startswith("2022-11-28T02:59:22")
    assert body["problems"] == []
    assert max(e["t"] for e in body["events"]) < 60


@needs_fixtures
def test_without_dates_in_the_syslog_the_cni_log_dates_it(tmp_path: Path) -> None:
    code, out, err = _collect(_copy("normal", tmp_path, keep_containerd_dates=False))
    assert code == 0, err
    assert _event(json.loads(out), "node_ready") == "2022-11-28T02:59:25.526964Z"


@needs_fixtures
def test_a_year_that_cannot_be_known_is_refused(tmp_path: Path) -> None:
    root = _copy("normal", tmp_path, keep_containerd_dates=False, cni=False)
    # Copied in June (a copy made on Nov 28 or 29, just after the last line, would date it).
    messages = root / "var" / "log" / "messages"
    copied = datetime(2026, 6, 15, 12, tzinfo=UTC).timestamp()
    os.utime(messages, (copied, copied))
    code, out, err = _collect(root)
    assert code == 2 and out == ""
    assert err.strip() == (
        f"error: cannot tell the year of {messages}: its lines carry no year, no "
        "other log dates them, and the file was modified on 2026-06-15, not just after "
        "its last line (Nov 28): a copy; pass --year"
    )
    code, out, _ = _collect(root, "--year", "2022")
    assert code == 0 and _event(json.loads(out), "node_ready") == "2022-11-28T02:59:25.526964Z"


@needs_fixtures
def test_a_wrong_year_gives_an_impossible_timeline_that_is_flagged(tmp_path: Path) -> None:
    code, out, err = _collect(_copy("normal", tmp_path, keep_containerd_dates=False), "--year", "2026")
    assert code == 1
    problems = json.loads(out)["problems"]
    assert any("126,230,4" in problem and "apart" in problem for problem in problems), problems
    assert any("before VM Initialized" in problem for problem in problems), problems
    assert all(line.startswith("error: impossible timeline: ") for line in err.strip().splitlines())


@needs_fixtures
def test_node_ready_missing_fails_the_run(tmp_path: Path) -> None:
    code, out, err = _collect(_copy("not-ready", tmp_path))
    assert code == 1
    assert "node_ready" in json.loads(out)["missing"]
    assert err.strip() == (
        'error: Node Ready is missing from the logs (not found: no kubelet line matching /event="NodeReady"/)'
    )


# ---- the year rules on synthetic lines -------------------------------------------------------------------


def _stamp(year: int, month: int, day: int) -> float:
    return datetime(year, month, day, 12, tzinfo=UTC).timestamp()


def test_embedded_dates_across_new_year() -> None:
    lines = [
        "Dec 31 23:59:58 h kernel: Linux version 6.1",
        'Jan  1 00:00:03 h containerd: time="2031-01-01T00:00:03.5Z" msg="starting containerd"',
    ]
    choice = years.infer_year(lines, other_logs_start=None, modified=None)
    assert choice.year == 2030  # the year of the first line


def test_modification_time_counts_only_when_it_follows_the_last_line() -> None:
    lines = ["Mar  3 10:00:00 h kernel: Linux version 6.1", "Mar  3 10:00:30 h kubelet: started"]
    assert years.infer_year(lines, other_logs_start=None, modified=_stamp(2029, 3, 3)).year == 2029
    late = years.infer_year(lines, other_logs_start=None, modified=_stamp(2029, 9, 1))
    assert late.year is None and "a copy" in late.basis
    assert (
        years.infer_year(lines, other_logs_start=_stamp(2027, 3, 3), modified=_stamp(2029, 9, 1)).year == 2027
    )


def test_impossible_timelines() -> None:
    ok = {"vm_initialized": 100.0, "kubelet_start": 107.0, "registered": 108.0, "node_ready": 118.0}
    assert years.impossible(ok) == []
    backwards = {**ok, "node_ready": 90.0}
    assert [p.split(":")[0] for p in years.impossible(backwards)] == [
        "Node Ready is 10.0 s before VM Initialized",
        "Node Ready is 18.0 s before Kubelet Registered",
    ]
    assert "apart" in years.impossible({**ok, "node_ready": 118.0 + 7 * 3600})[0]


def test_the_live_collector_keeps_dating_by_modification_time(tmp_path: Path) -> None:
    """On the node itself the syslog is being written: its modification time dates it."""
    log = tmp_path / "var" / "log"
    log.mkdir(parents=True)
    now = datetime.now(UTC)
    stamp = now.strftime("%b %e %H:%M:%S")
    (log / "messages").write_text(f"{stamp} h kernel: Linux version 6.1\n")
    os.utime(log / "messages")
    code, out, _ = _collect(tmp_path)
    assert code == 1  # no Node Ready yet
    assert _event(json.loads(out), "vm_initialized").startswith(str(now.year))
