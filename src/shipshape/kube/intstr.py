"""IntOrString values (`maxSurge: 25%`, `minAvailable: 2`) scaled as Kubernetes scales them.

One rule for every reader (the emulator's workload and disruption controllers, the controller's
availability floors, the simulator's observer): upstream's `intstr.GetScaledValueFromIntOrPercent`.
An int is taken as is; a string must be a whole number followed by `%` and is that share of `total`,
rounded up or down as the caller's field says (PDB `minAvailable`/`maxUnavailable` and rolling-update
`maxSurge` round up, rolling-update `maxUnavailable` rounds down). Anything else (a bare number as a
string, `12.5%`, a bool, a float) is an `IntOrStringError`, as it is an error upstream.
"""

from __future__ import annotations

import math
import re

# What `strconv.Atoi` accepts: an optional sign and decimal digits (no spaces, no underscores).
_ATOI = re.compile(r"[+-]?[0-9]+")

IntOrString = int | str


class IntOrStringError(ValueError):
    """A value that is neither an int nor a percentage string."""


def scaled_value(value: object, total: int, *, round_up: bool) -> int:
    """`GetScaledValueFromIntOrPercent`: an int as is, "N%" of `total` rounded up or down."""
    if isinstance(value, bool) or value is None:
        raise IntOrStringError(f"invalid value for IntOrString: {value!r}")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise IntOrStringError(
            f"invalid value for IntOrString: invalid type: neither int nor percentage: {value!r}"
        )
    if not value.endswith("%"):
        raise IntOrStringError(
            f"invalid value for IntOrString: invalid type: string is not a percentage: {value!r}"
        )
    digits = value[:-1]
    if not _ATOI.fullmatch(digits):
        raise IntOrStringError(f"invalid value for IntOrString: invalid value {value!r}")
    share = float(int(digits)) * float(total) / 100
    return math.ceil(share) if round_up else math.floor(share)


def value_or_default(value: object, default: IntOrString) -> object:
    """`intstr.ValueOrDefault`: the value, or `default` where the field is not set (None)."""
    return default if value is None else value
