"""Scenario files: the emulated cluster described in YAML, validated with clear errors.

Each section is owned by the model that uses it (cloud, kubelet, usage, ...); this module only
composes them and loads the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from shipshape.kube import capacity as kube_capacity
from shipshape.kube.duration import parse_duration
from shipshape.kube.quantity import QuantityError, parse_quantity

Seconds = Annotated[float, BeforeValidator(parse_duration)]


def _quantity(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a quantity such as 2, 500m or 8Gi, got {value!r}")
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
    return value


Quantity = Annotated[str, BeforeValidator(_quantity)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Pool(Strict):
    """A node pool: one instance type in one zone with one capacity type."""

    name: str
    instance_type: str = Field(alias="instanceType")
    zone: str
    capacity_type: Literal["spot", "on-demand"] = Field(alias="capacityType")
    cpu: Quantity
    memory: Quantity
    gpus: int = Field(default=0, ge=0)
    gpu_resource: str = Field(default="nvidia.com/gpu", alias="gpuResource")
    max_pods: int = Field(default=110, ge=1, alias="maxPods")
    price_per_hour: float | None = Field(default=None, ge=0, alias="pricePerHour")
    min_size: int = Field(default=0, ge=0, alias="minSize")
    max_size: int = Field(default=10, ge=0, alias="maxSize")
    initial_size: int = Field(default=0, ge=0, alias="initialSize")
    # Spot interruptions per node per hour; None = derive from the spot advisor band.
    interruption_rate: float | None = Field(default=None, ge=0, alias="interruptionRate")
    labels: dict[str, str] = Field(default_factory=dict)
    # How the pool's nodes say their capacity type (`kube.capacity.NODE_LABELS`): capacity
    # (node.kubernetes.io/capacity, the default), karpenter, eks, gke, gke-preemptible or aks.
    # None: the scenario's `capacityLabels`.
    capacity_labels: str | None = Field(default=None, alias="capacityLabels")
    taints: list[dict[str, str]] = Field(default_factory=list)
    bandwidth_mbps: float | None = Field(default=None, gt=0, alias="bandwidthMBps")

    @model_validator(mode="after")
    def _capacity_labels(self) -> Pool:
        if self.capacity_labels is not None and self.capacity_labels not in kube_capacity.NODE_LABELS:
            known = ", ".join(kube_capacity.NODE_LABELS)
            raise ValueError(
                f"pool {self.name}: capacityLabels {self.capacity_labels!r} is not one of {known}"
            )
        return self

    def capacity_node_labels(self) -> dict[str, str]:
        """The labels that say this pool's capacity type on its nodes, and under a cloud's or
        provisioner's convention the node group (named as the pool) they belong to."""
        convention = self.capacity_labels or "capacity"
        labels = kube_capacity.node_labels(convention, self.capacity_type)
        group = kube_capacity.NODE_GROUP_LABEL.get(convention)
        if group is not None:
            labels[group] = self.name
        return labels

    @model_validator(mode="after")
    def _sizes(self) -> Pool:
        if self.min_size > self.max_size:
            raise ValueError(f"pool {self.name}: minSize {self.min_size} is above maxSize {self.max_size}")
        if not self.min_size <= self.initial_size <= self.max_size:
            raise ValueError(
                f"pool {self.name}: initialSize {self.initial_size} must be within "
                f"[minSize {self.min_size}, maxSize {self.max_size}]"
            )
        return self


class NodeBoot(Strict):
    """Seconds from instance launch to each boot milestone (EKS-like defaults, ~30 s to Ready)."""

    vm_initialized: Seconds = Field(default=7.0, alias="vmInitialized")
    cloud_init_start: Seconds = Field(default=9.0, alias="cloudInitStart")
    network_ready: Seconds = Field(default=11.0, alias="networkReady")
    containerd_start: Seconds = Field(default=14.0, alias="containerdStart")
    kubelet_start: Seconds = Field(default=16.0, alias="kubeletStart")
    registered: Seconds = Field(default=18.0)
    cni_ready: Seconds = Field(default=27.0, alias="cniReady")
    ready: Seconds = Field(default=30.0)
    jitter: float = Field(default=0.1, ge=0, le=1, description="relative random spread per milestone")
    log_dir: str | None = Field(
        default=None, alias="logDir", description="write each node's boot logs under <logDir>/<node>/var/log"
    )


