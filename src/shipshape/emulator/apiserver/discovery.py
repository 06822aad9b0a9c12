"""Discovery documents: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`.

Both shapes kube-apiserver serves: the legacy documents (APIVersions, APIGroupList,
APIResourceList) and aggregated discovery (apidiscovery.k8s.io/v2 APIGroupDiscoveryList), which
kubectl asks for first through its Accept header.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shipshape.emulator.apiserver.reviews import REVIEWS
from shipshape.emulator.resources import ResourceType
from shipshape.emulator.resources import groups as stored_groups

AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_V2BETA1_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"


@dataclass(frozen=True, slots=True)
class SubresourceInfo:
    """What a subresource answers with and which verbs it takes."""

    group: str
    version: str
    kind: str  # "" means the parent's kind
    verbs: tuple[str, ...]


_SUBRESOURCES: dict[str, SubresourceInfo] = {
    "status": SubresourceInfo("", "", "", ("get", "patch", "update")),
    "scale": SubresourceInfo("autoscaling", "v1", "Scale", ("get", "patch", "update")),
    "binding": SubresourceInfo("", "v1", "Binding", ("create",)),
    "eviction": SubresourceInfo("policy", "v1", "Eviction", ("create",)),
    "log": SubresourceInfo("", "", "", ("get",)),
    "finalize": SubresourceInfo("", "", "", ("update",)),
}


def subresource_info(rt: ResourceType, sub: str) -> SubresourceInfo:
    info = _SUBRESOURCES.get(sub, SubresourceInfo("", "", "", ("get",)))
    if info.kind:
        return info
    return SubresourceInfo(rt.group, rt.version, rt.kind, info.verbs)


# Create-only, never stored: the self-subject reviews (see reviews.py).
VIRTUAL: tuple[ResourceType, ...] = tuple(
    ResourceType(group, version, plural, kind, False, verbs=("create",))
    for group, version, plural, kind in REVIEWS
)


def groups() -> dict[str, list[ResourceType]]:
    """Every served resource by group/version: the object types, then the reviews."""
    out = {api_version: list(types) for api_version, types in stored_groups().items()}
    for rt in VIRTUAL:
        out.setdefault(rt.api_version, []).append(rt)
    return out


def version_info(git_version: str) -> dict[str, Any]:
    """The `/version` document for a `vMAJOR.MINOR.PATCH` version."""
    core = git_version.lstrip("v").split("-")[0].split("+")[0]
    major, minor = ([*core.split("."), "0", "0"])[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": git_version if git_version.startswith("v") else f"v{git_version}",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.6",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _named_groups() -> dict[str, list[str]]:
    """Non-core groups and their versions, in registration order."""
    out: dict[str, list[str]] = {}
    for api_version in groups():
        if "/" in api_version:
            group, version = api_version.split("/", 1)
            out.setdefault(group, [])
            if version not in out[group]:
                out[group].append(version)
    return out


def api_group_list() -> dict[str, Any]:
    items = []
    for group, versions in _named_groups().items():
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        items.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": items}


def api_group(group: str) -> dict[str, Any] | None:
    versions = _named_groups().get(group)
    if versions is None:
        return None
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": gvs,
        "preferredVersion": gvs[0],
    }


def _resources(api_version: str) -> list[ResourceType]:
    return groups().get(api_version, [])


def api_resource_list(api_version: str) -> dict[str, Any] | None:
    """The legacy APIResourceList for one group/version; None when it is not served."""
    types = _resources(api_version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rt in types:
        entry: dict[str, Any] = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in rt.subresources:
            info = subresource_info(rt, sub)
            sub_entry: dict[str, Any] = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": info.kind,
                "verbs": list(info.verbs),
            }
            if info.group != rt.group or info.version != rt.version:
                sub_entry["group"] = info.group
                sub_entry["version"] = info.version
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": api_version,
        "resources": resources,
    }


def _aggregated_resource(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subs = []
    for sub in rt.subresources:
        info = subresource_info(rt, sub)
        subs.append(
            {
                "subresource": sub,
                "responseKind": {"group": info.group, "version": info.version, "kind": info.kind},
                "verbs": list(info.verbs),
            }
        )
    if subs:
        entry["subresources"] = subs
    return entry


def _aggregated_group(group: str, versions: Iterable[str]) -> dict[str, Any]:
    out_versions = []
    for version in versions:
        api_version = f"{group}/{version}" if group else version
        out_versions.append(
            {
                "version": version,
                "resources": [_aggregated_resource(rt) for rt in _resources(api_version)],
                "freshness": "Current",
            }
        )
    metadata: dict[str, Any] = {"name": group} if group else {}
    return {"metadata": metadata, "versions": out_versions}


def aggregated(core: bool, api_version: str = "apidiscovery.k8s.io/v2") -> dict[str, Any]:
    """APIGroupDiscoveryList for `/api` (core=True) or `/apis`."""
    if core:
        items = [_aggregated_group("", ["v1"])]
    else:
        items = [_aggregated_group(g, vs) for g, vs in _named_groups().items()]
    return {"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items}


def wants_aggregated(accept: str) -> str | None:
    """Which aggregated discovery version an Accept header asks for first (None: legacy)."""
    for part in accept.split(","):
        params = {}
        for piece in part.split(";")[1:]:
            key, _, value = piece.strip().partition("=")
            params[key] = value
        if (
            params.get("g") == "apidiscovery.k8s.io"
            and params.get("as") == "APIGroupDiscoveryList"
            and params.get("v") in ("v2", "v2beta1")
        ):
            return params["v"]
    return None
