"""Admission: what runs between decoding a write and storing it.

`builtin` holds the compiled-in plugins (NamespaceLifecycle, ServiceAccount, Priority,
DefaultTolerationSeconds); `webhooks` calls the cluster's Mutating/ValidatingWebhookConfigurations
over HTTPS. Both work on an `Attributes`, the request as admission sees it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from shipshape.emulator.resources import ResourceType

Obj = dict[str, Any]

CREATE, UPDATE, DELETE, CONNECT = "CREATE", "UPDATE", "DELETE", "CONNECT"


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who makes a request (the `userInfo` of an AdmissionReview)."""

    username: str = "system:admin"
    groups: tuple[str, ...] = ("system:masters", "system:authenticated")
    uid: str = ""


SYSTEM = UserInfo()

_warnings: ContextVar[list[str] | None] = ContextVar("admission_warnings", default=None)


@contextlib.contextmanager
def collecting_warnings() -> Iterator[list[str]]:
    """Collect the warnings webhooks return during the requests made inside the block.

    The HTTP layer wraps a request in it and answers each warning as a `Warning: 299 - "..."`
    header, as kube-apiserver does. Per asyncio task (a context variable), so requests served
    concurrently keep their own warnings.
    """
    bucket: list[str] = []
    token = _warnings.set(bucket)
    try:
        yield bucket
    finally:
        _warnings.reset(token)


def add_warning(text: str) -> None:
    bucket = _warnings.get()
    if bucket is not None:
        bucket.append(text)


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    def as_dict(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "kind": self.kind}


@dataclass(slots=True)
class Attributes:
    """One write as admission sees it. Mutating steps replace `object`."""

    operation: str
    resource: ResourceType
    namespace: str
    name: str
    object: Obj | None
    old_object: Obj | None = None
    subresource: str = ""
    kind: GroupVersionKind | None = None  # the object's kind when it is not the resource's (Scale, ...)
    dry_run: bool = False
    user: UserInfo = SYSTEM
    options: Obj | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def object_kind(self) -> GroupVersionKind:
        if self.kind is not None:
            return self.kind
        rt = self.resource
        return GroupVersionKind(rt.group, rt.version, rt.kind)

    @property
    def qualified_resource(self) -> str:
        """ "pods", "deployments.apps", "pods/binding": as Forbidden/Conflict messages name it."""
        base = self.resource.key
        return f"{base}/{self.subresource}" if self.subresource else base
