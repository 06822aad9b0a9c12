"""What `shipshape analyze --snapshot FILE` reads: a JSON object with

- `pods`, `nodes` (lists, or Kubernetes Lists with `items`), optionally
  `horizontalPodAutoscalers`, `priorityClasses`, `deployments` and `statefulsets` (the GPU
  scale-down advice computes its instruction from them);
- optionally `gpuUtilization`: `{"windowStart": unix seconds, "windowEnd": ..., "stepSeconds": 60,
  "series": [{"node", "gpu", "pod": "namespace/name", "metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE" |
  "DCGM_FI_DEV_GPU_UTIL", "timestamps": [...], "values": [...]}]}` (dcgm-exporter's series);
- optionally `usage`: `{"start": unix seconds, "step": seconds, "steps": N, "source": "...",
  "containers": [{"namespace", "pod", "container", "cpu": [cores|null, ...], "memory": [bytes|null, ...]}],
  "nodes": [{"name", "cpu": [...], "memory": [...]}],
  "oomKills": [{"namespace", "pod", "container", "count"}], "restarts": [same]}`
  (null is a gap; `cluster` may name the cluster of every key).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shipshape.analyzers.efficiency.usage import (
    DTYPE,
    ContainerKey,
    Series,
    UsageData,
    UsageError,
    Window,
)
from shipshape.analyzers.gpu.idle import ENGINE_ACTIVE, IdleSettings, UtilizationSeries
from shipshape.kube import objects as kube_objects

Obj = Mapping[str, Any]
LISTS = ("pods", "nodes", "horizontalPodAutoscalers", "priorityClasses", "deployments", "statefulsets")


class SnapshotError(ValueError):
    """A snapshot that is not what this module documents."""


@dataclass(frozen=True, slots=True)
class EfficiencySnapshot:
    pods: Sequence[Obj]
    nodes: Sequence[Obj]
    hpas: Sequence[Obj] = ()
    priority_classes: Sequence[Obj] = ()
    usage: UsageData | None = None
    deployments: Sequence[Obj] = ()
    statefulsets: Sequence[Obj] = ()
    gpu_utilization: GpuUtilization | None = None

    @classmethod
    def from_json(cls, body: object) -> EfficiencySnapshot:
        if not isinstance(body, Mapping):
            raise SnapshotError("a snapshot must be a JSON object with pods and nodes lists")
        try:
            lists: dict[str, list[Obj]] = {key: kube_objects.object_list(body, key) for key in LISTS}
        except ValueError as error:
            raise SnapshotError(str(error)) from None
        usage = body.get("usage")
        return cls(
            lists["pods"],
            lists["nodes"],
            lists["horizontalPodAutoscalers"],
            lists["priorityClasses"],
            None if usage is None else usage_from_json(usage),
            lists["deployments"],
            lists["statefulsets"],
            None if body.get("gpuUtilization") is None else gpu_utilization_from_json(body["gpuUtilization"]),
        )


@dataclass(frozen=True, slots=True)
class GpuUtilization:
    """dcgm-exporter series over a window, as a snapshot carries them."""

    settings: IdleSettings
    series: tuple[UtilizationSeries, ...]


def gpu_utilization_from_json(body: object) -> GpuUtilization:
    if not isinstance(body, Mapping):
        raise SnapshotError("snapshot.gpuUtilization must be an object")
    try:
        settings = IdleSettings(
            window_start=float(body["windowStart"]),
            window_end=float(body["windowEnd"]),
            step_seconds=float(body.get("stepSeconds", 60.0)),
        )
    except KeyError as error:
        raise SnapshotError(f"snapshot.gpuUtilization.{error.args[0]} is missing") from error
    except (TypeError, ValueError) as error:
        raise SnapshotError(f"snapshot.gpuUtilization: {error}") from error
    items = body.get("series", [])
    if not isinstance(items, list):
        raise SnapshotError("snapshot.gpuUtilization.series must be a list")
    series = []
    for i, item in enumerate(items):
        where = f"snapshot.gpuUtilization.series[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("node"), str):
            raise SnapshotError(f"{where} needs a node")
        try:
            series.append(
                UtilizationSeries(
                    node=item["node"],
                    gpu=str(item.get("gpu", "")),
                    pod=None if item.get("pod") is None else str(item["pod"]),
                    timestamps=np.asarray(item.get("timestamps", []), dtype=np.float64),
                    values=np.asarray(item.get("values", []), dtype=np.float64),
                    metric=str(item.get("metric", ENGINE_ACTIVE)),
                )
            )
        except (TypeError, ValueError) as error:
            raise SnapshotError(f"{where}: {error}") from error
    return GpuUtilization(settings, tuple(series))


def _row(values: object, steps: int, where: str) -> np.ndarray:
    if not isinstance(values, list) or len(values) != steps:
        raise SnapshotError(f"{where} must be a list of {steps} numbers or nulls")
    try:
        return np.array([math.nan if v is None else float(v) for v in values], dtype=DTYPE)
    except (TypeError, ValueError) as error:
        raise SnapshotError(f"{where} holds something other than numbers and nulls") from error


def usage_from_json(body: object) -> UsageData:
    if not isinstance(body, Mapping):
        raise SnapshotError("snapshot.usage must be an object")
    try:
        window = Window(float(body["start"]), float(body["step"]), int(body["steps"]))
    except KeyError as error:
        raise SnapshotError(f"snapshot.usage.{error.args[0]} is missing") from error
    except (TypeError, ValueError, UsageError) as error:
        raise SnapshotError(f"snapshot.usage: {error}") from error
    cluster = str(body.get("cluster", ""))

    def key_of(item: object, where: str) -> ContainerKey:
        if not isinstance(item, Mapping) or not all(
            isinstance(item.get(k), str) for k in ("namespace", "pod", "container")
        ):
            raise SnapshotError(f"{where} needs namespace, pod and container names")
        return ContainerKey(item["namespace"], item["pod"], item["container"], cluster)

    def series(name: str, key: Any) -> Series[Any]:
        items = body.get(name, [])
        if not isinstance(items, list):
            raise SnapshotError(f"snapshot.usage.{name} must be a list")
        keys, cpu, memory = [], [], []
        for i, item in enumerate(items):
            where = f"snapshot.usage.{name}[{i}]"
            keys.append(key(item, where))
            cpu.append(_row(item.get("cpu"), window.steps, where + ".cpu"))
            memory.append(_row(item.get("memory"), window.steps, where + ".memory"))
        empty = np.empty((0, window.steps), DTYPE)
        try:
            return Series(tuple(keys), np.stack(cpu) if cpu else empty, np.stack(memory) if memory else empty)
        except UsageError as error:
            raise SnapshotError(f"snapshot.usage.{name}: {error}") from error

    def node_key(item: object, where: str) -> str:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise SnapshotError(f"{where} needs a name")
        return str(item["name"])

    def counts(name: str) -> dict[ContainerKey, int]:
        items = body.get(name, [])
        if not isinstance(items, list):
            raise SnapshotError(f"snapshot.usage.{name} must be a list")
        return {
            key_of(item, f"snapshot.usage.{name}[{i}]"): int(item.get("count", 1))
            for i, item in enumerate(items)
        }

    return UsageData(
        window,
        series("containers", key_of),
        series("nodes", node_key),
        str(body.get("source", "snapshot")),
        counts("oomKills"),
        counts("restarts"),
    )


def _values(row: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in row.tolist()]


def usage_to_json(usage: UsageData) -> dict[str, Any]:
    """The inverse of `usage_from_json` (for writing snapshots)."""
    return {
        "start": usage.window.start,
        "step": usage.window.step,
        "steps": usage.window.steps,
        "source": usage.source,
        "containers": [
            {
                "namespace": k.namespace,
                "pod": k.pod,
                "container": k.container,
                "cpu": _values(c),
                "memory": _values(m),
            }
            for k, c, m in zip(
                usage.containers.keys, usage.containers.cpu, usage.containers.memory, strict=True
            )
        ],
        "nodes": [
            {"name": k, "cpu": _values(c), "memory": _values(m)}
            for k, c, m in zip(usage.nodes.keys, usage.nodes.cpu, usage.nodes.memory, strict=True)
        ],
        "oomKills": [
            {"namespace": k.namespace, "pod": k.pod, "container": k.container, "count": n}
            for k, n in usage.oom_kills.items()
        ],
        "restarts": [
            {"namespace": k.namespace, "pod": k.pod, "container": k.container, "count": n}
            for k, n in usage.restarts.items()
        ],
    }
