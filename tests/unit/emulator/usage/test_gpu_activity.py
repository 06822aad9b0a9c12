"""The usage model's GPU activity: devices per node, the profile's level, dcgm-exporter's format
(read back by prometheus_client's parser) and the history written for promtool."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from shipshape.emulator import dcgm, usage_history
from shipshape.emulator.scenario import UsageProfile
from shipshape.emulator.usage import container_gpus, gpu_activity
from tests.unit.emulator.usage.gpu_scenario import BUSY_ACTIVITY, MODEL, running_gpu_cluster


def _get(app: Starlette, params: dict[str, str] | None = None) -> str:
    async def go() -> str:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://e") as client:
            response = await client.get(dcgm.PATH, params=params)
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
            return response.text

    return asyncio.run(go())


def _by_pod(families: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(families):
        for sample in family.samples:
            out[(sample.name, sample.labels.get("pod", ""))] = sample.value
    return out


def test_each_gpu_container_holds_its_node_s_device_at_its_profile_s_activity() -> None:
    _cluster, model, pods, nodes = running_gpu_cluster()
    devices = dcgm.cluster_devices(model, [n["metadata"]["name"] for n in nodes])
    assert len(devices) == 2
    by_pod = {d.pod.split("-")[0]: d for d in devices}
    assert by_pod["idle"].activity == 0.0
    assert by_pod["busy"].activity == BUSY_ACTIVITY
    for device in devices:
        assert device.model == MODEL and device.index == 0 and device.container == "cuda"
        assert device.uuid.startswith("GPU-") and len(device.uuid) == 40
        pod = next(p for p in pods if p["metadata"]["name"] == device.pod)
        assert pod["spec"]["nodeName"] == device.node
    # the same seed and time give the same devices
    assert dcgm.cluster_devices(model, [n["metadata"]["name"] for n in nodes]) == devices


def test_the_exporter_text_parses_with_its_labels() -> None:
    cluster, model, pods, _nodes = running_gpu_cluster()
    app = Starlette(routes=dcgm.routes(cluster, model))
    body = _get(app)
    values = _by_pod(body)
    idle = next(p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("idle"))
    busy = next(p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("busy"))
    assert values[(dcgm.ENGINE_ACTIVE, idle)] == 0.0
    assert values[(dcgm.ENGINE_ACTIVE, busy)] == BUSY_ACTIVITY
    assert values[(dcgm.GPU_UTIL, busy)] == 70.0
    family = next(f for f in text_string_to_metric_families(body) if f.name == dcgm.ENGINE_ACTIVE)
    assert set(family.samples[0].labels) == {
        "gpu", "UUID", "device", "modelName", "Hostname", "namespace", "pod", "container"
    }  # fmt: skip
    one = next(p for p in pods if p["metadata"]["name"] == idle)["spec"]["nodeName"]
    only = _by_pod(_get(app, {"node": one}))
    assert {pod for _, pod in only} == {idle}


def test_activity_follows_the_pattern_and_stays_within_one() -> None:
    diurnal = UsageProfile(pattern="diurnal", gpu=0.8, amplitude=0.5, jitter=False)
    assert gpu_activity(diurnal, 1, "k", 0.0) == 0.8 * 0.5  # lowest at midnight
    assert gpu_activity(diurnal, 1, "k", 43200.0) == 1.0  # 0.8 x 1.5, capped
    assert gpu_activity(UsageProfile(gpu=0.0), 1, "k", 123.0) == 0.0  # idle stays exactly 0 with jitter
    assert container_gpus({"resources": {"limits": {"nvidia.com/gpu": "2"}}}) == 2
    assert container_gpus({"resources": {"requests": {"cpu": "1"}}}) == 0


def test_the_history_carries_the_dcgm_series_for_promtool() -> None:
    cluster, model, pods, nodes = running_gpu_cluster()
    start = cluster.clock.now()
    times = [start + 60.0 * i for i in range(3)]
    text = usage_history.openmetrics(model, pods, [n["metadata"]["name"] for n in nodes], times, cluster="c1")
    lines = [line for line in text.splitlines() if line.startswith(dcgm.ENGINE_ACTIVE + "{")]
    assert len(lines) == 2 * 3
    busy = [line for line in lines if 'pod="busy-' in line]
    assert all(line.split()[1] == "0.7" for line in busy)
    assert all('cluster="c1"' in line and f'modelName="{MODEL}"' in line for line in lines)
    assert [float(line.split()[2]) for line in busy] == times
    assert text.endswith("# EOF\n")
