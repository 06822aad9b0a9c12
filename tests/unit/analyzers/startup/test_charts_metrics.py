from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from prometheus_client.parser import text_string_to_metric_families

from shipshape.analyzers.startup import charts, model, nodes
from shipshape.analyzers.startup.analysis import (
    Snapshot,
    SnapshotError,
    analyze_node_startup,
    analyze_pod_startup,
)
from shipshape.analyzers.startup.prometheus import POD_START_BUCKETS, StartupMetrics

from .builders import T0, C, PodPlan, node, pod_and_events, ts

SVG = "{http://www.w3.org/2000/svg}"


def sample() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    pods, events = [], []
    for i, (pull, probe) in enumerate([(8.0, 2.0), (1.0, 12.0), (0.0, 1.0)]):
        started = 3.0 + pull + 1.0
        container = (
            C("app", started=started, pull_start=2.0, pull=pull) if pull else C("app", started=started)
        )
        plan = PodPlan(
            name=f"web-{i}",
            created=0.0,
            scheduled=1.0,
            sandbox=2.0,
            initialized=0.0,
            containers_ready=started + probe,
            ready=started + probe,
            containers=[container],
        )
        pod, pod_events = pod_and_events(plan)
        pods.append(pod)
        events.extend(pod_events)
    return pods, events


def _fill(group: ET.Element) -> str:
    path = group.find(f"{SVG}path")
    assert path is not None
    match = re.search(r"fill: (#[0-9a-f]{6})", path.get("style", ""))
    assert match
    return match.group(1)


def _width(group: ET.Element) -> float:
    path = group.find(f"{SVG}path")
    assert path is not None
    xs = [float(x) for x in re.findall(r"([-\d.]+) [-\d.]+", path.get("d", ""))]
    return max(xs) - min(xs)


def test_svg_pod_chart_has_a_bar_per_phase_sized_by_duration(tmp_path: Path) -> None:
    pods, events = sample()
    report = analyze_pod_startup(pods, events)
    target = tmp_path / "pods.svg"
    charts.pod_startup_chart(report.timelines, target)
    root = ET.parse(target).getroot()
    groups = {g.get("id"): g for g in root.iter(f"{SVG}g") if (g.get("id") or "").startswith("phase-")}
    slowest = report.slowest(1)[0]
    assert slowest.name == "web-1"  # 1 s pull + 12 s probes
    assert _fill(groups["phase-probe_wait-0"]) == charts.PHASE_COLORS[model.PROBE_WAIT]
    assert _fill(groups["phase-image_pull-1"]) == charts.PHASE_COLORS[model.IMAGE_PULL]
    ratio = _width(groups["phase-probe_wait-0"]) / _width(groups["phase-scheduling-0"])
    assert ratio == pytest.approx(12.0 / 1.0, rel=0.05)
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "default/web-1" in texts and "image pull" in texts
    buckets = [g.get("id") for g in root.iter(f"{SVG}g") if (g.get("id") or "").startswith("bucket-")]
    assert "bucket-20" in buckets


def test_png_pod_chart_shows_the_phase_colours(tmp_path: Path) -> None:
    pods, events = sample()
    target = tmp_path / "pods.png"
    charts.pod_startup_chart(analyze_pod_startup(pods, events).timelines, target)
    pixels = (imread(target)[:, :, :3] * 255).round().astype(int).reshape(-1, 3)
    colours = {tuple(p) for p in np.unique(pixels, axis=0)}
    for phase in (model.SCHEDULING, model.SANDBOX, model.IMAGE_PULL, model.PROBE_WAIT):
        hex_colour = charts.PHASE_COLORS[phase]
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        assert rgb in colours, phase


def test_chart_rejects_unknown_suffix_and_empty_input(tmp_path: Path) -> None:
    pods, events = sample()
    timelines = analyze_pod_startup(pods, events).timelines
    with pytest.raises(charts.ChartError, match=r"\.png or \.svg"):
        charts.pod_startup_chart(timelines, tmp_path / "chart.jpg")
    with pytest.raises(charts.ChartError, match="no pod became Ready"):
        charts.pod_startup_chart([], tmp_path / "chart.svg")


