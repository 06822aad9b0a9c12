"""GPU fleet inputs from Kubernetes objects (Node and Pod bodies as the API returns them).

Pure: bodies in, `GpuNode` and `GpuPod` out. What a cluster says about GPUs, read here once:

- a node's GPUs: `status.allocatable` of `nvidia.com/gpu`, `amd.com/gpu`, `gpu.intel.com/i915` or
  the Alibaba share scheduler's `alibabacloud.com/gpu-count`; MIG slices
  (`nvidia.com/mig-<g>g.<mem>gb`) count as 1/7 of a GPU per compute slice;
- its model: GPU feature discovery's `nvidia.com/gpu.product`, GKE's
  `cloud.google.com/gke-accelerator`, EKS's `k8s.amazonaws.com/accelerator`, or `accelerator`;
- its pool: instance type x zone (`node.kubernetes.io/instance-type`,
  `topology.kubernetes.io/zone`);
- a pod's ask: the GPU resources of its containers (init containers' largest ask counts when
  larger), or the share annotation `alibabacloud.com/gpu-milli` with one GPU;
- a pod's model constraint: its node selector, or required node affinity `In` terms, on the
  model labels.

Capacity type and prices come from the caller: the capacity type with the cluster's label
conventions (a function of the node's labels), the price per hour by node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from shipshape.analyzers.gpu.fleet import UNKNOWN, GpuNode, GpuPod, Owner, Workload, role_of
from shipshape.kube import objects
from shipshape.kube.wellknown import INSTANCE_TYPE_LABEL, ZONE_LABEL

WHOLE_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "alibabacloud.com/gpu-count")
SHARE_ANNOTATION = "alibabacloud.com/gpu-milli"
MODEL_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "k8s.amazonaws.com/accelerator",
    "accelerator",
)
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(\d+)g\.\d+gb$")
MIG_SLICES = 7

Body = Mapping[str, Any]


def _quantity(text: object) -> float:
    value = str(text).strip()
    if value.endswith("m"):
        return float(value[:-1]) / 1000.0
    return float(value)


def _gpus(resources: Mapping[str, object]) -> float:
    total = 0.0
    for name, amount in resources.items():
        if name in WHOLE_GPU_RESOURCES:
            total += _quantity(amount)
        elif (mig := MIG_RESOURCE.match(name)) is not None:
            total += _quantity(amount) * int(mig.group(1)) / MIG_SLICES
    return total


def _labels(body: Body) -> Mapping[str, str]:
    labels: Mapping[str, str] = (body.get("metadata") or {}).get("labels") or {}
    return labels


def gpu_model(labels: Mapping[str, str]) -> str:
    return next((labels[k] for k in MODEL_LABELS if labels.get(k)), "")


def node_from_object(
    body: Body,
    capacity_type: Callable[[Mapping[str, str]], str | None],
    price_per_hour: float | None = None,
) -> GpuNode | None:
    """A node with GPUs, or None for a node without."""
    allocatable = (body.get("status") or {}).get("allocatable") or {}
    gpus = _gpus(allocatable)
    if gpus <= 0:
        return None
    labels = _labels(body)
    instance_type = labels.get(INSTANCE_TYPE_LABEL, "")
    zone = labels.get(ZONE_LABEL, "")
    resource = next((r for r in allocatable if r in WHOLE_GPU_RESOURCES or MIG_RESOURCE.match(r)), "")
    return GpuNode(
        name=body["metadata"]["name"],
        gpus=max(round(gpus), 1),
        gpu_model=gpu_model(labels),
        pool=f"{instance_type or 'unknown'}/{zone or 'unknown'}",
        capacity_type=capacity_type(labels) or UNKNOWN,
        instance_type=instance_type,
        zone=zone,
        price_per_hour=price_per_hour,
        resource=resource,
    )


def _pod_gpus(body: Body) -> float:
    spec = body.get("spec") or {}

    def ask(container: Mapping[str, Any]) -> float:
        resources = container.get("resources") or {}
        return _gpus(resources.get("limits") or {}) or _gpus(resources.get("requests") or {})

    regular = sum(ask(c) for c in spec.get("containers") or [])
    init = max((ask(c) for c in spec.get("initContainers") or []), default=0.0)
    gpus = max(regular, init)
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    share = annotations.get(SHARE_ANNOTATION)
    if share is not None and gpus <= 1:
        milli = _quantity(share)
        if 0 < milli < 1000:
            return milli / 1000.0
    return gpus


def _model_constraint(spec: Mapping[str, Any]) -> tuple[str, ...]:
    selector = spec.get("nodeSelector") or {}
    for key in MODEL_LABELS:
        if selector.get(key):
            return (selector[key],)
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    models: set[str] = set()
    for term in affinity.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") in MODEL_LABELS and expression.get("operator") == "In":
                models.update(expression.get("values") or [])
    return tuple(sorted(models))


def _owner(body: Body) -> Owner | None:
    owner = objects.workload_of(body)
    return None if owner is None else Owner(owner.kind, owner.name)


def pod_from_object(body: Body) -> GpuPod | None:
    """A pod that asks for GPUs and has not finished, or None."""
    phase = (body.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return None
    gpus = _pod_gpus(body)
    if gpus <= 0:
        return None
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    owner = _owner(body)
    labels = metadata.get("labels") or {}
    return GpuPod(
        namespace=metadata.get("namespace", "default"),
        name=metadata["name"],
        gpus=gpus if gpus < 1 else float(round(gpus)),
        node=spec.get("nodeName") or None,
        owner=owner,
        role=role_of(owner.kind if owner else None, labels),
        gpu_models=_model_constraint(spec),
        annotations=tuple(sorted((metadata.get("annotations") or {}).items())),
    )


def fleet_from_objects(
    nodes: Iterable[Body],
    pods: Iterable[Body],
    capacity_type: Callable[[Mapping[str, str]], str | None],
    prices: Mapping[str, float] | None = None,
) -> tuple[list[GpuNode], list[GpuPod]]:
    """GPU nodes and GPU pods of a cluster; pods on nodes without GPUs are left out."""
    prices = prices or {}
    gpu_nodes = [
        n
        for body in nodes
        if (n := node_from_object(body, capacity_type, prices.get(body["metadata"]["name"]))) is not None
    ]
    names = {n.name for n in gpu_nodes}
    gpu_pods = [
        p for body in pods if (p := pod_from_object(body)) is not None and (p.node is None or p.node in names)
    ]
    return gpu_nodes, gpu_pods


def workloads_from_objects(
    deployments: Iterable[Body], statefulsets: Iterable[Body], hpas: Iterable[Body] = ()
) -> dict[tuple[str, str, str], Workload]:
    """Deployments and StatefulSets by (kind, namespace, name), with the HPA that scales each."""
    scaled: dict[tuple[str, str, str], str] = {}
    for hpa in hpas:
        md = hpa.get("metadata") or {}
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        scaled[(str(ref.get("kind", "")), str(md.get("namespace", "default")), str(ref.get("name", "")))] = (
            str(md.get("name", ""))
        )
    out: dict[tuple[str, str, str], Workload] = {}
    for kind, bodies in (("Deployment", deployments), ("StatefulSet", statefulsets)):
        for body in bodies:
            md = body.get("metadata") or {}
            generation = md.get("generation")
            key = (kind, str(md.get("namespace", "default")), str(md.get("name", "")))
            out[key] = Workload(
                kind=kind,
                namespace=key[1],
                name=key[2],
                replicas=int((body.get("spec") or {}).get("replicas", 1)),
                generation=generation if isinstance(generation, int) and generation >= 1 else None,
                resource_version=md.get("resourceVersion"),
                autoscaled_by=scaled.get(key),
            )
    return out
