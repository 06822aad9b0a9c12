"""The usage model: how much CPU and memory each running container uses, over emulated time.

Usage is a share of each container's requests (else its limits, else a small reference for
BestEffort containers) shaped by the scenario's `usage` profiles:

- steady: the profile's mean share;
- diurnal: mean x (1 - amplitude x cos(2 pi t / period)): lowest at t = 0 (mod period, midnight UTC
  for a one-day period), highest half a period later; memory follows with half the amplitude;
- bursty: 60-second windows, one in ten (chosen by a seeded hash) a burst; the levels keep the
  mean: (1 - amplitude) outside bursts, 1 + amplitude x 9 in them; memory stays steady.

Every value also carries a small deterministic per-minute jitter (unless the profile sets
`jitter: false`, for exactly known figures), so that a seed and a time always give the same numbers
and nothing is stored. CPU never exceeds the container's limit (throttling),
memory never its limit. Served by the HTTP layer through metrics.k8s.io (`kubectl top`).

GPUs: a container that asks for whole GPUs (`nvidia.com/gpu` and the other vendors' resources) holds
that many devices of its node, numbered in the order the pods were created; each device's engine
activity (a ratio 0..1, as dcgm-exporter's `DCGM_FI_PROF_GR_ENGINE_ACTIVE`) is the profile's `gpu`
share shaped like CPU (same pattern and jitter), capped at 1; `gpu: 0` is an idle GPU, exactly 0.
Served as dcgm-exporter's text format (`emulator/dcgm.py`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from shipshape.analyzers.gpu.objects import WHOLE_GPU_RESOURCES, gpu_model
from shipshape.emulator.resources import NODES
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import UsageProfile
from shipshape.emulator.store import Obj
from shipshape.kube.quantity import cpu_millis, to_int

BEST_EFFORT_CPU_MILLIS = 100  # reference "request" of a container that requests nothing
BEST_EFFORT_MEMORY_BYTES = 128 * 2**20
SYSTEM_CPU_MILLIS = 100  # kubelet, container runtime and OS on every node
SYSTEM_MEMORY_BYTES = 512 * 2**20
BURST_WINDOW_SECONDS = 60.0
BURST_PROBABILITY = 0.1
CPU_JITTER = 0.05
MEMORY_JITTER = 0.02
JITTER_WINDOW_SECONDS = 60.0

ContainerUsage = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU of a node, as dcgm-exporter labels it, with the container that holds it (if any)."""

    node: str
    index: int
    uuid: str
    model: str
    activity: float  # engine activity, ratio 0..1
    namespace: str = ""
    pod: str = ""
    container: str = ""


@dataclass(frozen=True, slots=True)
class Reference:
    """What a container's usage is a share of, and the ceilings it cannot pass."""

    cpu_millis: int
    memory_bytes: int
    cpu_limit: int | None
    memory_limit: int | None

    @classmethod
    def of(cls, container: Obj) -> Reference:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        cpu_limit = cpu_millis(limits["cpu"]) if "cpu" in limits else None
        memory_limit = to_int(limits["memory"]) if "memory" in limits else None
        cpu = cpu_millis(requests["cpu"]) if "cpu" in requests else cpu_limit
        memory = to_int(requests["memory"]) if "memory" in requests else memory_limit
        return cls(
            cpu if cpu else BEST_EFFORT_CPU_MILLIS,
            memory if memory else BEST_EFFORT_MEMORY_BYTES,
            cpu_limit,
            memory_limit,
        )


def unit_hash(*parts: object) -> float:
    """A deterministic number in [0, 1) for the given parts."""
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def levels(profile: UsageProfile, seed: int, key: str, at: float) -> tuple[float, float]:
    """Multipliers of the profile's mean CPU and memory shares at time `at`, for one container."""
    cpu = memory = 1.0
    if profile.pattern == "diurnal":
        wave = math.cos(2 * math.pi * at / profile.period)
        cpu = 1 - profile.amplitude * wave
        memory = 1 - profile.amplitude / 2 * wave
    elif profile.pattern == "bursty":
        window = math.floor(at / BURST_WINDOW_SECONDS)
        if unit_hash(seed, key, "burst", window) < BURST_PROBABILITY:
            cpu = 1 + profile.amplitude * (1 - BURST_PROBABILITY) / BURST_PROBABILITY
        else:
            cpu = 1 - profile.amplitude
    if not profile.jitter:
        return cpu, memory
    minute = math.floor(at / JITTER_WINDOW_SECONDS)
    cpu *= 1 + CPU_JITTER * (2 * unit_hash(seed, key, "cpu", minute) - 1)
    memory *= 1 + MEMORY_JITTER * (2 * unit_hash(seed, key, "memory", minute) - 1)
    return cpu, memory


def container_usage(profile: UsageProfile, seed: int, key: str, ref: Reference, at: float) -> tuple[int, int]:
    """(millicores, bytes) one container uses at time `at`."""
    cpu_level, memory_level = levels(profile, seed, key, at)
    cpu = round(ref.cpu_millis * profile.cpu * cpu_level)
    memory = round(ref.memory_bytes * profile.memory * memory_level)
    if ref.cpu_limit is not None:
        cpu = min(cpu, ref.cpu_limit)
    if ref.memory_limit is not None:
        memory = min(memory, ref.memory_limit)
    return max(0, cpu), max(0, memory)


def gpu_activity(profile: UsageProfile, seed: int, key: str, at: float) -> float:
    """Engine activity (0..1) of one container's GPUs at time `at`: shaped like its CPU."""
    cpu_level, _ = levels(profile, seed, key, at)
    return min(max(profile.gpu * cpu_level, 0.0), 1.0)


