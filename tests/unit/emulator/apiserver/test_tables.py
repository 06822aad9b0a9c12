"""Server-side printing matches kube-apiserver's columns and cell values."""

from __future__ import annotations

import pytest

from shipshape.emulator.apiserver import tables
from shipshape.kube.clock import rfc3339

NOW = 1_767_225_600.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-0.5, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (9 * 60 + 59, "9m59s"),
        (10 * 60 + 30, "10m"),
        (3 * 3600, "3h"),
        (7 * 3600 + 59 * 60, "7h59m"),
        (8 * 3600 + 30 * 60, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (3 * 86400 + 5 * 3600, "3d5h"),
        (8 * 86400, "8d"),
        (2 * 365 * 86400 + 86400, "2y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert tables.human_duration(seconds) == text


def _pod(**status: object) -> dict[str, object]:
    return {
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": rfc3339(NOW - 300)},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
        "status": status,
    }


def test_running_pod_row_counts_ready_containers_and_restarts() -> None:
    pod = _pod(
        phase="Running",
        podIPs=[{"ip": "10.0.0.7"}],
        containerStatuses=[
            {
                "name": "a",
                "ready": True,
                "restartCount": 2,
                "state": {"running": {}},
                "lastState": {"terminated": {"finishedAt": rfc3339(NOW - 90)}},
            },
            {"name": "b", "ready": False, "restartCount": 0, "state": {"running": {}}},
        ],
    )
    table = tables.table("pods", [pod], NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    row = table["rows"][0]
    assert row["cells"] == [
        "web",
        "1/2",
        "Running",
        "2 (90s ago)",
        "5m",
        "10.0.0.7",
        "n1",
        "<none>",
        "<none>",
    ]
    assert row["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": pod["metadata"],
    }


def test_pod_status_reasons() -> None:
    waiting = _pod(
        phase="Pending",
        containerStatuses=[{"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}}],
    )
    assert tables.row("pods", waiting, NOW)["cells"][2] == "ContainerCreating"
    init = _pod(
        phase="Pending",
        initContainerStatuses=[{"name": "i", "state": {"waiting": {"reason": "PodInitializing"}}}],
    )
    init["spec"]["initContainers"] = [{"name": "i"}]  # type: ignore[index]
    assert tables.row("pods", init, NOW)["cells"][2] == "Init:0/1"
    crashed = _pod(
        phase="Running", containerStatuses=[{"name": "a", "state": {"terminated": {"exitCode": 137}}}]
    )
    assert tables.row("pods", crashed, NOW)["cells"][2] == "ExitCode:137"
    terminating = _pod(phase="Running")
    terminating["metadata"]["deletionTimestamp"] = rfc3339(NOW)  # type: ignore[index]
    assert tables.row("pods", terminating, NOW)["cells"][2] == "Terminating"
    evicted = _pod(phase="Failed", reason="Evicted")
    assert tables.row("pods", evicted, NOW, include_object="None") == {
        "cells": ["web", "0/2", "Evicted", "0", "5m", "<none>", "n1", "<none>", "<none>"]
    }


def test_node_row() -> None:
    node = {
        "metadata": {
            "name": "n1",
            "creationTimestamp": rfc3339(NOW - 7200),
            "labels": {"node-role.kubernetes.io/worker": "", "kubernetes.io/role": "spot"},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "Unknown"}],
            "addresses": [{"type": "InternalIP", "address": "10.1.0.4"}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Amazon Linux 2023"},
        },
    }
    cells = tables.row("nodes", node, NOW)["cells"]
    assert cells == [
        "n1",
        "NotReady,SchedulingDisabled",
        "spot,worker",
        "120m",
        "v1.32.0",
        "10.1.0.4",
        "<none>",
        "Amazon Linux 2023",
        "<unknown>",
        "<unknown>",
    ]


def test_deployment_and_generic_rows() -> None:
    deployment = {
        "metadata": {"name": "api", "creationTimestamp": rfc3339(NOW - 30)},
        "spec": {
            "replicas": 3,
            "selector": {
                "matchLabels": {"app": "api"},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}],
            },
            "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}},
        },
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    }
    assert tables.row("deployments.apps", deployment, NOW)["cells"] == [
        "api",
        "2/3",
        3,
        2,
        "30s",
        "c",
        "nginx:1",
        "app=api,tier",
    ]
    limits = {"metadata": {"name": "s", "creationTimestamp": rfc3339(NOW - 5)}}
    generic = tables.table("limitranges", [limits], NOW, include_object="Object")
    assert [c["name"] for c in generic["columnDefinitions"]] == ["Name", "Age"]
    assert generic["rows"] == [{"cells": ["s", "5s"], "object": limits}]


def test_event_row() -> None:
    event = {
        "metadata": {"name": "n1.abc", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "n1"},
        "reason": "SpotInterruption",
        "message": "  notice received ",
        "source": {"component": "cloud", "host": "n1"},
        "firstTimestamp": rfc3339(NOW - 60),
        "lastTimestamp": rfc3339(NOW - 10),
        "count": 3,
        "type": "Warning",
    }
    assert tables.row("events", event, NOW)["cells"] == [
        "10s",
        "Warning",
        "SpotInterruption",
        "node/n1",
        "",
        "cloud, n1",
        "notice received",
        "60s",
        3,
        "n1.abc",
    ]


def test_secret_endpoints_and_revision_rows() -> None:
    created = rfc3339(NOW - 60)
    secret = {
        "metadata": {"name": "s", "creationTimestamp": created},
        "type": "Opaque",
        "data": {"a": "", "b": ""},
    }
    assert tables.row("secrets", secret, NOW)["cells"] == ["s", "Opaque", 2, "60s"]
    endpoints = {
        "metadata": {"name": "web", "creationTimestamp": created},
        "subsets": [
            {
                "addresses": [{"ip": f"10.0.0.{i}"} for i in range(1, 5)],
                "ports": [{"port": 8080}],
            }
        ],
    }
    assert (
        tables.row("endpoints", endpoints, NOW)["cells"][1]
        == "10.0.0.1:8080,10.0.0.2:8080,10.0.0.3:8080 + 1 more..."
    )
    assert tables.endpoints_text({"subsets": []}) == "<none>"
    revision = {
        "metadata": {
            "name": "ds-7d9",
            "creationTimestamp": created,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "controller": True}
            ],
        },
        "revision": 3,
    }
    assert tables.row("controllerrevisions.apps", revision, NOW)["cells"] == [
        "ds-7d9",
        "daemonset.apps/ds",
        3,
        "60s",
    ]


def test_events_k8s_io_rows_print_like_core_events() -> None:
    event = {
        "metadata": {"name": "n1.abc", "namespace": "default"},
        "regarding": {"kind": "Node", "name": "n1"},
        "reason": "SpotInterruption",
        "note": "notice received",
        "reportingController": "cloud",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "type": "Warning",
    }
    cells = tables.row("events.events.k8s.io", event, NOW + 30)["cells"]
    assert cells == [
        "30s",
        "Warning",
        "SpotInterruption",
        "node/n1",
        "",
        "cloud",
        "notice received",
        "30s",
        1,
        "n1.abc",
    ]
