"""Manifests the tests apply: one Deployment builder for the served-cluster and simulator tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def deployment(
    name: str,
    replicas: int,
    *,
    cpu: str,
    memory: str,
    grace_seconds: int,
    container: str = "nginx",
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An nginx Deployment labelled `app: <name>` whose pods request `cpu` and `memory` and terminate
    within `grace_seconds`; `metadata` adds to the Deployment's own (namespace, labels, annotations)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, **(metadata or {})},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": grace_seconds,
                    "containers": [
                        {
                            "name": container,
                            "image": "nginx:1.27",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}},
                        }
                    ],
                },
            },
        },
    }
