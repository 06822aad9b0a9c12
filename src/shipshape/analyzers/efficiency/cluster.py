"""The cluster side of an efficiency analysis: pods, containers, nodes, HPAs and PriorityClasses of a
snapshot, flattened into columns (numpy arrays) that line up with the usage rows.

Kubernetes QoS classes follow the kubelet's rules (`pkg/apis/core/v1/helper/qos`): Guaranteed when
every container has CPU and memory limits equal to its requests (a request left out defaults to
the limit), BestEffort when no container sets any CPU or memory request or limit, else Burstable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shipshape.analyzers.efficiency.usage import ContainerKey
from shipshape.contracts import usage as usage_contract
from shipshape.kube import capacity as kube_capacity
from shipshape.kube import wellknown
from shipshape.kube.quantity import QuantityError, cpu_millis, to_int

Obj = Mapping[str, Any]
F64 = NDArray[np.float64]

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"

SPOT = "spot"
ON_DEMAND = "on-demand"


class SnapshotError(ValueError):
    """A snapshot that is not what `EfficiencySnapshot.from_json` documents."""


def capacity_type(labels: Mapping[str, str]) -> str | None:
    """`spot`, `on-demand` or None, by the label conventions the node carries (`kube.capacity`)."""
    kind = kube_capacity.capacity_type_of(labels)
    return None if kind is None else str(kind)


def _cores(value: object) -> float:
    return cpu_millis(value) / 1000.0  # type: ignore[arg-type]


def _bytes(value: object) -> float:
    return float(to_int(value))  # type: ignore[arg-type]


Amounts = tuple[float, float, float, float]  # cpu request, memory request, cpu limit, memory limit


def _parse(memo: dict[tuple[str, object], float], name: str, value: object) -> float:
    if value is None:
        return math.nan
    key = (name, value)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _cores(value) if name == "cpu" else _bytes(value)
    return found


def container_amounts(container: Obj, memo: dict[tuple[str, object], float] | None = None) -> Amounts:
    """Requests and limits of one container (NaN where not set); `memo` caches parsed quantities."""
    memo = {} if memo is None else memo
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    return (
        _parse(memo, "cpu", requests.get("cpu")),
        _parse(memo, "memory", requests.get("memory")),
        _parse(memo, "cpu", limits.get("cpu")),
        _parse(memo, "memory", limits.get("memory")),
    )


def qos_of(amounts: Sequence[Amounts]) -> str:
    """The pod's QoS class from every container's (and init container's) parsed amounts: the rule of
    `kube.scheduling.qos_class` (upstream `GetPodQOS`) on the columns this module already parsed (a
    differential test holds the two together). Zero counts as unset; a missing request is its limit
    (API defaulting); Guaranteed needs cpu and memory limits on every container and the pod's
    request totals equal to its limit totals."""
    requests = [0.0, 0.0]
    limits = [0.0, 0.0]
    guaranteed = True
    for cpu_req, mem_req, cpu_lim, mem_lim in amounts:
        for index, (request, limit) in enumerate(((cpu_req, cpu_lim), (mem_req, mem_lim))):
            limit_set = not math.isnan(limit) and limit != 0
            if math.isnan(request):
                request = limit
            if not math.isnan(request) and request != 0:
                requests[index] += request
            if limit_set:
                limits[index] += limit
            else:
                guaranteed = False
    if not any(requests) and not any(limits):
        return BEST_EFFORT
    return GUARANTEED if guaranteed and requests == limits else BURSTABLE


def owner_workload(pod: Obj) -> tuple[str, str]:
    """(kind, name) of the workload that owns the pod: a ReplicaSet's pod belongs to its
    Deployment (the name less the pod-template-hash), a Job's pod to its Job; else the pod. The
    rule is the usage contract's (`contracts.usage.pod_workload`), so that the agent's usage
    series and the analysis group pods alike."""
    return usage_contract.pod_workload(pod.get("metadata") or {})


@dataclass(frozen=True, slots=True)
class HpaTarget:
    """An HPA's target workload and the resources whose utilisation it scales on."""

    name: str
    namespace: str
    kind: str
    workload: str
    resources: frozenset[str]


def hpa_targets(hpas: Sequence[Obj]) -> dict[tuple[str, str, str], HpaTarget]:
    """(namespace, kind, name) -> HPA, for autoscaling/v2 (and v1's targetCPUUtilizationPercentage)."""
    out: dict[tuple[str, str, str], HpaTarget] = {}
    for hpa in hpas:
        md = hpa.get("metadata") or {}
        spec = hpa.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        resources: set[str] = set()
        for metric in spec.get("metrics") or []:
            kind = metric.get("type")
            if kind == "Resource":
                resources.add(str((metric.get("resource") or {}).get("name", "")))
            elif kind == "ContainerResource":
                resources.add(str((metric.get("containerResource") or {}).get("name", "")))
        if spec.get("targetCPUUtilizationPercentage") is not None or (
            not spec.get("metrics") and "maxReplicas" in spec and hpa.get("apiVersion") == "autoscaling/v1"
        ):
            resources.add("cpu")
        namespace = str(md.get("namespace", "default"))
        target = HpaTarget(
            str(md.get("name", "")),
            namespace,
            str(ref.get("kind", "")),
            str(ref.get("name", "")),
            frozenset(resources),
        )
        out[(namespace, target.kind, target.workload)] = target
    return out


@dataclass(frozen=True, slots=True)
class Nodes:
    names: tuple[str, ...]
    cpu_capacity: F64  # cores
    memory_capacity: F64  # bytes
    cpu_allocatable: F64
    memory_allocatable: F64
    capacity_type: tuple[str | None, ...]
    instance_type: tuple[str | None, ...]
    zone: tuple[str | None, ...]
    region: tuple[str | None, ...]
    labels: tuple[Mapping[str, str], ...]
    index: dict[str, int] = field(repr=False)


def read_nodes(nodes: Sequence[Obj]) -> Nodes:
    n = len(nodes)
    cap_cpu, cap_mem, alloc_cpu, alloc_mem = (np.zeros(n) for _ in range(4))
    names: list[str] = []
    ctype: list[str | None] = []
    itype: list[str | None] = []
    zones: list[str | None] = []
    regions: list[str | None] = []
    labels_out: list[Mapping[str, str]] = []
    for i, node in enumerate(nodes):
        md = node.get("metadata") or {}
        status = node.get("status") or {}
        capacity = status.get("capacity") or {}
        allocatable = status.get("allocatable") or capacity
        names.append(str(md.get("name", "")))
        try:
            cap_cpu[i] = _cores(capacity.get("cpu", allocatable.get("cpu", 0)))
            cap_mem[i] = _bytes(capacity.get("memory", allocatable.get("memory", 0)))
            alloc_cpu[i] = _cores(allocatable.get("cpu", capacity.get("cpu", 0)))
            alloc_mem[i] = _bytes(allocatable.get("memory", capacity.get("memory", 0)))
        except (QuantityError, ValueError, TypeError) as error:
            raise SnapshotError(f"node {names[-1]}: bad capacity or allocatable: {error}") from error
        labels = md.get("labels") or {}
        labels_out.append(labels)
        ctype.append(capacity_type(labels))
        itype.append(
            labels.get(wellknown.INSTANCE_TYPE_LABEL) or labels.get(wellknown.BETA_INSTANCE_TYPE_LABEL)
        )
        zones.append(labels.get(wellknown.ZONE_LABEL))
        regions.append(labels.get(wellknown.REGION_LABEL))
    return Nodes(
        tuple(names),
        cap_cpu,
        cap_mem,
        alloc_cpu,
        alloc_mem,
        tuple(ctype),
        tuple(itype),
        tuple(zones),
        tuple(regions),
        tuple(labels_out),
        {name: i for i, name in enumerate(names)},
    )


@dataclass(frozen=True, slots=True)
class Pods:
    """One entry per pod that runs or waits on a node (Running or Pending with a node)."""

    keys: tuple[tuple[str, str], ...]  # (namespace, name)
    node: NDArray[np.int64]  # index into Nodes, -1 when unknown
    qos: tuple[str, ...]
    priority: tuple[int | None, ...]
    priority_class_name: tuple[str | None, ...]
    owner: tuple[tuple[str, str], ...]  # (kind, name)
    labels: tuple[Mapping[str, str], ...]


@dataclass(frozen=True, slots=True)
class Containers:
    """One row per (pod, container): requests and limits (NaN when not set) and the pod index."""

    keys: tuple[ContainerKey, ...]
    pod: NDArray[np.int64]
    cpu_request: F64
    memory_request: F64
    cpu_limit: F64
    memory_limit: F64


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: Nodes
    pods: Pods
    containers: Containers
    hpas: dict[tuple[str, str, str], HpaTarget]
    priority_classes: dict[str, int]


def read_cluster(
    pods: Sequence[Obj],
    nodes: Sequence[Obj],
    hpas: Sequence[Obj] = (),
    priority_classes: Sequence[Obj] = (),
    cluster: str = "",
) -> Cluster:
    """Flatten a snapshot's objects. Pods that are done (Succeeded, Failed) are left out."""
    node_table = read_nodes(nodes)
    classes = {
        str((pc.get("metadata") or {}).get("name", "")): int(pc.get("value", 0)) for pc in priority_classes
    }
    pod_keys: list[tuple[str, str]] = []
    pod_node: list[int] = []
    qos: list[str] = []
    priority: list[int | None] = []
    class_names: list[str | None] = []
    owners: list[tuple[str, str]] = []
    pod_labels: list[Mapping[str, str]] = []
    keys: list[ContainerKey] = []
    container_pod: list[int] = []
    columns: list[Amounts] = []
    memo: dict[tuple[str, object], float] = {}
    for pod in pods:
        md = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            continue
        namespace, name = str(md.get("namespace", "default")), str(md.get("name", ""))
        index = len(pod_keys)
        pod_keys.append((namespace, name))
        pod_node.append(node_table.index.get(str(spec.get("nodeName", "")), -1))
        try:
            amounts = [container_amounts(c, memo) for c in spec.get("containers") or []]
            init = [container_amounts(c, memo) for c in spec.get("initContainers") or []]
        except (QuantityError, ValueError, TypeError) as error:
            raise SnapshotError(f"pod {namespace}/{name}: bad resources: {error}") from error
        qos.append(qos_of(amounts + init if init else amounts))
        class_name = spec.get("priorityClassName")
        class_names.append(class_name)
        value = spec.get("priority")
        if value is None and class_name in classes:
            value = classes[class_name]
        priority.append(None if value is None else int(value))
        owners.append(owner_workload(pod))
        pod_labels.append(md.get("labels") or {})
        for container, amount in zip(spec.get("containers") or [], amounts, strict=True):
            keys.append(ContainerKey(namespace, name, str(container.get("name", "")), cluster))
            container_pod.append(index)
            columns.append(amount)
    table = np.asarray(columns, dtype=np.float64).reshape(len(columns), 4)
    cpu_req, mem_req, cpu_lim, mem_lim = (np.ascontiguousarray(table[:, i]) for i in range(4))
    # a request left out defaults to the limit (API defaulting)
    cpu_req = np.where(np.isnan(cpu_req), cpu_lim, cpu_req)
    mem_req = np.where(np.isnan(mem_req), mem_lim, mem_req)
    return Cluster(
        node_table,
        Pods(
            tuple(pod_keys),
            np.asarray(pod_node, dtype=np.int64),
            tuple(qos),
            tuple(priority),
            tuple(class_names),
            tuple(owners),
            tuple(pod_labels),
        ),
        Containers(
            tuple(keys), np.asarray(container_pod, dtype=np.int64), cpu_req, mem_req, cpu_lim, mem_lim
        ),
        hpa_targets(hpas),
        classes,
    )
