"""What an agent pushes to the backend: a full snapshot of its cluster, or a delta since one.

Versioned by `schema` (`shipshape.dev/snapshot/v1`, `shipshape.dev/delta/v1`): a receiver rejects a
schema it does not know instead of guessing. Objects are Kubernetes objects as the API serves them,
less what must never leave the cluster (managedFields, secret-looking environment values: the agent
strips them; `strip_object` is the one implementation) and less what analyzers never read.

Pure: no I/O. The agent builds these, the backend validates them, both import only this module.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import msgspec
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SnapshotSchema = Literal["shipshape.dev/snapshot/v1"]
DeltaSchema = Literal["shipshape.dev/delta/v1"]
SNAPSHOT_SCHEMA: SnapshotSchema = "shipshape.dev/snapshot/v1"
DELTA_SCHEMA: DeltaSchema = "shipshape.dev/delta/v1"

# The kinds an agent reports, by the plural the API uses, and whether objects have a namespace.
KINDS: dict[str, bool] = {
    "nodes": False,
    "pods": True,
    "deployments": True,
    "replicasets": True,
    "statefulsets": True,
    "daemonsets": True,
    "jobs": True,
    "poddisruptionbudgets": True,
    "horizontalpodautoscalers": True,
    "priorityclasses": False,
    "events": True,
}
# Bounds that keep one push small enough to validate and store in one go.
MAX_OBJECTS_PER_PUSH = 200_000
MAX_CHANGES_PER_DELTA = 50_000
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_ENV = re.compile(r"(?i)(pass(word)?|secret|token|api[-_]?key|credential|private[-_]?key)")
REDACTED = "<redacted>"
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class ObjectKey(BaseModel):
    """Where an object lives: kind (API plural), namespace ("" for cluster-scoped) and name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    namespace: str = ""
    name: str


def object_key(kind: str, obj: Mapping[str, Any]) -> ObjectKey:
    """The key of a Kubernetes object of `kind`, checked: a known kind, a valid name, a namespace
    exactly when the kind has one. ValueError says what is wrong."""
    namespace, name = object_key_tuple(kind, obj)
    return ObjectKey(kind=kind, namespace=namespace, name=name)


def object_key_tuple(kind: str, obj: Mapping[str, Any]) -> tuple[str, str]:
    """`(namespace, name)` of `object_key`, checked the same way, without building an `ObjectKey` (a
    pydantic model: building two per change was a tenth of a worker's CPU per delta)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} (known: {', '.join(sorted(KINDS))})")
        raise ValueError(f"a {kind} object has no metadata")
    return checked_key(kind, metadata.get("name"), metadata.get("namespace"))


def checked_key(kind: str, name: Any, namespace: Any) -> tuple[str, str]:
    """`(namespace, name)` of an object of `kind` whose metadata holds `name` and `namespace`, checked
    as `object_key` checks them, without building an `ObjectKey` (the validators run it once per
    object of a push: thousands per snapshot)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"a {kind} object has an invalid metadata.name: {name!r}")
    namespace = namespace or ""
    if not isinstance(namespace, str):
        raise ValueError(f"{kind} {name}: metadata.namespace must be a string")
    if KINDS[kind] and not namespace:
        raise ValueError(f"{kind} {name}: metadata.namespace is required")
    if not KINDS[kind] and namespace:
        raise ValueError(f"{kind} {name}: a cluster-scoped object has no namespace")
    return namespace, name


def strip_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy without managedFields and with secret-looking env values replaced by `<redacted>`."""
    out = dict(obj)
    metadata = dict(out.get("metadata") or {})
    metadata.pop("managedFields", None)
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping) and _LAST_APPLIED in annotations:
        metadata["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
    out["metadata"] = metadata
    spec = out.get("spec")
    if isinstance(spec, Mapping):
        out["spec"] = _strip_pod_spec_env(spec)
    return out


def _strip_pod_spec_env(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Redact env values in a pod spec, or in a workload's pod template."""
    result = dict(spec)
    template = result.get("template")
    if isinstance(template, Mapping) and isinstance(template.get("spec"), Mapping):
        result["template"] = {**template, "spec": _strip_pod_spec_env(template["spec"])}
    for field in ("containers", "initContainers", "ephemeralContainers"):
        containers = result.get(field)
        if isinstance(containers, list):
            result[field] = [_strip_container(c) for c in containers]
    return result


