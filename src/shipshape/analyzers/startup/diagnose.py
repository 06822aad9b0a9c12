"""Diagnosis rules: each names a cause of slow start-up, the fix, and the evidence it found.

Rules are small pure functions over the pod timelines (and node facts), registered explicitly in
RULES. Thresholds are typed settings with documented defaults.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from shipshape.analyzers.startup import model, nodes
from shipshape.analyzers.startup.model import ContainerTiming, Finding, NodeInfo, PodTimeline
from shipshape.analyzers.startup.nodes import NodeTimeline

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Thresholds:
    serialized_min_chain: int = 3  # pulls back to back on one node
    serialized_gap: float = 2.0  # s between one pull's end and the next one's start (timestamp slack)
    serialized_min_wait: float = 1.0  # s a pull must have queued to count as serialized
    large_image_bytes: int = 500 * MIB
    slow_pull: float = 30.0  # s
    slow_scheduling: float = 5.0  # s
    slow_admission: float = 2.0  # s, median per workload
    long_init: float = 10.0  # s per init container
    readiness_delay: int = 10  # s of initialDelaySeconds
    low_cpu_limit_millis: int = 500
    slow_start: float = 10.0  # s of container start + probe wait
    burst_pods: int = 10  # pods starting on one node ...
    burst_window: float = 10.0  # ... within this many seconds
    slow_sandbox: float = 5.0  # s
    new_node_window: float = 300.0  # s after registration during which a node is "new"
    max_evidence: int = 8


@dataclass(frozen=True, slots=True)
class PodWebhook:
    """An admission webhook that intercepts pod creation, from its webhook configuration."""

    name: str
    kind: str  # mutating | validating
    configuration: str
    timeout_seconds: int
    failure_policy: str
    scoped: bool  # has a namespaceSelector or objectSelector: may not see every pod

    def describe(self) -> str:
        scope = ", scoped by selectors" if self.scoped else ""
        return (
            f"{self.name} ({self.kind}, timeoutSeconds={self.timeout_seconds}, "
            f"failurePolicy={self.failure_policy}{scope})"
        )


_WEBHOOK_KINDS = {"MutatingWebhookConfiguration": "mutating", "ValidatingWebhookConfiguration": "validating"}


def _covers_pod_creation(rule: Mapping[str, object]) -> bool:
    def listed(key: str, *values: str) -> bool:
        entries = rule.get(key)
        return isinstance(entries, list) and any(value in entries for value in values)

    return (
        listed("operations", "CREATE", "*")
        and listed("apiGroups", "", "*")
        and listed("apiVersions", "v1", "*")
        and listed("resources", "pods", "*", "*/*")
    )


def pod_webhooks(configurations: Iterable[Mapping[str, object]]) -> list[PodWebhook]:
    """Webhooks of Mutating/ValidatingWebhookConfiguration objects (each with its `kind`) whose rules
    cover pod CREATE, in the API server's calling order (mutating first)."""
    found: list[PodWebhook] = []
    for configuration in configurations:
        kind = _WEBHOOK_KINDS.get(str(configuration.get("kind") or ""))
        metadata = configuration.get("metadata")
        webhooks = configuration.get("webhooks")
        if kind is None or not isinstance(metadata, Mapping) or not isinstance(webhooks, list):
            continue
        for webhook in webhooks:
            if not isinstance(webhook, Mapping) or not any(
                isinstance(rule, Mapping) and _covers_pod_creation(rule)
                for rule in webhook.get("rules") or []
            ):
                continue
            found.append(
                PodWebhook(
                    name=str(webhook.get("name") or ""),
                    kind=kind,
                    configuration=str(metadata.get("name") or ""),
                    timeout_seconds=int(webhook.get("timeoutSeconds") or 10),
                    failure_policy=str(webhook.get("failurePolicy") or "Fail"),
                    scoped=bool(webhook.get("namespaceSelector") or webhook.get("objectSelector")),
                )
            )
    found.sort(key=lambda w: (w.kind != "mutating", w.configuration, w.name))
    return found


