"""The compiled-in admission plugins the emulator enables, in kube-apiserver's order.

NamespaceLifecycle, ServiceAccount, Priority and DefaultTolerationSeconds. Each reads what it needs
from the store and changes `attrs.object` (a copy owned by the request) or raises an `ApiError`.
"""

from __future__ import annotations

from typing import Any

from shipshape.emulator import resources as r
from shipshape.emulator.admission import CREATE, DELETE, Attributes
from shipshape.emulator.store import Store
from shipshape.kube import errors

Obj = dict[str, Any]

# Namespaces the API server creates and never lets anyone delete.
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
SYSTEM_NAMESPACES = (*IMMORTAL_NAMESPACES, "kube-node-lease")

# PriorityClasses every cluster has, whether or not they are stored.
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}
DEFAULT_PREEMPTION_POLICY = "PreemptLowerPriority"

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


def forbidden(attrs: Attributes, reason: str) -> errors.Forbidden:
    """A Forbidden error worded as upstream's `NewForbidden(resource, name, err)`."""
    resource = attrs.qualified_resource
    message = (
        f'{resource} "{attrs.name}" is forbidden: {reason}'
        if attrs.name
        else f"{resource} is forbidden: {reason}"
    )
    details: dict[str, Any] = {"kind": attrs.resource.plural}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.resource.group:
        details["group"] = attrs.resource.group
    return errors.Forbidden(message, details=details)


def namespace_lifecycle(store: Store, attrs: Attributes) -> None:
    """No new content in a missing or terminating namespace; immortal namespaces stay."""
    rt = attrs.resource
    if rt is r.NAMESPACES:
        if attrs.operation == DELETE and attrs.name in IMMORTAL_NAMESPACES:
            raise forbidden(attrs, "this namespace may not be deleted")
        return
    if not rt.namespaced or attrs.operation != CREATE:
        return
    namespace = store.get(r.NAMESPACES, "", attrs.namespace)
    if namespace is None:
        raise errors.NotFound.of("namespaces", attrs.namespace)
    terminating = (
        namespace["metadata"].get("deletionTimestamp")
        or (namespace.get("status") or {}).get("phase") == "Terminating"
    )
    if terminating:
        raise forbidden(
            attrs,
            f"unable to create new content in namespace {attrs.namespace} because it is being terminated",
        )


def _new_pod(attrs: Attributes) -> Obj | None:
    """The pod being created (not a subresource), or None if the plugin does not apply."""
    if attrs.resource is not r.PODS or attrs.operation != CREATE or attrs.subresource:
        return None
    return attrs.object


def service_account(store: Store, attrs: Attributes) -> None:
    """Pods run as the namespace's `default` service account unless they name one."""
    pod = _new_pod(attrs)
    if pod is None:
        return
    if MIRROR_POD_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
        return
    spec = pod.setdefault("spec", {})
    name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = name
    spec["serviceAccount"] = name


def priority(store: Store, attrs: Attributes) -> None:
    """Resolve a pod's priority from its PriorityClass (or the global default, or 0)."""
    pod = _new_pod(attrs)
    if pod is None:
        return
    spec = pod.setdefault("spec", {})
    class_name = spec.get("priorityClassName") or ""
    preemption: str | None = None
    if class_name:
        if class_name in SYSTEM_PRIORITY_CLASSES and store.get(r.PRIORITYCLASSES, "", class_name) is None:
            value = SYSTEM_PRIORITY_CLASSES[class_name]
        else:
            pc = store.get(r.PRIORITYCLASSES, "", class_name)
            if pc is None:
                raise forbidden(attrs, f"no PriorityClass with name {class_name} was found")
            value = int(pc.get("value", 0))
            preemption = pc.get("preemptionPolicy")
    else:
        default = _global_default(store)
        if default is not None:
            spec["priorityClassName"] = default["metadata"]["name"]
            value = int(default.get("value", 0))
            preemption = default.get("preemptionPolicy")
        else:
            value = 0
    given = spec.get("priority")
    if given is not None and given != value:
        raise forbidden(
            attrs,
            f"the integer value of priority ({given}) must not be provided in pod spec; priority admission "
            f"controller computed {value} from the given PriorityClass name",
        )
    spec["priority"] = value
    spec["preemptionPolicy"] = preemption or spec.get("preemptionPolicy") or DEFAULT_PREEMPTION_POLICY


def _global_default(store: Store) -> Obj | None:
    """The globalDefault PriorityClass (the lowest value if several claim it, as upstream)."""
    defaults = [pc for pc in store.iter(r.PRIORITYCLASSES) if pc.get("globalDefault")]
    return min(defaults, key=lambda pc: int(pc.get("value", 0)), default=None)


def default_toleration_seconds(store: Store, attrs: Attributes) -> None:
    """Pods tolerate not-ready and unreachable nodes for 300 s unless they say otherwise."""
    pod = _new_pod(attrs)
    if pod is None:
        return
    spec = pod.setdefault("spec", {})
    tolerations: list[Obj] = list(spec.get("tolerations") or [])
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        covered = any(
            (t.get("key") in (key, "", None)) and (t.get("effect") in ("NoExecute", "", None))
            for t in tolerations
            if isinstance(t, dict)
        )
        if not covered:
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )
    spec["tolerations"] = tolerations


# Mutating plugins in kube-apiserver's order (NamespaceLifecycle first, so nothing else runs for a
# write into a missing namespace).
MUTATING = (namespace_lifecycle, service_account, priority, default_toleration_seconds)


def admit(store: Store, attrs: Attributes) -> None:
    """Run the built-in mutating plugins on `attrs.object`."""
    for plugin in MUTATING:
        plugin(store, attrs)
