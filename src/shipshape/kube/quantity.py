"""Kubernetes resource quantities ("100m", "1.5Gi", "2e3") as plain numbers.

CPU is handled in millicores (int), everything else in base units (bytes, counts) as int,
rounded up like the API server does for sub-unit values.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_PATTERN = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|)$")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a quantity into an exact decimal number of base units."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must match the regular expression, got {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    """Quantity strings repeat (every replica of a workload asks for the same); a Decimal is immutable."""
    text = value.strip()
    match = _PATTERN.match(text)
    if not match:
        raise QuantityError(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {value!r}"
        )
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as exc:
        raise QuantityError(f"invalid number in quantity {value!r}") from exc
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return base * (Decimal(10) ** int(suffix[1:]))
    return base * _DECIMAL[suffix]


def cpu_millis(value: str | int | float) -> int:
    """CPU quantity in millicores, rounded up ("250m" -> 250, "1" -> 1000, "0.1" -> 100)."""
    if isinstance(value, str):
        return _text_millis(value)
    return math.ceil(parse_quantity(value) * 1000)


def to_int(value: str | int | float) -> int:
    """Non-CPU quantity in base units, rounded up ("1Gi" -> 1073741824)."""
    if isinstance(value, str):
        return _text_int(value)
    return math.ceil(parse_quantity(value))


@functools.lru_cache(maxsize=4096)
def _text_millis(value: str) -> int:
    return math.ceil(_parse_text(value) * 1000)


@functools.lru_cache(maxsize=4096)
def _text_int(value: str) -> int:
    return math.ceil(_parse_text(value))


def resource_amount(name: str, value: str | int | float) -> int:
    """A resource's amount in the unit Shipshape uses for it: millicores for cpu, base units otherwise."""
    return cpu_millis(value) if name == "cpu" else to_int(value)


def format_cpu(millis: int) -> str:
    """Millicores back to a quantity string ("1500m", "2")."""
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def format_bytes(amount: int) -> str:
    """Bytes back to the largest exact binary quantity ("1Gi", "1536Mi", "100")."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if amount and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)