@dataclass(frozen=True)
class DiagnosisInput:
    timelines: Sequence[PodTimeline]
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    node_timelines: Mapping[str, NodeTimeline] = field(default_factory=dict)
    thresholds: Thresholds = Thresholds()
    # Webhooks that intercept pod creation; None when the webhook configurations were not read.
    webhooks: Sequence[PodWebhook] | None = None

    @cached_property
    def by_workload(self) -> dict[str, list[PodTimeline]]:
        return _by(self.timelines, _workload)

    @cached_property
    def by_node(self) -> dict[str, list[PodTimeline]]:
        """Pods that were scheduled, by node."""
        return _by((t for t in self.timelines if t.node and t.scheduled is not None), lambda t: t.node)


Rule = Callable[[DiagnosisInput], list[Finding]]


def _s(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}s"


def _by(timelines: Iterable[PodTimeline], key: Callable[[PodTimeline], str]) -> dict[str, list[PodTimeline]]:
    groups: dict[str, list[PodTimeline]] = {}
    for timeline in timelines:
        groups.setdefault(key(timeline), []).append(timeline)
    return groups


def _workload(timeline: PodTimeline) -> str:
    return f"{timeline.namespace}/{timeline.workload}"


def serialized_image_pulls(data: DiagnosisInput) -> list[Finding]:
    """Pulls on a node that queued and then ran one after another: the kubelet's serial puller."""
    limits = data.thresholds
    findings = []
    for node_name, pods in data.by_node.items():
        pulls: list[tuple[float, float, PodTimeline, ContainerTiming]] = []
        for pod in pods:
            for c in pod.containers:
                if c.image_present is False and c.pull_end is not None and c.pull is not None:
                    pulls.append((c.pull_end - c.pull, c.pull_end, pod, c))
        pulls.sort(key=lambda p: p[0])
        best: list[tuple[float, float, PodTimeline, ContainerTiming]] = []
        chain: list[tuple[float, float, PodTimeline, ContainerTiming]] = []
        for pull in pulls:
            start, _, _, container = pull
            previous_end = chain[-1][1] if chain else None
            follows = (
                previous_end is not None
                and abs(start - previous_end) <= limits.serialized_gap
                and (container.pull_wait or 0.0) >= limits.serialized_min_wait
            )
            chain = [*chain, pull] if follows else [pull]
            if len(chain) > len(best):
                best = chain
        if len(best) < limits.serialized_min_chain:
            continue
        waited = sum(c.pull_wait or 0.0 for _, _, _, c in best)
        evidence = tuple(
            f"{pod.key}/{c.name}: {c.image} waited {_s(c.pull_wait)} then pulled {_s(c.pull)}"
            for _, _, pod, c in best[: limits.max_evidence]
        )
        findings.append(
            Finding(
                rule="serialized-image-pulls",
                title=f"Image pulls ran one at a time on {node_name}",
                cause=(
                    f"{len(best)} pulls on {node_name} queued behind each other ({waited:.0f} s of waiting "
                    "in all): "
                    "the kubelet pulls one image at a time by default (serializeImagePulls: true)"
                ),
                fix=(
                    "set serializeImagePulls: false in the kubelet configuration, with maxParallelImagePulls "
                    "(e.g. 3-5) to bound the load on the node; pre-pull common images"
                ),
                evidence=evidence,
                subjects=(node_name,),
            )
        )
    return findings


