"""Durations as people write them in scenarios and flags: "90", "30s", "10m", "1h30m", "7d"."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DurationError(ValueError):
    pass


def parse_duration(value: str | int | float) -> float:
    """Seconds in a duration. A bare number means seconds."""
    if isinstance(value, bool):
        raise DurationError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise DurationError(f"duration must not be negative, got {value!r}")
        return float(value)
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if seconds < 0:
            raise DurationError(f"duration must not be negative, got {value!r}")
        return seconds
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise DurationError(f"invalid duration {value!r}: use a number of seconds or e.g. 30s, 10m, 2h, 7d")
    return total


def format_duration(seconds: float) -> str:
    """Compact human form: 45s, 12m30s, 3h05m, 2d04h."""
    s = round(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 and seconds != s else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
