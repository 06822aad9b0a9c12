"""Pod start-up timelines from pod objects and their events, as the API returns them.

The phases partition creation -> Ready (see `model.POD_PHASES`); admission precedes creation.
Kubelet starts a pod's init containers, then its containers, one after another, pulling each
image just before its container is created; so image pull time is subtracted from the
init-container and container-start intervals and reported on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from shipshape.analyzers.startup import model
from shipshape.analyzers.startup.events import Event, EventIndex, PulledMessage, TimeParser, parse_pulled
from shipshape.analyzers.startup.model import ContainerTiming, NodeInfo, Obj, PodTimeline, WorkloadRef
from shipshape.contracts.annotations import EMULATOR_POOL_LABEL
from shipshape.kube import capacity as kube_capacity
from shipshape.kube import objects
from shipshape.kube.quantity import cpu_millis
from shipshape.kube.wellknown import (
    BETA_INSTANCE_TYPE_LABEL,
    BETA_ZONE_LABEL,
    INSTANCE_TYPE_LABEL,
    POD_TEMPLATE_HASH_LABEL,
    ZONE_LABEL,
)

# A scale-up older than this before a pod's creation is not taken as the request that made it.
MAX_ADMISSION_LOOKBACK = 300.0

_SCALED_UP = re.compile(r"^Scaled up replica set (?P<rs>\S+) (?:from \d+ )?to \d+")
_CREATED_POD = re.compile(r"^Created pod: (?P<pod>\S+)")
_KUBELET_CONTAINER_REASONS = frozenset({"Pulling", "Pulled", "Created", "Started"})
_SANDBOX_ERRORS = frozenset({"FailedCreatePodSandBox", "NetworkNotReady"})


def node_info(node: Obj, parse_time: TimeParser | None = None) -> NodeInfo:
    """A node's grouping labels."""
    metadata = node.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    # Every common convention (`kube.capacity`); "" where the node's labels do not say.
    capacity = kube_capacity.capacity_type_of(labels) or ""
    parse = parse_time or TimeParser()
    return NodeInfo(
        name=metadata.get("name") or "",
        instance_type=labels.get(INSTANCE_TYPE_LABEL) or labels.get(BETA_INSTANCE_TYPE_LABEL) or "",
        zone=labels.get(ZONE_LABEL) or labels.get(BETA_ZONE_LABEL) or "",
        capacity_type=capacity,
        # The provisioner's node group on a real cluster; the emulator's own pool label otherwise.
        pool=kube_capacity.node_group_of(labels) or labels.get(EMULATOR_POOL_LABEL) or "",
        created=parse.optional(metadata.get("creationTimestamp")),
    )


WorkloadCache = dict[tuple[str, str, str], tuple[WorkloadRef, WorkloadRef]]


def workload_of(pod: Obj, cache: WorkloadCache | None = None) -> tuple[WorkloadRef, WorkloadRef | None]:
    """(top-level workload, immediate controller) from the pod's controller reference (a pod without
    one is its own workload).

    A ReplicaSet named `<deployment>-<pod-template-hash>` belongs to that Deployment
    (`kube.objects.deployment_of_replicaset`). `cache` shares the answers between the pods of one
    controller.
    """
    owner = objects.controller_ref(pod)
    if owner is None:
        return WorkloadRef("Pod", objects.name(pod)), None
    kind, name = owner.get("kind") or "", owner.get("name") or ""
    template_hash = (objects.labels(pod).get(POD_TEMPLATE_HASH_LABEL) or "") if kind == "ReplicaSet" else ""
    key = (kind, name, template_hash)
    if cache is not None and (known := cache.get(key)) is not None:
        return known
    direct = WorkloadRef(kind, name)
    answer = (direct, direct)
    deployment = objects.deployment_of_replicaset(name, template_hash)
    if deployment is not None:
        answer = (WorkloadRef("Deployment", deployment), direct)
    if cache is not None:
        cache[key] = answer
    return answer


