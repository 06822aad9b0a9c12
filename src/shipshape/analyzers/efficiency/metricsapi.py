"""metrics.k8s.io samples (PodMetrics and NodeMetrics, what metrics-server, the agent and the
emulator serve) into a `UsageData`.

Each object is one sample: a rate for CPU over its `window` (nanocores) and the working set for
memory, at its `timestamp`. Several rounds of samples fill a window: CPU is averaged within each
step, memory takes the step's highest value; steps without a sample stay NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shipshape.analyzers.efficiency.usage import (
    ContainerKey,
    UsageData,
    Window,
    bin_max,
    bin_mean,
    series_from_rows,
)
from shipshape.kube.clock import parse_time
from shipshape.kube.quantity import QuantityError, parse_quantity, to_int

Obj = Mapping[str, Any]


class MetricsApiError(ValueError):
    """A PodMetrics or NodeMetrics object without the fields metrics-server always sets."""


def _cores(value: str) -> float:
    try:
        return float(parse_quantity(value))
    except (QuantityError, ValueError) as error:
        raise MetricsApiError(f"bad cpu quantity {value!r}") from error


def _bytes(value: str) -> float:
    try:
        return float(to_int(value))
    except (QuantityError, ValueError) as error:
        raise MetricsApiError(f"bad memory quantity {value!r}") from error


def _when(obj: Obj) -> float:
    stamp = obj.get("timestamp")
    if not isinstance(stamp, str):
        raise MetricsApiError(
            f"{obj.get('kind', 'metrics')} {(obj.get('metadata') or {}).get('name')}: no timestamp"
        )
    return parse_time(stamp)


def latest_window(pod_metrics: Sequence[Obj], node_metrics: Sequence[Obj], step: float) -> Window:
    """One step ending at the newest sample (the API server's clock, not the caller's)."""
    stamps = [_when(item) for item in (*pod_metrics, *node_metrics)]
    if not stamps:
        raise MetricsApiError("metrics.k8s.io returned no samples")
    return Window(max(stamps), step, 1)


def usage_from_metrics(
    pod_metrics: Sequence[Obj], node_metrics: Sequence[Obj], window: Window, cluster: str = ""
) -> UsageData:
    """Rows for every container and node seen in the samples (any number of rounds, any order)."""
    containers: dict[ContainerKey, list[tuple[float, float, float]]] = {}
    for item in pod_metrics:
        md = item.get("metadata") or {}
        at = _when(item)
        for container in item.get("containers") or []:
            usage = container.get("usage") or {}
            key = ContainerKey(
                str(md.get("namespace", "")), str(md.get("name", "")), str(container.get("name", "")), cluster
            )
            containers.setdefault(key, []).append(
                (at, _cores(usage.get("cpu", "0")), _bytes(usage.get("memory", "0")))
            )
    nodes: dict[str, list[tuple[float, float, float]]] = {}
    for item in node_metrics:
        usage = item.get("usage") or {}
        name = str((item.get("metadata") or {}).get("name", ""))
        nodes.setdefault(name, []).append(
            (_when(item), _cores(usage.get("cpu", "0")), _bytes(usage.get("memory", "0")))
        )

    def rows(samples: list[tuple[float, float, float]]) -> tuple[np.ndarray, np.ndarray]:
        ordered = sorted(dict((s[0], s) for s in samples).values())
        times = np.array([s[0] for s in ordered])
        return bin_mean(window, times, np.array([s[1] for s in ordered])), bin_max(
            window, times, np.array([s[2] for s in ordered])
        )

    container_keys = sorted(containers)
    node_keys = sorted(nodes)
    return UsageData(
        window,
        series_from_rows(container_keys, [rows(containers[k]) for k in container_keys], window.steps),
        series_from_rows(node_keys, [rows(nodes[k]) for k in node_keys], window.steps),
        "metrics.k8s.io",
    )
