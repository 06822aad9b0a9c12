"""Data shapes of the start-up analysis: pod and node timelines, phases, findings.

All times are POSIX seconds (floats); all durations are seconds. A value that could not be
measured is `None` and comes with a reason in the owner's `missing` mapping: nothing is guessed
silently. Values derived from a weaker signal are kept but explained in `notes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = Mapping[str, Any]

# Pod phases, in the order they happen. ADMISSION precedes the pod's creation; the others
# partition the interval from creationTimestamp to Ready.
ADMISSION = "admission"
SCHEDULING = "scheduling"
SANDBOX = "sandbox"
IMAGE_PULL_WAIT = "image_pull_wait"
IMAGE_PULL = "image_pull"
INIT_CONTAINERS = "init_containers"
CONTAINER_START = "container_start"
PROBE_WAIT = "probe_wait"
READINESS_GATES = "readiness_gates"

POD_PHASES: tuple[str, ...] = (
    SCHEDULING,
    SANDBOX,
    IMAGE_PULL_WAIT,
    IMAGE_PULL,
    INIT_CONTAINERS,
    CONTAINER_START,
    PROBE_WAIT,
    READINESS_GATES,
)
ALL_POD_PHASES: tuple[str, ...] = (ADMISSION, *POD_PHASES)

PHASE_TITLES: Mapping[str, str] = {
    ADMISSION: "admission/creation",
    SCHEDULING: "scheduling",
    SANDBOX: "sandbox/CNI",
    IMAGE_PULL_WAIT: "image pull wait",
    IMAGE_PULL: "image pull",
    INIT_CONTAINERS: "init containers",
    CONTAINER_START: "container start",
    PROBE_WAIT: "startup/readiness probes",
    READINESS_GATES: "readiness gates",
}

# Pod outcomes.
READY = "ready"
NOT_READY = "not-ready"
UNSCHEDULED = "unscheduled"
CRASH_LOOPING = "crash-looping"
COMPLETED = "completed"
FAILED = "failed"


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    """The top-level controller of a pod, found through its owner chain."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(slots=True)
class ContainerTiming:
    """What happened to one container (or init container) of a pod."""

    name: str
    init: bool
    image: str = ""
    image_present: bool | None = None  # True: "already present on machine"; None: unknown
    image_size: int | None = None  # bytes, from the Pulled message
    pull_start: float | None = None  # when the kubelet asked for the image (waiting included)
    pull_wait: float | None = None  # queued behind other pulls on the node
    pull: float | None = None  # the pull itself
    pull_end: float | None = None
    started: float | None = None  # first start
    finished: float | None = None  # init containers: first successful completion
    restarts: int = 0
    waiting_reason: str = ""
    cpu_limit_millis: int | None = None
    readiness_initial_delay: int | None = None
    has_readiness_probe: bool = False
    has_startup_probe: bool = False

    @property
    def run_time(self) -> float | None:
        if self.started is None or self.finished is None:
            return None
        return max(0.0, self.finished - self.started)


@dataclass(slots=True)
class PodTimeline:
    """One pod's start-up, phase by phase."""

    namespace: str
    name: str
    uid: str
    workload: WorkloadRef
    node: str
    created: float
    outcome: str
    scheduled: float | None = None
    sandbox_ready: float | None = None
    initialized: float | None = None
    started: float | None = None  # all containers started
    containers_ready: float | None = None
    ready: float | None = None
    phases: dict[str, float | None] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    containers: list[ContainerTiming] = field(default_factory=list)
    sli: float | None = None  # kubelet_pod_start_sli_duration_seconds definition
    stateless: bool = True
    scheduling_attempts: int = 0
    unschedulable_message: str = ""
    sandbox_errors: list[str] = field(default_factory=list)
    admission_errors: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def end_to_end(self) -> float | None:
        """Creation to Ready."""
        return None if self.ready is None else max(0.0, self.ready - self.created)

    @property
    def images_prepulled(self) -> bool | None:
        """True when every image was already on the node; None when some is unknown."""
        unknown = False
        for container in self.containers:
            present = container.image_present
            if present is False:
                return False
            if present is None:
                unknown = True
        return None if unknown else True

    def dominant_phase(self) -> str | None:
        measured = [(value, phase) for phase, value in self.phases.items() if value is not None]
        if not measured:
            return None
        return max(measured)[1]

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "workload": str(self.workload),
            "node": self.node,
            "outcome": self.outcome,
            "created": self.created,
            "scheduled": self.scheduled,
            "sandboxReady": self.sandbox_ready,
            "initialized": self.initialized,
            "started": self.started,
            "containersReady": self.containers_ready,
            "ready": self.ready,
            "endToEnd": self.end_to_end,
            "sli": self.sli,
            "phases": dict(self.phases),
            "missing": dict(self.missing),
            "notes": list(self.notes),
            "schedulingAttempts": self.scheduling_attempts,
            "containers": [
                {
                    "name": c.name,
                    "init": c.init,
                    "image": c.image,
                    "imagePresent": c.image_present,
                    "imageSize": c.image_size,
                    "pullWait": c.pull_wait,
                    "pull": c.pull,
                    "started": c.started,
                    "finished": c.finished,
                    "restarts": c.restarts,
                }
                for c in self.containers
            ],
        }


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The labels of a node that start-up figures are grouped by."""

    name: str
    instance_type: str = ""
    zone: str = ""
    capacity_type: str = ""
    pool: str = ""
    created: float | None = None

    @property
    def pool_key(self) -> str:
        """The spot pool identity: instance type x zone (the pool label when there is one)."""
        if self.pool:
            return self.pool
        if self.instance_type or self.zone:
            return f"{self.instance_type or '?'}/{self.zone or '?'}"
        return ""


@dataclass(frozen=True, slots=True)
class Finding:
    """A diagnosis: what slows start-up, what to change, and the facts it rests on."""

    rule: str
    title: str
    cause: str
    fix: str
    evidence: tuple[str, ...]
    subjects: tuple[str, ...] = ()
    severity: str = "warning"

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "title": self.title,
            "severity": self.severity,
            "cause": self.cause,
            "fix": self.fix,
            "evidence": list(self.evidence),
            "subjects": list(self.subjects),
        }