class Kubelet(Strict):
    serialize_image_pulls: bool = Field(default=True, alias="serializeImagePulls")
    max_parallel_image_pulls: int | None = Field(default=None, ge=1, alias="maxParallelImagePulls")
    bandwidth_mbps: float = Field(default=100.0, gt=0, alias="bandwidthMBps")
    sandbox_seconds: Seconds = Field(default=1.0, alias="sandboxSeconds")
    container_start_seconds: Seconds = Field(default=0.5, alias="containerStartSeconds")
    heartbeat_seconds: Seconds = Field(default=10.0, gt=0, alias="heartbeatSeconds")
    node_status_report_seconds: Seconds = Field(
        default=60.0,
        gt=0,
        alias="nodeStatusReportSeconds",
        description="node conditions refresh when unchanged",
    )
    default_image_size: Quantity = Field(default="50Mi", alias="defaultImageSize")
    images: dict[str, Quantity] = Field(default_factory=dict, description="image -> compressed size")
    preloaded_images: list[str] = Field(default_factory=list, alias="preloadedImages")
    missing_images: list[str] = Field(
        default_factory=list, alias="missingImages", description="images the registry lacks: ErrImagePull"
    )


class Autoscaler(Strict):
    """cluster-autoscaler's settings (its flags' defaults); see docs/emulator-cloud.md."""

    enabled: bool = True
    scale_up_after: Seconds = Field(default=10.0, ge=0, alias="scaleUpAfter")
    scale_down_unneeded: Seconds = Field(default=600.0, ge=0, alias="scaleDownUnneeded")
    scale_down_empty_only: bool = Field(
        default=False,
        alias="scaleDownEmptyOnly",
        description="remove only nodes running nothing but DaemonSet/mirror pods (no drains)",
    )
    scale_down_utilization_threshold: float = Field(
        default=0.5, gt=0, le=1, alias="scaleDownUtilizationThreshold"
    )
    scale_down_gpu_utilization_threshold: float = Field(
        default=0.5, gt=0, le=1, alias="scaleDownGpuUtilizationThreshold"
    )
    scale_down_delay_after_add: Seconds = Field(default=600.0, ge=0, alias="scaleDownDelayAfterAdd")
    scale_down_delay_after_failure: Seconds = Field(default=180.0, ge=0, alias="scaleDownDelayAfterFailure")
    scale_down_non_empty_candidates_count: int = Field(
        default=30, ge=1, alias="scaleDownNonEmptyCandidatesCount"
    )
    max_scale_down_parallelism: int = Field(default=10, ge=1, alias="maxScaleDownParallelism")
    max_drain_parallelism: int = Field(default=1, ge=1, alias="maxDrainParallelism")
    expendable_pods_priority_cutoff: int = Field(default=-10, alias="expendablePodsPriorityCutoff")

    @model_validator(mode="after")
    def _parallelism(self) -> Autoscaler:
        if self.max_drain_parallelism > self.max_scale_down_parallelism:
            raise ValueError(
                f"maxDrainParallelism {self.max_drain_parallelism} is above maxScaleDownParallelism "
                f"{self.max_scale_down_parallelism}"
            )
        return self


class SchedulerSettings(Strict):
    """kube-scheduler's profile: NodeResourcesFit's scoring strategy (bin packing with MostAllocated),
    and its client's rate limit (`clientConnection.qps`/`burst`; qps 0 lifts it)."""

    scoring: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    kube_api_qps: float = Field(default=50.0, ge=0, alias="kubeApiQps")
    kube_api_burst: int = Field(default=100, ge=1, alias="kubeApiBurst")


class ControllerManager(Strict):
    """kube-controller-manager's client rate limit (`--kube-api-qps`, `--kube-api-burst`), applied to
    each controller's own client as upstream does; qps 0 lifts it."""

    kube_api_qps: float = Field(default=20.0, ge=0, alias="kubeApiQps")
    kube_api_burst: int = Field(default=30, ge=1, alias="kubeApiBurst")


class Interruptions(Strict):
    enabled: bool = True
    notice: Seconds = Field(default=120.0)
    handler: bool = Field(default=False, description="cordon and drain a node on its notice (like NTH)")
    # The cloud marks a noticed node with `emulator.shipshape.dev/spot-interruption` (as an interruption
    # handler would). Off: only the instance metadata (and the AWS queue) tell, as on a cluster whose
    # only notice source is the node-side poller.
    node_taint: bool = Field(default=True, alias="nodeTaint")
    region: str = "us-east-1"
    rate_multiplier: float = Field(default=1.0, ge=0, alias="rateMultiplier")


class UsageProfile(Strict):
    """CPU/memory usage of the pods a selector picks, as a share of their requests, and the GPU
    engine activity of their containers that request GPUs (0: idle GPUs)."""

    namespace: str | None = None
    selector: dict[str, str] = Field(default_factory=dict)
    pattern: Literal["steady", "diurnal", "bursty"] = "steady"
    cpu: float = Field(default=0.5, ge=0, description="mean usage as a fraction of the cpu request")
    memory: float = Field(default=0.6, ge=0, description="mean usage as a fraction of the memory request")
    gpu: float = Field(
        default=0.5, ge=0, le=1, description="mean GPU engine activity (ratio 0..1) of GPU containers"
    )
    amplitude: float = Field(default=0.3, ge=0, le=1)
    period: Seconds = Field(default=86400.0)
    jitter: bool = Field(
        default=True, description="a small seeded per-minute noise; false for exactly known figures"
    )


