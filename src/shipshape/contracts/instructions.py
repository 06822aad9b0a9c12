"""Recommendations (backend → people) and the instructions that apply them (backend → agent), and
the outcome an agent reports back. Versioned, pure.

An instruction names its target and the state it was computed from (`precondition`: the object's
generation, or resourceVersion). The agent re-reads the live object before acting and refuses when
it drifted: a recommendation made for yesterday's spec is never applied to today's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SPOT_ANNOTATION_PREFIX = "spot.shipshape.dev/"
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$"


class WorkloadRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["Deployment", "StatefulSet"]
    namespace: str = Field(min_length=1, max_length=253)
    name: str = Field(min_length=1, max_length=253)

    def text(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


class Precondition(BaseModel):
    """The target's state the instruction was computed from; at least one of the two."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    generation: int | None = Field(default=None, ge=1)
    resource_version: str | None = None

    @model_validator(mode="after")
    def _one_given(self) -> Precondition:
        if self.generation is None and self.resource_version is None:
            raise ValueError("a precondition needs a generation or a resourceVersion")
        return self


class SetSpotPolicy(BaseModel):
    """Set (or, with null, remove) the workload's `spot.shipshape.dev/*` annotations."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["set-spot-policy"] = "set-spot-policy"
    target: WorkloadRef
    precondition: Precondition
    annotations: dict[str, str | None] = Field(min_length=1)

    @field_validator("annotations")
    @classmethod
    def _only_spot_policy(cls, annotations: dict[str, str | None]) -> dict[str, str | None]:
        foreign = sorted(k for k in annotations if not k.startswith(SPOT_ANNOTATION_PREFIX))
        if foreign:
            raise ValueError(
                f"only {SPOT_ANNOTATION_PREFIX}* annotations may be set, not {', '.join(foreign)}"
            )
        return annotations


class ContainerResources(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: dict[Literal["cpu", "memory"], Annotated[str, Field(pattern=_QUANTITY)]] = Field(min_length=1)
    limits: dict[Literal["cpu", "memory"], Annotated[str, Field(pattern=_QUANTITY)]] = Field(
        default_factory=dict
    )


class SetContainerRequests(BaseModel):
    """Set containers' requests (and limits) in the workload's pod template (a rollout follows)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["set-container-requests"] = "set-container-requests"
    target: WorkloadRef
    precondition: Precondition
    containers: dict[str, ContainerResources] = Field(min_length=1)


class SetReplicas(BaseModel):
    """Set the workload's desired replicas (`spec.replicas`), e.g. to scale down pods that hold idle
    GPUs. The agent refuses it for a workload that a HorizontalPodAutoscaler scales (the HPA would
    undo it: its minReplicas is the thing to change)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["set-replicas"] = "set-replicas"
    target: WorkloadRef
    precondition: Precondition
    replicas: int = Field(ge=0, le=100_000)


Instruction = Annotated[SetSpotPolicy | SetContainerRequests | SetReplicas, Field(discriminator="type")]
INSTRUCTION_KINDS = ("set-spot-policy", "set-container-requests", "set-replicas")


class Recommendation(BaseModel):
    """A finding worth acting on, as an analyzer reports it (the backend adds ids and a lifecycle)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    # Stable across analyses of the same situation (the backend updates instead of duplicating).
    fingerprint: str = Field(min_length=1, max_length=200)
    title: str
    target: WorkloadRef | None = None
    evidence: dict[str, Any] = Field(default_factory=dict)
    monthly_savings_usd: float | None = None
    seconds_saved: float | None = None
    confidence: float = Field(ge=0.0, le=1.0)
    instruction: Instruction | None = None


class InstructionEnvelope(BaseModel):
    """What the agent receives: an approved instruction with its id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_: Literal["shipshape.dev/instruction/v1"] = Field(
        default="shipshape.dev/instruction/v1", alias="schema"
    )
    id: str
    recommendation_id: str
    instruction: Instruction


class InstructionOutcome(BaseModel):
    """What the agent reports: applied, refused (drifted, not allowed), failed, or dry-run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["applied", "refused", "failed", "dry-run"]
    detail: str = Field(max_length=2000)
    observed_generation: int | None = None