def _strip_container(container: Any) -> Any:
    if not isinstance(container, Mapping) or not isinstance(container.get("env"), list):
        return container
    env = []
    for var in container["env"]:
        if isinstance(var, Mapping) and "value" in var and _SECRET_ENV.search(str(var.get("name", ""))):
            var = {**var, "value": REDACTED}
        env.append(var)
    return {**container, "env": env}


class ClusterSnapshot(BaseModel):
    """Every object of the reported kinds at one moment; replaces what the backend knew."""

    model_config = ConfigDict(extra="forbid")

    schema_: SnapshotSchema = Field(default=SNAPSHOT_SCHEMA, alias="schema")
    # Increases with every push of one agent; a delta names the sequence it follows.
    sequence: int = Field(ge=0)
    taken_at: datetime
    agent_version: str = Field(default="", max_length=64)
    objects: dict[str, list[dict[str, Any]]]

    @field_validator("objects")
    @classmethod
    def _known_kinds_and_keys(
        cls, objects: dict[str, list[dict[str, Any]]]
    ) -> dict[str, list[dict[str, Any]]]:
        total = sum(len(items) for items in objects.values())
        if total > MAX_OBJECTS_PER_PUSH:
            raise ValueError(f"{total} objects in one snapshot (at most {MAX_OBJECTS_PER_PUSH})")
        for kind, items in objects.items():
            seen: set[tuple[str, str]] = set()
            for obj in items:
                metadata = obj.get("metadata")
                if not isinstance(metadata, Mapping):
                    object_key(kind, obj)  # says what is wrong
                    continue
                key = checked_key(kind, metadata.get("name"), metadata.get("namespace"))
                if key in seen:
                    raise ValueError(f"{kind} {key[0]}/{key[1]} appears twice")
                seen.add(key)
        return objects

    def keyed(self) -> dict[ObjectKey, dict[str, Any]]:
        return {object_key(kind, obj): obj for kind, items in self.objects.items() for obj in items}


class Change(BaseModel):
    """One object added, modified (the whole new object) or deleted (its last known object)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["ADDED", "MODIFIED", "DELETED"]
    kind: str
    object: dict[str, Any]

    @model_validator(mode="after")
    def _valid_key(self) -> Change:
        object_key_tuple(self.kind, self.object)
        return self

    def key_tuple(self) -> tuple[str, str, str]:
        """`(kind, namespace, name)`, checked as `object_key` checks it, without building an
        `ObjectKey`."""
        namespace, name = object_key_tuple(self.kind, self.object)
        return self.kind, namespace, name


class ClusterDelta(BaseModel):
    """Changes since the push numbered `base_sequence`, in the order they happened."""

    model_config = ConfigDict(extra="forbid")

    schema_: DeltaSchema = Field(default=DELTA_SCHEMA, alias="schema")
    sequence: int = Field(ge=1)
    base_sequence: int = Field(ge=0)
    taken_at: datetime
    agent_version: str = Field(default="", max_length=64)
    changes: list[Change] = Field(max_length=MAX_CHANGES_PER_DELTA)

    @model_validator(mode="after")
    def _follows_its_base(self) -> ClusterDelta:
        if self.sequence <= self.base_sequence:
            raise ValueError("sequence must be greater than base_sequence")
        return self


Push = ClusterSnapshot | ClusterDelta


def parse_push(data: Any) -> Push:
    """A snapshot or a delta by its `schema` field; pydantic's ValidationError (or ValueError for an
    unknown schema) says what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError("a push is a JSON object")
    schema = data.get("schema")
    if schema == SNAPSHOT_SCHEMA:
        return ClusterSnapshot.model_validate(data)
    if schema == DELTA_SCHEMA:
        return ClusterDelta.model_validate(data)
    raise ValueError(f"unknown schema {schema!r} (known: {SNAPSHOT_SCHEMA}, {DELTA_SCHEMA})")