def container_gpus(container: Obj) -> int:
    """Whole GPUs a container asks for (limits, else requests, of the GPU resources)."""
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        asked = resources.get(section) or {}
        total = 0
        for name in WHOLE_GPU_RESOURCES:
            if name in asked:
                try:
                    total += int(to_int(asked[name]))
                except (TypeError, ValueError):
                    continue
        if total:
            return total
    return 0


def device_uuid(seed: int, node: str, index: int) -> str:
    """A stable `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` for a node's device."""
    digest = hashlib.blake2b(f"{seed}|{node}|{index}".encode(), digest_size=16).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:]}"


def profile_for(pod: Obj, profiles: Sequence[UsageProfile]) -> UsageProfile:
    """The first profile whose namespace and label selector match the pod, else the default one."""
    md = pod.get("metadata") or {}
    labels = md.get("labels") or {}
    for profile in profiles:
        if profile.namespace is not None and profile.namespace != md.get("namespace", "default"):
            continue
        if all(labels.get(k) == v for k, v in profile.selector.items()):
            return profile
    return DEFAULT_PROFILE


DEFAULT_PROFILE = UsageProfile()


def running_containers(pod: Obj) -> list[str]:
    """Names of the pod's containers whose status says they run (metrics exist only for those)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return []
    return [
        s["name"]
        for s in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        if "running" in (s.get("state") or {})
    ]


class UsageModel:
    """Per-container and per-node usage for metrics.k8s.io, computed on demand from the clock."""

    name = "usage"

    def __init__(self, profiles: Sequence[UsageProfile] | None = None, seed: int | None = None) -> None:
        self._profiles = list(profiles) if profiles is not None else None
        self._seed = seed
        self.cluster: Cluster | None = None

    @property
    def c(self) -> Cluster:
        assert self.cluster is not None, "usage used before start()"
        return self.cluster

    @property
    def profiles(self) -> list[UsageProfile]:
        return self._profiles or []

    @property
    def seed(self) -> int:
        return self._seed if self._seed is not None else 1

    def start(self, cluster: Cluster) -> None:
        self.cluster = cluster
        if self._profiles is None:
            self._profiles = list(cluster.scenario.usage) if cluster.scenario is not None else []
        if self._seed is None:
            self._seed = cluster.scenario.seed if cluster.scenario is not None else 1
        cluster.services["usage"] = self
        from shipshape.emulator import dcgm  # it builds on this module

        cluster.services.setdefault("http_routes", []).extend(dcgm.routes(cluster, self))

    def pod_usage(self, pod: Obj, at: float | None = None) -> list[ContainerUsage]:
        """(container name, millicores, bytes) for each running container of the pod."""
        when = self.c.now() if at is None else at
        running = set(running_containers(pod))
        if not running:
            return []
        spec = pod.get("spec") or {}
        profile = profile_for(pod, self.profiles)
        uid = (pod.get("metadata") or {}).get("uid", "")
        out: list[ContainerUsage] = []
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            name = container.get("name", "")
            if name not in running:
                continue
            cpu, memory = container_usage(profile, self.seed, f"{uid}/{name}", Reference.of(container), when)
            out.append((name, cpu, memory))
        return out

    def node_gpus(self, node_name: str, at: float | None = None) -> list[GpuDevice]:
        """Every GPU of a node with its activity at `at`: devices held by running containers first
        (pods in creation order), then the free ones (activity 0). [] for a node without GPUs."""
        node = self.c.store.get(NODES, "", node_name)
        if node is None:
            return []
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        count = sum(int(to_int(allocatable[r])) for r in WHOLE_GPU_RESOURCES if r in allocatable)
        if count <= 0:
            return []
        when = self.c.now() if at is None else at
        model = gpu_model((node.get("metadata") or {}).get("labels") or {}) or "NVIDIA GPU"

        def created(pod: Obj) -> tuple[str, str, str]:
            md = pod.get("metadata") or {}
            return (
                str(md.get("creationTimestamp", "")),
                str(md.get("namespace", "")),
                str(md.get("name", "")),
            )

        devices: list[GpuDevice] = []
        for pod in sorted(self.c.store.pods_on_node(node_name), key=created):
            running = set(running_containers(pod))
            if not running:
                continue
            md = pod.get("metadata") or {}
            profile = profile_for(pod, self.profiles)
            for container in (pod.get("spec") or {}).get("containers") or []:
                name = str(container.get("name", ""))
                gpus = container_gpus(container) if name in running else 0
                if not gpus:
                    continue
                activity = gpu_activity(profile, self.seed, f"{md.get('uid', '')}/{name}/gpu", when)
                for _ in range(gpus):
                    index = len(devices)
                    if index >= count:
                        break
                    devices.append(
                        GpuDevice(
                            node_name,
                            index,
                            device_uuid(self.seed, node_name, index),
                            model,
                            activity,
                            str(md.get("namespace", "default")),
                            str(md.get("name", "")),
                            name,
                        )
                    )
        for index in range(len(devices), count):
            devices.append(GpuDevice(node_name, index, device_uuid(self.seed, node_name, index), model, 0.0))
        return devices

    def node_usage(self, node_name: str, at: float | None = None) -> tuple[int, int]:
        """(millicores, bytes) used on a node: its running pods plus the system's own share.

        (0, 0) for a node that does not exist."""
        if self.c.store.get(NODES, "", node_name) is None:
            return 0, 0
        cpu, memory = SYSTEM_CPU_MILLIS, SYSTEM_MEMORY_BYTES
        for pod in self.c.store.pods_on_node(node_name):
            for _, pod_cpu, pod_memory in self.pod_usage(pod, at):
                cpu += pod_cpu
                memory += pod_memory
        return cpu, memory
