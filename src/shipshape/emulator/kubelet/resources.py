"""Pure pod resource arithmetic as the kubelet does it: effective requests, QoS class, admission."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shipshape.kube.quantity import resource_amount

Obj = dict[str, Any]
_COMPUTE = ("cpu", "memory")
# The order the kubelet's fit check reports resources in (pods first, then these, then the rest).
_CHECK_ORDER = ("cpu", "memory", "ephemeral-storage")


def _amounts(values: Mapping[str, Any] | None) -> dict[str, int]:
    return {name: resource_amount(name, v) for name, v in (values or {}).items()}


def _container_requests(container: Obj) -> dict[str, int]:
    """A container's requests, defaulting each missing request to its limit (as the API server does)."""
    resources = container.get("resources") or {}
    requests = _amounts(resources.get("requests"))
    for name, amount in _amounts(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests


def _is_sidecar(container: Obj) -> bool:
    return container.get("restartPolicy") == "Always"


def pod_requests(pod: Obj) -> dict[str, int]:
    """Effective requests: max(sum of containers + sidecars, each init container + earlier sidecars)
    plus the pod overhead. CPU in millicores, everything else in base units."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, 0) + amount
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        requests = _container_requests(container)
        if _is_sidecar(container):
            for name, amount in requests.items():
                sidecars[name] = sidecars.get(name, 0) + amount
                total[name] = total.get(name, 0) + amount
            continue
        for name, amount in requests.items():
            init_peak[name] = max(init_peak.get(name, 0), amount + sidecars.get(name, 0))
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, 0), amount)
    for name, amount in _amounts(spec.get("overhead")).items():
        total[name] = total.get(name, 0) + amount
    return total


def qos_class(pod: Obj) -> str:
    """Guaranteed, Burstable or BestEffort, by the rules of the API server's qos helper."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = {k: v for k, v in _amounts(resources.get("requests")).items() if k in _COMPUTE}
        limits = {k: v for k, v in _amounts(resources.get("limits")).items() if k in _COMPUTE}
        if any(requests.values()) or any(limits.values()):
            any_set = True
        for name in _COMPUTE:
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why the kubelet refuses a pod: `reason` is the pod's status.reason and the Event reason."""

    reason: str
    message: str


def admission_check(
    pod: Obj,
    allocatable: Mapping[str, Any],
    admitted: Iterable[Obj],
    *,
    requests_of: Callable[[Obj], Mapping[str, int]] = pod_requests,
) -> Rejection | None:
    """The kubelet's resource fit check against the pods it already runs (None = admitted).

    `requests_of` gives an admitted pod's effective requests (a caller may remember them).
    """
    capacity = _amounts(allocatable)
    pods = list(admitted)
    max_pods = capacity.get("pods", 110)
    if len(pods) + 1 > max_pods:
        return _insufficient("pods", 1, len(pods), max_pods)
    wanted = pod_requests(pod)
    used: dict[str, int] = {}
    for other in pods:
        for name, amount in requests_of(other).items():
            used[name] = used.get(name, 0) + amount
    ordered = [n for n in _CHECK_ORDER if n in wanted] + sorted(n for n in wanted if n not in _CHECK_ORDER)
    for name in ordered:
        requested = wanted[name]
        if requested <= 0:
            continue
        have = capacity.get(name, 0)
        if requested + used.get(name, 0) > have:
            return _insufficient(name, requested, used.get(name, 0), have)
    return None


def _insufficient(name: str, requested: int, used: int, capacity: int) -> Rejection:
    return Rejection(
        f"OutOf{name}",
        f"Node didn't have enough resource: {name}, requested: {requested}, used: {used}, "
        f"capacity: {capacity}",
    )