def test_node_gantt_chart(tmp_path: Path) -> None:
    body = node("n1", created=10.0, ready=30.0)
    annotation = {
        nodes.VM_INITIALIZED: ts(0.0),
        nodes.CLOUD_INIT_START: ts(3.0),
        nodes.KUBELET_START: ts(7.0),
    }
    body["metadata"]["annotations"] = {nodes.TIMELINE_ANNOTATION: json.dumps(annotation)}
    report = analyze_node_startup([body])
    target = tmp_path / "nodes.svg"
    charts.node_gantt_chart(report.timelines, target)
    root = ET.parse(target).getroot()
    ids = {g.get("id"): g for g in root.iter(f"{SVG}g") if (g.get("id") or "").startswith("segment-")}
    expected = {"OS_boot", "cloud-init", "kubelet_registration", "node_ready"}  # CNI unknown: in node ready
    assert set(ids) == {f"segment-{name}-0" for name in expected}
    assert _width(ids["segment-node_ready-0"]) / _width(ids["segment-OS_boot-0"]) == pytest.approx(
        20 / 3, rel=0.05
    )
    assert _width(ids["segment-cloud-init-0"]) / _width(ids["segment-OS_boot-0"]) == pytest.approx(
        4 / 3, rel=0.05
    )
    assert _fill(ids["segment-cloud-init-0"]) == charts.SEGMENT_COLORS["cloud-init"]


def test_prometheus_histograms_use_kubelet_buckets_and_count_each_pod_once() -> None:
    pods, events = sample()
    report = analyze_pod_startup(pods, events)
    metrics = StartupMetrics()
    assert [metrics.observe_pod(t) for t in report.timelines] == [True, True, True]
    assert not metrics.observe_pod(report.timelines[0])
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    sli = families["shipshape_pod_start_sli_duration_seconds"]
    bounds = [s.labels["le"] for s in sli.samples if s.name.endswith("_bucket")]
    assert bounds == [*(str(float(b)) for b in POD_START_BUCKETS), "+Inf"]
    count = next(s.value for s in sli.samples if s.name.endswith("_count"))
    assert count == 3
    phase_counts = {
        s.labels["phase"]: s.value
        for s in families["shipshape_pod_start_phase_duration_seconds"].samples
        if s.name.endswith("_count")
    }
    assert phase_counts[model.PROBE_WAIT] == 3


def test_snapshot_validation() -> None:
    assert Snapshot.from_json({"pods": {"kind": "PodList", "items": []}}).pods == []
    assert Snapshot.from_json({}).webhook_configurations is None  # not read, unlike read and empty
    assert Snapshot.from_json({"webhookConfigurations": []}).webhook_configurations == []
    with pytest.raises(SnapshotError, match=r"snapshot.webhookConfigurations\[0\] is not"):
        Snapshot.from_json({"webhookConfigurations": [{"webhooks": []}]})
    with pytest.raises(SnapshotError, match=r"snapshot\.events must be a list"):
        Snapshot.from_json({"events": "x"})
    with pytest.raises(SnapshotError, match=r"snapshot.nodes\[0\] is not a Kubernetes object"):
        Snapshot.from_json({"nodes": [{"name": "n"}]})


def test_report_json_and_filters() -> None:
    pods, events = sample()
    report = analyze_pod_startup(pods, events, workload="Deployment/web")
    body = report.to_json()
    assert body["pods"] == 3 and body["slowest"][0]["name"] == "web-1"
    assert body["overall"]["endToEnd"]["max"] == pytest.approx(
        17.0
    )  # 1 s pull, started at 5 s, 12 s of probes
    assert analyze_pod_startup(pods, events, workload="other").timelines == []
    assert analyze_pod_startup(pods, events, namespace="kube-system").timelines == []
    assert report.timelines[0].created == T0
