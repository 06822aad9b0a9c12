"""The compiled-in admission plugins the emulator enables, in kube-apiserver's order.

NamespaceLifecycle, LimitRanger, ServiceAccount, Priority, DefaultTolerationSeconds and
TaintNodesByCondition (ResourceQuota is in `quota`). Each reads what it needs from the store and
changes `attrs.object` (a copy owned by the request) or raises an `ApiError`. LimitRanger also
checks min/max once the object is final (`validate`).
"""

from __future__ import annotations

from typing import Any

from shipshape.emulator import resources as r
from shipshape.emulator.admission import CREATE, DELETE, Attributes
from shipshape.emulator.store import Store
from shipshape.kube import errors, quantity

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


def class_priority(store: Store, class_name: str | None) -> int:
    """The priority a pod of this PriorityClass gets: the class's value; without a class (or one not
    found) the globalDefault class's, else 0."""
    if class_name:
        pc = store.get(r.PRIORITYCLASSES, "", class_name)
        if pc is not None:
            return int(pc.get("value") or 0)
    default = _global_default(store)
    return 0 if default is None else int(default.get("value") or 0)


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


def taint_nodes_by_condition(store: Store, attrs: Attributes) -> None:
    """A new Node starts with `node.kubernetes.io/not-ready:NoSchedule` (the node lifecycle
    controller lifts it once the node is Ready)."""
    node = attrs.object
    if attrs.resource is not r.NODES or attrs.operation != CREATE or attrs.subresource or node is None:
        return
    spec = node.setdefault("spec", {})
    taints: list[Obj] = list(spec.get("taints") or [])
    if not any(t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoSchedule" for t in taints):
        taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
    spec["taints"] = taints


# ---- LimitRanger ---------------------------------------------------------------------------------

LIMIT_RANGER_ANNOTATION = "kubernetes.io/limit-ranger"


def _limit_items(store: Store, namespace: str, kind: str) -> list[Obj]:
    return [
        item
        for lr in store.list(r.BY_KEY["limitranges"], namespace)
        for item in (lr.get("spec") or {}).get("limits") or []
        if isinstance(item, dict) and item.get("type") == kind
    ]


def _amount(name: str, value: Any) -> int | None:
    try:
        return quantity.resource_amount(name, value)
    except quantity.QuantityError:
        return None


def limit_ranger(store: Store, attrs: Attributes) -> None:
    """Containers without requests/limits get the namespace's LimitRange defaults (pod creation)."""
    pod = _new_pod(attrs)
    if pod is None:
        return
    items = _limit_items(store, attrs.namespace, "Container")
    if not items:
        return
    default_limits: Obj = {}
    default_requests: Obj = {}
    for item in items:
        default_limits.update(item.get("default") or {})
        default_requests.update(item.get("defaultRequest") or {})
    notes: list[str] = []
    spec = pod.setdefault("spec", {})
    for key, prefix in (("initContainers", "init container"), ("containers", "container")):
        for container in spec.get(key) or []:
            if not isinstance(container, dict):
                continue
            resources = container.setdefault("resources", {})
            limits = resources.setdefault("limits", {})
            requests = resources.setdefault("requests", {})
            set_limits = sorted(k for k in default_limits if k not in limits)
            set_requests = sorted(k for k in default_requests if k not in requests)
            for k in set_limits:
                limits[k] = default_limits[k]
            for k in set_requests:
                requests[k] = default_requests[k]
            for section in ("limits", "requests"):
                if not resources[section]:
                    del resources[section]
            if set_requests:
                notes.append(f"{', '.join(set_requests)} request for {prefix} {container.get('name', '')}")
            if set_limits:
                notes.append(f"{', '.join(set_limits)} limit for {prefix} {container.get('name', '')}")
    if notes:
        annotations = pod.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[LIMIT_RANGER_ANNOTATION] = f"LimitRanger plugin set: {'; '.join(notes)}"


def _bounds(scope: str, resources: Obj, item: Obj, problems: list[str]) -> None:
    """Min/max of one LimitRange item against a container's (or pod's summed) requests and limits."""
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for name, bound in (item.get("min") or {}).items():
        if name not in requests:
            problems.append(f"minimum {name} usage per {scope} is {bound}.  No request is specified")
            continue
        have, low = _amount(name, requests[name]), _amount(name, bound)
        if have is not None and low is not None and have < low:
            problems.append(f"minimum {name} usage per {scope} is {bound}, but request is {requests[name]}")
    for name, bound in (item.get("max") or {}).items():
        if name not in limits:
            problems.append(f"maximum {name} usage per {scope} is {bound}.  No limit is specified")
            continue
        have, high = _amount(name, limits[name]), _amount(name, bound)
        if have is not None and high is not None and have > high:
            problems.append(f"maximum {name} usage per {scope} is {bound}, but limit is {limits[name]}")
    for name, ratio in (item.get("maxLimitRequestRatio") or {}).items():
        request, limit = _amount(name, requests.get(name, 0)), _amount(name, limits.get(name, 0))
        if request and limit and limit / request > quantity.parse_quantity(ratio):
            problems.append(
                f"{name} max limit to request ratio per {scope} is {ratio}, but provided ratio is "
                f"{limit / request:f}"
            )


def _pod_totals(containers: list[Obj]) -> Obj:
    """The pod's requests and limits: per resource, the sum over containers when all set it."""
    totals: Obj = {}
    for section in ("requests", "limits"):
        per_container = [(c.get("resources") or {}).get(section) or {} for c in containers]
        names = {name for values in per_container for name in values}
        summed: dict[str, str] = {}
        for name in names:
            amounts = [_amount(name, values[name]) if name in values else None for values in per_container]
            if all(a is not None for a in amounts):
                total = sum(a for a in amounts if a is not None)
                summed[name] = quantity.format_cpu(total) if name == "cpu" else quantity.format_bytes(total)
        totals[section] = summed
    return totals


def limit_ranger_validate(store: Store, attrs: Attributes) -> None:
    """A new pod's containers (and the pod as a whole) within the namespace's LimitRange bounds."""
    pod = _new_pod(attrs)
    if pod is None:
        return
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    problems: list[str] = []
    for item in _limit_items(store, attrs.namespace, "Container"):
        for container in containers:
            _bounds("Container", container.get("resources") or {}, item, problems)
    for item in _limit_items(store, attrs.namespace, "Pod"):
        _bounds("Pod", _pod_totals(containers), item, problems)
    if problems:
        raise forbidden(attrs, problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]")


# Mutating plugins in kube-apiserver's order (NamespaceLifecycle first, so nothing else runs for a
# write into a missing namespace).
MUTATING = (
    namespace_lifecycle,
    limit_ranger,
    service_account,
    priority,
    default_toleration_seconds,
    taint_nodes_by_condition,
)
# Validating plugins, run once the object is final (after mutating webhooks and field validation).
VALIDATING = (limit_ranger_validate,)


def admit(store: Store, attrs: Attributes) -> None:
    """Run the built-in mutating plugins on `attrs.object`."""
    for plugin in MUTATING:
        plugin(store, attrs)


def validate(store: Store, attrs: Attributes) -> None:
    """Run the built-in validating plugins."""
    for plugin in VALIDATING:
        plugin(store, attrs)
