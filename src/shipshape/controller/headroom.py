"""Bodies for on-demand headroom: a PriorityClass below every workload and placeholder Deployments.

Placeholders are pause containers with the requests of the pods one spot pool could lose
(`decisions.headroom_plan`); replacements preempt them and start at once instead of waiting for a
node, and the preempted placeholders wait for (or trigger) new on-demand capacity.
"""

from __future__ import annotations

from typing import Any

from shipshape.controller.decisions import HeadroomPlan
from shipshape.controller.policy import CAPACITY_LABEL, CapacityType
from shipshape.kube.quantity import format_bytes, format_cpu

Obj = dict[str, Any]
PRIORITY_CLASS = "shipshape-headroom"
# Below the default priority (0) of every workload without a PriorityClass.
PRIORITY_VALUE = -1000
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
HEADROOM_LABEL = "spot.shipshape.dev/headroom"


def priority_class(name: str = PRIORITY_CLASS, value: int = PRIORITY_VALUE) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "Shipshape headroom placeholders: preempted first by any workload.",
    }


def placeholder_deployments(
    plan: HeadroomPlan, namespace: str, priority_class_name: str = PRIORITY_CLASS
) -> list[Obj]:
    """One Deployment per placeholder shape, pinned to on-demand nodes."""
    bodies: list[Obj] = []
    for shape in plan.placeholders:
        if shape.cpu_millis <= 0 and shape.memory_bytes <= 0:
            continue
        name = f"shipshape-headroom-{shape.cpu_millis}m-{shape.memory_bytes // 2**20}mi"
        labels = {HEADROOM_LABEL: "true", "app.kubernetes.io/name": name}
        requests: Obj = {}
        if shape.cpu_millis > 0:
            requests["cpu"] = format_cpu(shape.cpu_millis)
        if shape.memory_bytes > 0:
            requests["memory"] = format_bytes(shape.memory_bytes)
        bodies.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {
                    "replicas": shape.count,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "priorityClassName": priority_class_name,
                            "terminationGracePeriodSeconds": 0,
                            "automountServiceAccountToken": False,
                            "nodeSelector": {CAPACITY_LABEL: CapacityType.ON_DEMAND.value},
                            "containers": [
                                {
                                    "name": "pause",
                                    "image": PAUSE_IMAGE,
                                    "resources": {"requests": requests, "limits": requests},
                                }
                            ],
                        },
                    },
                },
            }
        )
    return bodies
