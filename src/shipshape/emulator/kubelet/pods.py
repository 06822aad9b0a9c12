"""One pod on one node, from admission to removal, as the kubelet's pod worker runs it.

Start-up: admission (resource fit) -> sandbox (waits for the node's network unless hostNetwork)
-> init containers in order (image, create/start, run to completion) -> containers in order
(image, create/start) -> probes (startup, then readiness and liveness) -> Ready.
Every step is a timer on the engine, so the same code runs in server and discrete-event mode.

Exact emulated times of each step go to the timeline record (phase -> (start, end)); the API
objects carry second-resolution timestamps only, as upstream.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shipshape.emulator.engine import Timer
from shipshape.emulator.kubelet import images
from shipshape.emulator.resources import PODS
from shipshape.emulator.store import Obj
from shipshape.kube.clock import parse_time, rfc3339
from shipshape.kube.scheduling import pod_requests, qos_class

if TYPE_CHECKING:
    from shipshape.emulator.kubelet.node import NodeAgent

ANNOTATION_PREFIX = "emulator.shipshape.dev/"
INIT_SECONDS = ANNOTATION_PREFIX + "init-seconds"
READY_AFTER_SECONDS = ANNOTATION_PREFIX + "ready-after-seconds"
EXIT_AFTER_SECONDS = ANNOTATION_PREFIX + "exit-after-seconds"
EXIT_CODE = ANNOTATION_PREFIX + "exit-code"
STOP_SECONDS = ANNOTATION_PREFIX + "stop-seconds"

DEFAULT_INIT_SECONDS = 1.0
DEFAULT_STOP_SECONDS = 1.0
BACKOFF_INITIAL = 10.0
# After a failed pull the pod worker's next sync (about a second later) finds the image in back-off.
IMAGE_BACKOFF_NOTICE_SECONDS = 1.0
BACKOFF_MAX = 300.0
# A container that ran this long gets its crash back-off reset (2 x the maximum back-off, as upstream).
BACKOFF_RESET_AFTER = 2 * BACKOFF_MAX

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
_ids = itertools.count(1)


class AnnotationError(ValueError):
    """An emulator annotation on a pod that cannot be used."""


def annotation_seconds(
    annotations: dict[str, str], key: str, container: str, default: float | None
) -> float | None:
    """Seconds from an annotation holding a number (every container) or a JSON map name -> seconds."""
    raw = annotations.get(key)
    if raw is None:
        return default
    try:
        value = json.loads(raw)
    except ValueError:
        raise AnnotationError(
            f"annotation {key}: {raw!r} is neither a number of seconds nor a JSON map of container "
            f"name to seconds"
        ) from None
    if isinstance(value, dict):
        if container not in value:
            return default
        value = value[container]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise AnnotationError(f"annotation {key}: seconds must be a non-negative number, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Probe:
    kind: str  # Startup | Readiness | Liveness
    initial_delay: float
    period: float
    success_threshold: int
    failure_threshold: int
    handler: Obj

    @classmethod
    def of(cls, kind: str, spec: Obj | None) -> Probe | None:
        if not spec:
            return None
        return cls(
            kind,
            float(spec.get("initialDelaySeconds", 0)),
            float(spec.get("periodSeconds", 10)) or 10.0,
            max(1, int(spec.get("successThreshold", 1))),
            max(1, int(spec.get("failureThreshold", 3))),
            spec,
        )

    def failure_output(self, pod_ip: str, ports: dict[str, int]) -> str:
        """What the prober reports while the application does not answer yet (connection refused)."""
        handler = self.handler

        def port_of(value: Any) -> str:
            return str(ports.get(value, value)) if isinstance(value, str) else str(value)

        if "httpGet" in handler:
            http = handler["httpGet"]
            scheme = str(http.get("scheme", "HTTP")).lower()
            host = http.get("host") or pod_ip
            path = http.get("path", "/")
            target = f"{host}:{port_of(http.get('port', 80))}"
            return f'Get "{scheme}://{target}{path}": dial tcp {target}: connect: connection refused'
        if "tcpSocket" in handler:
            tcp = handler["tcpSocket"]
            target = f"{tcp.get('host') or pod_ip}:{port_of(tcp.get('port', 0))}"
            return f"dial tcp {target}: connect: connection refused"
        if "grpc" in handler:
            target = f"{pod_ip}:{handler['grpc'].get('port', 0)}"
            timeout = int(self.handler.get("timeoutSeconds", 1))
            return f'timeout: failed to connect service "{target}" within {timeout}s'
        return ""  # exec: the command's output, empty for a plain non-zero exit


@dataclass(slots=True)
class ContainerSpec:
    name: str
    image: str
    pull_policy: str
    init: bool
    sidecar: bool
    startup: Probe | None
    readiness: Probe | None
    liveness: Probe | None
    ports: dict[str, int]
    pre_stop_seconds: float  # a preStop `sleep` hook; exec and httpGet hooks return at once here

    @classmethod
    def of(cls, container: Obj, init: bool) -> ContainerSpec:
        image = str(container.get("image", ""))
        pre_stop = ((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}
        return cls(
            name=str(container["name"]),
            image=image,
            pull_policy=container.get("imagePullPolicy") or images.default_pull_policy(image),
            init=init,
            sidecar=init and container.get("restartPolicy") == "Always",
            startup=Probe.of("Startup", container.get("startupProbe")),
            readiness=Probe.of("Readiness", container.get("readinessProbe")),
            liveness=Probe.of("Liveness", container.get("livenessProbe")),
            ports={p["name"]: int(p["containerPort"]) for p in container.get("ports") or [] if p.get("name")},
            pre_stop_seconds=max(0.0, float(pre_stop.get("seconds", 0))),
        )

    @property
    def field_path(self) -> str:
        return f"spec.{'initContainers' if self.init else 'containers'}{{{self.name}}}"


@dataclass(slots=True)
class ContainerRun:
    """The runtime state of one container, rendered into containerStatuses."""

    spec: ContainerSpec
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    container_id: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int = 0
    ready: bool = False
    started: bool = False
    restart_count: int = 0
    last_state: Obj = field(default_factory=dict)
    app_up_at: float = 0.0
    backoff: float = 0.0
    pull_backoff: float = 0.0
    epoch: int = 0  # bumped on every (re)start so that timers of an old run do nothing
    successes: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)

    def terminated(self) -> Obj:
        return {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": rfc3339(self.started_at) if self.started_at is not None else None,
            "finishedAt": rfc3339(self.finished_at) if self.finished_at is not None else None,
            "containerID": f"containerd://{self.container_id}",
        }

    def status(self) -> Obj:
        created = bool(self.container_id)
        out: Obj = {
            "name": self.spec.name,
            "image": images.normalize(self.spec.image) if created else self.spec.image,
            "imageID": images.image_id(self.spec.image) if created else "",
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started and self.state == "running",
            "lastState": {"terminated": self.last_state} if self.last_state else {},
        }
        if created:
            out["containerID"] = f"containerd://{self.container_id}"
        if self.state == "running":
            out["state"] = {"running": {"startedAt": rfc3339(self.started_at or 0.0)}}
        elif self.state == "terminated":
            out["state"] = {"terminated": self.terminated()}
        else:
            waiting: Obj = {"reason": self.reason}
            if self.message:
                waiting["message"] = self.message
            out["state"] = {"waiting": waiting}
        return out


@dataclass(slots=True)
class PodTiming:
    """What the pod's emulator annotations ask for (parsed once at admission)."""

    init_seconds: dict[str, float]
    ready_after: dict[str, float]
    exit_after: dict[str, float | None]
    exit_code: int
    stop_seconds: float
    errors: list[str]

    @classmethod
    def of(cls, pod: Obj, names: list[str], init_names: list[str]) -> PodTiming:
        annotations: dict[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
        errors: list[str] = []

        def seconds(key: str, name: str, default: float | None) -> float | None:
            try:
                return annotation_seconds(annotations, key, name, default)
            except AnnotationError as exc:
                if str(exc) not in errors:
                    errors.append(str(exc))
                return default

        exit_code = 0
        if EXIT_CODE in annotations:
            try:
                exit_code = int(annotations[EXIT_CODE])
            except ValueError:
                errors.append(f"annotation {EXIT_CODE}: expected an integer, got {annotations[EXIT_CODE]!r}")
        return cls(
            init_seconds={n: seconds(INIT_SECONDS, n, DEFAULT_INIT_SECONDS) or 0.0 for n in init_names},
            ready_after={n: seconds(READY_AFTER_SECONDS, n, 0.0) or 0.0 for n in names + init_names},
            exit_after={n: seconds(EXIT_AFTER_SECONDS, n, None) for n in names},
            exit_code=exit_code,
            stop_seconds=seconds(STOP_SECONDS, "", DEFAULT_STOP_SECONDS) or 0.0,
            errors=errors,
        )


class PodWorker:
    """Runs one admitted pod on a node and writes its status."""

    def __init__(self, agent: NodeAgent, pod: Obj) -> None:
        self.agent = agent
        md = pod["metadata"]
        self.uid: str = md["uid"]
        self.namespace: str = md.get("namespace", "default")
        self.name: str = md["name"]
        self.pod = pod  # the spec as admitted (read-only)
        spec = pod.get("spec") or {}
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        self.host_network = bool(spec.get("hostNetwork"))
        self.readiness_gates = [g["conditionType"] for g in spec.get("readinessGates") or []]
        self.inits = [
            ContainerRun(ContainerSpec.of(c, True), reason="PodInitializing")
            for c in spec.get("initContainers") or []
        ]
        first_reason = "PodInitializing" if self.inits else "ContainerCreating"
        self.mains = [
            ContainerRun(ContainerSpec.of(c, False), reason=first_reason)
            for c in spec.get("containers") or []
        ]
        self.timing = PodTiming.of(pod, [c.spec.name for c in self.mains], [c.spec.name for c in self.inits])
        self.timeline = agent.model.timeline_record(self.uid)
        self.alive = True
        self.terminating = False
        self.phase: str = "Pending"
        self.reason = ""
        self.message = ""
        self.start_time: float | None = None
        self.pod_ip = ""
        self.sandbox_ready = False
        self.first_pull_started: float | None = None
        self.last_pull_finished: float | None = None
        self.sli_recorded = False
        self._timers: dict[int, Timer] = {}  # pending timers of this pod, by a unique key
        self._flush_scheduled = False
        self._requests: dict[str, int] | None = None

    def requests(self) -> dict[str, int]:
        """The admitted pod's effective requests (computed once: the admitted spec does not change)."""
        if self._requests is None:
            self._requests = pod_requests(self.pod)
        return self._requests

    # ---- plumbing ------------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.agent.engine.now()

    @property
    def all_containers(self) -> list[ContainerRun]:
        return [*self.inits, *self.mains]

    def _later(self, delay: float, action: Callable[[], None]) -> Timer:
        key = next(_ids)

        def run() -> None:
            self._timers.pop(key, None)
            if self.alive:
                action()

        timer = self.agent.engine.call_later(delay, run)
        self._timers[key] = timer
        return timer

    def _cancel_timers(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _event(
        self, reason: str, message: str, *, warning: bool = False, container: ContainerRun | None = None
    ) -> None:
        current = self.agent.store.get(PODS, self.namespace, self.name)
        involved = current if current is not None and current["metadata"]["uid"] == self.uid else self.pod
        self.agent.recorder.record(
            involved,
            reason,
            message,
            type="Warning" if warning else "Normal",
            component="kubelet",
            host=self.agent.name,
            field_path=container.spec.field_path if container else "",
        )

    def _mark(self, phase: str, start: float, end: float | None = None) -> None:
        """Record a phase's exact times once (the first run is what start-up analysis needs)."""
        self.timeline.setdefault(phase, (start, self.now if end is None else end))

    def drop(self) -> None:
        """Forget the pod without writing anything (it was deleted, or the node went away)."""
        self.alive = False
        self._cancel_timers()
        self.agent.release_ip(self.pod_ip)

    # ---- admission and sandbox --------------------------------------------------------------
    def reject(self, reason: str, message: str) -> None:
        self._event(reason, message, warning=True)
        self.phase, self.reason, self.message = "Failed", reason, f"Pod was rejected: {message}"
        self.alive = False

        def change(pod: Obj) -> None:
            # The kubelet's rejection status; conditions other components own (PodScheduled) stay.
            kept = [
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") not in KUBELET_CONDITIONS
            ]
            pod["status"] = {
                "phase": "Failed",
                "reason": reason,
                "message": self.message,
                "qosClass": qos_class(pod),
            }
            if kept:
                pod["status"]["conditions"] = kept

        self._write(change)

    def start(self) -> None:
        self.start_time = self.now
        for error in self.timing.errors:
            self._event("InvalidAnnotation", f"{error}; using the default", warning=True)
        self.flush()
        self._await_network()

    def _await_network(self) -> None:
        admitted = self.now
        if self.host_network or self.agent.network_ready:
            self._create_sandbox()
            return
        self._event(
            "NetworkNotReady",
            "network is not ready: container runtime network not ready: NetworkReady=false "
            "reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
            warning=True,
        )

        def ready() -> None:
            if self.alive and not self.terminating:
                self._mark("network-wait", admitted)
                self._create_sandbox()

        self.agent.when_network_ready(ready)

    def _create_sandbox(self) -> None:
        began = self.now

        def done() -> None:
            self.sandbox_ready = True
            self.pod_ip = self.agent.host_ip if self.host_network else self.agent.allocate_ip()
            self._mark("sandbox", began)
            self.flush_soon()
            self._next_init(0)

        self._later(self.agent.settings.sandbox_seconds, done)

    # ---- images -------------------------------------------------------------------------
    def _ensure_image(self, run: ContainerRun, then: Callable[[], None]) -> None:
        spec = run.spec
        ref = images.normalize(spec.image)
        requested = self.now
        present = self.agent.has_image(ref)
        key = f"image:{spec.name}"
        if spec.pull_policy == "Never" or (spec.pull_policy != "Always" and present):
            if present:
                self._event(
                    "Pulled", f'Container image "{spec.image}" already present on machine', container=run
                )
                self._mark(key, requested, requested)
                then()
                return
            message = f'Container image "{spec.image}" is not present with pull policy of Never'
            self._event("ErrImageNeverPull", message, warning=True, container=run)
            run.state, run.reason, run.message = "waiting", "ErrImageNeverPull", message
            self.flush_soon()
            return
        size = self.agent.image_size(spec.image)
        missing = self.agent.model.image_missing(spec.image)
        self._event("Pulling", f'Pulling image "{spec.image}"', container=run)
        if self.first_pull_started is None:
            self.first_pull_started = requested

        def pulled(started: float, finished: float) -> None:
            if missing:
                if self.alive and not self.terminating:
                    self._pull_failed(run, then)
                return
            self.agent.add_image(ref, size)
            if not self.alive or self.terminating:
                return
            run.pull_backoff = 0.0
            self.last_pull_finished = finished
            self._event(
                "Pulled",
                f'Successfully pulled image "{spec.image}" in {images.go_duration(finished - started)} '
                f"({images.go_duration(finished - requested)} including waiting). Image size: {size} bytes.",
                container=run,
            )
            self._mark(f"pull:{spec.name}", started, finished)
            self._mark(key, requested, finished)
            then()

        self.agent.pull(ref, 0 if present or missing else size, pulled)

    def _pull_failed(self, run: ContainerRun, then: Callable[[], None]) -> None:
        """The registry has no such image: ErrImagePull, then ImagePullBackOff until the next try."""
        spec = run.spec
        ref = images.normalize(spec.image)
        error = (
            f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": '
            f'failed to resolve reference "{ref}": {ref}: not found'
        )
        self._event("Failed", f'Failed to pull image "{spec.image}": {error}', warning=True, container=run)
        self._event("Failed", "Error: ErrImagePull", warning=True, container=run)
        run.state, run.reason, run.message = "waiting", "ErrImagePull", error
        self.flush_soon()
        delay = run.pull_backoff or BACKOFF_INITIAL
        run.pull_backoff = min(BACKOFF_MAX, delay * 2)

        def backing_off() -> None:
            message = f'Back-off pulling image "{spec.image}"'
            self._event("BackOff", message, container=run)
            self._event("Failed", "Error: ImagePullBackOff", warning=True, container=run)
            run.reason, run.message = "ImagePullBackOff", message
            self.flush_soon()

        self._later(min(IMAGE_BACKOFF_NOTICE_SECONDS, delay), backing_off)
        self._later(delay, lambda: self._ensure_image(run, then))

    # ---- containers ---------------------------------------------------------------------
    def _run_container(self, run: ContainerRun, then: Callable[[], None]) -> None:
        """Image, then create and start; `then` once the container runs."""

        def create() -> None:
            began = self.now
            run.container_id = f"{next(_ids):064x}"
            run.state, run.reason, run.message = "waiting", "ContainerCreating", ""
            start_seconds = self.agent.settings.container_start_seconds
            self._later(
                start_seconds / 2,
                lambda: self._event("Created", f"Created container: {run.spec.name}", container=run),
            )

            def started() -> None:
                run.epoch += 1
                run.state, run.reason = "running", ""
                run.started_at = self.now
                run.started = run.spec.startup is None
                run.ready = False
                run.app_up_at = self.now + self.timing.ready_after.get(run.spec.name, 0.0)
                run.successes.clear()
                run.failures.clear()
                self._event("Started", f"Started container {run.spec.name}", container=run)
                self._mark(f"start:{run.spec.name}", began)
                self._start_probes(run)
                self.flush_soon()
                then()

            self._later(start_seconds, started)

        self._ensure_image(run, create)

    def _next_init(self, index: int) -> None:
        if index >= len(self.inits):
            self._initialized()
            return
        run = self.inits[index]

        def running() -> None:
            if run.spec.sidecar:
                self._next_init(index + 1)
                return
            seconds = self.timing.init_seconds.get(run.spec.name, DEFAULT_INIT_SECONDS)
            epoch = run.epoch

            def finished() -> None:
                if run.epoch != epoch:
                    return
                run.state, run.reason, run.exit_code = "terminated", "Completed", 0
                run.finished_at = self.now
                run.ready = True
                self._mark(f"init:{run.spec.name}", run.started_at or self.now)
                self.flush_soon()
                self._next_init(index + 1)

            self._later(seconds, finished)

        self._run_container(run, running)

    def _initialized(self) -> None:
        if self.inits:
            self._mark("initialized", self.timeline.get("sandbox", (self.now, self.now))[1])
        for run in self.mains:
            if run.state == "waiting" and run.reason == "PodInitializing":
                run.reason = "ContainerCreating"
        self.flush_soon()
        began = self.now
        self._next_main(0, began)

    def _next_main(self, index: int, began: float) -> None:
        if index >= len(self.mains):
            self._mark("containers-started", began)
            self._record_sli()
            return
        run = self.mains[index]

        def running() -> None:
            self._schedule_exit(run)
            self._next_main(index + 1, began)

        self._run_container(run, running)

    def _record_sli(self) -> None:
        if self.sli_recorded:
            return
        self.sli_recorded = True
        created = self.timeline.get("created", (self.now, self.now))[0]
        pulling = 0.0
        if self.first_pull_started is not None and self.last_pull_finished is not None:
            pulling = self.last_pull_finished - self.first_pull_started
        first_network_pod = not self.host_network and not self.agent.first_network_pod_seen
        if first_network_pod:
            self.agent.first_network_pod_seen = True
        self.agent.model.observe_pod_start(
            sli=max(0.0, self.now - created - pulling),
            total=self.now - created,
            first_network_pod=first_network_pod,
        )

    def _schedule_exit(self, run: ContainerRun) -> None:
        seconds = self.timing.exit_after.get(run.spec.name)
        if seconds is None:
            return
        epoch = run.epoch
        self._later(seconds, lambda: self._exited(run, epoch, self.timing.exit_code))

    def _exited(self, run: ContainerRun, epoch: int, code: int, reason: str | None = None) -> None:
        if run.epoch != epoch or run.state != "running":
            return
        run.epoch += 1
        run.state, run.exit_code = "terminated", code
        run.reason = reason or ("Completed" if code == 0 else "Error")
        run.finished_at = self.now
        run.ready = False
        run.started = False
        restart = (
            run.spec.sidecar
            or self.restart_policy == "Always"
            or (self.restart_policy == "OnFailure" and code != 0)
        )
        if not restart:
            self._check_finished()
            self.flush_soon()
            return
        ran = self.now - (run.started_at or self.now)
        if ran >= BACKOFF_RESET_AFTER:
            run.backoff = 0.0
        delay = run.backoff
        run.backoff = BACKOFF_INITIAL if run.backoff == 0 else min(BACKOFF_MAX, run.backoff * 2)
        run.last_state = run.terminated()
        run.state = "waiting"
        if delay > 0:
            run.reason = "CrashLoopBackOff"
            pod_ref = f"{self.name}_{self.namespace}({self.uid})"
            run.message = (
                f"back-off {images.go_duration(delay)} restarting failed container={run.spec.name} "
                f"pod={pod_ref}"
            )
            self._event(
                "BackOff",
                f"Back-off restarting failed container {run.spec.name} in pod {pod_ref}",
                warning=True,
                container=run,
            )
        else:
            run.reason, run.message = "ContainerCreating", ""
        self.flush_soon()

        def restart_now() -> None:
            run.restart_count += 1
            self._run_container(run, lambda: self._schedule_exit(run) if not run.spec.init else None)

        self._later(delay, restart_now)

    def _check_finished(self) -> None:
        """A pod whose containers have all exited for good reaches a terminal phase."""
        if any(run.state != "terminated" for run in self.mains):
            return
        failed = any(run.exit_code != 0 for run in self.mains)
        for run in self.inits:
            if run.spec.sidecar and run.state == "running":
                run.epoch += 1
                run.state, run.reason, run.exit_code, run.finished_at = "terminated", "Completed", 0, self.now
                run.ready = False
        self.phase = "Failed" if failed else "Succeeded"
        self._finish()

    def _finish(self) -> None:
        self.sandbox_ready = False
        self._cancel_timers()
        self.agent.release_ip(self.pod_ip)
        self.agent.pod_finished(self)

    # ---- probes -------------------------------------------------------------------------
    def _start_probes(self, run: ContainerRun) -> None:
        if run.spec.readiness is None and run.spec.startup is None:
            run.ready = True
        for probe in (run.spec.startup, run.spec.readiness, run.spec.liveness):
            if probe is not None:
                self._schedule_probe(run, probe, probe.initial_delay)

    def _schedule_probe(self, run: ContainerRun, probe: Probe, delay: float) -> None:
        epoch = run.epoch
        self._later(delay, lambda: self._probe(run, probe, epoch))

    def _probe(self, run: ContainerRun, probe: Probe, epoch: int) -> None:
        if run.epoch != epoch or run.state != "running":
            return
        if probe.kind != "Startup" and not run.started:
            self._schedule_probe(run, probe, probe.period)
            return
        success = self.now >= run.app_up_at - 1e-9
        kind = probe.kind
        if success:
            run.failures[kind] = 0
            run.successes[kind] = run.successes.get(kind, 0) + 1
        else:
            run.successes[kind] = 0
            run.failures[kind] = run.failures.get(kind, 0) + 1
            output = probe.failure_output(self.pod_ip, run.spec.ports)
            self._event("Unhealthy", f"{kind} probe failed: {output}", warning=True, container=run)
        if kind == "Startup":
            if success:
                run.started = True
                if run.spec.readiness is None:
                    run.ready = True
                self.flush_soon()
                return  # a startup probe stops once it succeeded
            if run.failures[kind] >= probe.failure_threshold:
                self._kill_for_probe(run, "startup")
                return
        elif kind == "Readiness":
            if success and run.successes[kind] >= probe.success_threshold and not run.ready:
                run.ready = True
                self.flush_soon()
            elif not success and run.failures[kind] >= probe.failure_threshold and run.ready:
                run.ready = False
                self.flush_soon()
            if run.ready:
                return  # the emulated application stays up: further probes could not change anything
        else:
            if not success and run.failures[kind] >= probe.failure_threshold:
                self._kill_for_probe(run, "liveness")
                return
            if success:
                return
        self._schedule_probe(run, probe, probe.period)

    def _kill_for_probe(self, run: ContainerRun, which: str) -> None:
        self._event(
            "Killing", f"Container {run.spec.name} failed {which} probe, will be restarted", container=run
        )
        epoch = run.epoch
        self._later(
            min(self.timing.stop_seconds, self._grace()),
            lambda: self._exited(run, epoch, 137, "Error"),
        )

    def _grace(self) -> float:
        current = self.agent.store.get(PODS, self.namespace, self.name) or self.pod
        md = current.get("metadata") or {}
        if md.get("deletionGracePeriodSeconds") is not None:
            return float(md["deletionGracePeriodSeconds"])
        return float((current.get("spec") or {}).get("terminationGracePeriodSeconds", 30))

    # ---- termination --------------------------------------------------------------------
    def terminate(self) -> None:
        """Graceful deletion: stop the containers, report a terminal phase, then remove the pod."""
        if self.terminating or not self.alive:
            return
        self.terminating = True
        self._cancel_timers()
        began = self.now
        running = [run for run in self.all_containers if run.state == "running"]
        grace = self._grace()
        # Each container: preStop hook, then SIGTERM and the application's stop time; SIGKILL at the grace.
        wanted = {run.spec.name: run.spec.pre_stop_seconds + self.timing.stop_seconds for run in running}
        for run in running:
            self._event("Killing", f"Stopping container {run.spec.name}", container=run)
        stop = min(grace, max(wanted.values())) if running else 0.0

        def stopped() -> None:
            for run in running:
                run.epoch += 1
                killed = wanted[run.spec.name] > grace
                run.state, run.finished_at = "terminated", began + min(grace, wanted[run.spec.name])
                run.exit_code, run.reason = (137, "Error") if killed else (0, "Completed")
                run.ready = False
                run.started = False
            self._mark("terminating", began)
            finished = all(run.state == "terminated" and run.exit_code == 0 for run in self.mains)
            if self.phase not in ("Succeeded", "Failed"):
                self.phase = "Succeeded" if finished and self.mains else "Failed"
            self.sandbox_ready = False
            self.flush()
            self.alive = False
            self.agent.release_ip(self.pod_ip)
            self.agent.remove_pod(self)

        self._later(stop, stopped)

    # ---- status -------------------------------------------------------------------------
    def flush_soon(self) -> None:
        """Write the status once at the end of this instant (several steps often finish together)."""
        if self._flush_scheduled:
            return
        self._flush_scheduled = True

        def run() -> None:
            self._flush_scheduled = False
            if self.alive:
                self.flush()

        self.agent.engine.call_soon(run)

    def flush(self) -> None:
        current = self.agent.store.get(PODS, self.namespace, self.name)
        if current is None or current["metadata"]["uid"] != self.uid:
            return
        # `render_status` only reads the stored status: no copy of the pod is needed.
        status = self.render_status(current.get("status") or {})
        self.agent.store.write_status(PODS, self.namespace, self.name, status)

    def _write(self, change: Callable[[Obj], None]) -> None:
        current = self.agent.store.get(PODS, self.namespace, self.name)
        if current is None or current["metadata"]["uid"] != self.uid:
            return
        self.agent.store.mutate(PODS, self.namespace, self.name, change, subresource="status")

    def _phase(self) -> str:
        if self.phase in ("Succeeded", "Failed"):
            return self.phase
        if any(run.state == "running" or run.restart_count or run.last_state for run in self.mains):
            return "Running"
        return "Pending"

    def render_status(self, current: Obj) -> Obj:
        """The pod status the kubelet reports now, keeping what other components own."""
        now = self.now
        phase = self._phase()
        terminal = phase in ("Succeeded", "Failed")
        status: Obj = {k: v for k, v in current.items() if k not in ("reason", "message")}
        status["phase"] = phase
        status["hostIP"] = self.agent.host_ip
        status["hostIPs"] = [{"ip": self.agent.host_ip}]
        if self.pod_ip:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.start_time is not None and "startTime" not in status:
            status["startTime"] = rfc3339(self.start_time)
        status["qosClass"] = current.get("qosClass") or qos_class(self.pod)
        if self.inits:
            status["initContainerStatuses"] = [run.status() for run in self.inits]
        status["containerStatuses"] = [run.status() for run in self.mains]
        status["conditions"] = self._conditions(current.get("conditions") or [], terminal, now)
        return status

    def _conditions(self, existing: list[Obj], terminal: bool, now: float) -> list[Obj]:
        def names(runs: list[ContainerRun]) -> str:
            return "[" + " ".join(run.spec.name for run in runs) + "]"

        incomplete = [
            run
            for run in self.inits
            if (run.state != "terminated" or run.exit_code != 0) and not (run.spec.sidecar and run.started)
        ]
        unready = [run for run in [*[r for r in self.inits if r.spec.sidecar], *self.mains] if not run.ready]
        wanted: dict[str, tuple[str, str, str]] = {}
        wanted["PodReadyToStartContainers"] = ("True" if self.sandbox_ready else "False", "", "")
        if incomplete and not terminal:
            wanted["Initialized"] = (
                "False",
                "ContainersNotInitialized",
                f"containers with incomplete status: {names(incomplete)}",
            )
        else:
            wanted["Initialized"] = ("True", "", "")
        if terminal:
            containers_ready = ("False", "PodCompleted", "")
        elif unready:
            containers_ready = (
                "False",
                "ContainersNotReady",
                f"containers with unready status: {names(unready)}",
            )
        else:
            containers_ready = ("True", "", "")
        ready = containers_ready
        if ready[0] == "True":
            by_type = {c.get("type"): c for c in existing}
            for gate in self.readiness_gates:
                gate_condition = by_type.get(gate)
                if gate_condition is None:
                    message = f'corresponding condition of pod readiness gate "{gate}" does not exist.'
                    ready = ("False", "ReadinessGatesNotReady", message)
                    break
                if gate_condition.get("status") != "True":
                    message = (
                        f'the status of pod readiness gate "{gate}" is not "True", '
                        f"but {gate_condition.get('status')}"
                    )
                    ready = ("False", "ReadinessGatesNotReady", message)
                    break
        wanted["Ready"] = ready
        wanted["ContainersReady"] = containers_ready
        if ready[0] == "True":
            self._mark("ready", self.timeline.get("containers-started", (now, now))[1], now)
            created = self.timeline.get("created")
            if created is not None:
                self._mark("startup", created[0], now)
        previous = {c.get("type"): c for c in existing}
        out: list[Obj] = []
        for ctype in KUBELET_CONDITIONS:
            cstatus, reason, message = wanted[ctype]
            before = previous.get(ctype)
            since = before.get("lastTransitionTime") if before and before.get("status") == cstatus else None
            condition: Obj = {
                "type": ctype,
                "status": cstatus,
                "lastProbeTime": None,
                "lastTransitionTime": since or rfc3339(now),
            }
            if reason:
                condition["reason"] = reason
            if message:
                condition["message"] = message
            out.append(condition)
        if "PodScheduled" not in previous:
            out.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(now),
                }
            )
        out.extend(c for c in existing if c.get("type") not in KUBELET_CONDITIONS)
        return out

    # ---- adoption after a kubelet restart -------------------------------------------------
    def adopt_running(self, status: Obj) -> None:
        """Take over a pod that already runs (the node came back): its containers keep running."""
        self.start_time = self.start_time or self.now
        self.sandbox_ready = True
        self.pod_ip = str(status.get("podIP") or "")
        if self.pod_ip and not self.host_network:
            self.agent.reserve_ip(self.pod_ip)
        self.sli_recorded = True
        reported = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        by_name = {s.get("name"): s for s in reported}
        for run in self.all_containers:
            seen = by_name.get(run.spec.name) or {}
            run.container_id = (
                str(seen.get("containerID", "")).removeprefix("containerd://") or f"{next(_ids):064x}"
            )
            run.restart_count = int(seen.get("restartCount", 0))
            run.ready = True
            if run.spec.init and not run.spec.sidecar:
                run.state, run.reason, run.exit_code = "terminated", "Completed", 0
                continue
            run.state, run.reason = "running", ""
            running_state = (seen.get("state") or {}).get("running") or {}
            started = running_state.get("startedAt")
            run.started_at = parse_time(started) if started else self.now
            run.started = True
            run.epoch += 1
            if not run.spec.init:
                self._schedule_exit(run)
        self.flush_soon()
