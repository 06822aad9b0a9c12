"""Shipshape's own names on Kubernetes objects, and the versioned records some of them carry.

What one process writes on an object and another reads back crosses a process boundary as surely
as a push to the backend does: a webhook replica's decision is read by the leader's loops (and by
every replica after a restart), a surge note by the next leader, the node collector's start-up
timeline by `shipshape startup` and the agent. Each such annotation is a JSON record with a schema
here, versioned by `"v"` (a record without it is version 1, as written before the field existed).

A reader never crashes on what it finds: `read(obj, Record)` answers None for a missing annotation,
and for a malformed one or one of a version it does not know it logs the reason (once per distinct
value) and answers None; `Record.parse(text)` raises `AnnotationError` with that reason for callers
that report it themselves.

Pure data: no I/O beyond that warning, no client library. The names below are the only definition of
each; the controller, the agent, the analyzers and the CLI import them from here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any, ClassVar, Final, Literal, Self, TypeVar, cast

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from shipshape.kube.clock import parse_time, rfc3339_micro

LOG = logging.getLogger("shipshape.contracts.annotations")

# ---- names ------------------------------------------------------------------------------------
PREFIX: Final = "spot.shipshape.dev/"
# Workload policy (annotations on a Deployment or StatefulSet; `ENABLED` also a namespace label).
ENABLED: Final = PREFIX + "enabled"
ON_DEMAND_BASE: Final = PREFIX + "on-demand-base"
SPOT_PERCENTAGE: Final = PREFIX + "spot-percentage"
MAX_POOL_SHARE: Final = PREFIX + "max-pool-share"
SINGLE_REPLICA: Final = PREFIX + "single-replica"
POLICY_ANNOTATIONS: Final = (ENABLED, ON_DEMAND_BASE, SPOT_PERCENTAGE, MAX_POOL_SHARE, SINGLE_REPLICA)
# A training workload declares that it checkpoints (a spot interruption loses little work).
CHECKPOINTING: Final = PREFIX + "checkpointing"
# The webhook's placement decision on a pod (`DecisionRecord`).
DECISION: Final = PREFIX + "decision"
# Placeholder pods of the headroom (and their Deployments) carry this label set to "true".
HEADROOM_LABEL: Final = PREFIX + "headroom"
# On a Deployment being surged for a notice (`SurgeNote`), and on a single-replica Deployment
# restarted for one (`RestartNote`).
SURGE_NOTE: Final = PREFIX + "surge"
RESTART_NOTE: Final = PREFIX + "interruption-restart"
# On the guard PodDisruptionBudgets of single-replica `surge` Deployments: the label (value: the
# Deployment's name), until when the guard holds (RFC 3339) and which replica keeps it.
GUARD_LABEL: Final = PREFIX + "guard"
GUARD_EXPIRES: Final = PREFIX + "guard-expires-at"
GUARD_OWNER: Final = PREFIX + "guard-owner"
# The node collector's start-up timeline on a Node (`NodeStartupTimeline`).
STARTUP_TIMELINE: Final = "startup.shipshape.dev/timeline"
# Batch extended resources published on nodes (Koordinator's model) and when they were last set.
BATCH_CPU: Final = "shipshape.dev/batch-cpu"
BATCH_MEMORY: Final = "shipshape.dev/batch-memory"
BATCH_UPDATED: Final = "shipshape.dev/batch-resources-updated"
# A node's QoS band label (`koord-batch`-like bands for the QoS analyzer).
PRIORITY_BAND_LABEL: Final = "shipshape.dev/priority-band"

# What the emulator's cloud puts on its nodes, read by the simulator, the demo and the start-up analysis
# (which pool a node belongs to) and taken by the controller for a notice, as an interruption handler's.
EMULATOR_POOL_LABEL: Final = "emulator.shipshape.dev/pool"
EMULATOR_SPOT_INTERRUPTION_TAINT: Final = "emulator.shipshape.dev/spot-interruption"

# ---- node start-up events, in the order they happen (the EKS start-up timing table) ------------
INSTANCE_CREATED: Final = "instance_created"
VM_INITIALIZED: Final = "vm_initialized"
NETWORK_START: Final = "network_start"
NETWORK_READY: Final = "network_ready"
CONTAINERD_START: Final = "containerd_start"
CONTAINERD_READY: Final = "containerd_initialized"
CLOUD_INIT_LOCAL: Final = "cloud_init_local"
CLOUD_INIT_START: Final = "cloud_init_start"
CLOUD_INIT_CONFIG: Final = "cloud_init_config"
CLOUD_INIT_FINAL: Final = "cloud_init_final"
CLOUD_INIT_FINISH: Final = "cloud_init_finish"
KUBELET_START: Final = "kubelet_start"
KUBELET_INITIALIZED: Final = "kubelet_initialized"
REGISTERED: Final = "registered"
KUBE_PROXY_START: Final = "kube_proxy_start"
CNI_INIT_START: Final = "cni_init_start"
CNI_START: Final = "cni_start"
CNI_READY: Final = "cni_ready"
KUBE_PROXY_READY: Final = "kube_proxy_ready"
DAEMONSETS_READY: Final = "daemonsets_ready"
NODE_READY: Final = "node_ready"
FIRST_POD_STARTED: Final = "first_pod_started"
NODE_STARTUP_EVENTS: Final[tuple[str, ...]] = (
    INSTANCE_CREATED,
    VM_INITIALIZED,
    NETWORK_START,
    NETWORK_READY,
    CONTAINERD_START,
    CONTAINERD_READY,
    CLOUD_INIT_LOCAL,
    CLOUD_INIT_START,
    CLOUD_INIT_CONFIG,
    CLOUD_INIT_FINAL,
    CLOUD_INIT_FINISH,
    KUBELET_START,
    KUBELET_INITIALIZED,
    REGISTERED,
    KUBE_PROXY_START,
    CNI_INIT_START,
    CNI_START,
    CNI_READY,
    KUBE_PROXY_READY,
    DAEMONSETS_READY,
    NODE_READY,
    FIRST_POD_STARTED,
)
EVENT_ORDER: Final[Mapping[str, int]] = {name: index for index, name in enumerate(NODE_STARTUP_EVENTS)}

# ---- records ----------------------------------------------------------------------------------
VERSION: Final = 1
VERSIONS: Final = frozenset({VERSION})


class AnnotationError(ValueError):
    """An annotation that is not a record of its schema (malformed, or of an unknown version)."""


class Record(BaseModel):
    """A versioned JSON record in one annotation. Unknown fields are ignored (a newer writer of the
    same version may add some); a version this reader does not know is refused."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)
    annotation: ClassVar[str]

    v: StrictInt = VERSION

    @field_validator("v")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value not in VERSIONS:
            raise ValueError(f"unknown version {value} (this reader knows {sorted(VERSIONS)})")
        return value

    @classmethod
    def parse(cls, text: str) -> Self:
        """The record in an annotation's value; `AnnotationError` says what is wrong with it."""
        try:
            body = orjson.loads(text)
        except ValueError as error:
            raise AnnotationError(f"{cls.annotation} is not JSON: {error}") from None
        if not isinstance(body, dict):
            raise AnnotationError(f"{cls.annotation} must be a JSON object")
        return cls.from_body(body)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Self:
        try:
            return cls.model_validate(body)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in error.errors()
            )
            raise AnnotationError(f"{cls.annotation}: {problems}") from None

    def body(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def dump(self) -> str:
        """The annotation's value: compact JSON, keys sorted (the same record gives the same bytes)."""
        return orjson.dumps(self.body(), option=orjson.OPT_SORT_KEYS).decode()

    @classmethod
    def read(cls, obj: Mapping[str, Any]) -> Self | None:
        """The record on an object; None when absent, or (with a logged reason) unreadable."""
        return read(obj, cls)


R = TypeVar("R", bound=Record)
# Values already warned about (bounded): a reader sees the same object again on every event.
_WARNED: dict[tuple[str, str], None] = {}
_WARNED_LIMIT = 1024


def _warn_once(annotation: str, text: str, reason: str) -> None:
    key = (annotation, text)
    if key in _WARNED:
        return
    if len(_WARNED) >= _WARNED_LIMIT:
        _WARNED.pop(next(iter(_WARNED)))
    _WARNED[key] = None
    LOG.warning("ignoring an unreadable annotation: %s", reason)


@functools.lru_cache(maxsize=8192)
def _parsed(record: type[Record], text: str) -> Record | AnnotationError:
    """`record.parse(text)`, remembered: an object is read again on each of its events, and records
    are immutable."""
    try:
        return record.parse(text)
    except AnnotationError as error:
        return error


def read(obj: Mapping[str, Any], record: type[R]) -> R | None:
    """`record`'s annotation on `obj`: None when absent; None, with the reason logged, when malformed
    or of a version this reader does not know."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(record.annotation)
    if not text:
        return None
    found = _parsed(record, str(text))
    if isinstance(found, AnnotationError):
        name = str((obj.get("metadata") or {}).get("name") or "")
        _warn_once(record.annotation, str(text), f"{name}: {found}")
        return None
    return cast(R, found)


class DecisionRecord(Record):
    """The webhook's placement decision on a pod: read back by every replica's cache (it counts the
    pod for its pool before the pod is bound) and by the loops (spot fallback), the demo and
    uninstall. `id` ends the webhook's assumption for it; `node` names the node the pod was packed
    onto; `dryRun` marks a decision only recommended."""

    annotation: ClassVar[str] = DECISION

    capacity_type: Literal["spot", "on-demand"] = Field(
        validation_alias="capacityType", serialization_alias="capacityType"
    )
    pool: str = ""  # <instance-type>/<zone> for spot, "" otherwise
    reason: str
    id: str
    node: str = ""
    dry_run: bool = Field(default=False, validation_alias="dryRun", serialization_alias="dryRun")

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "v": self.v,
            "capacityType": self.capacity_type,
            "pool": self.pool,
            "reason": self.reason,
            "id": self.id,
        }
        if self.node:
            body["node"] = self.node
        if self.dry_run:
            body["dryRun"] = True
        return body


class SurgeNote(Record):
    """On a Deployment surged for a notice: `surge` replicas added while the `pods` on the noticed
    `nodes` are replaced, since `since`, ending by `deadline` (POSIX seconds). `done`: replicas are
    back; the note stays until its doomed pods are gone, so that they are not surged for again."""

    annotation: ClassVar[str] = SURGE_NOTE

    surge: int = Field(ge=0)
    pods: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    since: float
    deadline: float
    done: bool = False

    @property
    def active(self) -> bool:
        return not self.done

    def ended(self) -> SurgeNote:
        """The same note, done and surging no more."""
        return self.model_copy(update={"surge": 0, "done": True})


class RestartNote(Record):
    """On a single-replica Deployment restarted (with a surge) for a notice: the noticed `nodes` and
    the notice's time `at` (POSIX seconds), the stamp of the restart."""

    annotation: ClassVar[str] = RESTART_NOTE

    nodes: tuple[str, ...] = ()
    at: float


class NodeStartupTimeline(Record):
    """The node collector's timeline on a Node: when each start-up event happened on the host, as
    RFC 3339 times (with microseconds). On the wire the events sit beside `"v"`, in time order:
    `{"v":1,"vm_initialized":"2022-11-28T02:59:07.000000Z",...}`."""

    annotation: ClassVar[str] = STARTUP_TIMELINE

    events: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of_seconds(cls, events: Mapping[str, float]) -> NodeStartupTimeline:
        """A timeline from POSIX seconds per event."""
        return cls.from_body({name: rfc3339_micro(when) for name, when in events.items()})

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> NodeStartupTimeline:
        version = body.get("v", VERSION)
        if isinstance(version, bool) or version not in VERSIONS:
            raise AnnotationError(f"{cls.annotation}: unknown version {version!r}")
        events: dict[str, str] = {}
        for name, value in body.items():
            if name == "v":
                continue
            if name not in EVENT_ORDER:
                raise AnnotationError(f"{cls.annotation}: unknown event {name!r}")
            if not isinstance(value, str):
                raise AnnotationError(f"{cls.annotation}: {name} must be an RFC 3339 time")
            try:
                parse_time(value)
            except ValueError as error:
                raise AnnotationError(f"{cls.annotation}: {name}: {error}") from None
            events[name] = value
        return cls(v=version, events=events)

    def body(self) -> dict[str, Any]:
        ordered = sorted(self.events.items(), key=lambda item: (parse_time(item[1]), EVENT_ORDER[item[0]]))
        return {"v": self.v, **dict(ordered)}

    def dump(self) -> str:
        """Compact JSON, the events in time order."""
        return orjson.dumps(self.body()).decode()
