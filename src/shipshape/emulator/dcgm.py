"""dcgm-exporter for the emulated GPU nodes: the usage model's GPU activity in the exporter's text
format, served at `/dcgm-exporter/metrics` (every GPU node; `?node=NAME` for one, as the exporter's
per-node pod would answer).

Metric names and labels are dcgm-exporter's (with its Kubernetes pod mapping): `gpu` (device index),
`UUID`, `device` (`nvidia<index>`), `modelName`, `Hostname` (the node), and `namespace`, `pod`,
`container` of the container the device is assigned to (empty for a free device). Two gauges:
`DCGM_FI_PROF_GR_ENGINE_ACTIVE` (ratio 0..1) and `DCGM_FI_DEV_GPU_UTIL` (whole percent, as the
exporter reports it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from shipshape.emulator.resources import NODES
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.usage import GpuDevice, UsageModel

PATH = "/dcgm-exporter/metrics"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FAMILIES = (
    (GPU_UTIL, "GPU utilization (in %)."),
    (ENGINE_ACTIVE, "Ratio of time the graphics engine is active."),
)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def device_labels(device: GpuDevice, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {
        **(extra or {}),
        "gpu": str(device.index),
        "UUID": device.uuid,
        "device": f"nvidia{device.index}",
        "modelName": device.model,
        "Hostname": device.node,
        "container": device.container,
        "namespace": device.namespace,
        "pod": device.pod,
    }


def label_text(labels: Mapping[str, str]) -> str:
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


def util_percent(activity: float) -> int:
    """The exporter's DCGM_FI_DEV_GPU_UTIL: whole percent."""
    return round(activity * 100)


def exposition(devices: Iterable[GpuDevice]) -> str:
    """The exporter's answer for these devices (Prometheus text format 0.0.4)."""
    listed = list(devices)
    lines: list[str] = []
    for name, help_text in FAMILIES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        for device in listed:
            value = str(util_percent(device.activity)) if name == GPU_UTIL else repr(float(device.activity))
            lines.append(f"{name}{label_text(device_labels(device))} {value}")
    return "\n".join(lines) + "\n"


def cluster_devices(model: UsageModel, node_names: Sequence[str], at: float | None = None) -> list[GpuDevice]:
    return [device for name in node_names for device in model.node_gpus(name, at)]


def routes(cluster: Cluster, model: UsageModel) -> list[Route]:
    async def metrics(request: Request) -> Response:
        node = request.query_params.get("node")
        names = [node] if node else sorted(str(n["metadata"]["name"]) for n in cluster.store.list(NODES))
        return PlainTextResponse(exposition(cluster_devices(model, names)), media_type=CONTENT_TYPE)

    return [Route(PATH, metrics, methods=["GET"])]
