"""The API server's semantics, independent of HTTP: defaulting, admission, validation, storage.

The HTTP layer (`emulator.apiserver`) and the in-process models both go through `Api`, so a pod
created by the ReplicaSet model passes the same mutating webhooks as one created by kubectl.

Request flow for writes (as in kube-apiserver):
    decode -> defaulting -> mutating admission (built-in, then webhooks) -> validation
    -> validating admission (webhooks, built-in) -> store
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shipshape.emulator.resources import ResourceType
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj
from shipshape.kube import errors

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str = "system:admin"
    groups: tuple[str, ...] = ("system:masters", "system:authenticated")


SYSTEM = UserInfo()


@dataclass(slots=True)
class DeleteOptions:
    grace_period_seconds: int | None = None
    propagation_policy: str | None = None  # Background | Foreground | Orphan
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False


class Api:
    """Kubernetes API semantics over the cluster's store."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        cluster.services["api"] = self

    # ---- reads --------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        return self.store.must_get(rt, namespace, name)

    # ---- writes -------------------------------------------------------------------------
    async def create(
        self, rt: ResourceType, namespace: str, body: Obj, *, dry_run: bool = False, user: UserInfo = SYSTEM
    ) -> Obj:
        if rt.namespaced:
            body.setdefault("metadata", {})["namespace"] = namespace
        return self.store.create(rt, body, dry_run=dry_run)

    async def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        user: UserInfo = SYSTEM,
    ) -> Obj:
        return self.store.update(rt, body, subresource=subresource, dry_run=dry_run)

    async def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        patch_type: str,
        patch: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        user: UserInfo = SYSTEM,
    ) -> Obj:
        raise errors.UnsupportedMediaType(f"patch type {patch_type} is not supported yet")

    async def delete(
        self, rt: ResourceType, namespace: str, name: str, options: DeleteOptions, *, user: UserInfo = SYSTEM
    ) -> tuple[Obj, bool]:
        return self.store.delete(
            rt,
            namespace,
            name,
            grace_seconds=options.grace_period_seconds,
            propagation=options.propagation_policy,
            uid=options.uid,
            resource_version=options.resource_version,
            dry_run=options.dry_run,
        )

    # ---- for in-process models ----------------------------------------------------------
    def submit_create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Obj,
        *,
        on_done: Callable[[Obj | None, errors.ApiError | None], None] | None = None,
    ) -> None:
        """Create an object on behalf of a model (e.g. a ReplicaSet's pod), through admission.

        Without webhooks that match, this completes synchronously. With webhooks it completes
        later on the event loop; `on_done(obj, error)` is called either way, so a model can keep
        "expectations" of in-flight creations as upstream controllers do.
        """
        coro = self.create(rt, namespace, body)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            # Discrete-event mode: no event loop, no HTTP webhooks; run the coroutine to its end.
            result, error = _run_sync(coro)
            if on_done is not None:
                on_done(result, error)
            return

        async def runner() -> None:
            result: Obj | None = None
            error: errors.ApiError | None = None
            try:
                result = await coro
            except errors.ApiError as exc:
                error = exc
            if on_done is not None:
                on_done(result, error)
            self.cluster.engine.call_soon(lambda: None)  # wake the engine for the follow-ups

        task = loop.create_task(runner())
        _background.add(task)
        task.add_done_callback(_background.discard)


_background: set[asyncio.Task[None]] = set()


def _run_sync(coro: Any) -> tuple[Obj | None, errors.ApiError | None]:
    """Drive a coroutine that never really suspends (no network I/O) to completion."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value, None
    except errors.ApiError as exc:
        return None, exc
    coro.close()
    raise RuntimeError("an in-process create suspended outside an event loop (webhook without a loop?)")