def large_images(data: DiagnosisInput) -> list[Finding]:
    """Big or slow image pulls: cold caches on new nodes."""
    limits = data.thresholds
    slow: dict[str, list[tuple[PodTimeline, ContainerTiming]]] = {}
    for pod in data.timelines:
        for c in pod.containers:
            if c.image_present is not False or c.pull is None:
                continue
            if c.pull >= limits.slow_pull or (c.image_size or 0) >= limits.large_image_bytes:
                slow.setdefault(c.image, []).append((pod, c))
    findings = []
    for image, pulls in sorted(slow.items(), key=lambda item: -sum(c.pull or 0.0 for _, c in item[1])):
        node_names = sorted({pod.node for pod, _ in pulls})
        size = max((c.image_size or 0 for _, c in pulls), default=0)
        median_pull = statistics.median(c.pull or 0.0 for _, c in pulls)
        findings.append(
            Finding(
                rule="large-images",
                title=f"Slow pulls of {image}",
                cause=(
                    f"{image} ({size / MIB:.0f} MiB) took a median {median_pull:.1f} s to pull, "
                    f"{len(pulls)} times on {len(node_names)} nodes whose cache did not have it"
                ),
                fix=(
                    "pre-pull it on new nodes (a DaemonSet or the node image), use a smaller base image "
                    "(distroless, multi-stage builds), or lazy pulling (SOCI, stargz snapshotter)"
                ),
                evidence=tuple(
                    f"{pod.key}/{c.name} on {pod.node}: pulled in {_s(c.pull)}, "
                    f"{(c.image_size or 0) / MIB:.0f} MiB"
                    for pod, c in pulls[: limits.max_evidence]
                ),
                subjects=(image,),
            )
        )
    return findings


_INSUFFICIENT = re.compile(r"Insufficient [\w./-]+|Too many pods")
_CONSTRAINTS = re.compile(
    r"didn't match Pod's node affinity/selector|didn't match pod (?:anti-)?affinity rules|"
    r"didn't match pod topology spread constraints|had untolerated taint|didn't have free ports"
)


def slow_scheduling(data: DiagnosisInput) -> list[Finding]:
    limits = data.thresholds
    findings = []
    slow = [t for t in data.timelines if (t.phases.get(model.SCHEDULING) or 0.0) >= limits.slow_scheduling]
    unscheduled = [t for t in data.timelines if t.outcome == model.UNSCHEDULED]
    for workload, pods in _by([*slow, *unscheduled], _workload).items():
        messages = [p.unschedulable_message for p in pods if p.unschedulable_message]
        capacity = sorted({m for text in messages for m in _INSUFFICIENT.findall(text)})
        constraints = sorted({m for text in messages for m in _CONSTRAINTS.findall(text)})
        if capacity:
            cause = f"not enough free capacity ({', '.join(capacity)}): pods waited for nodes to be added"
            fix = (
                "keep headroom (low-priority placeholder pods), scale the node pool faster, or right-size "
                "requests"
            )
        elif constraints:
            cause = f"scheduling constraints too strict: nodes {'; '.join(constraints)}"
            fix = "relax node affinity/selectors, anti-affinity or topology spread, or add tolerations"
        else:
            cause = "pods waited in the scheduling queue without an unschedulable reason"
            fix = "check the scheduler's throughput (QPS to the API server) and the number of pending pods"
        waits = [p.phases.get(model.SCHEDULING) for p in pods]
        known = [w for w in waits if w is not None]
        evidence = [
            f"{p.key}: scheduled after {_s(p.phases.get(model.SCHEDULING))}, {p.scheduling_attempts} failed "
            "attempts"
            for p in pods[: limits.max_evidence]
        ]
        evidence += [f"last reason: {m}" for m in sorted(set(messages))[:2]]
        findings.append(
            Finding(
                rule="slow-scheduling",
                title=f"Slow scheduling of {workload}",
                cause=cause + (f" (up to {max(known):.0f} s)" if known else " (still pending)"),
                fix=fix,
                evidence=tuple(evidence),
                subjects=(workload,),
            )
        )
    return findings


_WEBHOOK = re.compile(r'failed calling webhook "([^"]+)"')


