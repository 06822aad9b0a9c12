"""ResourceQuota admission: a create that would take a namespace over a quota's `hard` is Forbidden.

Usage is computed from the store at admission time (pods that are not finished, objects by
count), so no quota controller is needed for enforcement; the admitted object's usage is written
to the quota's `status.used` as upstream's admission does. Quota scopes BestEffort, NotBestEffort,
Terminating, NotTerminating and the PriorityClass scope selector are honoured.
"""

from __future__ import annotations

from typing import Any

from shipshape.emulator import resources as r
from shipshape.emulator.admission import CREATE, Attributes
from shipshape.emulator.admission.builtin import forbidden
from shipshape.emulator.defaults import qos_class
from shipshape.emulator.resources import ResourceType
from shipshape.emulator.store import Obj, Store
from shipshape.kube import quantity

RESOURCEQUOTAS = r.BY_KEY["resourcequotas"]
_LEGACY_COUNTS = {
    "pods": "pods",
    "services": "services",
    "configmaps": "configmaps",
    "secrets": "secrets",
    "persistentvolumeclaims": "persistentvolumeclaims",
    "resourcequotas": "resourcequotas",
}
_COMPUTE = ("cpu", "memory")


def _resource_of(key: str) -> str:
    """`requests.cpu` -> cpu, `limits.memory` -> memory, `cpu` -> cpu."""
    for prefix in ("requests.", "limits."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def _amount(key: str, value: Any) -> int:
    try:
        return quantity.resource_amount(_resource_of(key), value)
    except quantity.QuantityError:
        return 0


def _show(key: str, amount: int) -> str:
    name = _resource_of(key)
    if name == "cpu":
        return quantity.format_cpu(amount)
    if name in ("memory", "ephemeral-storage", "storage"):
        return quantity.format_bytes(amount)
    return str(amount)


def _container_sum(containers: list[Obj], section: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for container in containers:
        for name, value in (((container.get("resources") or {}).get(section)) or {}).items():
            out[name] = out.get(name, 0) + _amount(name, value)
    return out


def pod_usage(pod: Obj) -> dict[str, int]:
    """What a pod counts against quotas: pods, and requests/limits (max of init vs sum of regular)."""
    spec = pod.get("spec") or {}
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    init = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    usage = {"pods": 1, "count/pods": 1}
    for section in ("requests", "limits"):
        totals = _container_sum(containers, section)
        for container in init:
            for name, amount in _container_sum([container], section).items():
                totals[name] = max(totals.get(name, 0), amount)
        for name, amount in totals.items():
            usage[f"{section}.{name}"] = amount
            if section == "requests" and name in (*_COMPUTE, "ephemeral-storage"):
                usage[name] = amount
    return usage


def _object_usage(rt: ResourceType, obj: Obj) -> dict[str, int]:
    if rt is r.PODS:
        return pod_usage(obj)
    usage = {f"count/{rt.key}": 1}
    if rt.key in _LEGACY_COUNTS:
        usage[_LEGACY_COUNTS[rt.key]] = 1
    if rt is r.SERVICES:
        kind = (obj.get("spec") or {}).get("type")
        if kind == "LoadBalancer":
            usage["services.loadbalancers"] = 1
        if kind in ("NodePort", "LoadBalancer"):
            usage["services.nodeports"] = len((obj.get("spec") or {}).get("ports") or [])
    return usage


def _pod_in_scope(quota: Obj, pod: Obj) -> bool:
    spec = quota.get("spec") or {}
    pod_spec = pod.get("spec") or {}
    best_effort = qos_class(pod_spec) == "BestEffort"
    terminating = pod_spec.get("activeDeadlineSeconds") is not None
    for scope in spec.get("scopes") or []:
        if (
            (scope == "BestEffort" and not best_effort)
            or (scope == "NotBestEffort" and best_effort)
            or (scope == "Terminating" and not terminating)
            or (scope == "NotTerminating" and terminating)
        ):
            return False
    for expr in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        if expr.get("scopeName") != "PriorityClass":
            continue
        value = pod_spec.get("priorityClassName")
        op, values = expr.get("operator"), expr.get("values") or []
        if (
            (op == "In" and value not in values)
            or (op == "NotIn" and value in values)
            or (op == "Exists" and not value)
            or (op == "DoesNotExist" and value)
        ):
            return False
    return True


def _finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _used(store: Store, rt: ResourceType, namespace: str, quota: Obj, keys: set[str]) -> dict[str, int]:
    used = dict.fromkeys(keys, 0)
    pod_keys = {k for k in keys if k in ("pods", "count/pods") or _resource_of(k) != k or k in _COMPUTE}
    if pod_keys:
        for pod in store.list(r.PODS, namespace):
            if _finished(pod) or not _pod_in_scope(quota, pod):
                continue
            for key, amount in pod_usage(pod).items():
                if key in pod_keys:
                    used[key] += amount
    for key in keys - pod_keys:
        counted = _counted_type(key)
        if counted is not None:
            used[key] = sum(_object_usage(counted, obj).get(key, 0) for obj in store.list(counted, namespace))
    return used


def used(store: Store, namespace: str, quota: Obj) -> dict[str, str]:
    """A quota's `status.used` as the quota controller recomputes it: every `hard` key, rendered."""
    keys = set((quota.get("spec") or {}).get("hard") or {})
    return {key: _show(key, amount) for key, amount in _used(store, r.PODS, namespace, quota, keys).items()}


def _counted_type(key: str) -> ResourceType | None:
    name = key[len("count/") :] if key.startswith("count/") else key
    name = name.split(".", 1)[0] if name.startswith("services.") else name
    return r.BY_KEY.get(name)


def admit(store: Store, attrs: Attributes) -> None:
    """Refuse a create that exceeds a quota of its namespace; record the new usage in the quotas."""
    rt = attrs.resource
    obj = attrs.object
    if attrs.operation != CREATE or attrs.subresource or not rt.namespaced or obj is None:
        return
    quotas = store.list(RESOURCEQUOTAS, attrs.namespace)
    if not quotas:
        return
    delta = _object_usage(rt, obj)
    updates: list[tuple[Obj, dict[str, int]]] = []
    for quota in quotas:
        hard = (quota.get("spec") or {}).get("hard") or {}
        if rt is r.PODS and not _pod_in_scope(quota, obj):
            continue
        _require_compute(attrs, quota, hard, obj)
        keys = {k for k in hard if k in delta}
        if not keys:
            continue
        used = _used(store, rt, attrs.namespace, quota, keys)
        over = sorted(k for k in keys if used[k] + delta[k] > _amount(k, hard[k]))
        if over:
            listed = over  # upstream names only the exceeded resources
            requested = ",".join(f"{k}={_show(k, delta[k])}" for k in listed)
            used_text = ",".join(f"{k}={_show(k, used[k])}" for k in listed)
            limited = ",".join(f"{k}={hard[k]}" for k in listed)
            raise forbidden(
                attrs,
                f"exceeded quota: {quota['metadata']['name']}, requested: {requested}, used: {used_text}, "
                f"limited: {limited}",
            )
        updates.append((quota, {k: used[k] + delta[k] for k in keys}))
    if attrs.dry_run:
        return
    for quota, new_used in updates:
        _record(store, quota, new_used)


def _require_compute(attrs: Attributes, quota: Obj, hard: Obj, obj: Obj) -> None:
    """A quota on requests/limits of cpu or memory needs every container to set them."""
    if attrs.resource is not r.PODS:
        return
    tracked = sorted(
        k
        for k in hard
        if _resource_of(k) in _COMPUTE and (k.startswith(("requests.", "limits.")) or k in _COMPUTE)
    )
    missing: list[str] = []
    containers = [c for c in (obj.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    for key in tracked:
        section = "limits" if key.startswith("limits.") else "requests"
        name = _resource_of(key)
        lacking = [
            str(c.get("name", ""))
            for c in containers
            if name not in (((c.get("resources") or {}).get(section)) or {})
        ]
        if lacking:
            missing.append(f"{key} for: {','.join(lacking)}")
    if missing:
        raise forbidden(
            attrs, f"failed quota: {quota['metadata']['name']}: must specify {'; '.join(missing)}"
        )


def _record(store: Store, quota: Obj, used: dict[str, int]) -> None:
    hard = (quota.get("spec") or {}).get("hard") or {}

    def change(q: Obj) -> None:
        status = q.setdefault("status", {})
        status["hard"] = dict(hard)
        recorded = dict(status.get("used") or {})
        recorded.update({k: _show(k, v) for k, v in used.items()})
        status["used"] = recorded

    md = quota["metadata"]
    store.mutate(RESOURCEQUOTAS, md["namespace"], md["name"], change, subresource="status")
