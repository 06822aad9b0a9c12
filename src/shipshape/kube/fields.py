"""Field selectors (`?fieldSelector=spec.nodeName=n1,status.phase!=Running`), as the API server has them.

A selector is a conjunction of `field=value`, `field==value` and `field!=value` terms; `\\,`, `\\=`
and `\\\\` escape those characters inside values. Each kind supports a fixed set of fields (plus
`metadata.name`, and `metadata.namespace` for namespaced kinds); any other field is refused with
upstream's message ("field label not supported: ...").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]
FieldGetter = Callable[[Obj], str | list[str]]


class FieldSelectorError(ValueError):
    """A field selector that cannot be parsed or names a field the kind does not support."""


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    equals: bool  # True for = and ==, False for !=
    value: str


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def value_of(self, field: str) -> str | None:
        """The value an equality term requires for `field` (e.g. to narrow a list by name)."""
        for req in self.requirements:
            if req.field == field and req.equals:
                return req.value
        return None


EVERYTHING = FieldSelector()


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(value: str, whole: str) -> str:
    out: list[str] = []
    escaped = False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise FieldSelectorError(
                    f"invalid field selector: '{whole}'; invalid escape sequence '\\{ch}'"
                )
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise FieldSelectorError(f"invalid field selector: '{whole}'; unescaped '{ch}' in value")
        else:
            out.append(ch)
    if escaped:
        raise FieldSelectorError(f"invalid field selector: '{whole}'; trailing backslash")
    return "".join(out)


def parse(text: str | None) -> FieldSelector:
    """Parse the string form. An empty or missing selector selects everything."""
    if text is None or not text.strip():
        return EVERYTHING
    reqs: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        if not term:
            continue
        for op, equals in (("!=", False), ("==", True), ("=", True)):
            idx = _find_unescaped(term, op)
            if idx >= 0:
                field = term[:idx].strip()
                value = _unescape(term[idx + len(op) :], text)
                if not field:
                    raise FieldSelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
                reqs.append(FieldRequirement(field, equals, value))
                break
        else:
            raise FieldSelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
    return FieldSelector(tuple(reqs))


def _find_unescaped(term: str, op: str) -> int:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        if term.startswith(op, i):
            return i
        i += 1
    return -1


# ---- the fields each kind supports ---------------------------------------------------------------


def _path(*keys: str) -> FieldGetter:
    def get(obj: Obj) -> str:
        cur: Any = obj
        for key in keys:
            if not isinstance(cur, Mapping):
                return ""
            cur = cur.get(key)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


def _pod_ips(obj: Obj) -> list[str]:
    return [str(ip.get("ip", "")) for ip in (obj.get("status", {}).get("podIPs") or [])]


def _event_source(obj: Obj) -> str:
    return str(obj.get("reportingComponent") or (obj.get("source") or {}).get("component") or "")


_INVOLVED = {
    f"involvedObject.{key}": _path("involvedObject", key)
    for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
}
_REGARDING = {
    f"regarding.{key}": _path("regarding", key)
    for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
}

# Keyed by ResourceType.key ("pods", "replicasets.apps", ...), as upstream registers them per kind.
SUPPORTED: dict[str, dict[str, FieldGetter]] = {
    "pods": {
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: _path("spec", "hostNetwork")(o) or "false",
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.podIPs": _pod_ips,
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    "nodes": {"spec.unschedulable": lambda o: _path("spec", "unschedulable")(o) or "false"},
    "namespaces": {"status.phase": _path("status", "phase")},
    "secrets": {"type": _path("type")},
    "replicasets.apps": {"status.replicas": lambda o: _path("status", "replicas")(o) or "0"},
    "jobs.batch": {"status.successful": lambda o: _path("status", "succeeded")(o) or "0"},
    "events": {
        **_INVOLVED,
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _event_source,
        "type": _path("type"),
    },
    "events.events.k8s.io": {
        **_REGARDING,
        "reason": _path("reason"),
        "reportingController": _path("reportingController"),
        "type": _path("type"),
    },
}


def getters_for(resource_key: str, namespaced: bool) -> dict[str, FieldGetter]:
    """Every field a kind can be selected by."""
    getters: dict[str, FieldGetter] = {"metadata.name": _path("metadata", "name")}
    if namespaced:
        getters["metadata.namespace"] = _path("metadata", "namespace")
    getters.update(SUPPORTED.get(resource_key, {}))
    return getters


def compile_for(selector: FieldSelector, resource_key: str, namespaced: bool) -> Callable[[Obj], bool] | None:
    """A predicate for one kind, or None when the selector is empty.

    Raises FieldSelectorError for a field the kind does not support.
    """
    if selector.empty:
        return None
    getters = getters_for(resource_key, namespaced)
    checks: list[tuple[FieldGetter, bool, str]] = []
    for req in selector.requirements:
        getter = getters.get(req.field)
        if getter is None:
            raise FieldSelectorError(f"field label not supported: {req.field}")
        checks.append((getter, req.equals, req.value))

    def matches(obj: Obj) -> bool:
        for getter, equals, value in checks:
            have = getter(obj)
            hit = value in have if isinstance(have, list) else have == value
            if hit != equals:
                return False
        return True

    return matches
