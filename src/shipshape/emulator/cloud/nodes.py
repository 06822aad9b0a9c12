"""Node objects as an EKS node registers them: labels, capacity, allocatable, nodeInfo, conditions.

Pure functions over plain data; the cloud model decides when to write them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shipshape.contracts.annotations import EMULATOR_POOL_LABEL, EMULATOR_SPOT_INTERRUPTION_TAINT
from shipshape.emulator.scenario import Pool
from shipshape.kube import capacity as kube_capacity
from shipshape.kube import wellknown
from shipshape.kube.clock import rfc3339
from shipshape.kube.quantity import cpu_millis, format_cpu, to_int

# The default convention's capacity label (every convention: `kube.capacity`).
CAPACITY_LABEL = kube_capacity.CAPACITY_LABEL
POOL_LABEL = EMULATOR_POOL_LABEL
METADATA_URL_ANNOTATION = "emulator.shipshape.dev/metadata-url"
INSTANCE_ID_ANNOTATION = "emulator.shipshape.dev/instance-id"
LAUNCH_TIME_ANNOTATION = "emulator.shipshape.dev/launch-time"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
SPOT_INTERRUPTION_TAINT = EMULATOR_SPOT_INTERRUPTION_TAINT
NTH_SPOT_TAINT = wellknown.AWS_NTH_SPOT_ITN_TAINT
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
UNREACHABLE_ANNOTATION = "emulator.shipshape.dev/unreachable"
GCP_PROJECT = "shipshape-emulator"
AZURE_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
AZURE_RESOURCE_GROUP = "mc_shipshape_emulator"  # the kubelet model stops for such nodes

EVICTION_HARD_MEMORY = 100 * 2**20  # kubelet --eviction-hard memory.available<100Mi
EPHEMERAL_STORAGE_KI = 20_959_212  # a 20 GiB root volume as the kubelet reports it
CONTAINERD_VERSION = "containerd://1.7.22"
OS_IMAGE = "Amazon Linux 2"
KERNEL_VERSION = "5.10.227-219.884.amzn2.x86_64"

NOT_READY_MESSAGE = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
    "message:Network plugin returns error: cni plugin not initialized"
)


def kube_reserved_cpu_millis(vcpus_millis: int) -> int:
    """EKS AMI kube-reserved CPU: 6 % of the first core, 1 % of the second, 0.5 % of the next two,
    0.25 % of any above four."""
    cores = vcpus_millis / 1000
    reserved = 0.0
    for width, share in ((1.0, 0.06), (1.0, 0.01), (2.0, 0.005), (float("inf"), 0.0025)):
        take = min(cores, width)
        reserved += take * share
        cores -= take
        if cores <= 0:
            break
    return round(reserved * 1000)


def kube_reserved_memory(max_pods: int) -> int:
    """EKS AMI kube-reserved memory: 255 MiB + 11 MiB per pod the node may run."""
    return (255 + 11 * max_pods) * 2**20


@dataclass(frozen=True, slots=True)
class Shape:
    """What one pool's nodes offer."""

    cpu_millis: int
    memory_bytes: int
    gpus: int
    gpu_resource: str
    max_pods: int

    @classmethod
    def of(cls, pool: Pool) -> Shape:
        return cls(cpu_millis(pool.cpu), to_int(pool.memory), pool.gpus, pool.gpu_resource, pool.max_pods)

    def capacity(self) -> dict[str, str]:
        out = {
            "cpu": format_cpu(self.cpu_millis),
            "ephemeral-storage": f"{EPHEMERAL_STORAGE_KI}Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": f"{self.memory_bytes // 1024}Ki",
            "pods": str(self.max_pods),
        }
        if self.gpus:
            out[self.gpu_resource] = str(self.gpus)
        return dict(sorted(out.items()))

    def allocatable(self) -> dict[str, str]:
        cpu = self.cpu_millis - kube_reserved_cpu_millis(self.cpu_millis)
        memory = self.memory_bytes - kube_reserved_memory(self.max_pods) - EVICTION_HARD_MEMORY
        out = self.capacity()
        out["cpu"] = format_cpu(cpu)
        out["memory"] = f"{max(memory, 0) // 1024}Ki"
        out["ephemeral-storage"] = str(EPHEMERAL_STORAGE_KI * 1024 * 9 // 10)
        return out


def node_labels(pool: Pool, region: str, node_name: str) -> dict[str, str]:
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": pool.instance_type,
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": region,
        "failure-domain.beta.kubernetes.io/zone": pool.zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": pool.instance_type,
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": pool.zone,
        **pool.capacity_node_labels(),
        POOL_LABEL: pool.name,
    }
    labels.update(pool.labels)
    return dict(sorted(labels.items()))


