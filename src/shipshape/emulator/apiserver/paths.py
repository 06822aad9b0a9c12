"""Where a REST request points: group, version, namespace, resource, name, subresource.

Pure parsing of `/api/v1/...` and `/apis/<group>/<version>/...` paths, following the API server's
request-info rules (including the legacy `/watch/` prefix and `namespaces/<ns>/status|finalize`).
"""

from __future__ import annotations

from dataclasses import dataclass

_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True, slots=True)
class Target:
    group: str
    version: str
    plural: str
    namespace: str = ""  # "" for cluster-scoped resources and all-namespace lists
    name: str = ""
    subresource: str = ""
    watch_prefix: bool = False  # the legacy /watch/ path form

    @property
    def is_collection(self) -> bool:
        return not self.name


def parse(path: str) -> Target | None:
    """Parse a resource path; None for anything that is not one (discovery paths included)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    watch_prefix = False
    if rest[0] == "watch":
        watch_prefix = True
        rest = rest[1:]
        if not rest:
            return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
        else:
            # The namespace object itself: /namespaces/<name>[/status|/finalize].
            return Target(
                group,
                version,
                "namespaces",
                "",
                namespace,
                rest[2] if len(rest) > 2 else "",
                watch_prefix,
            )
    if len(rest) > 3:
        return None
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    return Target(group, version, plural, namespace, name, subresource, watch_prefix)
