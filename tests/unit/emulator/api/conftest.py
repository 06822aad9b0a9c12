from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator.api import Api
from shipshape.emulator.resources import NAMESPACES
from shipshape.emulator.runtime import Cluster
from shipshape.kube.clock import VirtualClock

Obj = dict[str, Any]


def pod_body(
    name: str = "web", *, image: str = "nginx:1.27", labels: dict[str, str] | None = None, **spec: Any
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": image}], **spec},
    }


def deployment_body(name: str = "web", replicas: int = 2, labels: dict[str, str] | None = None) -> Obj:
    match = labels or {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": match},
            "template": {
                "metadata": {"labels": dict(match)},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]},
            },
        },
    }


@pytest.fixture
def cluster() -> Cluster:
    cluster = Cluster(VirtualClock())
    Api(cluster)
    for name, labels in (("default", {}), ("prod", {"env": "prod"}), ("dev", {"env": "dev"})):
        cluster.store.create(
            NAMESPACES,
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            },
        )
    return cluster


@pytest.fixture
def api(cluster: Cluster) -> Api:
    created: Api = cluster.services["api"]
    return created
