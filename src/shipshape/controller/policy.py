"""What users write, as typed policy.

A workload (Deployment or StatefulSet) opts in with the annotation `spot.shipshape.dev/enabled: "true"`
or through its namespace's label `spot.shipshape.dev/enabled=true`; its placement annotations are
validated here and turned into a `WorkloadPolicy`. Cluster-wide defaults come from `ControllerConfig`
(a config file or ConfigMap, loaded once at the entry point).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shipshape.contracts import annotations as names
from shipshape.contracts.annotations import (
    ENABLED,
    MAX_POOL_SHARE,
    ON_DEMAND_BASE,
    SINGLE_REPLICA,
    SPOT_PERCENTAGE,
)
from shipshape.kube import capacity as kube_capacity
from shipshape.kube import wellknown

# Names re-exported for the loops, which read them through the policy; their one definition is in
# `contracts.annotations` (Shipshape's) and `kube.wellknown` (upstream's).
DECISION = names.DECISION
HEADROOM_LABEL = names.HEADROOM_LABEL
POLICY_ANNOTATIONS = names.POLICY_ANNOTATIONS
DELETION_COST = wellknown.POD_DELETION_COST


class CapacityType(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"


class SingleReplicaMode(StrEnum):
    ON_DEMAND = "on-demand"
    SURGE = "surge"


class Packing(StrEnum):
    """Which pods the webhook steers onto the fullest nodes that fit them (see `packing.py`)."""

    OFF = "off"
    ON_DEMAND = "on-demand"
    ALL = "all"

    def covers(self, capacity: CapacityType) -> bool:
        return self is Packing.ALL or (self is Packing.ON_DEMAND and capacity is CapacityType.ON_DEMAND)


class WorkloadKind(StrEnum):
    DEPLOYMENT = "Deployment"
    STATEFULSET = "StatefulSet"


class TolerationSpec(BaseModel):
    """A toleration added to spot-bound pods (spot nodes are often tainted)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    key: str
    operator: str = Field(default="Equal", pattern="^(Equal|Exists)$")
    value: str | None = None
    effect: str | None = Field(default=None, pattern="^(NoSchedule|PreferNoSchedule|NoExecute)$")

    def to_toleration(self) -> dict[str, Any]:
        body: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.value is not None and self.operator == "Equal":
            body["value"] = self.value
        if self.effect is not None:
            body["effect"] = self.effect
        return body


