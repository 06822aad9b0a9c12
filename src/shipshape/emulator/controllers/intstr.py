"""IntOrString values (`maxSurge: 25%`, `minAvailable: 2`) scaled as upstream's `intstr` does."""

from __future__ import annotations

import math
from typing import Any


class IntOrPercentError(ValueError):
    """A value that is neither an int nor a percentage string."""


def scaled_value(value: Any, total: int, *, round_up: bool) -> int:
    """`GetScaledValueFromIntOrPercent`: an int as is, "N%" of `total` rounded up or down."""
    if isinstance(value, bool):
        raise IntOrPercentError(f"invalid value for IntOrString: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%"):
            try:
                percent = int(text[:-1])
            except ValueError:
                raise IntOrPercentError(f"invalid value for IntOrString: invalid value {value!r}") from None
            exact = percent * total / 100
            return math.ceil(exact) if round_up else math.floor(exact)
    raise IntOrPercentError(
        f"invalid value for IntOrString: invalid type: string is not a percentage: {value!r}"
    )