def _conditions(
    ready: bool, since: float, heartbeat: float, registered: float | None = None
) -> list[dict[str, Any]]:
    """The kubelet's conditions: Ready changed at `since`; the pressure conditions were first set
    when the node registered (`registered`, default `since`)."""

    def cond(kind: str, status: str, reason: str, message: str, changed: float) -> dict[str, Any]:
        return {
            "type": kind,
            "status": status,
            "lastHeartbeatTime": rfc3339(heartbeat),
            "lastTransitionTime": rfc3339(changed),
            "reason": reason,
            "message": message,
        }

    first = since if registered is None else registered
    return [
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            first,
        ),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", first),
        cond(
            "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available", first
        ),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status", since)
        if ready
        else cond("Ready", "False", "KubeletNotReady", NOT_READY_MESSAGE, since),
    ]


def ready_conditions(since: float, heartbeat: float) -> list[dict[str, Any]]:
    return _conditions(True, since, heartbeat)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Everything that identifies one instance's Node."""

    name: str
    instance_id: str
    ip: str
    pool: Pool
    region: str
    kubelet_version: str
    launched: float
    metadata_url: str | None = None
    cloud: str = "aws"


def provider_id(spec: NodeSpec) -> str:
    """`spec.providerID` as each cloud's node registers it."""
    if spec.cloud == "gcp":
        return f"gce://{GCP_PROJECT}/{spec.pool.zone}/{spec.name}"
    if spec.cloud == "azure":
        return (
            f"azure:///subscriptions/{AZURE_SUBSCRIPTION}/resourceGroups/{AZURE_RESOURCE_GROUP}/providers/"
            f"Microsoft.Compute/virtualMachineScaleSets/{spec.pool.name}/virtualMachines/{spec.instance_id}"
        )
    return f"aws:///{spec.pool.zone}/{spec.instance_id}"


def build_node(
    spec: NodeSpec, *, ready: bool, since: float, heartbeat: float, registered: float | None = None
) -> dict[str, Any]:
    """The Node object (registered NotReady with the not-ready taint, or already Ready)."""
    pool = spec.pool
    shape = Shape.of(pool)
    annotations = {
        "alpha.kubernetes.io/provided-node-ip": spec.ip,
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        INSTANCE_ID_ANNOTATION: spec.instance_id,
        LAUNCH_TIME_ANNOTATION: rfc3339(spec.launched),
    }
    if spec.metadata_url:
        annotations[METADATA_URL_ANNOTATION] = f"{spec.metadata_url.rstrip('/')}/{spec.name}"
    taints: list[dict[str, Any]] = [dict(t) for t in pool.taints]
    if not ready:
        taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
    seed = spec.instance_id.removeprefix("i-").ljust(32, "0")
    machine_id = (seed * 2)[:32]
    system_uuid = (
        f"ec2{machine_id[3:8]}-{machine_id[8:12]}-{machine_id[12:16]}-{machine_id[16:20]}-{machine_id[20:32]}"
    )
    short_host = spec.name.split(".", 1)[0]
    node: dict[str, Any] = {
        "metadata": {
            "name": spec.name,
            "labels": node_labels(pool, spec.region, spec.name),
            "annotations": annotations,
        },
        "spec": {"providerID": provider_id(spec)},
        "status": {
            "capacity": shape.capacity(),
            "allocatable": shape.allocatable(),
            "conditions": _conditions(ready, since, heartbeat, registered),
            "addresses": [
                {"type": "InternalIP", "address": spec.ip},
                {"type": "InternalDNS", "address": spec.name},
                {"type": "Hostname", "address": spec.name if "." in spec.name else short_host},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": machine_id,
                "systemUUID": system_uuid,
                "bootID": _dashed(machine_id[::-1]),
                "kernelVersion": KERNEL_VERSION,
                "osImage": OS_IMAGE,
                "containerRuntimeVersion": CONTAINERD_VERSION,
                "kubeletVersion": spec.kubelet_version,
                "kubeProxyVersion": spec.kubelet_version,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [],
        },
    }
    if taints:
        node["spec"]["taints"] = taints
    return node


def _dashed(hex32: str) -> str:
    return f"{hex32[:8]}-{hex32[8:12]}-{hex32[12:16]}-{hex32[16:20]}-{hex32[20:32]}"


def template_node(pool: Pool, region: str, kubelet_version: str) -> dict[str, Any]:
    """A Ready node of the pool as the autoscaler imagines it before launching one."""
    spec = NodeSpec(
        name=f"template-node-for-{pool.name}",
        instance_id="i-00000000000000000",
        ip="0.0.0.0",
        pool=pool,
        region=region,
        kubelet_version=kubelet_version,
        launched=0.0,
    )
    return build_node(spec, ready=True, since=0.0, heartbeat=0.0)