class SelectorRequirement(BaseModel):
    """One `matchExpressions` entry of a Kubernetes LabelSelector."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_fit_operator(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(BaseModel):
    """A Kubernetes LabelSelector (`matchLabels`, `matchExpressions`), as the API spells it."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[SelectorRequirement, ...] = Field(default=(), alias="matchExpressions")

    def body(self) -> dict[str, Any]:
        """The selector as the API's JSON (empty parts left out; `{}` selects everything)."""
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            out["matchExpressions"] = [
                {"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
                for r in self.match_expressions
            ]
        return out


class CapacityLabelSpec(BaseModel):
    """A capacity-type label convention added to (or replacing, by key) the built-in ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    key: str
    spot: tuple[str, ...]
    on_demand: tuple[str, ...] = ()
    # The cloud labels only its spot nodes: a node without the label is on-demand.
    absent_means_on_demand: bool = False

    @model_validator(mode="after")
    def _usable(self) -> CapacityLabelSpec:
        try:
            self.convention()
        except kube_capacity.ConventionError as exc:
            raise ValueError(str(exc)) from None
        return self

    def convention(self) -> kube_capacity.Convention:
        return kube_capacity.Convention(self.key, self.spot, self.on_demand, self.absent_means_on_demand)


class NodeGroupSpec(BaseModel):
    """A spot pool the cluster has (instance type x zone), known before or after its nodes exist, and
    whether it can grow (an autoscaler or provisioner adds nodes to it), up to `max_size` nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    instance_type: str = Field(min_length=1)
    zone: str = Field(min_length=1)
    can_grow: bool = True
    max_size: int | None = Field(default=None, ge=0)


class ControllerConfig(BaseModel):
    """Cluster defaults and tuning; every field has a safe default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = "shipshape-system"
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    on_demand_base: int = Field(default=1, ge=0)
    spot_percentage: int = Field(default=100, ge=0, le=100)
    max_pool_share: float = Field(default=0.5, gt=0.0, le=1.0)
    single_replica_deployment: SingleReplicaMode = SingleReplicaMode.SURGE
    spot_tolerations: tuple[TolerationSpec, ...] = ()
    # Seconds an in-flight ("assumed") placement counts before the real pod must have appeared.
    assume_ttl_seconds: float = Field(default=30.0, gt=0)
    # Seconds a pool stays "at risk" (no new placements) after an interruption notice in it.
    risk_cooldown_seconds: float = Field(default=1800.0, ge=0)
    # Window over which observed interruptions raise a pool's risk score.
    risk_window_seconds: float = Field(default=7 * 86400.0, gt=0)
    # Lead time between a termination notice and the instance going away (AWS: 120 s).
    notice_lead_seconds: float = Field(default=120.0, gt=0)
    # Seconds a spot-bound pod may stay unschedulable before it is re-decided to on-demand.
    fallback_after_seconds: float = Field(default=120.0, gt=0)
    # First back-off before spot is tried again for a pool in shortage (doubles up to the max).
    fallback_retry_seconds: float = Field(default=300.0, gt=0)
    fallback_retry_max_seconds: float = Field(default=3600.0, gt=0)
    region: str | None = None
    # Pods whose placement prefers the fullest nodes that fit them, so that emptier nodes can be
    # scaled down: all (default; spot pods within their chosen pool), on-demand ones only, or none.
    packing: Packing = Packing.ALL
    # An SQS queue of EventBridge events (spot interruption warnings, rebalance recommendations, state
    # changes, AWS Health scheduled changes) as a notice source, read through the AWS SDK with its
    # default credential chain (IRSA included). The region comes from the URL when it is AWS's.
    notice_queue_url: str | None = None
    # Region for a queue URL that names none (an SQS-compatible endpoint); default: `region`, the SDK's.
    notice_queue_region: str | None = None
    # How long a received message stays hidden from other consumers before it is delivered again.
    notice_queue_visibility_seconds: float = Field(default=30.0, gt=0, le=43200)
    # Recommend only: decisions are computed, logged, counted and posted as Events (pods get a decision
    # annotation marked dryRun), but nothing is patched, evicted, deleted, created or tainted.
    dry_run: bool = False
    # Whether the rebalancer may move pods (evictions, surge restarts); off: it only logs its moves.
    rebalance_evictions: bool = True
    # Kubernetes LabelSelectors narrowing the webhook registration (None: the built-in defaults: every
    # namespace but the controller's and `excluded_namespaces`; every pod but the controller's own).
    webhook_namespace_selector: LabelSelector | None = None
    webhook_object_selector: LabelSelector | None = None
    # Capacity-type label conventions besides (or replacing, by key) the built-in ones
    # (`kube.capacity.DEFAULT_CONVENTIONS`).
    capacity_labels: tuple[CapacityLabelSpec, ...] = ()
    # Spot pools known from configuration, with whether they can grow (see docs/controller.md).
    node_groups: tuple[NodeGroupSpec, ...] = ()

    @field_validator("capacity_labels")
    @classmethod
    def _distinct_keys(cls, value: tuple[CapacityLabelSpec, ...]) -> tuple[CapacityLabelSpec, ...]:
        keys = [spec.key for spec in value]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise ValueError(f"each key may be given once, repeated: {', '.join(repeated)}")
        return value

    def conventions(self) -> kube_capacity.Conventions:
        """The capacity-label conventions in force: the configured ones, then the built-in ones."""
        return kube_capacity.Conventions.with_overrides(spec.convention() for spec in self.capacity_labels)

    # Long polling: how long one ReceiveMessage waits for a message (SQS allows 0 to 20 s).
    notice_queue_wait_seconds: int = Field(default=20, ge=0, le=20)

    @field_validator("notice_queue_url")
    @classmethod
    def _queue_url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^/\s]+/\S+", value):
            raise ValueError(
                f"must be an SQS queue URL such as https://sqs.<region>.amazonaws.com/<account>/<name>, "
                f"got {value!r}"
            )
        return value

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> ControllerConfig:
        """Build from a parsed config file / ConfigMap, with a readable error on bad input."""
        try:
            return cls.model_validate(dict(data or {}))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
            )
            raise ConfigError(f"invalid controller configuration: {problems}") from exc


class ConfigError(ValueError):
    """A controller configuration that cannot be used."""


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    """One invalid annotation value, reported on the workload and in the admission warnings."""

    annotation: str
    value: str
    message: str

    def __str__(self) -> str:
        return f"{self.annotation}={self.value!r}: {self.message}"


@dataclass(frozen=True, slots=True)
class WorkloadPolicy:
    """The resolved placement policy of one workload."""

    kind: WorkloadKind
    on_demand_base: int = 1
    spot_percentage: int = 100
    # None: the default applies (`ControllerConfig.max_pool_share` when two or more spot pools exist).
    max_pool_share: float | None = None
    single_replica: SingleReplicaMode = SingleReplicaMode.SURGE

    def pool_share(self, pool_count: int, default: float) -> float:
        if self.max_pool_share is not None:
            return self.max_pool_share
        return default if pool_count >= 2 else 1.0


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """Outcome of reading a workload's annotations: managed or not, and a policy or problems."""

    managed: bool
    policy: WorkloadPolicy | None = None
    problems: tuple[PolicyProblem, ...] = field(default=())

    @property
    def valid(self) -> bool:
        return self.managed and self.policy is not None and not self.problems


def _truthy(value: str) -> bool | None:
    lowered = value.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None


def _parse_int(annotation: str, value: str, low: int, high: int | None) -> int | PolicyProblem:
    text = value.strip()
    if not text.lstrip("-").isdigit():
        return PolicyProblem(annotation, value, "must be an integer")
    number = int(text)
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        return PolicyProblem(annotation, value, f"must be {bound}")
    return number


def _parse_share(value: str) -> float | PolicyProblem:
    text = value.strip()
    try:
        share = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        return PolicyProblem(
            MAX_POOL_SHARE, value, "must be a fraction in (0, 1] such as 0.5, or a percentage"
        )
    if not math.isfinite(share) or share <= 0.0 or share > 1.0:
        return PolicyProblem(MAX_POOL_SHARE, value, "must be greater than 0 and at most 1 (or 100%)")
    return share


def resolve_policy(
    kind: WorkloadKind,
    annotations: Mapping[str, str] | None,
    namespace_labels: Mapping[str, str] | None,
    config: ControllerConfig,
) -> PolicyResult:
    """Read a workload's opt-in and placement annotations over the cluster defaults.

    The workload's `enabled` annotation wins over its namespace's label. Every invalid value is
    reported; with any problem the workload gets no policy (it is left as it is).
    """
    notes = dict(annotations or {})
    problems: list[PolicyProblem] = []
    enabled: bool | None = None
    if ENABLED in notes:
        enabled = _truthy(notes[ENABLED])
        if enabled is None:
            problems.append(PolicyProblem(ENABLED, notes[ENABLED], 'must be "true" or "false"'))
    if enabled is None and not problems:
        enabled = _truthy((namespace_labels or {}).get(ENABLED, "")) is True
    if problems:
        return PolicyResult(managed=True, problems=tuple(problems))
    if not enabled:
        return PolicyResult(managed=False)

    base: int = config.on_demand_base
    percentage: int = config.spot_percentage
    share: float | None = None
    default_single = (
        config.single_replica_deployment if kind is WorkloadKind.DEPLOYMENT else SingleReplicaMode.ON_DEMAND
    )
    single = default_single
    if ON_DEMAND_BASE in notes:
        parsed = _parse_int(ON_DEMAND_BASE, notes[ON_DEMAND_BASE], 0, None)
        if isinstance(parsed, PolicyProblem):
            problems.append(parsed)
        else:
            base = parsed
    if SPOT_PERCENTAGE in notes:
        parsed = _parse_int(SPOT_PERCENTAGE, notes[SPOT_PERCENTAGE], 0, 100)
        if isinstance(parsed, PolicyProblem):
            problems.append(parsed)
        else:
            percentage = parsed
    if MAX_POOL_SHARE in notes:
        parsed_share = _parse_share(notes[MAX_POOL_SHARE])
        if isinstance(parsed_share, PolicyProblem):
            problems.append(parsed_share)
        else:
            share = parsed_share
    if SINGLE_REPLICA in notes:
        raw = notes[SINGLE_REPLICA].strip()
        if raw not in {mode.value for mode in SingleReplicaMode}:
            problems.append(
                PolicyProblem(SINGLE_REPLICA, notes[SINGLE_REPLICA], 'must be "on-demand" or "surge"')
            )
        elif raw == SingleReplicaMode.SURGE and kind is WorkloadKind.STATEFULSET:
            problems.append(PolicyProblem(SINGLE_REPLICA, raw, "a StatefulSet cannot surge; use on-demand"))
        else:
            single = SingleReplicaMode(raw)
    if problems:
        return PolicyResult(managed=True, problems=tuple(problems))
    policy = WorkloadPolicy(
        kind=kind,
        on_demand_base=base,
        spot_percentage=percentage,
        max_pool_share=share,
        single_replica=single,
    )
    return PolicyResult(managed=True, policy=policy)