def slow_admission(data: DiagnosisInput) -> list[Finding]:
    """Pod creation requests that took long to be admitted.

    What the product can see is the gap between the controller's request (the Deployment's
    `ScalingReplicaSet` event) and the pod's creation (its creationTimestamp, or the ReplicaSet's
    `SuccessfulCreate` when later): mutating webhooks run before the API server stamps
    creationTimestamp, validating ones after it and before `SuccessfulCreate`. The webhook
    configurations name the suspects; per-webhook latency is only in the API server's own metrics
    (`apiserver_admission_webhook_admission_duration_seconds{name=...}`) and audit annotations
    (`apiserver.latency.k8s.io/mutating-webhook`, `.../validating-webhook`), which the evidence
    points to.
    """
    limits = data.thresholds
    findings = []
    for workload, pods in data.by_workload.items():
        values = [v for p in pods if (v := p.phases.get(model.ADMISSION)) is not None]
        errors = [e for p in pods for e in p.admission_errors]
        median = statistics.median(values) if values else None
        if not errors and (median is None or median < limits.slow_admission):
            continue
        failing = sorted({m for e in errors for m in _WEBHOOK.findall(e)})
        evidence = [f"median creation request -> created: {_s(median)} over {len(values)} pods"]
        evidence += [f"FailedCreate: {e}" for e in sorted(set(errors))[:3]]
        fix = (
            "lower the webhooks' timeoutSeconds, scope them with namespaceSelector/objectSelector, "
            "run more webhook replicas, and choose failurePolicy deliberately"
        )
        if failing:
            cause = f"admission webhooks delay pod creation ({', '.join(failing)} failed or timed out)"
        elif data.webhooks is None:
            cause = (
                "admission webhooks delay pod creation (the webhook configurations were not read: list "
                "MutatingWebhookConfigurations and ValidatingWebhookConfigurations to name them)"
            )
        elif data.webhooks:
            cause = "admission webhooks that intercept pod creation delay it: " + ", ".join(
                w.name for w in data.webhooks
            )
            evidence += [
                f"intercepts pod CREATE: {w.describe()}" for w in data.webhooks[: limits.max_evidence]
            ]
        else:
            cause = (
                "pod creation requests were slow although no admission webhook intercepts pods: the API "
                "server (its latency, API Priority and Fairness) or the controller's creation rate "
                "(slow-start batches, client QPS) holds them"
            )
            fix = (
                "check the API server's request latency for pod creates (apiserver_request_duration_seconds"
                '{verb="POST",resource="pods"}) and flow-control queueing, and kube-controller-manager\'s '
                "--kube-api-qps/--kube-api-burst"
            )
        if data.webhooks:
            evidence.append(
                "per-webhook latency: apiserver_admission_webhook_admission_duration_seconds{name=...} "
                "in the API server's metrics, or the audit annotations "
                "apiserver.latency.k8s.io/mutating-webhook and apiserver.latency.k8s.io/validating-webhook"
            )
        findings.append(
            Finding(
                rule="slow-admission",
                title=f"Slow pod admission for {workload}",
                cause=cause,
                fix=fix,
                evidence=tuple(evidence),
                subjects=(workload,),
            )
        )
    return findings


def long_init_containers(data: DiagnosisInput) -> list[Finding]:
    limits = data.thresholds
    findings = []
    for workload, pods in data.by_workload.items():
        long_runs = [
            (p, c) for p in pods for c in p.containers if c.init and (c.run_time or 0.0) >= limits.long_init
        ]
        if not long_runs:
            continue
        names = sorted({c.name for _, c in long_runs})
        findings.append(
            Finding(
                rule="long-init-containers",
                title=f"Long init containers in {workload}",
                cause=(
                    f"init containers {', '.join(names)} run for "
                    f"{max(c.run_time or 0 for _, c in long_runs):.0f} s "
                    "before any container can start"
                ),
                fix=(
                    "move the work out of the start path (a Job, a baked image, a cache), or run it as a "
                    "sidecar"
                ),
                evidence=tuple(
                    f"{p.key}/{c.name}: ran {_s(c.run_time)}" for p, c in long_runs[: limits.max_evidence]
                ),
                subjects=(workload,),
            )
        )
    return findings


