"""The usage model's history: as a `UsageData` for the efficiency analyzers, or as OpenMetrics text
with the series a cluster's Prometheus would hold (cAdvisor and kube-state-metrics names), for
`promtool tsdb create-blocks-from openmetrics`.

Samples are taken at the given times. The CPU counter `container_cpu_usage_seconds_total` grows by
usage(t_i) x (t_i - t_(i-1)) between consecutive samples, so its rate over any run of samples is
the mean usage at those samples; a restart resets it to 0 (and bumps the restart counter). Node
totals are cAdvisor's root cgroup (`id="/"`), labelled with the node's name. GPU nodes add
dcgm-exporter's `DCGM_FI_PROF_GR_ENGINE_ACTIVE` and `DCGM_FI_DEV_GPU_UTIL` per device, with the
exporter's labels (`emulator/dcgm.py`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from shipshape.analyzers.efficiency.usage import (
    ContainerKey,
    ContainerSpec,
    UsageData,
    Window,
    series_from_rows,
)
from shipshape.emulator import dcgm
from shipshape.emulator.store import Obj
from shipshape.emulator.usage import UsageModel, running_containers
from shipshape.kube.quantity import cpu_millis, to_int


def _key(pod: Obj, container: str, cluster: str) -> ContainerKey:
    md = pod.get("metadata") or {}
    return ContainerKey(str(md.get("namespace", "default")), str(md.get("name", "")), container, cluster)


def container_samples(
    model: UsageModel, pods: Sequence[Obj], times: Sequence[float], cluster: str = ""
) -> dict[ContainerKey, tuple[np.ndarray, np.ndarray]]:
    """(cores, bytes) at each time for each running container of the pods."""
    out: dict[ContainerKey, tuple[np.ndarray, np.ndarray]] = {}
    for pod in pods:
        running = running_containers(pod)
        if not running:
            continue
        cpu = {name: np.zeros(len(times)) for name in running}
        memory = {name: np.zeros(len(times)) for name in running}
        for i, at in enumerate(times):
            for name, millis, num_bytes in model.pod_usage(pod, at):
                cpu[name][i] = millis / 1000.0
                memory[name][i] = float(num_bytes)
        for name in running:
            if name in cpu:
                out[_key(pod, name, cluster)] = (cpu[name], memory[name])
    return out


def node_samples(
    model: UsageModel, node_names: Sequence[str], times: Sequence[float]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in node_names:
        values = [model.node_usage(name, at) for at in times]
        out[name] = (np.array([v[0] / 1000.0 for v in values]), np.array([float(v[1]) for v in values]))
    return out


def record(
    model: UsageModel, pods: Sequence[Obj], node_names: Sequence[str], window: Window, cluster: str = ""
) -> UsageData:
    """The model's usage sampled once per step (at each step's time) as a `UsageData`."""
    times = list(window.times())
    containers = container_samples(model, pods, times, cluster)
    nodes = node_samples(model, node_names, times)
    return UsageData(
        window,
        series_from_rows(containers.keys(), containers.values(), window.steps),
        series_from_rows(nodes.keys(), nodes.values(), window.steps),
        "emulator",
        specs={key: spec for key, spec in specs_of(pods, cluster).items() if key in containers},
    )


def specs_of(pods: Iterable[Obj], cluster: str = "") -> dict[ContainerKey, ContainerSpec]:
    out: dict[ContainerKey, ContainerSpec] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        for container in (pod.get("spec") or {}).get("containers") or []:
            resources = container.get("resources") or {}
            requests = resources.get("requests") or {}
            limits = resources.get("limits") or {}
            out[_key(pod, str(container.get("name", "")), cluster)] = ContainerSpec(
                cpu_millis(requests["cpu"]) / 1000.0 if "cpu" in requests else None,
                float(to_int(requests["memory"])) if "memory" in requests else None,
                cpu_millis(limits["cpu"]) / 1000.0 if "cpu" in limits else None,
                float(to_int(limits["memory"])) if "memory" in limits else None,
                node,
            )
    return out


@dataclass(frozen=True, slots=True)
class Incidents:
    """Restarts to write into the history: at each time the container's CPU counter starts again
    from 0; with `oom` the last termination reason becomes OOMKilled from then on."""

    restarts: Mapping[ContainerKey, Sequence[float]] = field(default_factory=dict)
    oom: frozenset[ContainerKey] = frozenset()


def _labels(pairs: Mapping[str, str]) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in pairs.items()) + "}"


def _fmt(value: float) -> str:
    return repr(float(value)) if math.isfinite(value) else ("+Inf" if value > 0 else "-Inf")


def _counter(times: Sequence[float], rates: np.ndarray, resets: Sequence[float] = ()) -> list[float]:
    values: list[float] = []
    total = 0.0
    reset_at = sorted(resets)
    for i, at in enumerate(times):
        if reset_at and at >= reset_at[0] and (i == 0 or times[i - 1] < reset_at[0]):
            reset_at.pop(0)
            total = 0.0
        elif i > 0:
            total += float(rates[i]) * (at - times[i - 1])
        values.append(total)
    return values


def openmetrics(
    model: UsageModel,
    pods: Sequence[Obj],
    node_names: Sequence[str],
    times: Sequence[float],
    *,
    cluster: str | None = None,
    incidents: Incidents | None = None,
) -> str:
    """OpenMetrics text (ending in `# EOF`) of the model's usage at `times`, plus kube-state-metrics
    series for requests, limits, pod placement, restarts and OOM kills. `cluster` adds a `cluster`
    label to every series (a central Prometheus)."""
    incidents = incidents or Incidents()
    extra = {"cluster": cluster} if cluster is not None else {}
    samples = container_samples(model, pods, times)
    nodes = node_samples(model, node_names, times)
    specs = specs_of(pods)
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"# HELP {name} {help_text}")

    def container_labels(key: ContainerKey) -> dict[str, str]:
        node = specs[key].node if key in specs else None
        return {
            **extra,
            "namespace": key.namespace,
            "pod": key.pod,
            "container": key.container,
            **({"node": node} if node else {}),
        }

    family("container_cpu_usage_seconds", "counter", "Cumulative cpu time consumed in seconds.")
    for key, (cpu, _) in samples.items():
        labels = _labels(container_labels(key))
        counter = _counter(times, cpu, incidents.restarts.get(key, ()))
        lines += [
            f"container_cpu_usage_seconds_total{labels} {_fmt(v)} {_fmt(t)}"
            for t, v in zip(times, counter, strict=True)
        ]
    for node, (cpu, _) in nodes.items():
        labels = _labels({**extra, "id": "/", "node": node})
        counter = _counter(times, cpu)
        lines += [
            f"container_cpu_usage_seconds_total{labels} {_fmt(v)} {_fmt(t)}"
            for t, v in zip(times, counter, strict=True)
        ]
    family("container_memory_working_set_bytes", "gauge", "Current working set in bytes.")
    for key, (_, memory) in samples.items():
        labels = _labels(container_labels(key))
        lines += [
            f"container_memory_working_set_bytes{labels} {_fmt(v)} {_fmt(t)}"
            for t, v in zip(times, memory, strict=True)
        ]
    for node, (_, memory) in nodes.items():
        labels = _labels({**extra, "id": "/", "node": node})
        lines += [
            f"container_memory_working_set_bytes{labels} {_fmt(v)} {_fmt(t)}"
            for t, v in zip(times, memory, strict=True)
        ]
    for metric, limits in (
        ("kube_pod_container_resource_requests", False),
        ("kube_pod_container_resource_limits", True),
    ):
        family(metric, "gauge", "The number of requested (or limited) resource by a container.")
        for key in samples:
            spec = specs.get(key)
            if spec is None:
                continue
            cpu_value, memory_value = (
                (spec.cpu_limit, spec.memory_limit) if limits else (spec.cpu_request, spec.memory_request)
            )
            for resource, unit, value in (("cpu", "core", cpu_value), ("memory", "byte", memory_value)):
                if value is None:
                    continue
                labels = _labels({**container_labels(key), "resource": resource, "unit": unit})
                lines += [f"{metric}{labels} {_fmt(value)} {_fmt(t)}" for t in times]
    family("kube_pod_info", "gauge", "Information about pod.")
    seen_pods: set[tuple[str, str]] = set()
    for key in samples:
        if (key.namespace, key.pod) in seen_pods or key not in specs or not specs[key].node:
            continue
        seen_pods.add((key.namespace, key.pod))
        labels = _labels({**extra, "namespace": key.namespace, "pod": key.pod, "node": specs[key].node or ""})
        lines += [f"kube_pod_info{labels} 1.0 {_fmt(t)}" for t in times]
    family("kube_pod_container_status_restarts", "counter", "The number of container restarts per container.")
    for key in samples:
        restarts = sorted(incidents.restarts.get(key, ()))
        labels = _labels({**extra, "namespace": key.namespace, "pod": key.pod, "container": key.container})
        counts = [sum(1 for r in restarts if r <= t) for t in times]
        lines += [
            f"kube_pod_container_status_restarts_total{labels} {_fmt(n)} {_fmt(t)}"
            for t, n in zip(times, counts, strict=True)
        ]
    family(
        "kube_pod_container_status_last_terminated_reason",
        "gauge",
        "Describes the last reason the container was in terminated state.",
    )
    for key in sorted(incidents.oom):
        first = min(incidents.restarts.get(key, (times[0],)))
        labels = _labels(
            {
                **extra,
                "namespace": key.namespace,
                "pod": key.pod,
                "container": key.container,
                "reason": "OOMKilled",
            }
        )
        lines += [
            f"kube_pod_container_status_last_terminated_reason{labels} 1.0 {_fmt(t)}"
            for t in times
            if t >= first
        ]
    lines += gpu_lines(model, node_names, times, extra)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def gpu_lines(
    model: UsageModel, node_names: Sequence[str], times: Sequence[float], extra: Mapping[str, str]
) -> list[str]:
    """dcgm-exporter's two gauges per GPU device at `times` (nothing for clusters without GPUs).
    A device that changes hands is a new series (its pod labels change), as with the exporter."""
    samples: dict[str, list[tuple[float, float]]] = {}
    for at in times:
        for device in dcgm.cluster_devices(model, node_names, at):
            labels = dcgm.device_labels(device, extra)
            key = dcgm.label_text({k: v for k, v in labels.items() if v})
            samples.setdefault(key, []).append((at, device.activity))
    lines: list[str] = []
    for name, help_text in dcgm.FAMILIES:
        if not samples:
            break
        lines.append(f"# TYPE {name} gauge")
        lines.append(f"# HELP {name} {help_text}")
        for key, points in samples.items():
            lines += [
                f"{name}{key} {_fmt(dcgm.util_percent(v) if name == dcgm.GPU_UTIL else v)} {_fmt(t)}"
                for t, v in points
            ]
    return lines
