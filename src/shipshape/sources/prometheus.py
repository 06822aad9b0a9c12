"""Usage from Prometheus over PromQL, the way right-sizing tools (KRR) read it, into a `UsageData`.

Queries (`/api/v1/query_range` at the window's step; `{sel}` is `container!="", container!="POD"`
plus `cluster="<name>"` for a central Prometheus, the label name configurable):

- CPU (cores): `max by (namespace, pod, container) (rate(container_cpu_usage_seconds_total{sel}[R]))`,
  R = the rate range (5m by default, at least two steps); `rate()` handles counter resets.
- memory (bytes):
  `max by (namespace, pod, container) (max_over_time(container_memory_working_set_bytes{sel}[S]))`
  with S one millisecond short of the step, so that each step's interval is (t - step, t].
- node totals: the same over cAdvisor's root cgroup (`id="/"`), by `node`.
- requests and limits (instant, at the window's end): `kube_pod_container_resource_requests` /
  `_limits` by resource; the node of each pod from `kube_pod_info`.
- OOM kills: containers whose `kube_pod_container_status_last_terminated_reason{reason="OOMKilled"}`
  was 1 in the window (at least one kill each); restarts: `increase()` of
  `kube_pod_container_status_restarts_total` over the window.

GPU activity (`fetch_gpu`, dcgm-exporter's series, into the idle-GPU analyzer's
`UtilizationSeries`): per device and pod,
`max by (Hostname, gpu, exported_namespace, exported_pod, namespace, pod)
(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{sel}[S]))` (ratio 0..1; the pod is `exported_pod`
where the scrape renamed the exporter's labels, as kube-prometheus does, else `pod`);
a device without engine activity (the profiling metrics need a datacenter GPU) falls
back to `DCGM_FI_DEV_GPU_UTIL` (percent). `{sel}` holds only the cluster matcher. `gpu_activity`
is the same over one bucket at one instant (the agent's question when a usage bucket closes): the
mean, highest and count over the bucket in one query per metric.

A step where Prometheus returns nothing stays NaN. Errors become `PrometheusError` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from shipshape.analyzers.efficiency.usage import (
    DTYPE,
    ContainerKey,
    ContainerSpec,
    Series,
    UsageData,
    Window,
)
from shipshape.analyzers.gpu.idle import ENGINE_ACTIVE, GPU_UTIL, UtilizationSeries

MAX_POINTS = 11_000  # Prometheus refuses query_range answers longer than this per series
# dcgm-exporter's pod attribution, under both names it has in Prometheus (see `_pod_labels`).
POD_LABELS = "exported_namespace, exported_pod, namespace, pod"
STAT_LABEL = "shipshape_stat"  # tells apart the figures of `gpu_activity`'s union query


class PrometheusError(RuntimeError):
    """Prometheus could not be reached, refused a query or answered something unexpected."""


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    url: str
    cluster: str | None = None  # value of the cluster label (a central Prometheus); None: no matcher
    cluster_label: str = "cluster"
    rate_range_seconds: float = 300.0
    timeout_seconds: float = 60.0
    headers: Mapping[str, str] | None = None


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


class PrometheusSource:
    def __init__(self, settings: PrometheusSettings, client: httpx.Client | None = None) -> None:
        self.settings = settings
        self._client = client or httpx.Client(
            base_url=settings.url.rstrip("/"),
            timeout=settings.timeout_seconds,
            headers=dict(settings.headers or {}),
        )
        self._owned = client is None

    def close(self) -> None:
        if self._owned:
            self._client.close()

    def __enter__(self) -> PrometheusSource:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---- HTTP ------------------------------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        try:
            response = self._client.get(path, params=params)
        except httpx.HTTPError as error:
            raise PrometheusError(f"cannot reach Prometheus at {self.settings.url}: {error}") from error
        try:
            body = response.json()
        except ValueError as error:
            raise PrometheusError(
                f"Prometheus at {self.settings.url} answered {response.status_code} with no JSON"
            ) from error
        if response.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(
                f"Prometheus refused {params.get('query', '')!r}: "
                f"{body.get('errorType', response.status_code)}: {body.get('error', '')}"
            )
        result = (body.get("data") or {}).get("result")
        if not isinstance(result, list):
            raise PrometheusError("Prometheus answered without a result list")
        return result

    def query_range(self, query: str, window: Window) -> list[dict[str, Any]]:
        """Matrix results over the window, fetched in pieces of at most MAX_POINTS steps."""
        merged: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        for first in range(0, window.steps, MAX_POINTS):
            last = min(window.steps, first + MAX_POINTS) - 1
            params = {
                "query": query,
                "start": repr(window.start + first * window.step),
                "end": repr(window.start + last * window.step),
                "step": repr(window.step),
            }
            for item in self._get("/api/v1/query_range", params):
                key = tuple(sorted((item.get("metric") or {}).items()))
                merged.setdefault(key, {"metric": item.get("metric") or {}, "values": []})["values"] += (
                    item.get("values", [])
                )
        return list(merged.values())

    def query(self, query: str, at: float) -> list[dict[str, Any]]:
        return self._get("/api/v1/query", {"query": query, "time": repr(at)})

    # ---- PromQL ----------------------------------------------------------------------------------

    def _selector(self, *matchers: str) -> str:
        parts = list(matchers)
        if self.settings.cluster is not None:
            value = self.settings.cluster.replace("\\", "\\\\").replace('"', '\\"')
            parts.append(f'{self.settings.cluster_label}="{value}"')
        return "{" + ", ".join(parts) + "}"

    def queries(self, window: Window) -> dict[str, str]:
        rate_range = _duration(max(self.settings.rate_range_seconds, 2 * window.step))
        step_range = _duration(window.step - 0.001)
        containers = self._selector('container!=""', 'container!="POD"')
        root = self._selector('id="/"')
        by = "namespace, pod, container"
        cpu, memory = "container_cpu_usage_seconds_total", "container_memory_working_set_bytes"
        return {
            "cpu": f"max by ({by}) (rate({cpu}{containers}[{rate_range}]))",
            "memory": f"max by ({by}) (max_over_time({memory}{containers}[{step_range}]))",
            "node_cpu": f"max by (node) (rate({cpu}{root}[{rate_range}]))",
            "node_memory": f"max by (node) (max_over_time({memory}{root}[{step_range}]))",
        }

    def gpu_queries(self, range_seconds: float) -> dict[str, str]:
        """The two dcgm-exporter queries, each device's activity averaged over `range_seconds`."""
        window = _duration(range_seconds - 0.001)
        sel = self._selector()
        by = f"Hostname, gpu, {POD_LABELS}"
        return {
            metric: f"max by ({by}) (avg_over_time({metric}{sel}[{window}]))"
            for metric in (ENGINE_ACTIVE, GPU_UTIL)
        }

    def fetch_gpu(self, window: Window) -> list[UtilizationSeries]:
        """Each GPU device's activity per step of the window (engine activity where the device has
        it, else GPU_UTIL), attributed to its pod ("namespace/name") where the exporter says."""
        found: dict[tuple[str, str, str], UtilizationSeries] = {}
        for metric, query in self.gpu_queries(window.step).items():
            for item in self.query_range(query, window):
                labels = item.get("metric") or {}
                key = (labels.get("Hostname", ""), labels.get("gpu", ""), _pod_of(labels) or "")
                if key in found:
                    continue  # the device's engine activity, read first, wins
                points = [(float(at), float(text)) for at, text in item.get("values") or []]
                points = [(at, value) for at, value in points if math.isfinite(value)]
                if not points:
                    continue
                found[key] = UtilizationSeries(
                    node=key[0],
                    gpu=key[1],
                    pod=_pod_of(labels),
                    timestamps=np.array([at for at, _ in points], dtype=np.float64),
                    values=np.array([value for _, value in points], dtype=np.float64),
                    metric=metric,
                )
        return sorted(found.values(), key=lambda s: (s.node, s.gpu, s.pod or ""))

    def gpu_activity(self, end: float, range_seconds: float) -> list[GpuSample]:
        """Each attributed device's mean and highest activity (ratio 0..1) and its sample count
        over (end - range, end], with its model; engine activity preferred, GPU_UTIL else. Two
        instant queries (one per metric), each the union of the three `*_over_time` figures told
        apart by a `shipshape_stat` label."""
        window = _duration(range_seconds - 0.001)
        sel = self._selector('pod!=""')
        by = f"Hostname, gpu, modelName, {POD_LABELS}"
        found: dict[tuple[str, str, str], GpuSample] = {}
        for metric in (ENGINE_ACTIVE, GPU_UTIL):
            scale = 100.0 if metric == GPU_UTIL else 1.0
            query = " or ".join(
                f"label_replace(max by ({by}) ({stat}_over_time({metric}{sel}[{window}])), "
                f'"{STAT_LABEL}", "{stat}", "", "")'
                for stat in ("avg", "max", "count")
            )
            stats: dict[tuple[str, str, str], dict[str, float]] = {}
            labels_of: dict[tuple[str, str, str], Mapping[str, str]] = {}
            for item in self.query(query, end):
                labels = item.get("metric") or {}
                key = (labels.get("Hostname", ""), labels.get("gpu", ""), _pod_of(labels) or "")
                value = float(item["value"][1])
                if key[2] and math.isfinite(value):
                    stats.setdefault(key, {})[labels.get(STAT_LABEL, "")] = value
                    labels_of[key] = labels
            for key, figures in stats.items():
                if key in found or "avg" not in figures:
                    continue  # the device's engine activity, read first, wins
                labels = labels_of[key]
                mean = figures["avg"]
                namespace, pod = _pod_labels(labels)
                found[key] = GpuSample(
                    namespace=namespace,
                    pod=pod,
                    node=key[0],
                    gpu=key[1],
                    model=labels.get("modelName", ""),
                    mean=min(max(mean / scale, 0.0), 1.0),
                    high=min(max(figures.get("max", mean) / scale, 0.0), 1.0),
                    samples=max(int(figures.get("count", 1.0)), 1),
                    metric=metric,
                )
        return sorted(found.values(), key=lambda s: (s.namespace, s.pod, s.node, s.gpu))

    # ---- results -> arrays -----------------------------------------------------------------------

    @staticmethod
    def _rows(results: list[dict[str, Any]], window: Window, key_of: Any) -> dict[Any, np.ndarray]:
        rows: dict[Any, np.ndarray] = {}
        for item in results:
            key = key_of(item.get("metric") or {})
            if key is None:
                continue
            row = rows.setdefault(key, np.full(window.steps, np.nan, dtype=DTYPE))
            for at, text in item.get("values") or []:
                index = round((float(at) - window.start) / window.step)
                if 0 <= index < window.steps:
                    value = float(text)
                    if math.isfinite(value):
                        row[index] = value if math.isnan(row[index]) else max(row[index], value)
        return rows

    def fetch(self, window: Window) -> UsageData:
        """Container and node usage over the window, with requests, limits, OOM kills and restarts."""
        cluster = self.settings.cluster or ""
        q = self.queries(window)

        def container_key(metric: Mapping[str, str]) -> ContainerKey | None:
            if not metric.get("namespace") or not metric.get("pod") or not metric.get("container"):
                return None
            return ContainerKey(metric["namespace"], metric["pod"], metric["container"], cluster)

        def node_key(metric: Mapping[str, str]) -> str | None:
            return metric.get("node") or None

        cpu = self._rows(self.query_range(q["cpu"], window), window, container_key)
        memory = self._rows(self.query_range(q["memory"], window), window, container_key)
        node_cpu = self._rows(self.query_range(q["node_cpu"], window), window, node_key)
        node_memory = self._rows(self.query_range(q["node_memory"], window), window, node_key)
        containers = _series(cpu, memory, window)
        nodes = _series(node_cpu, node_memory, window)
        specs, ooms, restarts = self._states(window, container_key)
        return UsageData(window, containers, nodes, "prometheus", ooms, restarts, specs)

    def _states(
        self, window: Window, container_key: Any
    ) -> tuple[dict[ContainerKey, ContainerSpec], dict[ContainerKey, int], dict[ContainerKey, int]]:
        at = window.end
        whole = _duration(window.duration)
        by = "namespace, pod, container, resource"
        values: dict[str, dict[ContainerKey, dict[str, float]]] = {}
        resources = self._selector('resource=~"cpu|memory"')
        for kind in ("requests", "limits"):
            query = f"max by ({by}) (kube_pod_container_resource_{kind}{resources})"
            table: dict[ContainerKey, dict[str, float]] = {}
            for item in self.query(query, at):
                key = container_key(item.get("metric") or {})
                if key is not None:
                    table.setdefault(key, {})[item["metric"].get("resource", "")] = float(item["value"][1])
            values[kind] = table
        nodes: dict[tuple[str, str], str] = {}
        for item in self.query(f"max by (namespace, pod, node) (kube_pod_info{self._selector()})", at):
            metric = item.get("metric") or {}
            if metric.get("node"):
                nodes[(metric.get("namespace", ""), metric.get("pod", ""))] = metric["node"]
        specs: dict[ContainerKey, ContainerSpec] = {}
        for key in set(values["requests"]) | set(values["limits"]):
            req, lim = values["requests"].get(key, {}), values["limits"].get(key, {})
            specs[key] = ContainerSpec(
                req.get("cpu"),
                req.get("memory"),
                lim.get("cpu"),
                lim.get("memory"),
                nodes.get((key.namespace, key.pod)),
            )
        ooms: dict[ContainerKey, int] = {}
        oom_selector = self._selector('reason="OOMKilled"')
        oom_query = (
            "max by (namespace, pod, container) (max_over_time("
            f"kube_pod_container_status_last_terminated_reason{oom_selector}[{whole}]))"
        )
        for item in self.query(oom_query, at):
            key = container_key(item.get("metric") or {})
            if key is not None and float(item["value"][1]) >= 1:
                ooms[key] = 1
        restarts: dict[ContainerKey, int] = {}
        restart_query = (
            "max by (namespace, pod, container) (increase("
            f"kube_pod_container_status_restarts_total{self._selector()}[{whole}]))"
        )
        for item in self.query(restart_query, at):
            key = container_key(item.get("metric") or {})
            if key is not None:
                restarts[key] = round(float(item["value"][1]))
        return specs, ooms, restarts


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU device's activity over one range, as `gpu_activity` reads it."""

    namespace: str
    pod: str
    node: str
    gpu: str
    model: str
    mean: float  # ratio 0..1
    high: float
    samples: int
    metric: str


