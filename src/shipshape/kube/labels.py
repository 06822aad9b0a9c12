"""Label selectors: the string form of `?labelSelector=` and the `LabelSelector` object form.

Both compile to a `Selector`, a conjunction of requirements that matches a label dict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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


# The lexer of upstream's `labels.Parse`: these characters are tokens of their own; anything else
# up to whitespace or one of them is an identifier (or the keyword `in`/`notin` after a key).
_SPECIAL = "=!(),><"
_OPERATORS = {"=": "In", "==": "In", "!=": "NotIn", "in": "In", "notin": "NotIn", ">": "Gt", "<": "Lt"}
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MSG_NAME = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_MSG_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _lex(text: str) -> list[str]:
    tokens: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in _SPECIAL:
            two = text[i : i + 2]
            if two in ("==", "!="):
                tokens.append(two)
                i += 2
            else:
                tokens.append(ch)
                i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            tokens.append(text[i:j])
            i = j
    return tokens


def key_error(key: str) -> str | None:
    """Why `key` is not a valid label key (a qualified name), as upstream words it; None if valid."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return (
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
            "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional "
            "DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        )
    if key.count("/") == 1:
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            return (
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character"
            )
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.match(name):
        return _MSG_NAME
    return None


def value_error(value: str) -> str | None:
    """Why `value` is not a valid label value, as upstream words it; None if valid."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if value and not _NAME.match(value):
        return _MSG_VALUE
    return None


def parse(text: str | None) -> Selector:
    """Parse the string form as upstream's `labels.Parse`: `a=b,c!=d,e in (x,y),f notin (z),g,!h,i>1`.

    Keys must be qualified names and values label values; `in ()` means the empty value. A selector
    that does not parse raises `SelectorError` (the API answers 400 BadRequest)."""
    if text is None or not text.strip():
        return EVERYTHING
    tokens = _lex(text)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str | None:
        nonlocal pos
        token = peek()
        pos += 1
        return token

    def is_identifier(token: str | None) -> bool:
        return token is not None and token[0] not in _SPECIAL

    def shown(token: str | None) -> str:
        return "" if token is None else token

    def fail(message: str) -> SelectorError:
        return SelectorError(f"unable to parse requirement: {message}")

    def requirement() -> Requirement:
        token = take()
        negated = token == "!"
        if negated:
            token = take()
        if not is_identifier(token):
            raise fail(f"found '{shown(token)}', expected: identifier")
        assert token is not None
        key = token
        problem = key_error(key)
        if problem:
            raise fail(f'key: Invalid value: "{key}": {problem}')
        if peek() in (None, ","):
            return Requirement(key, "DoesNotExist" if negated else "Exists")
        if negated:
            raise fail(f"found '{shown(peek())}', expected: ',' or 'end of string'")
        op_token = take()
        if op_token not in _OPERATORS:
            raise fail(f"found '{shown(op_token)}', expected: !=, =, ==, >, <, in, notin")
        assert op_token is not None
        values: list[str] = []
        if op_token in ("in", "notin"):
            token = take()
            if token != "(":
                raise fail(f"found '{shown(token)}' expected: '('")
            if peek() == ")":
                take()
                values = [""]
            elif is_identifier(peek()) or peek() == ",":
                while True:
                    token = take()
                    if is_identifier(token):
                        assert token is not None
                        values.append(token)
                        if peek() == ",":
                            continue
                        if peek() == ")":
                            take()
                            break
                        raise fail(f"found '{shown(peek())}', expected: ',' or ')'")
                    if token == ",":  # "(,", ",)" and ",," stand for the empty value, as upstream
                        if not values:
                            values.append("")
                        if peek() == ")":
                            take()
                            values.append("")
                            break
                        if peek() == ",":
                            take()
                            values.append("")
                        continue
                    raise fail(f"found '{shown(token)}', expected: ',', or identifier")
            else:
                raise fail(f"found '{shown(peek())}', expected: ',', ')' or identifier")
        elif peek() in (None, ","):
            values = [""]
        else:
            token = take()
            if not is_identifier(token):
                raise fail(f"found '{shown(token)}', expected: identifier")
            assert token is not None
            values = [token]
        operator = _OPERATORS[op_token]
        unique = tuple(sorted(set(values)))
        for value in unique:
            problem = value_error(value)
            if problem:
                raise fail(f'values[0]: Invalid value: "{value}": {problem}')
        if operator in ("Gt", "Lt"):
            try:
                int(unique[0])
            except ValueError:
                raise fail(
                    f"values[0]: Invalid value: \"{unique[0]}\": for 'Gt', 'Lt' operators, the value "
                    "must be an integer"
                ) from None
        return Requirement(key, operator, unique)

    reqs: list[Requirement] = []
    while True:
        token = peek()
        if token is None:
            break
        if not (is_identifier(token) or token == "!"):
            raise SelectorError(f"found '{token}', expected: !, identifier, or 'end of string'")
        reqs.append(requirement())
        token = take()
        if token is None:
            break
        if token != ",":
            raise SelectorError(f"found '{token}', expected: ',' or 'end of string'")
        if not (is_identifier(peek()) or peek() == "!"):
            raise SelectorError(f"found '{shown(peek())}', expected: identifier after ','")
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
