"""Read a host's log tree (`--root DIR`, the host's `/` mounted into the collector's pod) and
build the node's start-up timeline.

Where the logs are looked for, in order:
- `DIR/var/log/messages` (syslog, AL2 and most RPM distributions);
- a journal export (`journalctl -o json`) given explicitly, or produced by running
  `journalctl --directory DIR/var/log/journal -o json` when the host keeps only the journal;
- the VPC CNI container's log `DIR/var/log/pods/kube-system_aws-node-*/aws-node/*.log`.

Syslog stamps carry no year: `years.infer_year` finds it (or the caller passes it), and a timeline
whose dates cannot be true is flagged in its `problems`.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shipshape.nodecollector import parsers, timeline, years
from shipshape.nodecollector.parsers import LogLine


class CollectError(RuntimeError):
    """The host tree has no log the collector can read."""


@dataclass(frozen=True, slots=True)
class HostLogs:
    messages: Path | None
    journal_export: Path | None
    journal_dir: Path | None
    cni_logs: tuple[Path, ...]


def find_logs(root: Path, journal_export: Path | None = None) -> HostLogs:
    messages = root / "var" / "log" / "messages"
    journal_dir = root / "var" / "log" / "journal"
    cni = sorted((root / "var" / "log" / "pods").glob("kube-system_aws-node-*/aws-node/*.log"))
    return HostLogs(
        messages=messages if messages.is_file() else None,
        journal_export=journal_export,
        journal_dir=journal_dir if journal_dir.is_dir() else None,
        cni_logs=tuple(cni),
    )


def _read_lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", errors="replace") as handle:
        yield from handle


def _journal_lines(directory: Path) -> Iterator[str]:
    binary = shutil.which("journalctl")
    if binary is None:
        raise CollectError(
            f"{directory} holds a binary journal but journalctl is not installed: "
            "export it with `journalctl -o json` and pass --journal FILE"
        )
    result = subprocess.run(
        [binary, "--directory", str(directory), "--boot", "-o", "json", "--no-pager"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise CollectError(f"journalctl failed on {directory}: {result.stderr.strip()}")
    yield from result.stdout.splitlines()


def _first_time(lines: Iterator[LogLine]) -> float | None:
    return next((line.time for line in lines), None)


def syslog_year(logs: HostLogs) -> years.YearChoice:
    """The year of the first line of `logs.messages` (its stamps carry none): see `years`."""
    assert logs.messages is not None
    other_start = _first_time(_cni_lines(logs.cni_logs)) if logs.cni_logs else None
    return years.infer_year(
        _read_lines(logs.messages), other_logs_start=other_start, modified=logs.messages.stat().st_mtime
    )


def system_log(logs: HostLogs, *, year: int | None = None) -> Iterator[LogLine] | None:
    """The host's system log, whichever way it is kept; None when there is none."""
    if logs.journal_export is not None:
        return parsers.parse_journal_json(_read_lines(logs.journal_export))
    if logs.messages is not None:
        if year is None:
            choice = syslog_year(logs)
            if choice.year is None:
                raise CollectError(f"cannot tell the year of {logs.messages}: {choice.basis}; pass --year")
            year = choice.year
        return parsers.parse_syslog(_read_lines(logs.messages), year=year)
    if logs.journal_dir is not None:
        return parsers.parse_journal_json(_journal_lines(logs.journal_dir))
    return None


def collect(
    root: Path, *, year: int | None = None, journal_export: Path | None = None
) -> timeline.NodeLogTimeline:
    """The node's log timeline from the host tree at `root`."""
    if not root.is_dir():
        raise CollectError(f"{root} is not a directory")
    if journal_export is not None and not journal_export.is_file():
        raise CollectError(f"journal export {journal_export} does not exist")
    logs = find_logs(root, journal_export)
    system = system_log(logs, year=year)
    if system is None:
        raise CollectError(f"no system log under {root}: expected var/log/messages or var/log/journal")
    sources: dict[str, Iterator[LogLine]] = {timeline.SYSTEM_LOG: system}
    if logs.cni_logs:
        sources[timeline.CNI_LOG] = _cni_lines(logs.cni_logs)
    try:
        found = timeline.match_events(sources)
    except parsers.LogFormatError as error:
        raise CollectError(str(error)) from error
    found.problems = years.impossible(found.times())
    return found


def _cni_lines(paths: tuple[Path, ...]) -> Iterator[LogLine]:
    for path in paths:
        yield from parsers.parse_cri_log(_read_lines(path), source=timeline.CNI_LOG)


def timeline_from_text(messages: str, *, year: int, cni_log: str | None = None) -> timeline.NodeLogTimeline:
    """The timeline from log texts already in hand (e.g. the emulator's `boot_log(node)` and
    `cni_log(node)`): `messages` in /var/log/messages form, `cni_log` in CRI container-log form."""
    sources: dict[str, Iterator[LogLine]] = {
        timeline.SYSTEM_LOG: parsers.parse_syslog(messages.splitlines(), year=year)
    }
    if cni_log is not None:
        sources[timeline.CNI_LOG] = parsers.parse_cri_log(cni_log.splitlines(), source=timeline.CNI_LOG)
    found = timeline.match_events(sources)
    found.problems = years.impossible(found.times())
    return found
