"""The API server's semantics, independent of HTTP: defaulting, admission, validation, storage.

The HTTP layer (`emulator.apiserver`) and the in-process models both go through `Api`, so a pod
created by the ReplicaSet model passes the same mutating webhooks as one created by kubectl.

Request flow for writes (as in kube-apiserver):
    decode -> defaulting -> mutating admission (built-in, then webhooks) -> validation
    -> validating admission (built-in, webhooks, then ResourceQuota) -> store

Every step works on a copy: a request that fails at any step leaves the stored state unchanged.
Without matching webhooks nothing awaits, so a write completes in one step of its coroutine
(`submit_create` and discrete-event callers rely on that).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from shipshape.emulator import defaults, goformat, validation
from shipshape.emulator import resources as r
from shipshape.emulator.admission import (
    CREATE,
    DELETE,
    UPDATE,
    Attributes,
    GroupVersionKind,
    UserInfo,
    builtin,
    quota,
)
from shipshape.emulator.admission import SYSTEM as SYSTEM
from shipshape.emulator.admission import webhooks as hooks
from shipshape.emulator.resources import ResourceType
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.specfacts import PodSpecMemo
from shipshape.emulator.store import Obj, clone, meta, new_uid
from shipshape.kube import errors, labels
from shipshape.kube import patch as kpatch
from shipshape.kube.clock import rfc3339

log = logging.getLogger(__name__)

__all__ = ["SYSTEM", "Api", "DeleteOptions", "UserInfo"]

SCALE_KIND = GroupVersionKind("autoscaling", "v1", "Scale")
BINDING_KIND = GroupVersionKind("", "v1", "Binding")
EVICTION_KIND = GroupVersionKind("policy", "v1", "Eviction")
MAX_DISRUPTED_PODS = 2000
MSG_PDB_VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
_PATCH_RETRIES = 5
# A pod's top-level fields: a metadata-only patch shares the others with the stored version.
_POD_FIELDS = frozenset(("apiVersion", "kind", "metadata", "spec", "status"))
# An in-process mutating admission plugin: may replace `attrs.object`; returns whether it changed it.
AdmissionPlugin = Callable[[Attributes], bool]


@dataclass(slots=True)
class DeleteOptions:
    grace_period_seconds: int | None = None
    propagation_policy: str | None = None  # Background | Foreground | Orphan
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False

    @classmethod
    def from_body(cls, body: Obj | None) -> DeleteOptions:
        """From a `DeleteOptions` JSON object (as in an Eviction's `deleteOptions`)."""
        body = body or {}
        propagation = body.get("propagationPolicy")
        if propagation is None and body.get("orphanDependents") is not None:
            propagation = "Orphan" if body["orphanDependents"] else "Background"
        preconditions = body.get("preconditions") or {}
        grace = body.get("gracePeriodSeconds")
        if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)):
            raise errors.BadRequest(f"gracePeriodSeconds must be an integer, got {grace!r}")
        if propagation not in (None, "Foreground", "Background", "Orphan"):
            raise errors.Invalid(
                "DeleteOptions",
                "",
                [
                    (
                        "propagationPolicy",
                        "FieldValueNotSupported",
                        f'Unsupported value: "{propagation}": supported values: "Foreground", "Background", '
                        '"Orphan"',
                    )
                ],
                "meta.k8s.io",
            )
        if not isinstance(preconditions, dict):
            raise errors.BadRequest("preconditions must be an object")
        return cls(
            grace_period_seconds=grace,
            propagation_policy=propagation,
            uid=preconditions.get("uid"),
            resource_version=preconditions.get("resourceVersion"),
            dry_run=bool(body.get("dryRun")),
        )

    def as_body(self) -> Obj:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
        if self.grace_period_seconds is not None:
            body["gracePeriodSeconds"] = self.grace_period_seconds
        if self.propagation_policy:
            body["propagationPolicy"] = self.propagation_policy
        if self.uid or self.resource_version:
            body["preconditions"] = {
                k: v for k, v in (("uid", self.uid), ("resourceVersion", self.resource_version)) if v
            }
        if self.dry_run:
            body["dryRun"] = ["All"]
        return body


def _options(kind: str, dry_run: bool) -> Obj:
    body: Obj = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
    if dry_run:
        body["dryRun"] = ["All"]
    return body