def readiness_initial_delay(data: DiagnosisInput) -> list[Finding]:
    limits = data.thresholds
    findings = []
    for workload, pods in data.by_workload.items():
        gated = []
        for pod in pods:
            wait = pod.phases.get(model.PROBE_WAIT)
            for c in pod.containers:
                delay = c.readiness_initial_delay or 0
                if c.init or c.has_startup_probe or delay < limits.readiness_delay or wait is None:
                    continue
                if wait >= delay - 1.0:
                    gated.append((pod, c, delay, wait))
        if not gated:
            continue
        delay = max(d for _, _, d, _ in gated)
        findings.append(
            Finding(
                rule="readiness-initial-delay",
                title=f"Readiness held back by initialDelaySeconds in {workload}",
                cause=(
                    f"readinessProbe.initialDelaySeconds={delay} without a startupProbe: pods cannot be "
                    "Ready "
                    "before that delay however fast they start"
                ),
                fix=(
                    "replace the delay with a startupProbe (short periodSeconds, failureThreshold for the "
                    "worst "
                    "case) and set initialDelaySeconds to 0"
                ),
                evidence=tuple(
                    f"{p.key}/{c.name}: initialDelaySeconds={d}, probe wait {_s(w)}"
                    for p, c, d, w in gated[: limits.max_evidence]
                ),
                subjects=(workload,),
            )
        )
    return findings


def low_cpu_limits(data: DiagnosisInput) -> list[Finding]:
    limits = data.thresholds
    findings = []
    for workload, pods in data.by_workload.items():
        slow = []
        for pod in pods:
            start = (pod.phases.get(model.CONTAINER_START) or 0.0) + (pod.phases.get(model.PROBE_WAIT) or 0.0)
            if start < limits.slow_start:
                continue
            for c in pod.containers:
                if (
                    not c.init
                    and c.cpu_limit_millis is not None
                    and c.cpu_limit_millis <= limits.low_cpu_limit_millis
                ):
                    slow.append((pod, c, start))
        if not slow:
            continue
        findings.append(
            Finding(
                rule="low-cpu-limit",
                title=f"Low CPU limits slow the start of {workload}",
                cause=f"containers limited to {min(c.cpu_limit_millis or 0 for _, c, _ in slow)}m CPU take "
                f"{max(s for _, _, s in slow):.0f} s from start to Ready: start-up work is throttled",
                fix="raise or drop the CPU limit, or give more CPU only while starting (in-place pod resize, "
                "a start-up CPU boost)",
                evidence=tuple(
                    f"{p.key}/{c.name}: limit {c.cpu_limit_millis}m, start to Ready {s:.1f}s"
                    for p, c, s in slow[: limits.max_evidence]
                ),
                subjects=(workload,),
            )
        )
    return findings


def start_burst_on_node(data: DiagnosisInput) -> list[Finding]:
    """Many pods starting at once on one node, and starting slowly."""
    limits = data.thresholds
    findings = []
    for node_name, pods in data.by_node.items():
        ordered = sorted(pods, key=lambda t: t.scheduled or 0.0)
        best: list[PodTimeline] = []
        first = 0
        for last in range(len(ordered)):
            while (ordered[last].scheduled or 0.0) - (ordered[first].scheduled or 0.0) > limits.burst_window:
                first += 1
            if last - first + 1 > len(best):
                best = ordered[first : last + 1]
        if len(best) < limits.burst_pods:
            continue
        local = [
            (t.phases.get(model.SANDBOX) or 0.0) + (t.phases.get(model.CONTAINER_START) or 0.0) for t in best
        ]
        median = statistics.median(local)
        if median < limits.slow_sandbox:
            continue
        findings.append(
            Finding(
                rule="start-burst-on-node",
                title=f"{len(best)} pods started at once on {node_name}",
                cause=(
                    f"{len(best)} pods landed on {node_name} within {limits.burst_window:.0f} s and took "
                    f"a median {median:.1f} s for sandbox and container start: "
                    "the kubelet's API and runtime calls queue"
                ),
                fix=(
                    "raise the kubelet's kubeAPIQPS/kubeAPIBurst (and registryPullQPS/registryBurst), "
                    "spread pods "
                    "with topology spread constraints, or lower maxPods on small nodes"
                ),
                evidence=tuple(
                    f"{t.key}: sandbox {_s(t.phases.get(model.SANDBOX))}, container start "
                    f"{_s(t.phases.get(model.CONTAINER_START))}"
                    for t in best[: limits.max_evidence]
                ),
                subjects=(node_name,),
            )
        )
    return findings