def _pod_labels(labels: Mapping[str, str]) -> tuple[str, str]:
    """The (namespace, pod) a dcgm-exporter series names. Scraped without `honor_labels` (the
    kube-prometheus and GPU Operator default), Prometheus's own target labels `namespace`/`pod` name
    the exporter's pod and the exporter's are renamed `exported_namespace`/`exported_pod`: those
    win where present. (A device no pod holds then shows the exporter's pod, which holds no GPU, so
    nothing downstream counts it.)"""
    if labels.get("exported_pod"):
        return labels.get("exported_namespace", ""), labels["exported_pod"]
    return labels.get("namespace", ""), labels.get("pod", "")


def _pod_of(labels: Mapping[str, str]) -> str | None:
    namespace, pod = _pod_labels(labels)
    return f"{namespace}/{pod}" if namespace and pod else None


def _series(cpu: Mapping[Any, np.ndarray], memory: Mapping[Any, np.ndarray], window: Window) -> Series[Any]:
    keys = sorted(set(cpu) | set(memory))
    empty = np.full(window.steps, np.nan, dtype=DTYPE)
    cpu_rows = np.stack([cpu.get(k, empty) for k in keys]) if keys else np.empty((0, window.steps), DTYPE)
    memory_rows = (
        np.stack([memory.get(k, empty) for k in keys]) if keys else np.empty((0, window.steps), DTYPE)
    )
    return Series(tuple(keys), cpu_rows, memory_rows)