def success_status(code: int = 201) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def selector_string(selector: Obj | None) -> str:
    """A LabelSelector as `metav1.LabelSelectorAsSelector(...).String()` prints it (sorted by key)."""
    if not selector:
        return ""
    parts: list[tuple[str, str]] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        parts.append((key, f"{key}={value}"))
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key", ""), expr.get("operator")
        values = ",".join(sorted(expr.get("values") or []))
        text = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(str(op), key)
        parts.append((key, text))
    return ",".join(text for _, text in sorted(parts, key=lambda kv: kv[0]))


def check_preconditions(obj: Obj, options: DeleteOptions) -> None:
    """DeleteOptions preconditions, worded as upstream's registry."""
    md = obj["metadata"]
    if options.uid and md.get("uid") != options.uid:
        raise errors.Conflict(
            f"Precondition failed: UID in precondition: {options.uid}, UID in object meta: {md.get('uid')}"
        )
    if options.resource_version and md.get("resourceVersion") != options.resource_version:
        raise errors.Conflict(
            f"Precondition failed: ResourceVersion in precondition: {options.resource_version}, "
            f"ResourceVersion in object meta: {md.get('resourceVersion')}"
        )


def _pod_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class Api:
    """Kubernetes API semantics over the cluster's store."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.webhooks = hooks.Dispatcher(cluster.store)
        self.allocator = defaults.ServiceAllocator()
        self._admission_plugins: list[AdmissionPlugin] = []
        # What decoding, defaulting and validation make of stored pod specs, by the spec object: a
        # metadata-only patch of a pod keeps the stored spec instead of copying it (`patch`).
        self.pod_specs = PodSpecMemo()
        cluster.services["api"] = self

    def add_admission_plugin(self, plugin: AdmissionPlugin) -> None:
        """Register an in-process mutating admission plugin, called on every CREATE.

        Plugins run after the built-in ones and before mutating webhooks, in registration order, as
        compiled-in plugins do upstream; each may replace `attrs.object` and returns whether it changed
        it. Used where a webhook's logic runs in the same process (the what-if simulator) instead of
        behind HTTPS. An error a plugin raises fails the request.
        """
        self._admission_plugins.append(plugin)

    def _run_admission_plugins(self, attrs: Attributes) -> bool:
        changed = False
        for plugin in self._admission_plugins:
            changed = plugin(attrs) or changed
        return changed

    # ---- reads --------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        return self.store.must_get(rt, namespace, name)

    def get_subresource(self, rt: ResourceType, namespace: str, name: str, subresource: str) -> Obj:
        """GET of `status` (the object) or `scale` (an autoscaling/v1 Scale)."""
        self._check_subresource(rt, subresource, ("status", "scale"))
        obj = self.store.must_get(rt, namespace, name)
        if subresource == "scale":
            return self.scale_of(rt, obj)
        return obj

    def scale_of(self, rt: ResourceType, obj: Obj) -> Obj:
        md = obj["metadata"]
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        scale_md = {
            k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in md
        }
        scale_status: Obj = {"replicas": int(status.get("replicas") or 0)}
        selector = selector_string(spec.get("selector"))
        if selector:
            scale_status["selector"] = selector
        replicas = spec.get("replicas")
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": scale_md,
            "spec": {"replicas": replicas} if replicas else {},
            "status": scale_status,
        }

    @staticmethod
    def _check_subresource(rt: ResourceType, subresource: str, served: tuple[str, ...]) -> None:
        if subresource not in rt.subresources or subresource not in served:
            raise errors.NotFound("the server could not find the requested resource", details={})

    # ---- create -------------------------------------------------------------------------
    async def create(
        self, rt: ResourceType, namespace: str, body: Obj, *, dry_run: bool = False, user: UserInfo = SYSTEM
    ) -> Obj:
        validation.check_decodable(rt, body)
        obj = clone(body)
        md = meta(obj)
        if rt.namespaced:
            if md.get("namespace") and md["namespace"] != namespace:
                raise errors.BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            md["namespace"] = namespace
        else:
            md.pop("namespace", None)
        uid: str | None = None
        if rt is r.JOBS:
            uid = new_uid()
            if not md.get("name") and md.get("generateName"):
                md["name"] = f"{md['generateName']}{_suffix()}"
            defaults.job_selector(obj, uid)
        defaults.prepare_create(rt, obj)
        attrs = Attributes(
            CREATE,
            rt,
            namespace if rt.namespaced else "",
            str(md.get("name") or ""),
            obj,
            dry_run=dry_run,
            user=user,
            options=_options("CreateOptions", dry_run),
        )
        builtin.admit(self.store, attrs)
        plugged = self._run_admission_plugins(attrs)
        if await self.webhooks.mutate(attrs) or plugged:
            assert attrs.object is not None
            validation.check_decodable(rt, attrs.object)  # a webhook's patch is decoded again
            defaults.apply_defaults(rt, attrs.object)
        admitted = attrs.object
        assert admitted is not None
        # As upstream's registry does before validation (mutating admission saw none of these): the
        # system fields and a name for `generateName`, so validating admission sees them.
        admitted_md = meta(admitted)
        if not admitted_md.get("name") and admitted_md.get("generateName"):
            admitted_md["name"] = self._generate_name(rt, namespace, str(admitted_md["generateName"]))
        uid = uid or new_uid()  # after the name, as the store drew them: seeded runs replay as before
        admitted_md["uid"] = uid
        admitted_md["creationTimestamp"] = rfc3339(self.cluster.clock.now())
        validation.raise_if_invalid(rt, str(admitted_md.get("name") or ""), validation.validate(rt, admitted))
        builtin.validate(self.store, attrs)
        await self.webhooks.validate(attrs)
        quota.admit(self.store, attrs)  # last, as upstream: only a request about to be stored counts
        if rt is r.SERVICES:
            self.allocator.allocate(admitted)
        if meta(admitted).get("resourceVersion") and not dry_run:
            # Storage refuses it, after validation and admission, with an unclassified error (500);
            # a dry run never reaches storage's check.
            raise errors.Unclassified("resourceVersion should not be set on objects to be created")
        return self.store.create(rt, admitted, dry_run=dry_run, uid=uid)

    def _generate_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        """`prefix` and a random suffix not taken yet (upstream retries a generated name that is)."""
        candidate = prefix + _suffix()
        for _ in range(100):
            if self.store.get(rt, namespace if rt.namespaced else "", candidate) is None:
                break
            candidate = prefix + _suffix()
        return candidate

    # ---- update -------------------------------------------------------------------------
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
        owned: bool = False,
        kept_spec: Obj | None = None,
    ) -> Obj:
        """PUT an object (or its status). `owned`: `body` is a copy nobody else holds (a patch's result),
        handed over to be stored without copying it again. `kept_spec`: a pod's `body` has, as its
        spec, this stored spec object, shared rather than copied (see `patch`): its decoding,
        defaults and validation come from `pod_specs`, and nothing here changes it."""
        facts = None
        if kept_spec is not None and rt is r.PODS and body.get("spec") is kept_spec:
            facts = self.pod_specs.facts(kept_spec)
        validation.check_decodable(rt, body, pod_spec_decodable=facts is not None and facts.decodable)
        if subresource == "scale":
            return await self._update_scale(rt, namespace, name, body, dry_run=dry_run, user=user)
        if subresource == "finalize":
            return await self._finalize_namespace(name, body, dry_run=dry_run, user=user)
        if subresource is not None:
            self._check_subresource(rt, subresource, ("status",))
        obj = body if owned else clone(body)
        md = meta(obj)
        if md.get("name") and md["name"] != name:
            raise errors.BadRequest(
                f"the name of the object ({md['name']}) does not match the name on the URL ({name})"
            )
        current = self.store.must_get(rt, namespace, name)
        if md.get("uid") and md["uid"] != current["metadata"]["uid"]:
            raise errors.Conflict(
                f"Precondition failed: UID in precondition: {md['uid']}, "
                f"UID in object meta: {current['metadata']['uid']}"
            )
        md["name"] = name
        if rt.namespaced:
            if md.get("namespace") and md["namespace"] != namespace:
                raise errors.BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            md["namespace"] = namespace
        if subresource == "status":
            new = clone(current)
            new["status"] = obj.get("status") or {}
            if md.get("resourceVersion"):
                new["metadata"]["resourceVersion"] = md["resourceVersion"]
        else:
            if facts is not None and obj.get("spec") is kept_spec:
                if not facts.defaulted:
                    obj["spec"] = kpatch.copy_json(kept_spec)  # never default a stored spec in place
                    defaults.apply_defaults(rt, obj)
                # else: defaulting would change nothing (a pod's defaults are all in its spec)
            else:
                defaults.apply_defaults(rt, obj)
            if rt is r.SERVICES:
                self.allocator.keep_allocated(obj, current)
            if rt is r.NAMESPACES:
                # Only the finalize subresource changes a namespace's finalizers.
                obj.setdefault("spec", {})["finalizers"] = (current.get("spec") or {}).get("finalizers") or []
                if not obj["spec"]["finalizers"]:
                    del obj["spec"]["finalizers"]
            new = obj
        attrs = Attributes(
            UPDATE,
            rt,
            namespace if rt.namespaced else "",
            name,
            new,
            old_object=current,
            subresource=subresource or "",
            dry_run=dry_run,
            user=user,
            options=_options("UpdateOptions", dry_run),
        )
        builtin.admit(self.store, attrs)
        if await self.webhooks.mutate(attrs) and subresource is None:
            assert attrs.object is not None
            validation.check_decodable(rt, attrs.object)
            defaults.apply_defaults(rt, attrs.object)
        admitted = attrs.object
        assert admitted is not None
        # The resourceVersion precondition comes before validation, as in upstream's registry: a
        # stale write is a 409 Conflict even when the object would also be invalid.
        wanted_rv = meta(admitted).get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise errors.Conflict.of(rt.plural, name, rt.group)
        self._validate_update(rt, name, admitted, current, subresource)
        builtin.validate(self.store, attrs)
        await self.webhooks.validate(attrs)
        # `admitted` is this request's own copy (of the body, or of the stored object with the new
        # status), or an admission webhook's patched copy of it: the store keeps it as it is.
        return self.store.update(rt, admitted, subresource=subresource, dry_run=dry_run, copy=False)

    async def _finalize_namespace(self, name: str, body: Obj, *, dry_run: bool, user: UserInfo) -> Obj:
        """PUT namespaces/<name>/finalize: set `spec.finalizers`; an emptied Terminating namespace goes."""
        self._check_subresource(r.NAMESPACES, "finalize", ("finalize",))
        current = self.store.must_get(r.NAMESPACES, "", name)
        finalizers = (body.get("spec") or {}).get("finalizers") or []
        if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
            raise errors.BadRequest("spec.finalizers must be a list of strings")
        new = clone(current)
        new.setdefault("spec", {})["finalizers"] = finalizers
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
        if wanted_rv:
            new["metadata"]["resourceVersion"] = wanted_rv
        attrs = Attributes(
            UPDATE,
            r.NAMESPACES,
            "",
            name,
            new,
            old_object=current,
            subresource="finalize",
            dry_run=dry_run,
            user=user,
            options=_options("UpdateOptions", dry_run),
        )
        await self.webhooks.validate(attrs)
        stored = self.store.update(r.NAMESPACES, new, dry_run=dry_run)
        terminating = (stored.get("status") or {}).get("phase") == "Terminating"
        if terminating and not finalizers and not stored["metadata"].get("finalizers") and not dry_run:
            return self.store.remove(r.NAMESPACES, "", name) or stored
        return stored

    def _validate_update(
        self, rt: ResourceType, name: str, new: Obj, current: Obj, subresource: str | None
    ) -> None:
        if subresource == "status":
            validation.raise_if_invalid(rt, name, validation.validate_status(rt, new))
            return
        # The validators only read: a copy of the top level and the metadata is enough to override
        # the fields the store keeps from the current version.
        effective = {**new, "metadata": {**new["metadata"]}}
        for field in ("uid", "creationTimestamp", "deletionTimestamp", "generation"):
            if field in current["metadata"]:
                effective["metadata"][field] = current["metadata"][field]
        if rt.status_subresource and "status" in current:
            effective["status"] = current["status"]
        spec = new.get("spec")
        if rt is r.PODS and spec is not None and spec is current.get("spec"):
            # The stored spec itself (a metadata-only patch): what the pod validator finds in it
            # depends on that object alone, and is kept.
            spec_causes = self.pod_specs.facts(spec).update_causes
            if spec_causes is not None:
                causes = validation.validate_pod_update_same_spec(effective, current, spec_causes)
                validation.raise_if_invalid(rt, name, causes)
                return
        validation.raise_if_invalid(rt, name, validation.validate(rt, effective, current))

    async def _update_scale(
        self, rt: ResourceType, namespace: str, name: str, body: Obj, *, dry_run: bool, user: UserInfo
    ) -> Obj:
        self._check_subresource(rt, "scale", ("scale",))
        current = self.store.must_get(rt, namespace, name)
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise errors.Conflict.of(rt.plural, name, rt.group)
        attrs = Attributes(
            UPDATE,
            rt,
            namespace,
            name,
            clone(body),
            old_object=self.scale_of(rt, current),
            subresource="scale",
            kind=SCALE_KIND,
            dry_run=dry_run,
            user=user,
            options=_options("UpdateOptions", dry_run),
        )
        await self.webhooks.mutate(attrs)
        scale = attrs.object or {}
        replicas = (scale.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            shown = goformat.value(replicas)
            raise errors.Invalid(
                "Scale",
                name,
                [
                    (
                        "spec.replicas",
                        "FieldValueInvalid",
                        f"Invalid value: {shown}: must be greater than or equal to 0",
                    )
                ],
                "autoscaling",
            )
        new = clone(current)
        new["spec"]["replicas"] = replicas
        validation.raise_if_invalid(rt, name, validation.validate(rt, new, current))
        await self.webhooks.validate(attrs)
        stored = self.store.update(rt, new, dry_run=dry_run)
        return self.scale_of(rt, stored)

    # ---- patch --------------------------------------------------------------------------
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
        field_manager: str | None = None,
        force: bool = False,
    ) -> Obj:
        """Apply the patch to the current object (or its Scale), then run the normal update path.

        Without a resourceVersion in the patch, a conflict with a concurrent write is retried on
        the newer object, as upstream does. An apply patch (server-side apply) by `field_manager`
        creates the object when it does not exist; `force` takes over fields other appliers own.
        """
        if subresource is not None:
            self._check_subresource(rt, subresource, ("status", "scale"))
        if patch_type == kpatch.APPLY_PATCH:
            if subresource is not None:
                raise errors.UnsupportedMediaType(
                    f"server-side apply of the {subresource} subresource is not supported by this API server"
                )
            return await self._apply(
                rt,
                namespace,
                name,
                patch,
                field_manager or "unknown",
                force=force,
                dry_run=dry_run,
                user=user,
            )
        for _ in range(_PATCH_RETRIES):
            current = self.store.must_get(rt, namespace, name)
            kept_spec = self._kept_spec(rt, patch_type, patch, current) if subresource is None else None
            if kept_spec is not None:
                # A merge patch of a pod's metadata alone: only the top level and the metadata are
                # this request's own; the spec (plain JSON, decodable, defaulted: `pod_specs`), the
                # status and the kind are the stored version's, which nothing changes.
                base = {**current, "metadata": clone(current["metadata"])}
            else:
                base = self.scale_of(rt, current) if subresource == "scale" else clone(current)
            base_version = base["metadata"].get("resourceVersion")
            if patch_type == kpatch.MERGE_PATCH and subresource != "scale":
                # `base` is a fresh copy: the merge needs no copy of its own.
                patched = kpatch.merge_patch_owned(base, patch)
                if not isinstance(patched, dict):
                    raise errors.BadRequest("the patched object is not a JSON object")
            else:
                patched = kpatch.apply(patch_type, base, patch)
            md = patched.get("metadata")
            if not isinstance(md, dict):
                raise errors.BadRequest("the patched object has no metadata")
            precondition = md.get("resourceVersion") != base_version
            if not md.get("resourceVersion"):
                md["resourceVersion"] = base_version
            try:
                return await self.update(
                    rt,
                    namespace,
                    name,
                    patched,
                    subresource=subresource,
                    dry_run=dry_run,
                    user=user,
                    owned=True,  # patched from this request's own copy of the stored object
                    kept_spec=kept_spec,
                )
            except errors.Conflict:
                if precondition:
                    raise
                log.debug(
                    "patch of %s %s/%s conflicted; retrying on the newer object", rt.kind, namespace, name
                )
        raise errors.Conflict.of(rt.plural, name, rt.group)

    def _kept_spec(self, rt: ResourceType, patch_type: str, patch: Any, current: Obj) -> Obj | None:
        """The stored spec a patch of `current` may share instead of copying: for a JSON merge patch
        of a pod that names `metadata` alone (as an object), when the spec is one `pod_specs` says
        may be shared and the pod has no other fields than the five a pod has."""
        if rt is not r.PODS or patch_type != kpatch.MERGE_PATCH or not isinstance(patch, dict):
            return None
        if len(patch) != 1 or not isinstance(patch.get("metadata"), dict):
            return None
        spec = current.get("spec")
        if not isinstance(spec, dict) or not _POD_FIELDS.issuperset(current):
            return None
        return spec if self.pod_specs.facts(spec).shareable else None

    async def _apply(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        config: Any,
        manager: str,
        *,
        force: bool,
        dry_run: bool,
        user: UserInfo,
    ) -> Obj:
        if not isinstance(config, dict):
            raise errors.BadRequest("an apply patch must be an object")
        config_name = (
            (config.get("metadata") or {}).get("name") if isinstance(config.get("metadata"), dict) else None
        )
        if config_name and config_name != name:
            raise errors.BadRequest(
                f"the name of the object ({config_name}) does not match the name on the URL ({name})"
            )
        now = rfc3339(self.cluster.clock.now())
        for _ in range(_PATCH_RETRIES):
            current = self.store.get(rt, namespace, name)
            applied = kpatch.server_side_apply(current, config, manager, force=force, now=now)
            applied.setdefault("metadata", {})["name"] = name
            if current is None:
                applied["metadata"].pop("resourceVersion", None)
                try:
                    return await self.create(rt, namespace, applied, dry_run=dry_run, user=user)
                except errors.AlreadyExists:
                    continue
            applied["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                return await self.update(rt, namespace, name, applied, dry_run=dry_run, user=user)
            except errors.Conflict:
                log.debug(
                    "apply to %s %s/%s conflicted; retrying on the newer object", rt.kind, namespace, name
                )
        raise errors.Conflict.of(rt.plural, name, rt.group)

    # ---- delete -------------------------------------------------------------------------
    async def delete(
        self, rt: ResourceType, namespace: str, name: str, options: DeleteOptions, *, user: UserInfo = SYSTEM
    ) -> tuple[Obj, bool]:
        current = self.store.must_get(rt, namespace, name)
        check_preconditions(current, options)  # before admission, as upstream's BeforeDelete
        attrs = Attributes(
            DELETE,
            rt,
            namespace if rt.namespaced else "",
            name,
            None,
            old_object=current,
            dry_run=options.dry_run,
            user=user,
            options=options.as_body(),
        )
        builtin.admit(self.store, attrs)
        await self.webhooks.mutate(attrs)
        await self.webhooks.validate(attrs)
        if rt is r.NAMESPACES:
            return self._delete_namespace(current, options)
        propagation = options.propagation_policy or ("Orphan" if rt is r.JOBS else "Background")
        return self.store.delete(
            rt,
            namespace,
            name,
            grace_seconds=options.grace_period_seconds,
            propagation=propagation,
            uid=options.uid,
            resource_version=options.resource_version,
            dry_run=options.dry_run,
        )

    def _delete_namespace(self, current: Obj, options: DeleteOptions) -> tuple[Obj, bool]:
        """A namespace with finalizers turns Terminating (the namespace controller empties and removes it)."""
        name = current["metadata"]["name"]
        check_preconditions(current, options)
        if options.dry_run:
            return current, False
        if not (current.get("spec") or {}).get("finalizers"):
            return self.store.delete(r.NAMESPACES, "", name)
        if (current.get("status") or {}).get("phase") == "Terminating":
            return current, False

        def terminating(ns: Obj) -> None:
            ns["status"] = {**(ns.get("status") or {}), "phase": "Terminating"}

        updated = self.store.mutate(r.NAMESPACES, "", name, terminating, subresource="status")
        return (updated or current), False

    # ---- subresources that create -------------------------------------------------------
    async def create_subresource(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        subresource: str,
        body: Obj,
        *,
        dry_run: bool = False,
        user: UserInfo = SYSTEM,
    ) -> Obj:
        """POST of pods/binding or pods/eviction; answers a Success Status."""
        if rt is not r.PODS or subresource not in ("binding", "eviction"):
            raise errors.MethodNotAllowed(f"POST is not supported on {rt.plural}/{subresource}")
        if not isinstance(body, dict):
            raise errors.BadRequest(f"the body of a {subresource} must be a JSON object")
        for field in ("metadata", "target", "deleteOptions"):
            if body.get(field) is not None and not isinstance(body[field], dict):
                raise errors.BadRequest(f"{field} of a {subresource} must be a JSON object")
        if subresource == "binding":
            return await self._bind(namespace, name, body, dry_run=dry_run, user=user)
        return await self._evict(namespace, name, body, dry_run=dry_run, user=user)

    async def _bind(self, namespace: str, name: str, body: Obj, *, dry_run: bool, user: UserInfo) -> Obj:
        target = body.get("target") if isinstance(body.get("target"), dict) else {}
        assert isinstance(target, dict)
        causes: list[validation.Cause] = []
        if not target.get("name"):
            causes.append(("target.name", "FieldValueRequired", "Required value"))
        if target.get("kind") not in (None, "", "Node"):
            causes.append(
                (
                    "target.kind",
                    "FieldValueInvalid",
                    f"Invalid value: {goformat.value(target['kind'])}: must be empty or 'Node'",
                )
            )
        if causes:
            raise errors.Invalid("Binding", name, causes)
        attrs = Attributes(
            CREATE,
            r.PODS,
            namespace,
            name,
            clone(body),
            subresource="binding",
            kind=BINDING_KIND,
            dry_run=dry_run,
            user=user,
            options=_options("CreateOptions", dry_run),
        )
        await self.webhooks.mutate(attrs)
        await self.webhooks.validate(attrs)
        pod = self.store.must_get(r.PODS, namespace, name)
        conflict_details = {"name": name, "kind": "pods/binding"}
        prefix = f'Operation cannot be fulfilled on pods/binding "{name}"'
        binding_uid = (body.get("metadata") or {}).get("uid")
        if binding_uid and binding_uid != pod["metadata"].get("uid"):
            raise errors.Conflict(
                f"{prefix}: the UID in the bind request ({binding_uid}) does not match the UID of the pod",
                details=conflict_details,
            )
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.Conflict(
                f"{prefix}: pod {name} is being deleted, cannot be assigned to a host",
                details=conflict_details,
            )
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            raise errors.Conflict(
                f'{prefix}: pod {name} is already assigned to node "{node}"', details=conflict_details
            )
        if dry_run:
            return success_status()
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        now = rfc3339(self.cluster.clock.now())
        # Both writes build the new version beside the stored one instead of deep-copying the pod.
        assigned: Obj = {
            **pod,
            "metadata": {**pod["metadata"]},
            "spec": {**pod["spec"], "nodeName": target["name"]},
        }
        if annotations:
            assigned["metadata"]["annotations"] = {
                **pod["metadata"].get("annotations", {}),
                **clone(annotations),
            }
        self.store.update(r.PODS, assigned, copy=False)
        current = self.store.get(r.PODS, namespace, name)  # as the write's watchers left it
        if current is not None:
            status = dict(current.get("status") or {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append(
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
            )
            status["conditions"] = conditions
            self.store.write_status(r.PODS, namespace, name, status)
        return success_status()

    async def _evict(self, namespace: str, name: str, body: Obj, *, dry_run: bool, user: UserInfo) -> Obj:
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise errors.BadRequest(
                f"name in URL does not match name in Eviction object: {name} != {body_name}"
            )
        options = DeleteOptions.from_body(body.get("deleteOptions"))
        options.dry_run = options.dry_run or dry_run
        attrs = Attributes(
            CREATE,
            r.PODS,
            namespace,
            name,
            clone(body),
            subresource="eviction",
            kind=EVICTION_KIND,
            dry_run=options.dry_run,
            user=user,
            options=_options("CreateOptions", options.dry_run),
        )
        await self.webhooks.mutate(attrs)
        await self.webhooks.validate(attrs)
        pod = self.store.must_get(r.PODS, namespace, name)
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
            await self._delete_evicted(namespace, name, options, user)
            return success_status()
        pdbs = [
            pdb
            for pdb in self.store.list(r.PDBS, namespace)
            if _selects(pdb, pod.get("metadata", {}).get("labels") or {})
        ]
        if len(pdbs) > 1:
            raise errors.InternalError(
                "This pod has more than one PodDisruptionBudget, "
                "which the eviction subresource does not support."
            )
        if not pdbs:
            await self._delete_evicted(namespace, name, options, user)
            return success_status()
        pdb = pdbs[0]
        spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
        if not _pod_ready(pod):
            policy = spec.get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
            current_healthy = int(status.get("currentHealthy") or 0)
            desired_healthy = int(status.get("desiredHealthy") or 0)
            if policy == "AlwaysAllow" or (desired_healthy > 0 and current_healthy >= desired_healthy):
                await self._delete_evicted(namespace, name, options, user)
                return success_status()
        self._check_budget(pdb)
        check_preconditions(pod, options)
        if not options.dry_run:
            now = rfc3339(self.cluster.clock.now())

            def take(p: Obj) -> None:
                st = p.setdefault("status", {})
                st["disruptionsAllowed"] = int(st.get("disruptionsAllowed") or 0) - 1
                st.setdefault("disruptedPods", {})[name] = now

            self.store.mutate(r.PDBS, namespace, pdb["metadata"]["name"], take, subresource="status")
        await self._delete_evicted(namespace, name, options, user)
        return success_status()

    @staticmethod
    def _check_budget(pdb: Obj) -> None:
        md, status = pdb["metadata"], pdb.get("status") or {}
        pdb_name = md["name"]
        if int(status.get("observedGeneration") or 0) < int(md.get("generation") or 1):
            raise errors.TooManyRequests(
                MSG_PDB_VIOLATION,
                details={
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": (
                                f"The disruption budget {pdb_name} is still being processed by the server."
                            ),
                        }
                    ]
                },
            )
        allowed = int(status.get("disruptionsAllowed") or 0)
        if allowed < 0:
            raise errors.Forbidden("pdb disruptions allowed is negative")
        if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
            raise errors.Forbidden(
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
            )
        if allowed == 0:
            desired, healthy = int(status.get("desiredHealthy") or 0), int(status.get("currentHealthy") or 0)
            raise errors.TooManyRequests(
                MSG_PDB_VIOLATION,
                details={
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": (
                                f"The disruption budget {pdb_name} needs {desired} "
                                f"healthy pods and has {healthy} currently"
                            ),
                        }
                    ]
                },
            )

    async def _delete_evicted(
        self, namespace: str, name: str, options: DeleteOptions, user: UserInfo
    ) -> None:
        await self.delete(r.PODS, namespace, name, options, user=user)

    # ---- for in-process models ----------------------------------------------------------
    def submit_create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Obj,
        *,
        on_done: Callable[[Obj | None, errors.ApiError | None], None] | None = None,
        user: UserInfo = SYSTEM,
    ) -> None:
        """Create an object on behalf of a model (e.g. a ReplicaSet's pod), through admission.

        Without webhooks that match, this completes synchronously. With webhooks it completes
        later on the event loop; `on_done(obj, error)` is called either way, so a model can keep
        "expectations" of in-flight creations as upstream controllers do. In discrete-event mode
        (no running event loop) a webhook call blocks until it answers.
        """
        probe = Attributes(CREATE, rt, namespace, str(meta(body).get("name") or ""), body)
        needs_io = self.webhooks.has_matching(probe)
        coro = self.create(rt, namespace, body, user=user)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if not needs_io or loop is None:
            result, error = _run_sync(coro) if not needs_io else _run_blocking(coro)
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
            except Exception as exc:  # a bug must not leave the model waiting on its expectation
                log.exception("in-process create of %s in %s failed", rt.kind, namespace)
                error = errors.InternalError(f"Internal error occurred: {exc}")
            if on_done is not None:
                on_done(result, error)
            self.cluster.engine.call_soon(lambda: None)  # wake the engine for the follow-ups

        task = loop.create_task(runner())
        _background.add(task)
        task.add_done_callback(_background.discard)


_background: set[asyncio.Task[None]] = set()


def _selects(pdb: Obj, pod_labels: Obj) -> bool:
    """policy/v1: an empty selector selects every pod of the namespace, a missing one none."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return False
    try:
        return labels.from_label_selector(selector).matches(pod_labels)
    except labels.SelectorError:
        return False


def _suffix(n: int = 5) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(random.choice(alphabet) for _ in range(n))


def _run_sync(coro: Coroutine[Any, Any, Obj]) -> tuple[Obj | None, errors.ApiError | None]:
    """Drive a coroutine that never really suspends (no network I/O) to completion."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value, None
    except errors.ApiError as exc:
        return None, exc
    coro.close()
    raise RuntimeError("an in-process create suspended although no webhook matched")


def _run_blocking(coro: Coroutine[Any, Any, Obj]) -> tuple[Obj | None, errors.ApiError | None]:
    """Run a create that calls webhooks to its end, outside any event loop (discrete-event mode)."""
    try:
        return asyncio.run(coro), None
    except errors.ApiError as exc:
        return None, exc
