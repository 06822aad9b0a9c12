"""GPU fleet: the typed inputs of the GPU analyzers, the inventory and the allocation.

Inputs are plain values that a source fills (a cluster snapshot, Prometheus, the emulator):

- `GpuNode`: a node with GPUs, its model, pool, capacity type and actual price per hour (the spot
  price on spot nodes);
- `GpuPod`: a pod that asks for GPUs, whole (`gpus` = 2) or a share of one (`gpus` = 0.25, from
  gpu-milli, time-slicing or MIG-style sharing), with its owner, role and model constraint;
- `UtilizationSeries` (in `idle`): dcgm-exporter-style per-GPU activity samples.

The capacity type comes resolved (`spot`, `on-demand` or `unknown`): sources read it from the
node's labels with the cluster's label conventions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shipshape.contracts import annotations as names

SPOT = "spot"
ON_DEMAND = "on-demand"
UNKNOWN = "unknown"
CAPACITY_TYPES = (SPOT, ON_DEMAND, UNKNOWN)
ROLES = ("inference", "training", "other")
# A training workload declares that it checkpoints (so a spot interruption loses little work).
CHECKPOINTING_ANNOTATION = names.CHECKPOINTING


class FleetError(ValueError):
    """Inputs that contradict each other (a pod on an unknown node, a negative count)."""


@dataclass(frozen=True)
class Workload:
    """A Deployment or StatefulSet as it stands: what an instruction that changes it is computed from
    (its desired replicas, its generation as the precondition, whether an HPA scales it)."""

    kind: str
    namespace: str
    name: str
    replicas: int
    generation: int | None = None
    resource_version: str | None = None
    autoscaled_by: str | None = None  # the HorizontalPodAutoscaler that scales it, if any

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)


@dataclass(frozen=True)
class GpuNode:
    name: str
    gpus: int
    gpu_model: str
    pool: str
    capacity_type: str = UNKNOWN
    instance_type: str = ""
    zone: str = ""
    price_per_hour: float | None = None
    resource: str = "nvidia.com/gpu"

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise FleetError(f"node {self.name}: negative GPU count {self.gpus}")
        if self.capacity_type not in CAPACITY_TYPES:
            raise FleetError(
                f"node {self.name}: capacity type must be one of {', '.join(CAPACITY_TYPES)}, "
                f"got {self.capacity_type!r}"
            )
        if self.price_per_hour is not None and self.price_per_hour < 0:
            raise FleetError(f"node {self.name}: negative price {self.price_per_hour}")

    @property
    def price_per_gpu_hour(self) -> float | None:
        if self.price_per_hour is None or self.gpus == 0:
            return None
        return self.price_per_hour / self.gpus


@dataclass(frozen=True)
class Owner:
    kind: str  # Deployment, StatefulSet, Job, ...
    name: str


@dataclass(frozen=True)
class GpuPod:
    namespace: str
    name: str
    gpus: float  # whole GPUs (1, 2, 8) or a share of one GPU (0 < gpus < 1)
    node: str | None = None  # None while pending
    owner: Owner | None = None
    role: str = "other"
    gpu_models: tuple[str, ...] = ()  # models the pod accepts (node selector / affinity); () = any
    annotations: tuple[tuple[str, str], ...] = ()
    replicas: int | None = None  # the owner's desired replicas, when known

    def __post_init__(self) -> None:
        if self.gpus <= 0:
            raise FleetError(f"pod {self.key}: GPU request must be positive, got {self.gpus}")
        if self.gpus > 1 and not float(self.gpus).is_integer():
            raise FleetError(f"pod {self.key}: more than one GPU must be whole GPUs, got {self.gpus}")
        if self.role not in ROLES:
            raise FleetError(f"pod {self.key}: role must be one of {', '.join(ROLES)}, got {self.role!r}")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def shared(self) -> bool:
        return self.gpus < 1

    @property
    def checkpointing(self) -> bool:
        return dict(self.annotations).get(CHECKPOINTING_ANNOTATION, "").lower() == "true"


def role_of(kind: str | None, labels: dict[str, str] | None = None) -> str:
    """Inference or training from the owner's kind and common labels: Jobs (and the training
    operators' kinds) train, Deployments and StatefulSets serve, `app.kubernetes.io/component`
    or a `workload-type` label wins when present."""
    labels = labels or {}
    for key in ("shipshape.dev/gpu-role", "workload-type", "app.kubernetes.io/component"):
        value = labels.get(key, "").lower()
        if value in ("inference", "serving", "server"):
            return "inference"
        if value in ("training", "train", "trainer"):
            return "training"
    if kind in ("Job", "CronJob", "PyTorchJob", "TFJob", "MPIJob", "RayJob"):
        return "training"
    if kind in ("Deployment", "StatefulSet", "ReplicaSet", "InferenceService"):
        return "inference"
    return "other"


@dataclass(frozen=True)
class NodeAllocation:
    node: GpuNode
    whole: int  # GPUs given whole to pods
    shared_devices: int  # GPUs carved into shares (a GPU holds shares until they pass 1)
    shared: float  # sum of the shares
    pods: tuple[GpuPod, ...]

    @property
    def allocated(self) -> float:
        """GPUs allocated, fractional shares counted by their size."""
        return self.whole + self.shared

    @property
    def devices_in_use(self) -> int:
        return self.whole + self.shared_devices

    @property
    def free_devices(self) -> int:
        return max(self.node.gpus - self.devices_in_use, 0)


def _shared_devices(shares: Sequence[float]) -> int:
    """Devices that the shares occupy, packed first-fit decreasing (what a sharing device plugin
    reports as partly used GPUs)."""
    devices: list[float] = []
    for share in sorted(shares, reverse=True):
        for i, used in enumerate(devices):
            if used + share <= 1.0 + 1e-9:
                devices[i] = used + share
                break
        else:
            devices.append(share)
    return len(devices)


def allocation(nodes: Iterable[GpuNode], pods: Iterable[GpuPod]) -> dict[str, NodeAllocation]:
    """Per node: whole GPUs, shared devices and shares, and the pods on it."""
    by_name = {n.name: n for n in nodes}
    placed: dict[str, list[GpuPod]] = defaultdict(list)
    for pod in pods:
        if pod.node is None:
            continue
        if pod.node not in by_name:
            raise FleetError(f"pod {pod.key} runs on {pod.node}, which is not in the node list")
        placed[pod.node].append(pod)
    result = {}
    for name, node in by_name.items():
        here = placed.get(name, [])
        shares = [p.gpus for p in here if p.shared]
        result[name] = NodeAllocation(
            node=node,
            whole=int(sum(p.gpus for p in here if not p.shared)),
            shared_devices=_shared_devices(shares),
            shared=round(sum(shares), 6),
            pods=tuple(here),
        )
    return result


@dataclass(frozen=True)
class InventoryRow:
    """One (model, capacity type, pool) group."""

    gpu_model: str
    capacity_type: str
    pool: str
    nodes: int
    gpus: int
    allocated: float
    whole: int
    shared: float
    free_devices: int
    price_per_hour: float | None  # the group's nodes together, when every price is known
    node_names: tuple[str, ...] = field(default=())

    @property
    def allocated_pct(self) -> float:
        return 100.0 * self.allocated / self.gpus if self.gpus else 0.0


def inventory(allocations: dict[str, NodeAllocation]) -> list[InventoryRow]:
    """GPUs by model, capacity type and pool, with what is allocated; sorted by model, capacity
    type, pool."""
    groups: dict[tuple[str, str, str], list[NodeAllocation]] = defaultdict(list)
    for alloc in allocations.values():
        node = alloc.node
        groups[(node.gpu_model, node.capacity_type, node.pool)].append(alloc)
    rows = []
    for (model, capacity, pool), members in sorted(groups.items()):
        prices = [m.node.price_per_hour for m in members]
        rows.append(
            InventoryRow(
                gpu_model=model,
                capacity_type=capacity,
                pool=pool,
                nodes=len(members),
                gpus=sum(m.node.gpus for m in members),
                allocated=round(sum(m.allocated for m in members), 6),
                whole=sum(m.whole for m in members),
                shared=round(sum(m.shared for m in members), 6),
                free_devices=sum(m.free_devices for m in members),
                price_per_hour=None if any(p is None for p in prices) else sum(p or 0.0 for p in prices),
                node_names=tuple(sorted(m.node.name for m in members)),
            )
        )
    return rows
