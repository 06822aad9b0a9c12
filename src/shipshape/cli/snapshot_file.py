"""The files `shipshape startup --from-file` reads: what users have at hand. Pure: text in, objects out.

Accepted, in one file or spread over several:
- `kubectl get pods,events,nodes -A -o json|yaml` (a `List`, kinds mixed), or one kind per file;
- a single object (`kubectl get pod NAME -o json`);
- JSON lines, one object or List per line (`kubectl get pods -A -o json | jq -c '.items[]'`);
- YAML documents separated by `---`;
- the snapshot format `{"pods": [...], "events": [...], "nodes": [...]}` (each may be a List).
Objects are sorted by `kind`; other kinds are counted and left out.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from shipshape.analyzers.startup.analysis import Snapshot, SnapshotError

Obj = Mapping[str, Any]

SNAPSHOT_KEYS = ("pods", "events", "nodes", "webhookConfigurations")
KIND_TO_LIST = {
    "Pod": "pods",
    "Event": "events",
    "Node": "nodes",
    "MutatingWebhookConfiguration": "webhookConfigurations",
    "ValidatingWebhookConfiguration": "webhookConfigurations",
}


class InputError(ValueError):
    """A file that holds nothing `startup` can read."""


@dataclass(slots=True)
class Collected:
    """Objects gathered from one or more files, by list, with what was left out."""

    lists: dict[str, list[Obj]] = field(default_factory=lambda: {key: [] for key in SNAPSHOT_KEYS})
    webhooks_seen: bool = False
    ignored: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.lists["pods"],
            self.lists["events"],
            self.lists["nodes"],
            self.lists["webhookConfigurations"] if self.webhooks_seen else None,
        )


def documents(text: str, name: str) -> list[Any]:
    """The documents of a file: one JSON value, JSON lines, or YAML documents."""
    stripped = text.strip()
    if not stripped:
        raise InputError(f"{name} is empty")
    try:
        return [json.loads(stripped)]
    except json.JSONDecodeError as whole:
        if stripped[0] in "{[":
            lines = [line for line in stripped.splitlines() if line.strip()]
            try:
                return [json.loads(line) for line in lines]
            except json.JSONDecodeError:
                if len(lines) > 1 and all(line.lstrip()[:1] in "{[" for line in lines):
                    raise InputError(
                        f"{name} is neither JSON nor JSON lines: {whole.msg} (line {whole.lineno})"
                    ) from None
    try:
        return [doc for doc in yaml.safe_load_all(stripped) if doc is not None]
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or "not valid"
        raise InputError(f"{name} is neither JSON nor YAML: {problem}{where}") from None


def _objects(value: Any, where: str) -> Iterator[Obj]:
    """Kubernetes objects in a decoded document, Lists expanded."""
    if isinstance(value, list):
        for position, item in enumerate(value):
            yield from _objects(item, f"{where}[{position}]")
        return
    if not isinstance(value, dict):
        raise InputError(f"{where} is not a Kubernetes object")
    kind = str(value.get("kind") or "")
    if kind.endswith("List") or (not kind and isinstance(value.get("items"), list)):
        yield from _objects(value.get("items") or [], f"{where}.items")
        return
    yield value


def _is_snapshot(value: Any) -> bool:
    return isinstance(value, dict) and "kind" not in value and any(key in value for key in SNAPSHOT_KEYS)


def collect(files: Iterable[tuple[str, str]]) -> Collected:
    """Gather the objects of (name, text) files."""
    out = Collected()
    for name, text in files:
        for number, document in enumerate(documents(text, name)):
            where = name if number == 0 else f"{name} (document {number + 1})"
            if _is_snapshot(document):
                try:
                    snap = Snapshot.from_json(document)
                except SnapshotError as error:
                    raise InputError(f"{where}: {error}") from None
                out.lists["pods"] += snap.pods
                out.lists["events"] += snap.events
                out.lists["nodes"] += snap.nodes
                if snap.webhook_configurations is not None:
                    out.webhooks_seen = True
                    out.lists["webhookConfigurations"] += snap.webhook_configurations
                continue
            for obj in _objects(document, where):
                kind = str(obj.get("kind") or "")
                if not kind and isinstance(obj.get("spec"), dict) and "containers" in obj["spec"]:
                    kind = "Pod"  # an item of a List whose items carry no kind
                target = KIND_TO_LIST.get(kind)
                if target is None:
                    out.ignored[kind or "object without kind"] += 1
                    continue
                if not isinstance(obj.get("metadata"), dict):
                    raise InputError(f"{where}: a {kind} without metadata")
                if target == "webhookConfigurations":
                    out.webhooks_seen = True
                out.lists[target].append(obj)
    return out


def describe_ignored(ignored: Counter[str]) -> str:
    return ", ".join(f"{count} {kind}" for kind, count in sorted(ignored.items()))


def read_snapshot(files: Sequence[tuple[str, str]]) -> Snapshot:
    """A snapshot from (name, text) files; InputError when they hold no pod, event or node."""
    collected = collect(files)
    if not any(collected.lists[key] for key in ("pods", "events", "nodes")):
        names = ", ".join(name for name, _ in files)
        found = describe_ignored(collected.ignored)
        raise InputError(
            f"{names} holds no pods, events or nodes"
            + (f" (found {found})" if found else "")
            + ": give `kubectl get pods,events,nodes -A -o json` output or a snapshot"
        )
    return collected.snapshot()