def needs_stripping(obj: Mapping[str, Any]) -> bool:
    """Whether `strip_object` would change `obj` (an agent strips before sending: usually not)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        if "managedFields" in metadata:
            return True
        annotations = metadata.get("annotations")
        if isinstance(annotations, Mapping) and _LAST_APPLIED in annotations:
            return True
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and _pod_spec_has_secrets(spec)


def _pod_spec_has_secrets(spec: Mapping[str, Any]) -> bool:
    template = spec.get("template")
    template_spec = template.get("spec") if isinstance(template, Mapping) else None
    if isinstance(template_spec, Mapping) and _pod_spec_has_secrets(template_spec):
        return True
    for field in ("containers", "initContainers", "ephemeralContainers"):
        containers = spec.get(field)
        if not isinstance(containers, list):
            continue
        for container in containers:
            if not isinstance(container, Mapping) or not isinstance(container.get("env"), list):
                continue
            for var in container["env"]:
                if (
                    isinstance(var, Mapping)
                    and "value" in var
                    and var["value"] != REDACTED
                    and _SECRET_ENV.search(str(var.get("name", "")))
                ):
                    return True
    return False


def stripped(push: Push) -> Push:
    """The same push with every object passed through `strip_object` (the receiver does it again, so
    that what an older or foreign agent forgot to strip is never stored); `push` itself when nothing
    needed stripping."""
    if isinstance(push, ClusterSnapshot):
        if not any(needs_stripping(obj) for items in push.objects.values() for obj in items):
            return push
        objects = {kind: [strip_object(obj) for obj in items] for kind, items in push.objects.items()}
        return push.model_copy(update={"objects": objects})
    if not any(needs_stripping(c.object) for c in push.changes):
        return push
    changes = [c.model_copy(update={"object": strip_object(c.object)}) for c in push.changes]
    return push.model_copy(update={"changes": changes})


def dump(push: Push) -> bytes:
    """The push as JSON bytes, in its wire form (`schema`, not `schema_`). The objects are JSON
    values already: orjson writes them as they are (pydantic's JSON mode inspected every value, a
    third of a second for a 3,000-pod snapshot). ValueError when an object is nested deeper than the
    encoder goes (255 levels)."""
    if isinstance(push, ClusterSnapshot):
        document = push.model_dump(mode="json", by_alias=True, exclude={"objects"})
        document["objects"] = push.objects
    else:
        document = push.model_dump(mode="json", by_alias=True, exclude={"changes"})
        document["changes"] = [
            {**change.model_dump(mode="json", exclude={"object"}), "object": change.object}
            for change in push.changes
        ]
    try:
        return orjson.dumps(document)
    except orjson.JSONEncodeError as error:
        raise ValueError(f"an object cannot be stored: {error}") from error


# ---- a push checked without building its objects (the receiver's fast path) -----------------------


class _EnvView(msgspec.Struct, gc=False):
    name: Any = msgspec.UNSET
    value: Any = msgspec.UNSET


class _ContainerView(msgspec.Struct, gc=False):
    env: list[_EnvView] | None = None


class _PodSpecView(msgspec.Struct, gc=False):
    containers: list[_ContainerView] | None = None
    initContainers: list[_ContainerView] | None = None
    ephemeralContainers: list[_ContainerView] | None = None


class _TemplateView(msgspec.Struct, gc=False):
    spec: _PodSpecView | None = None


class _SpecView(_PodSpecView):
    template: _TemplateView | None = None


class _AnnotationsView(msgspec.Struct, gc=False):
    # The one annotation stripping looks for; the others are skipped, not built into a dict.
    last_applied: msgspec.Raw | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name=_LAST_APPLIED)


class _MetadataView(msgspec.Struct, gc=False):
    name: Any = None
    namespace: Any = None
    managedFields: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    annotations: _AnnotationsView | None = None


class _ObjectView(msgspec.Struct, gc=False):
    metadata: _MetadataView | None = None
    spec: _SpecView | None = None


class _SnapshotView(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    schema: str
    sequence: int
    taken_at: str
    objects: dict[str, list[_ObjectView]]
    agent_version: str = ""


class _ChangeView(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    kind: str
    object: _ObjectView


class _DeltaView(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    schema: str
    sequence: int
    base_sequence: int
    taken_at: str
    changes: list[_ChangeView]
    agent_version: str = ""


# Two decoders rather than a union tagged by `schema`: the tag may come after a snapshot's objects
# (key order means nothing), and msgspec then reads them twice. A delta is small, and a snapshot view
# refuses it at its first field of a delta.
_SNAPSHOT_VIEW = msgspec.json.Decoder(_SnapshotView)
_DELTA_VIEW = msgspec.json.Decoder(_DeltaView)


def clean_push(body: bytes) -> Push | None:
    """A push's fields less its objects, when `body` is a valid snapshot or delta that needs no
    stripping, read without building its objects (about a tenth of a full parse: a 3,000-pod snapshot
    is millions of small objects; a 10-pod delta's parse and check take 250 µs this way, 25 µs so);
    None when it is not one, or not surely one: `parse_push` then says what is wrong, or `stripped`
    strips it.

    Only what `parse_push` and `needs_stripping` look at is read (keys, managedFields, the
    last-applied annotation, env names and values); any other shape falls back to them.
    """
    if not body.isascii():
        # What the view skips is checked less strictly than a full parse (invalid UTF-8 passes): a
        # body with any non-ASCII byte, rare in Kubernetes objects, takes the full path.
        return None
    try:
        snapshot = _SNAPSHOT_VIEW.decode(body)
    except msgspec.DecodeError:  # not JSON, or a shape this view does not take
        snapshot = None
    if snapshot is not None:
        return _clean_snapshot(snapshot) if snapshot.schema == SNAPSHOT_SCHEMA else None
    try:
        delta = _DELTA_VIEW.decode(body)
    except msgspec.DecodeError:  # the full path decides (and says what is wrong)
        return None
    return _clean_delta(delta) if delta.schema == DELTA_SCHEMA else None


def clean_snapshot(body: bytes) -> ClusterSnapshot | None:
    """`clean_push` of a body that must be a snapshot (None for a delta)."""
    head = clean_push(body)
    return head if isinstance(head, ClusterSnapshot) else None


def snapshot_head(
    schema: Any, sequence: Any, taken_at: Any, agent_version: Any, objects: int
) -> ClusterSnapshot | None:
    """A snapshot's fields less its objects, validated as the contract validates them, with the count
    of its objects checked against the bound; None when they are not valid. For the readers that
    check a snapshot without building its objects."""
    try:
        head = ClusterSnapshot.model_validate(
            {
                "schema": schema,
                "sequence": sequence,
                "taken_at": taken_at,
                "agent_version": agent_version,
                "objects": {},
            }
        )
    except ValidationError:
        return None
    return head if objects <= MAX_OBJECTS_PER_PUSH else None


def _clean_snapshot(view: _SnapshotView) -> ClusterSnapshot | None:
    count = sum(len(items) for items in view.objects.values())
    head = snapshot_head(view.schema, view.sequence, view.taken_at, view.agent_version, count)
    if head is None:
        return None
    for kind, items in view.objects.items():
        seen: set[tuple[str, str]] = set()
        for obj in items:
            key = _clean_key(kind, obj)
            if key is None or key in seen:
                return None
            seen.add(key)
    return head


def _clean_delta(view: _DeltaView) -> ClusterDelta | None:
    if len(view.changes) > MAX_CHANGES_PER_DELTA:
        return None
    try:
        head = ClusterDelta.model_validate(
            {
                "schema": view.schema,
                "sequence": view.sequence,
                "base_sequence": view.base_sequence,
                "taken_at": view.taken_at,
                "agent_version": view.agent_version,
                "changes": [],
            }
        )
    except ValidationError:
        return None
    for change in view.changes:
        if _clean_key(change.kind, change.object) is None:
            return None
    return head


def _clean_key(kind: str, obj: _ObjectView) -> tuple[str, str] | None:
    """The checked key of an object that needs no stripping; None otherwise."""
    metadata = obj.metadata
    if metadata is None or metadata.managedFields is not msgspec.UNSET:
        return None
    if metadata.annotations is not None and metadata.annotations.last_applied is not msgspec.UNSET:
        return None
    try:
        key = checked_key(kind, metadata.name, metadata.namespace)
    except ValueError:
        return None
    spec = obj.spec
    if spec is not None and (
        _secret_in_view(spec) or (spec.template is not None and _secret_in_view(spec.template.spec))
    ):
        return None
    return key


def _secret_in_view(spec: _PodSpecView | None) -> bool:
    if spec is None:
        return False
    for containers in (spec.containers, spec.initContainers, spec.ephemeralContainers):
        for container in containers or ():
            for var in container.env or ():
                name = "" if var.name is msgspec.UNSET else str(var.name)
                if var.value is not msgspec.UNSET and var.value != REDACTED and _secret_name(name):
                    return True
    return False


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    """Whether an env var of this name has a secret-looking value (`_SECRET_ENV`), remembered: the
    pods of a snapshot repeat a few names thousands of times."""
    return _SECRET_ENV.search(name) is not None