_CNI_ERROR = re.compile(
    r"cni|network plugin|failed to setup network|NetworkPluginNotReady|network is not ready", re.I
)


def cni_not_ready_on_new_nodes(data: DiagnosisInput) -> list[Finding]:
    """Pods that landed on a new node before its CNI (or other DaemonSets) were ready."""
    limits = data.thresholds
    findings = []
    for node_name, pods in data.by_node.items():
        info = data.nodes.get(node_name)
        node_timeline = data.node_timelines.get(node_name)
        registered = info.created if info else None
        if node_timeline is not None and nodes.REGISTERED in node_timeline.events:
            registered = node_timeline.events[nodes.REGISTERED]
        cni_ready = node_timeline.events.get(nodes.CNI_READY) if node_timeline else None
        affected = []
        for pod in pods:
            scheduled = pod.scheduled or 0.0
            if registered is None or scheduled - registered > limits.new_node_window:
                continue
            sandbox = pod.phases.get(model.SANDBOX) or 0.0
            cni_errors = [e for e in pod.sandbox_errors if _CNI_ERROR.search(e)]
            early = cni_ready is not None and scheduled < cni_ready
            if cni_errors or (early and sandbox >= limits.slow_sandbox):
                affected.append((pod, sandbox, cni_errors))
        if not affected:
            continue
        evidence = (
            [f"node registered at +0 s, CNI ready at +{(cni_ready - registered):.0f} s"]
            if (cni_ready is not None and registered is not None)
            else []
        )
        evidence += [
            f"{p.key}: sandbox {s:.1f}s" + (f", {errors[0]}" if errors else "")
            for p, s, errors in affected[: limits.max_evidence]
        ]
        findings.append(
            Finding(
                rule="cni-not-ready-on-new-node",
                title=f"Pods waited for the CNI on new node {node_name}",
                cause=(
                    f"{len(affected)} pods were placed on {node_name} before its CNI DaemonSet was ready; "
                    "their "
                    "sandboxes could not get a network"
                ),
                fix=(
                    "give CNI and other node DaemonSets system-node-critical priority and pre-pulled "
                    "images, and keep "
                    "new nodes tainted until they are ready (startup taints, e.g. "
                    "node.cilium.io/agent-not-ready)"
                ),
                evidence=tuple(evidence),
                subjects=(node_name,),
            )
        )
    return findings


RULES: tuple[tuple[str, Rule], ...] = (
    ("serialized-image-pulls", serialized_image_pulls),
    ("large-images", large_images),
    ("slow-scheduling", slow_scheduling),
    ("slow-admission", slow_admission),
    ("long-init-containers", long_init_containers),
    ("readiness-initial-delay", readiness_initial_delay),
    ("low-cpu-limit", low_cpu_limits),
    ("start-burst-on-node", start_burst_on_node),
    ("cni-not-ready-on-new-node", cni_not_ready_on_new_nodes),
)


def diagnose(data: DiagnosisInput, rules: Sequence[tuple[str, Rule]] = RULES) -> list[Finding]:
    findings: list[Finding] = []
    for _, rule in rules:
        findings.extend(rule(data))
    return findings
