"""The year of a syslog file whose stamps carry none, and checks that a timeline is possible. Pure.

Syslog lines (`Nov 28 02:59:07 host ident: ...`) have no year. It is taken, in order, from:
1. full dates inside the syslog's own lines (containerd's `time="2022-11-28T02:59:10.9Z"`);
2. the other logs of the same boot that carry full dates (the CNI container log), the year that
   puts their first line inside the syslog's span;
3. the file's modification time, only when it falls within `RECENT` of the file's last line (a
   live host, or a copy that kept its times).
Otherwise the year is unknown and the caller asks for `--year`. Dates that the sources disagree on
show up in `impossible()` as a timeline no node can have.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from shipshape.analyzers.startup import nodes

_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {name: i for i, name in enumerate(_MONTH_NAMES, 1)}
_STAMP = re.compile(r"^(?P<month>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<clock>\d\d:\d\d:\d\d) ")
_EMBEDDED = re.compile(r'\btime="(?P<year>\d{4})-(?P<month>\d\d)-(?P<day>\d\d)T')

DAY = 86_400.0
RECENT = 2 * DAY  # a file modified this long after its last line still dates it
SLACK = DAY  # how far another log's first line may lie outside the syslog's span
# A node's start-up, first event to last, takes minutes; more than this is dates gone wrong.
LONGEST_STARTUP = 6 * 3600.0
# Events the boot cannot have before it (kernel first), allowing the syslog's whole-second stamps.
ORDER_SLACK = 1.0
MUST_FOLLOW: tuple[tuple[str, str], ...] = (
    (nodes.VM_INITIALIZED, nodes.KUBELET_START),
    (nodes.VM_INITIALIZED, nodes.CNI_READY),
    (nodes.VM_INITIALIZED, nodes.NODE_READY),
    (nodes.KUBELET_START, nodes.REGISTERED),
    (nodes.REGISTERED, nodes.NODE_READY),
)


@dataclass(frozen=True, slots=True)
class YearChoice:
    year: int | None  # of the file's first line; None: unknown
    basis: str  # how it was found, or why it could not be


@dataclass(frozen=True, slots=True)
class _Stamp:
    wraps: int  # year changes (December -> January) since the first line
    month: int
    day: int
    clock: str
    embedded: tuple[int, int, int] | None


def _stamps(lines: Iterable[str]) -> list[_Stamp]:
    out: list[_Stamp] = []
    wraps = last = 0
    for line in lines:
        match = _STAMP.match(line)
        if not match or match.group("month") not in _MONTHS:
            continue
        month = _MONTHS[match.group("month")]
        if month < last:
            wraps += 1
        last = month
        inner = _EMBEDDED.search(line, match.end())
        embedded = (
            (int(inner.group("year")), int(inner.group("month")), int(inner.group("day"))) if inner else None
        )
        out.append(_Stamp(wraps, month, int(match.group("day")), match.group("clock"), embedded))
    return out


def _when(stamp: _Stamp, first_year: int) -> float | None:
    hours, minutes, seconds = (int(part) for part in stamp.clock.split(":"))
    try:
        moment = datetime(
            first_year + stamp.wraps, stamp.month, stamp.day, hours, minutes, seconds, tzinfo=UTC
        )
    except ValueError:  # Feb 29 in a year without one
        return None
    return moment.timestamp()


def _span(stamps: Sequence[_Stamp], year: int) -> tuple[float, float] | None:
    first, last = _when(stamps[0], year), _when(stamps[-1], year)
    return None if first is None or last is None else (first, last)


def infer_year(lines: Iterable[str], *, other_logs_start: float | None, modified: float | None) -> YearChoice:
    """The year of the first line of syslog `lines` (see the module's docstring)."""
    stamps = _stamps(lines)
    if not stamps:
        return YearChoice(None, "the file has no syslog lines")
    votes: Counter[int] = Counter()
    for stamp in stamps:
        if stamp.embedded is None:
            continue
        year, month, day = stamp.embedded
        if (month, day) == (stamp.month, stamp.day):
            votes[year - stamp.wraps] += 1
    if votes:
        year, _ = votes.most_common(1)[0]
        return YearChoice(year, f"dates inside its lines ({votes[year]} containerd stamps)")
    if other_logs_start is not None:
        anchor_year = datetime.fromtimestamp(other_logs_start, UTC).year
        for year in (anchor_year, anchor_year - 1):
            span = _span(stamps, year)
            if span is not None and span[0] - SLACK <= other_logs_start <= span[1] + SLACK:
                return YearChoice(year, "the CNI log's dates")
    if modified is not None:
        mtime_year = datetime.fromtimestamp(modified, UTC).year
        for year in (mtime_year - stamps[-1].wraps, mtime_year - stamps[-1].wraps - 1):
            span = _span(stamps, year)
            if span is not None and span[1] - SLACK <= modified <= span[1] + RECENT:
                return YearChoice(year, "the file's modification time")
        when = datetime.fromtimestamp(modified, UTC).strftime("%Y-%m-%d")
        last = stamps[-1]
        return YearChoice(
            None,
            f"its lines carry no year, no other log dates them, and the file was modified on {when}, "
            f"not just after its last line ({_month_name(last.month)} {last.day}): a copy",
        )
    return YearChoice(None, "its lines carry no year and no other log dates them")


def _month_name(month: int) -> str:
    return _MONTH_NAMES[month - 1]


def impossible(times: Mapping[str, float]) -> list[str]:
    """Why a node start-up timeline (event -> POSIX time) cannot be true; empty when it can."""
    problems = []
    if times:
        first = min(times, key=lambda name: times[name])
        last = max(times, key=lambda name: times[name])
        span = times[last] - times[first]
        if span > LONGEST_STARTUP:
            problems.append(
                f"{nodes.EVENT_TITLES[first]} and {nodes.EVENT_TITLES[last]} are {span:,.0f} s apart "
                f"(more than {LONGEST_STARTUP / 3600:g} h): the logs' dates disagree (check --year)"
            )
    for before, after in MUST_FOLLOW:
        if before in times and after in times and times[after] < times[before] - ORDER_SLACK:
            problems.append(
                f"{nodes.EVENT_TITLES[after]} is {times[before] - times[after]:,.1f} s before "
                f"{nodes.EVENT_TITLES[before]}: the logs' dates disagree (check --year)"
            )
    return problems
