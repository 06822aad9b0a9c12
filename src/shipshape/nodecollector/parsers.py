"""Node log parsers: syslog `/var/log/messages`, journald's `journalctl -o json` export, and
CRI container logs (`/var/log/pods/...`). Pure: text in, `LogLine`s out.

Every parser yields lines in a syslog-like shape (`ident: message`) so that the same event rules
apply whichever way the host keeps its logs. Syslog stamps have no year and only seconds: the year
is supplied by the caller, and when a line embeds a precise time of the same second (klog's
`I1128 02:59:14.598227`, containerd's `time="...Z"`) that one is used instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo

_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {name: index for index, name in enumerate(_MONTH_NAMES, 1)}
# "Nov 28 02:59:07 ip-192-168-29-250 kubelet[5685]: message" (RFC 3164, the rsyslog default).
_SYSLOG = re.compile(
    r"^(?P<month>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<clock>\d\d:\d\d:\d\d) (?P<host>\S+) "
    r"(?P<ident>[^:\[\s]+)(?:\[(?P<pid>\d+)\])?: ?(?P<message>.*)$"
)
# "2022-11-28T02:59:07.123456+00:00 host ident[pid]: message" (rsyslog's high-precision format).
_SYSLOG_ISO = re.compile(
    r"^(?P<stamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) (?P<host>\S+) "
    r"(?P<ident>[^:\[\s]+)(?:\[(?P<pid>\d+)\])?: ?(?P<message>.*)$"
)
_KLOG = re.compile(r"^[IWEF](?P<month>\d\d)(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d\.\d+) ")
_CONTAINERD_TIME = re.compile(r'^time="(?P<stamp>[^"]+)"')
_CRI = re.compile(r"^(?P<stamp>\S+) (?P<stream>stdout|stderr) (?P<tag>[FP]) ?(?P<message>.*)$")


class LogFormatError(ValueError):
    """A log that is not in the format it was read as."""


@dataclass(frozen=True, slots=True)
class LogLine:
    time: float  # POSIX seconds
    ident: str  # the program: kernel, systemd, kubelet, containerd, cloud-init, ...
    message: str
    source: str  # "messages", "journal" or the container log's name
    precise: bool = False  # time has sub-second precision

    @property
    def text(self) -> str:
        """The line as syslog would print it after the time stamp and host."""
        return f"{self.ident}: {self.message}"


def parse_rfc3339(text: str) -> float:
    """RFC 3339 with up to nanoseconds (Python keeps microseconds)."""
    stamp = text.strip()
    if stamp.endswith("Z"):
        stamp = stamp[:-1] + "+00:00"
    match = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", stamp)
    if not match:
        raise LogFormatError(f"not an RFC 3339 time: {text!r}")
    head, fraction, zone = match.groups()
    fraction = (fraction or "")[:7]
    return datetime.fromisoformat(f"{head}{fraction}{zone or '+00:00'}").timestamp()


def _precise_time(message: str, second: datetime) -> float | None:
    """A sub-second time embedded in the message, if it falls within the syslog stamp's second."""
    klog = _KLOG.match(message)
    if klog:
        hours, minutes, seconds = klog.group("clock").split(":")
        whole, _, fraction = seconds.partition(".")
        candidate = second.replace(
            month=int(klog.group("month")),
            day=int(klog.group("day")),
            hour=int(hours),
            minute=int(minutes),
            second=int(whole),
            microsecond=int(fraction[:6].ljust(6, "0")),
        )
        value = candidate.timestamp()
    else:
        containerd = _CONTAINERD_TIME.match(message)
        if not containerd:
            return None
        try:
            value = parse_rfc3339(containerd.group("stamp"))
        except (LogFormatError, ValueError):
            return None
    base = second.timestamp()
    return value if base <= value < base + 1 else None


def parse_syslog(
    lines: Iterable[str], *, year: int, tz: tzinfo = UTC, source: str = "messages"
) -> Iterator[LogLine]:
    """Lines of a syslog file. `year` is the year of the first line; it advances when the month
    goes back (December -> January). Lines that are not syslog lines (continuations) are skipped."""
    current_year = year
    last_month = 0
    for raw in lines:
        line = raw.rstrip("\n")
        match = _SYSLOG.match(line)
        if match:
            month = _MONTHS.get(match.group("month"))
            if month is None:
                continue
            if month < last_month:
                current_year += 1
            last_month = month
            hours, minutes, seconds = (int(part) for part in match.group("clock").split(":"))
            try:
                second = datetime(
                    current_year, month, int(match.group("day")), hours, minutes, seconds, tzinfo=tz
                )
            except ValueError:
                continue
            message = match.group("message")
            precise = _precise_time(message, second)
            yield LogLine(
                precise if precise is not None else second.timestamp(),
                match.group("ident"),
                message,
                source,
                precise is not None,
            )
            continue
        iso = _SYSLOG_ISO.match(line)
        if iso:
            yield LogLine(
                parse_rfc3339(iso.group("stamp")),
                iso.group("ident"),
                iso.group("message"),
                source,
                "." in iso.group(1),
            )


def parse_journal_json(lines: Iterable[str]) -> Iterator[LogLine]:
    """`journalctl -o json` output: one JSON object per line (`__REALTIME_TIMESTAMP` in µs)."""
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise LogFormatError(f"journal export line {number} is not JSON: {error.msg}") from error
        if not isinstance(entry, dict):
            raise LogFormatError(f"journal export line {number} is not a JSON object")
        stamp = entry.get("__REALTIME_TIMESTAMP")
        if not isinstance(stamp, str) or not stamp.isdigit():
            raise LogFormatError(f"journal export line {number} has no __REALTIME_TIMESTAMP")
        message = entry.get("MESSAGE")
        if isinstance(message, list):  # journald exports non-UTF-8 messages as byte arrays
            message = bytes(value for value in message if isinstance(value, int)).decode("utf-8", "replace")
        if not isinstance(message, str):
            continue
        ident = entry.get("SYSLOG_IDENTIFIER") or entry.get("_COMM") or ""
        if entry.get("_TRANSPORT") == "kernel":
            ident = "kernel"
        yield LogLine(int(stamp) / 1_000_000, str(ident), message, "journal", True)


def parse_cri_log(lines: Iterable[str], *, source: str) -> Iterator[LogLine]:
    """A container log as the kubelet writes it: `<RFC 3339 nano> <stream> <F|P> <message>`."""
    for raw in lines:
        match = _CRI.match(raw.rstrip("\n"))
        if not match:
            continue
        try:
            when = parse_rfc3339(match.group("stamp"))
        except (LogFormatError, ValueError):
            continue
        yield LogLine(when, source, match.group("message"), source, True)


def fixed_zone(offset_minutes: int) -> tzinfo:
    return timezone(timedelta(minutes=offset_minutes))
