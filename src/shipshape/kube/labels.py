"""Label selectors: the string form of `?labelSelector=` and the `LabelSelector` object form.

Both compile to a `Selector`, a conjunction of requirements that matches a label dict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(r"\s*(!=|==|=|!|,|\(|\)|[A-Za-z0-9_./\-]+)\s*")
_SET_OPS = {"in", "notin"}


class SelectorError(ValueError):
    """A selector that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":  # the most common operator (every matchLabels entry) first
            return self.key in labels and labels[self.key] in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op in ("Gt", "Lt"):
            if self.key not in labels:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except (ValueError, IndexError):
                return False
            return have > want if op == "Gt" else have < want
        raise SelectorError(f"unknown operator {op!r}")


@dataclass(frozen=True, slots=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()
    match_nothing: bool = False
    # For a selector of equalities only (`matchLabels`, `a=b,c=d`) on distinct keys: the required
    # (key, value) pairs, which a label dict matches when they are among its items. Derived.
    _pairs: dict[str, str] | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        pairs: dict[str, str] = {}
        for req in self.requirements:
            if req.operator != "In" or len(req.values) != 1 or req.key in pairs:
                return
            pairs[req.key] = req.values[0]
        object.__setattr__(self, "_pairs", pairs)

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.match_nothing:
            return False
        have = labels or {}
        if self._pairs is not None and isinstance(have, dict):
            # The requirements' own test (key present, value equal), in one C-level comparison:
            # this runs for every pod a controller looks at.
            return self._pairs.items() <= have.items()
        for req in self.requirements:  # noqa: SIM110
            if not req.matches(have):
                return False
        return True

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.match_nothing


EVERYTHING = Selector()
NOTHING = Selector(match_nothing=True)


def parse(text: str | None) -> Selector:
    """Parse the string form: `a=b,c!=d,e in (x,y),f notin (z),g,!h`."""
    if text is None or not text.strip():
        return EVERYTHING
    tokens: list[str] = list(_TOKEN.findall(text))
    if "".join(tokens).replace(" ", "") != text.replace(" ", ""):
        raise SelectorError(f"unable to parse requirement: {text!r}")
    reqs: list[Requirement] = []
    i = 0

    def expect_value(pos: int) -> str:
        if pos >= len(tokens) or tokens[pos] in {",", "(", ")", "=", "==", "!=", "!"}:
            raise SelectorError(f"unable to parse requirement: found no value in {text!r}")
        return tokens[pos]

    while i < len(tokens):
        tok = tokens[i]
        if tok == "!":
            key = expect_value(i + 1)
            reqs.append(Requirement(key, "DoesNotExist"))
            i += 2
        else:
            key = tok
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ","
            if nxt in ("=", "=="):
                value = tokens[i + 2] if i + 2 < len(tokens) and tokens[i + 2] not in {",", "(", ")"} else ""
                reqs.append(Requirement(key, "In", (value,)))
                i += 3 if value else 2
            elif nxt == "!=":
                value = tokens[i + 2] if i + 2 < len(tokens) and tokens[i + 2] not in {",", "(", ")"} else ""
                reqs.append(Requirement(key, "NotIn", (value,)))
                i += 3 if value else 2
            elif nxt in _SET_OPS:
                if i + 2 >= len(tokens) or tokens[i + 2] != "(":
                    raise SelectorError(f"unable to parse requirement: expected '(' in {text!r}")
                j = i + 3
                values: list[str] = []
                while j < len(tokens) and tokens[j] != ")":
                    if tokens[j] != ",":
                        values.append(tokens[j])
                    j += 1
                if j >= len(tokens):
                    raise SelectorError(f"unable to parse requirement: missing ')' in {text!r}")
                reqs.append(Requirement(key, "In" if nxt == "in" else "NotIn", tuple(values)))
                i = j + 1
            elif nxt == ",":
                reqs.append(Requirement(key, "Exists"))
                i += 1
            else:
                raise SelectorError(f"unable to parse requirement: unexpected {nxt!r} in {text!r}")
        if i < len(tokens):
            if tokens[i] != ",":
                raise SelectorError(f"unable to parse requirement: expected ',' in {text!r}")
            i += 1
    return Selector(tuple(reqs))


def from_label_selector(selector: Mapping[str, Any] | None) -> Selector:
    """Compile a `LabelSelector` object (matchLabels + matchExpressions).

    `None` matches nothing (as for a workload selector that is absent); `{}` matches everything.
    """
    if selector is None:
        return NOTHING
    reqs = [Requirement(k, "In", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        op = expr.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise SelectorError(f"{op!r} is not a valid label selector operator")
        reqs.append(Requirement(expr["key"], op, tuple(expr.get("values") or ())))
    return Selector(tuple(reqs))


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Whether a `LabelSelector` object selects these labels."""
    return from_label_selector(selector).matches(labels)


def to_string(match_labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))
