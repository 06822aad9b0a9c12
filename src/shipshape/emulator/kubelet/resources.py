"""The kubelet's resource admission: a pod's effective requests (and its QoS class, which the
kubelet reports) come from `kube.scheduling`, the one implementation of Kubernetes' rules."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shipshape.kube.quantity import resource_amount
from shipshape.kube.scheduling import pod_requests

Obj = dict[str, Any]
# The order the kubelet's fit check reports resources in (pods first, then these, then the rest).
_CHECK_ORDER = ("cpu", "memory", "ephemeral-storage")


def _amounts(values: Mapping[str, Any] | None) -> dict[str, int]:
    return {name: resource_amount(name, v) for name, v in (values or {}).items()}


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
