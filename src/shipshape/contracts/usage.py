"""What an agent pushes about usage: one report per closed time bucket (`shipshape.dev/usage/v1`).

The agent reads metrics.k8s.io (PodMetrics and NodeMetrics, as metrics-server serves them) every
30 s and folds the samples of each bucket (5 minutes by default) into one line per container and
per node: how many samples, the mean and the highest CPU rate (cores), the highest memory working
set (bytes). A container or node without a sample in the bucket is absent (a gap is a gap, never a
zero). metrics.k8s.io serves rates and gauges, not counters: CPU is the rate over the sample's own
window, so a container restart shows as nothing more than a missing sample.

Each pod names the workload that owns it (`pod_workload`: a ReplicaSet's pod belongs to its
Deployment), so that the receiver keeps one series per workload container whatever the pods'
churn. A report is identified by its bucket: the agent sends it with the idempotency key
`usage-<bucket start, unix seconds>`, and the receiver applies a bucket at most once.

GPUs (optional; an agent given the cluster's Prometheus adds them): one line per pod holding GPUs,
from dcgm-exporter's series over the bucket: how many devices, their model, the mean and highest
engine activity (a ratio 0..1; `DCGM_FI_DEV_GPU_UTIL`'s percent divided by 100 where the device has
no engine activity) and how many samples the busiest device had. A report without GPU lines leaves
`gpus` out, so it reads as before.

Pure: no I/O. The agent builds these, the backend validates them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shipshape.kube import objects

UsageSchema = Literal["shipshape.dev/usage/v1"]
USAGE_SCHEMA: UsageSchema = "shipshape.dev/usage/v1"
KEY_PREFIX = "usage-"

# Bounds that keep one report small enough to validate and store in one go.
MIN_BUCKET_SECONDS = 10
MAX_BUCKET_SECONDS = 3600
MAX_PODS_PER_REPORT = 300_000
MAX_CONTAINERS_PER_POD = 100
MAX_NODES_PER_REPORT = 50_000
MAX_CORES = 100_000.0
MAX_BYTES = 2.0**50  # 1 PiB
MAX_GPU_PODS_PER_REPORT = 100_000
MAX_GPUS_PER_POD = 64
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}$")

Cores = Annotated[float, Field(ge=0.0, le=MAX_CORES, allow_inf_nan=False)]
Bytes = Annotated[float, Field(ge=0.0, le=MAX_BYTES, allow_inf_nan=False)]
Name = Annotated[str, Field(pattern=_NAME.pattern)]
Ratio = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


def pod_workload(metadata: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the workload that owns a pod, from its metadata, by Kubernetes' rule
    (`kube.objects.workload_of`: the owner reference marked `controller: true`, a ReplicaSet named
    `<deployment>-<pod-template-hash>` standing for its Deployment); a pod without a controller is
    its own workload (`Pod`, its name)."""
    owner = objects.workload_of({"metadata": metadata})
    return ("Pod", str(metadata.get("name", ""))) if owner is None else (owner.kind, owner.name)


class Workload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(pattern=_KIND.pattern)
    name: Name