def _conditions(status: Obj, parse: TimeParser) -> dict[str, tuple[bool, float | None, str]]:
    found: dict[str, tuple[bool, float | None, str]] = {}
    optional = parse.optional
    for condition in status.get("conditions") or ():
        get = condition.get
        found[get("type") or ""] = (
            get("status") == "True",
            optional(get("lastTransitionTime")),
            get("message") or get("reason") or "",
        )
    return found


def _true_at(conditions: Mapping[str, tuple[bool, float | None, str]], kind: str) -> float | None:
    state = conditions.get(kind)
    return state[1] if state and state[0] else None


def _first(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return min(present) if present else None


def _cpu_millis(value: object, cache: dict[str, int | None]) -> int | None:
    text = str(value)
    if text not in cache:
        try:
            cache[text] = cpu_millis(text)
        except ValueError:
            cache[text] = None
    return cache[text]


def _container_spec(spec: Obj, init: bool, cpu_cache: dict[str, int | None]) -> ContainerTiming:
    limits = (spec.get("resources") or {}).get("limits") or {}
    readiness = spec.get("readinessProbe")
    cpu_limit = _cpu_millis(limits["cpu"], cpu_cache) if limits.get("cpu") is not None else None
    return ContainerTiming(
        name=spec.get("name") or "",
        init=init,
        image=spec.get("image") or "",
        cpu_limit_millis=cpu_limit,
        has_readiness_probe=readiness is not None,
        readiness_initial_delay=int(readiness.get("initialDelaySeconds") or 0) if readiness else None,
        has_startup_probe=spec.get("startupProbe") is not None,
    )


def _apply_status(timing: ContainerTiming, status: Obj | None, parse: TimeParser) -> None:
    if not status:
        return
    timing.restarts = int(status.get("restartCount") or 0)
    optional = parse.optional
    started: float | None = None
    for state_name in ("state", "lastState"):
        state = status.get(state_name)
        if not state:
            continue
        running = state.get("running")
        terminated = state.get("terminated")
        for when in (
            optional(running.get("startedAt")) if running else None,
            optional(terminated.get("startedAt")) if terminated else None,
        ):
            if when is not None and (started is None or when < started):
                started = when
        if timing.init and terminated and terminated.get("exitCode") == 0:
            timing.finished = optional(terminated.get("finishedAt"))
        waiting = state.get("waiting")
        if state_name == "state" and waiting:
            timing.waiting_reason = waiting.get("reason") or ""
    timing.started = started


def _apply_events(timing: ContainerTiming, events: Sequence[Event]) -> None:
    # one pass, oldest first: the first Pulling, the first Pulled that parses, the first Started
    pulling: Event | None = None
    pulled: PulledMessage | None = None
    pulled_at = 0.0
    started_at: float | None = None
    for event in events:
        reason = event.reason
        if reason == "Pulling":
            if pulling is None:
                pulling = event
        elif reason == "Pulled":
            if pulled is None:
                pulled = parse_pulled(event.message)
                pulled_at = event.time
        elif reason == "Started" and started_at is None:
            started_at = event.time
    if started_at is not None and (timing.started is None or started_at < timing.started):
        timing.started = started_at
    if pulled is None:
        if pulling is not None:
            timing.image_present = False  # a pull began and has not succeeded
        return
    timing.image_size = pulled.size
    if pulled.present:
        timing.image_present = True
        timing.pull_wait = timing.pull = 0.0
        timing.pull_start = timing.pull_end = pulled_at
        return
    timing.image_present = False
    # Event times are truncated to the second: place the pull so that it agrees with both the
    # Pulling and the Pulled events' seconds as far as the measured durations allow.
    start = pulled_at - pulled.total
    if pulling is not None:
        start = max(start, pulling.time)
    timing.pull_start = start
    timing.pull_end = start + pulled.total
    timing.pull = pulled.pull
    timing.pull_wait = max(0.0, pulled.total - pulled.pull)


def _pull_totals(containers: Sequence[ContainerTiming]) -> tuple[float | None, float | None, list[str]]:
    """(sum of waits, sum of pulls, containers whose pull is unknown)."""
    waits: float = 0
    pulls: float = 0
    unknown: list[str] = []
    for c in containers:
        wait, pull = c.pull_wait, c.pull
        if pull is None or wait is None:
            unknown.append(c.name)
        elif not unknown:
            waits += wait
            pulls += pull
    if unknown:
        return None, None, unknown
    return waits, pulls, []


def _span(end: float | None, start: float | None) -> float | None:
    return None if end is None or start is None else max(0.0, end - start)


class PodTimelineBuilder:
    """Builds `PodTimeline`s; holds the event index and node labels shared by all pods."""

    def __init__(self, events: EventIndex, nodes: Mapping[str, NodeInfo] | None = None) -> None:
        self.events = events
        self.nodes = nodes or {}
        self.time = events.time
        self._cpu_cache: dict[str, int | None] = {}
        self._workloads: WorkloadCache = {}
        self._controllers: dict[tuple[str, str, str], tuple[dict[str, float], list[tuple[float, str]]]] = {}
        self._deployments: dict[tuple[str, str], dict[str, list[float]]] = {}

    def build(self, pod: Obj) -> PodTimeline | None:
        """The pod's timeline; None for an object without a creation timestamp."""
        metadata = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        parse = self.time
        created = parse.optional(metadata.get("creationTimestamp"))
        if created is None:
            return None
        namespace, name = metadata.get("namespace") or "", metadata.get("name") or ""
        uid = metadata.get("uid") or ""
        workload, controller = workload_of(pod, self._workloads)
        events = self.events.for_pod(namespace, name, uid)
        conditions = _conditions(status, parse)
        timeline = PodTimeline(
            namespace=namespace,
            name=name,
            uid=uid,
            workload=workload,
            node=spec.get("nodeName") or "",
            created=created,
            outcome=model.NOT_READY,
        )
        volumes: Sequence[Obj] = spec.get("volumes") or []
        timeline.stateless = not any(v.get("persistentVolumeClaim") or v.get("ephemeral") for v in volumes)
        phases: dict[str, float | None] = dict.fromkeys(model.ALL_POD_PHASES)
        timeline.phases = phases
        missing = timeline.missing

        self._admission(timeline, controller, workload)

        # One pass over the pod's events (oldest first) sorts out what each phase needs.
        attempts = 0
        unschedulable = ""
        scheduled_event: Event | None = None
        by_container: dict[tuple[bool, str], list[Event]] = {}
        sandbox_errors: list[str] = []
        first_container_event: float | None = None
        for event in events:
            reason = event.reason
            if event.container:
                by_container.setdefault((event.init, event.container), []).append(event)
                if reason in _KUBELET_CONTAINER_REASONS and (
                    first_container_event is None or event.time < first_container_event
                ):
                    first_container_event = event.time
            if reason == "FailedScheduling":
                attempts += event.occurrences
                unschedulable = event.message
            elif reason == "Scheduled":
                if scheduled_event is None:
                    scheduled_event = event
            elif reason in _SANDBOX_ERRORS:
                sandbox_errors.append(event.message)

        # Scheduling: the scheduler's event has microseconds, the condition only seconds.
        timeline.scheduling_attempts = attempts
        timeline.unschedulable_message = unschedulable
        scheduled_at = _true_at(conditions, "PodScheduled")
        if scheduled_event is not None:
            timeline.scheduled = scheduled_event.time
        elif scheduled_at is not None:
            timeline.scheduled = scheduled_at
        phases[model.SCHEDULING] = _span(timeline.scheduled, created)
        if timeline.scheduled is None:
            if timeline.node:
                missing[model.SCHEDULING] = (
                    "no Scheduled event or PodScheduled condition"
                    " (bound through spec.nodeName, or events expired)"
                )
            else:
                timeline.outcome = model.UNSCHEDULED
                condition = conditions.get("PodScheduled") or (False, None, "")
                reason = timeline.unschedulable_message or condition[2]
                missing[model.SCHEDULING] = "not scheduled" + (f": {reason}" if reason else "")

        # Containers, in spec order.
        statuses = {
            (init, s.get("name") or ""): s
            for init, key in ((True, "initContainerStatuses"), (False, "containerStatuses"))
            for s in status.get(key) or []
        }
        for init, key in ((True, "initContainers"), (False, "containers")):
            for container_spec in spec.get(key) or []:
                timing = _container_spec(container_spec, init, self._cpu_cache)
                _apply_status(timing, statuses.get((init, timing.name)), parse)
                _apply_events(timing, by_container.get((init, timing.name), []))
                timeline.containers.append(timing)
        init_containers = [c for c in timeline.containers if c.init]
        main_containers = [c for c in timeline.containers if not c.init]

        # Sandbox and network: PodReadyToStartContainers (v1.29+) marks the end.
        timeline.sandbox_errors = sandbox_errors
        timeline.sandbox_ready = _true_at(conditions, "PodReadyToStartContainers")
        if timeline.sandbox_ready is None:
            first_container_signal = _first(
                [first_container_event, *(c.started for c in timeline.containers)]
            )
            if first_container_signal is not None:
                timeline.sandbox_ready = first_container_signal
                timeline.notes.append(
                    "sandbox ready taken from the first container event"
                    " (no PodReadyToStartContainers condition)"
                )
        if timeline.scheduled is not None:
            phases[model.SANDBOX] = _span(timeline.sandbox_ready, timeline.scheduled)
            if timeline.sandbox_ready is None:
                missing[model.SANDBOX] = (
                    "no sandbox signal (no PodReadyToStartContainers condition, no container event)"
                )
        elif model.SCHEDULING in missing:
            missing[model.SANDBOX] = "starts at scheduling, which is unknown"

        # Image pulls.
        all_waits, all_pulls, unknown_pulls = _pull_totals(timeline.containers)
        phases[model.IMAGE_PULL_WAIT], phases[model.IMAGE_PULL] = all_waits, all_pulls
        if unknown_pulls and timeline.outcome != model.UNSCHEDULED:
            names = ", ".join(unknown_pulls)
            reason = f"no Pulled event for {names} (events expired or pull not finished)"
            missing[model.IMAGE_PULL_WAIT] = missing[model.IMAGE_PULL] = reason

        # Init containers: sandbox ready -> Initialized, less their image pulls.
        initialized = _true_at(conditions, "Initialized")
        if init_containers:
            timeline.initialized = initialized or max_or_none(c.finished for c in init_containers)
            init_waits, init_pulls, init_unknown = _pull_totals(init_containers)
            span = _span(timeline.initialized, timeline.sandbox_ready)
            if span is not None:
                phases[model.INIT_CONTAINERS] = max(0.0, span - (init_waits or 0.0) - (init_pulls or 0.0))
                if init_unknown:
                    timeline.notes.append("init containers include their image pulls (no Pulled event)")
            elif timeline.outcome != model.UNSCHEDULED:
                missing[model.INIT_CONTAINERS] = "init containers have not all completed"
            main_start = timeline.initialized
        else:
            timeline.initialized = initialized
            phases[model.INIT_CONTAINERS] = 0.0 if timeline.sandbox_ready is not None else None
            main_start = timeline.sandbox_ready

        # Containers: -> all started, less their image pulls.
        not_started = [c for c in main_containers if c.started is None]
        if main_containers and not not_started:
            timeline.started = max(c.started for c in main_containers if c.started is not None)
        main_waits, main_pulls, main_unknown = _pull_totals(main_containers)
        span = _span(timeline.started, main_start)
        if span is not None:
            phases[model.CONTAINER_START] = max(0.0, span - (main_waits or 0.0) - (main_pulls or 0.0))
            if main_unknown:
                timeline.notes.append("container start includes image pulls (no Pulled events)")
        elif not_started and timeline.outcome != model.UNSCHEDULED:
            waiting = ", ".join(f"{c.name} ({c.waiting_reason or 'not started'})" for c in not_started)
            missing[model.CONTAINER_START] = f"containers not started: {waiting}"

        # Probes and readiness gates.
        timeline.containers_ready = _true_at(conditions, "ContainersReady")
        timeline.ready = _true_at(conditions, "Ready")
        phases[model.PROBE_WAIT] = _span(timeline.containers_ready, timeline.started)
        phases[model.READINESS_GATES] = _span(timeline.ready, timeline.containers_ready)

        self._outcome(timeline, status, conditions)
        self._sli(timeline, init_containers)
        return timeline

    def _controller_events(
        self, kind: str, namespace: str, name: str
    ) -> tuple[dict[str, float], list[tuple[float, str]]]:
        """A controller's events, read once for all its pods: pod name -> its latest SuccessfulCreate,
        and the FailedCreate events that name a webhook."""
        key = (kind, namespace, name)
        known = self._controllers.get(key)
        if known is None:
            acks: dict[str, float] = {}
            failures: list[tuple[float, str]] = []
            for event in self.events.for_owner(kind, namespace, name):
                if event.reason == "SuccessfulCreate":
                    match = _CREATED_POD.match(event.message)
                    if match:
                        acks[match.group("pod")] = event.time
                elif event.reason == "FailedCreate" and "webhook" in event.message:
                    failures.append((event.time, event.message))
            known = self._controllers[key] = (acks, failures)
        return known

    def _scale_ups(self, namespace: str, deployment: str) -> dict[str, list[float]]:
        """A Deployment's scale-ups, read once: ReplicaSet name -> times (first and last occurrence)."""
        key = (namespace, deployment)
        known = self._deployments.get(key)
        if known is None:
            known = self._deployments[key] = {}
            for event in self.events.for_owner("Deployment", namespace, deployment):
                if event.reason != "ScalingReplicaSet":
                    continue
                match = _SCALED_UP.match(event.message)
                if match:
                    known.setdefault(match.group("rs"), []).extend((event.time, event.last))
        return known

    def _admission(
        self, timeline: PodTimeline, controller: WorkloadRef | None, workload: WorkloadRef
    ) -> None:
        """Creation request (the Deployment's scale-up) -> the controller saw the create succeed."""
        missing = timeline.missing
        if controller is None:
            missing[model.ADMISSION] = "no controller: the creation request is not recorded"
            return
        created = timeline.created
        acks, failures = self._controller_events(controller.kind, timeline.namespace, controller.name)
        acknowledged = acks.get(timeline.name)
        timeline.admission_errors.extend(
            message for when, message in failures if created - MAX_ADMISSION_LOOKBACK <= when <= created
        )
        requested: float | None = None
        if workload.kind == "Deployment" and controller.kind == "ReplicaSet":
            for when in self._scale_ups(timeline.namespace, workload.name).get(controller.name, ()):
                if created - MAX_ADMISSION_LOOKBACK <= when <= created:
                    requested = when if requested is None else max(requested, when)
        end = timeline.created if acknowledged is None else max(timeline.created, acknowledged)
        if requested is not None:
            timeline.phases[model.ADMISSION] = end - requested
        elif acknowledged is not None:
            timeline.phases[model.ADMISSION] = end - timeline.created
            timeline.notes.append("admission measured from creation to the controller's SuccessfulCreate")
        else:
            missing[model.ADMISSION] = "no scale-up or SuccessfulCreate event for this pod (events expired?)"

    def _outcome(
        self, timeline: PodTimeline, status: Obj, conditions: Mapping[str, tuple[bool, float | None, str]]
    ) -> None:
        phase = status.get("phase") or ""
        crash = [c for c in timeline.containers if c.waiting_reason == "CrashLoopBackOff"]
        restarted = sum(c.restarts for c in timeline.containers)
        missing = timeline.missing
        if timeline.outcome == model.UNSCHEDULED:
            pass
        elif phase == "Succeeded":
            timeline.outcome = model.COMPLETED
        elif phase == "Failed":
            timeline.outcome = model.FAILED
        elif timeline.ready is not None:
            timeline.outcome = model.READY
        elif crash or (restarted and timeline.started is not None):
            timeline.outcome = model.CRASH_LOOPING
        if timeline.ready is None:
            if timeline.outcome == model.CRASH_LOOPING:
                names = ", ".join(f"{c.name} ({c.restarts} restarts)" for c in crash)
                names = names or f"{restarted} restarts"
                reason = f"crash-looping: {names}"
            elif timeline.outcome == model.COMPLETED:
                reason = "pod completed without reporting Ready"
            elif timeline.outcome == model.UNSCHEDULED:
                reason = "not scheduled"
            else:
                ready_message = (conditions.get("Ready") or (False, None, ""))[2]
                reason = "not Ready yet" + (f": {ready_message}" if ready_message else "")
            missing.setdefault("ready", reason)
            for name in (model.PROBE_WAIT, model.READINESS_GATES):
                if timeline.phases.get(name) is None:
                    missing.setdefault(name, reason)
        elif restarted:
            timeline.notes.append(
                f"containers restarted {restarted} times: Ready is its latest transition,"
                " probe wait may include restarts"
            )
        for name in model.POD_PHASES:
            if timeline.phases.get(name) is None and name not in missing:
                missing[name] = missing.get("ready") or "not reached"

    def _sli(self, timeline: PodTimeline, init_containers: Sequence[ContainerTiming]) -> None:
        """kubelet_pod_start_sli_duration_seconds: creation -> all containers started, less the image
        pulling window (first pull start to last pull end) and init containers' run time."""
        containers = timeline.containers
        if timeline.started is None:
            timeline.missing["sli"] = "containers not all started"
            return
        if any(c.image_present is None or (not c.image_present and c.pull_end is None) for c in containers):
            timeline.missing["sli"] = "image pull times unknown (events expired): cannot exclude them"
            return
        pulls = [c for c in timeline.containers if c.image_present is False]
        window = 0.0
        if pulls:
            window = max(c.pull_end or 0.0 for c in pulls) - min(c.pull_start or 0.0 for c in pulls)
        init_run = 0.0
        for container in init_containers:
            if container.run_time is None:
                timeline.missing["sli"] = f"init container {container.name} run time unknown"
                return
            init_run += container.run_time
        timeline.sli = max(0.0, timeline.started - timeline.created - window - init_run)


def max_or_none(values: Iterable[float | None]) -> float | None:
    collected = list(values)
    if not collected or any(value is None for value in collected):
        return None
    return max(value for value in collected if value is not None)


def node_infos(nodes: Iterable[Obj], parse_time: TimeParser | None = None) -> dict[str, NodeInfo]:
    parse = parse_time or TimeParser()
    infos = (node_info(node, parse) for node in nodes)
    return {info.name: info for info in infos}


def analyze_pods(
    pods: Iterable[Obj], events: Iterable[Obj], nodes: Iterable[Obj] = (), *, index: EventIndex | None = None
) -> list[PodTimeline]:
    """Timelines of every pod. Events are consumed first (they may be a generator), then pods."""
    event_index = index or EventIndex.of(events)
    builder = PodTimelineBuilder(event_index, node_infos(nodes, event_index.time))
    timelines: list[PodTimeline] = []
    for pod in pods:
        timeline = builder.build(pod)
        if timeline is not None:
            timelines.append(timeline)
    return timelines
