"""Values printed as kube-apiserver prints them in messages (Go's `fmt` verbs), for field errors.

Upstream's `field.Error` prints a bad value with `%v` for numbers and booleans, `%q` for strings and
`%#v` for anything else, so a label map reads `map[string]string{"app":"web"}` and a selector
`v1.LabelSelector{MatchLabels:..., MatchExpressions:...}`. JSON objects carry no Go type, so the
caller names it where the shape alone cannot tell (`string_map`, `label_selector`); values of other
shapes (whole structs upstream) fall back to compact JSON. Pure functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


@dataclass(frozen=True, slots=True)
class Shown:
    """A value already rendered the Go way; `value()` prints it as is."""

    text: str


def quote(text: str) -> str:
    """Go's `%q` (strconv.Quote): double quotes, backslash escapes, printable Unicode kept."""
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def number(value: int | float) -> str:
    """`%v` of a number; whole floats print without a fraction, as Go's shortest form does."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def string_map(value: Mapping[str, Any] | None) -> Shown:
    """`%#v` of a `map[string]string` (keys sorted, as fmt sorts them); None is the nil map."""
    if value is None:
        return Shown("map[string]string(nil)")
    entries = ", ".join(f"{quote(str(k))}:{quote(str(v))}" for k, v in sorted(value.items()))
    return Shown(f"map[string]string{{{entries}}}")


def string_slice(value: Sequence[Any] | None) -> Shown:
    """`%#v` of a `[]string`; None is the nil slice."""
    if value is None:
        return Shown("[]string(nil)")
    return Shown(f"[]string{{{', '.join(quote(str(item)) for item in value)}}}")


def label_selector(selector: Mapping[str, Any]) -> Shown:
    """`%#v` of a `metav1.LabelSelector` (upstream dereferences the pointer before printing)."""
    expressions = selector.get("matchExpressions")
    if expressions is None:
        shown_expressions = "[]v1.LabelSelectorRequirement(nil)"
    else:
        items = ", ".join(
            "v1.LabelSelectorRequirement{"
            f"Key:{quote(str(e.get('key', '')))}, Operator:{quote(str(e.get('operator', '')))}, "
            f"Values:{string_slice(e.get('values')).text}}}"
            for e in expressions
            if isinstance(e, Mapping)
        )
        shown_expressions = f"[]v1.LabelSelectorRequirement{{{items}}}"
    labels = selector.get("matchLabels")
    shown_labels = string_map(labels if isinstance(labels, Mapping) else None).text
    return Shown(f"v1.LabelSelector{{MatchLabels:{shown_labels}, MatchExpressions:{shown_expressions}}}")


def _is_string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def value(bad: Any) -> str:
    """A field error's bad value as upstream prints it: `%v` for numbers and booleans, `%q` for strings,
    `%#v` for string maps and slices; a nil value is `null`; other shapes as compact JSON."""
    if isinstance(bad, Shown):
        return bad.text
    if bad is None:
        return "null"
    if isinstance(bad, bool):
        return "true" if bad else "false"
    if isinstance(bad, int | float):
        return number(bad)
    if isinstance(bad, str):
        return quote(bad)
    if _is_string_map(bad):
        return string_map(bad).text
    if isinstance(bad, list) and all(isinstance(item, str) for item in bad):
        return string_slice(bad).text
    return json.dumps(bad, separators=(",", ":"), sort_keys=True)