class TimelineEvent(Strict):
    at: Seconds
    action: Literal["interrupt", "shortage", "rebalance"]
    node: str | None = None
    pool: str | None = None
    zone: str | None = None
    notice: Seconds = Field(default=120.0)
    duration: Seconds | None = Field(default=None, alias="for")

    @model_validator(mode="after")
    def _target(self) -> TimelineEvent:
        targets = [t for t in (self.node, self.pool, self.zone) if t]
        if len(targets) != 1:
            raise ValueError(f"timeline event at {self.at}s: give exactly one of node, pool or zone")
        if self.action == "shortage" and (self.pool is None or self.duration is None):
            raise ValueError("a shortage needs a pool and a duration ('for')")
        return self


# Spot notice lead per cloud (the cloud's notice when the scenario gives none): AWS two minutes,
# GCP preemption and Azure `Preempt` about 30 s.
NOTICE_BY_CLOUD = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}


class Scenario(Strict):
    name: str = "cluster"
    description: str = ""
    # The cloud whose instance metadata the nodes serve (formats, paths, headers, notice lead).
    cloud: Literal["aws", "gcp", "azure"] = "aws"
    kubernetes_version: str = Field(default="v1.32.0", alias="kubernetesVersion")
    region: str = "us-east-1"
    seed: int = 1
    # How nodes say their capacity type, for pools that do not say (`Pool.capacity_labels`).
    capacity_labels: str = Field(default="capacity", alias="capacityLabels")
    pools: list[Pool] = Field(min_length=1)
    node_boot: NodeBoot = Field(default_factory=NodeBoot, alias="nodeBoot")
    kubelet: Kubelet = Field(default_factory=Kubelet)
    autoscaler: Autoscaler = Field(default_factory=Autoscaler)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    controller_manager: ControllerManager = Field(
        default_factory=ControllerManager, alias="controllerManager"
    )
    interruptions: Interruptions = Field(default_factory=Interruptions)
    usage: list[UsageProfile] = Field(default_factory=list)
    timeline: list[TimelineEvent] = Field(default_factory=list)
    namespaces: list[str] = Field(default_factory=list)
    objects: list[dict[str, Any]] = Field(default_factory=list, description="manifests applied at start")

    @model_validator(mode="after")
    def _pool_capacity_labels(self) -> Scenario:
        if self.capacity_labels not in kube_capacity.NODE_LABELS:
            known = ", ".join(kube_capacity.NODE_LABELS)
            raise ValueError(f"capacityLabels {self.capacity_labels!r} is not one of {known}")
        for pool in self.pools:
            if pool.capacity_labels is None:
                pool.capacity_labels = self.capacity_labels
        return self

    @model_validator(mode="after")
    def _cloud_notice(self) -> Scenario:
        """Notices the scenario does not time itself get the cloud's lead."""
        lead = NOTICE_BY_CLOUD[self.cloud]
        if "notice" not in self.interruptions.model_fields_set and self.interruptions.notice != lead:
            self.interruptions.notice = lead
        for event in self.timeline:
            if "notice" not in event.model_fields_set and event.notice != lead:
                event.notice = lead
        return self

    @model_validator(mode="after")
    def _unique_pools(self) -> Scenario:
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool names must be unique, repeated: {', '.join(dupes)}")
        for ev in self.timeline:
            if ev.pool and ev.pool not in names:
                raise ValueError(f"timeline event at {ev.at}s names unknown pool {ev.pool!r}")
        for i, obj in enumerate(self.objects):
            if not isinstance(obj, dict) or "kind" not in obj or "metadata" not in obj:
                raise ValueError(f"objects[{i}] must be a Kubernetes manifest with kind and metadata")
        return self

    @model_validator(mode="after")
    def _priced_pools(self) -> Scenario:
        """Every pool needs a price: pricePerHour, or an instance type the shipped catalog knows."""
        from shipshape.pricing.catalog import default_catalog  # data only, no models

        catalog = default_catalog()
        for pool in self.pools:
            if pool.price_per_hour is not None:
                continue
            itype = pool.instance_type
            missing = catalog.on_demand_price(itype, self.region) is None or (
                pool.capacity_type == "spot" and catalog.spot_advice(itype, self.region) is None
            )
            if missing:
                raise ValueError(
                    f"pool {pool.name}: no {pool.capacity_type} price for instance type {itype!r} in "
                    f"{self.region} in the catalog (prices of {catalog.on_demand_as_of}); set pricePerHour"
                )
        return self


class ScenarioError(ValueError):
    """A scenario file that cannot be used, with a message that says where and why."""


def parse(data: Any, source: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a YAML mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            lines.append(f"  {where}: {err['msg']}")
        raise ScenarioError(f"{source}: invalid scenario\n" + "\n".join(lines)) from None


def load(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read scenario: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{p}: not a YAML text file (not UTF-8 at byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: not valid YAML: {' '.join(str(exc).split())}") from None
    return parse(data, str(p))