class Sampled(BaseModel):
    """The samples of one container or node in one bucket."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    samples: int = Field(ge=1, le=MAX_BUCKET_SECONDS)
    cpu_mean: Cores  # cores: the mean of the sampled rates
    cpu_max: Cores  # cores: the highest sampled rate
    memory_max: Bytes  # bytes: the highest working set

    @model_validator(mode="after")
    def _mean_within_max(self) -> Sampled:
        # The mean of the samples cannot pass their highest (a float's last bit aside).
        if self.cpu_mean > self.cpu_max * (1 + 1e-9) + 1e-12:
            raise ValueError(f"cpu_mean {self.cpu_mean} is above cpu_max {self.cpu_max}")
        return self


class ContainerUsage(Sampled):
    name: Name


class PodUsage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: Name
    name: Name
    workload: Workload
    containers: list[ContainerUsage] = Field(min_length=1, max_length=MAX_CONTAINERS_PER_POD)

    @field_validator("containers")
    @classmethod
    def _unique_containers(cls, containers: list[ContainerUsage]) -> list[ContainerUsage]:
        names = [c.name for c in containers]
        if len(set(names)) != len(names):
            raise ValueError("a container appears twice in one pod")
        return containers


class NodeUsage(Sampled):
    name: Name


class GpuUsage(BaseModel):
    """One pod's GPUs in one bucket, from dcgm-exporter's series (the cluster's Prometheus)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: Name
    name: Name
    workload: Workload
    devices: int = Field(ge=1, le=MAX_GPUS_PER_POD)
    model: str = Field(default="", max_length=128)
    samples: int = Field(ge=1, le=MAX_BUCKET_SECONDS)
    activity_mean: Ratio  # the mean over the bucket, averaged over the pod's devices
    activity_max: Ratio  # the highest sample of any of its devices

    @model_validator(mode="after")
    def _mean_within_max(self) -> GpuUsage:
        if self.activity_mean > self.activity_max + 1e-9:
            raise ValueError(f"activity_mean {self.activity_mean} is above activity_max {self.activity_max}")
        return self


class UsageReport(BaseModel):
    """The samples of one closed bucket [bucket_start, bucket_start + bucket_seconds)."""

    model_config = ConfigDict(extra="forbid")

    schema_: UsageSchema = Field(default=USAGE_SCHEMA, alias="schema")
    bucket_start: datetime
    bucket_seconds: int = Field(ge=MIN_BUCKET_SECONDS, le=MAX_BUCKET_SECONDS)
    taken_at: datetime
    agent_version: str = Field(default="", max_length=64)
    pods: list[PodUsage] = Field(default_factory=list, max_length=MAX_PODS_PER_REPORT)
    nodes: list[NodeUsage] = Field(default_factory=list, max_length=MAX_NODES_PER_REPORT)
    gpus: list[GpuUsage] = Field(default_factory=list, max_length=MAX_GPU_PODS_PER_REPORT)

    @field_validator("bucket_start", "taken_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("a time must carry its offset (RFC 3339)")
        return value.astimezone(UTC)

    @model_validator(mode="after")
    def _consistent(self) -> UsageReport:
        start = self.bucket_start.timestamp()
        if not math.isclose(start % self.bucket_seconds, 0.0, abs_tol=1e-6):
            raise ValueError(f"bucket_start must be a multiple of bucket_seconds ({self.bucket_seconds} s)")
        sampled: list[Sampled] = [c for p in self.pods for c in p.containers]
        sampled.extend(self.nodes)
        most = max((s.samples for s in sampled), default=0)
        most = max([most, *(g.samples for g in self.gpus)])
        if most > self.bucket_seconds:
            raise ValueError(f"{most} samples in a bucket of {self.bucket_seconds} s")
        pods = {(p.namespace, p.name) for p in self.pods}
        if len(pods) != len(self.pods):
            raise ValueError("a pod appears twice in one report")
        if len({n.name for n in self.nodes}) != len(self.nodes):
            raise ValueError("a node appears twice in one report")
        if len({(g.namespace, g.name) for g in self.gpus}) != len(self.gpus):
            raise ValueError("a pod's GPUs appear twice in one report")
        return self

    @property
    def start(self) -> int:
        """The bucket's start in unix seconds."""
        return round(self.bucket_start.timestamp())

    def idempotency_key(self) -> str:
        return bucket_key(self.start)


def bucket_key(start: int) -> str:
    """The idempotency key of the report of the bucket starting at `start` (unix seconds)."""
    return f"{KEY_PREFIX}{start}"


def parse_usage(data: Any) -> UsageReport:
    """A report from its JSON form; pydantic's ValidationError (or ValueError for another schema)
    says what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError("a usage report is a JSON object")
    if data.get("schema") != USAGE_SCHEMA:
        raise ValueError(f"unknown schema {data.get('schema')!r} (known: {USAGE_SCHEMA})")
    return UsageReport.model_validate(data)


def dump(report: UsageReport) -> bytes:
    """The report as JSON bytes, in its wire form (`schema`, not `schema_`)."""
    return orjson.dumps(
        report.model_dump(mode="json", by_alias=True, exclude=None if report.gpus else {"gpus"})
    )
