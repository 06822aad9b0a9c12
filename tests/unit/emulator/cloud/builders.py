"""Builders for the cloud model's tests: a scenario, a cluster with the cloud on a virtual clock, pods."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shipshape.emulator.cloud import CloudModel
from shipshape.emulator.resources import EVENTS, NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Scenario, parse
from shipshape.emulator.store import Obj
from shipshape.kube.clock import VirtualClock, rfc3339

SPOT_A = {
    "name": "spot-a",
    "instanceType": "m5.large",
    "zone": "us-east-1a",
    "capacityType": "spot",
    "cpu": "2",
    "memory": "8Gi",
    "initialSize": 2,
    "maxSize": 6,
}
SPOT_B = {**SPOT_A, "name": "spot-b", "zone": "us-east-1b", "initialSize": 1}
ON_DEMAND_B = {
    "name": "od-b",
    "instanceType": "m5.xlarge",
    "zone": "us-east-1b",
    "capacityType": "on-demand",
    "cpu": "4",
    "memory": "16Gi",
    "initialSize": 1,
    "maxSize": 4,
}


def scenario(pools: list[dict[str, Any]] | None = None, **sections: Any) -> Scenario:
    doc: dict[str, Any] = {"name": "test", "seed": 7, "pools": pools or [SPOT_A, SPOT_B, ON_DEMAND_B]}
    doc.update(sections)
    return parse(doc)


@dataclass
class Env:
    cluster: Cluster
    clock: VirtualClock
    cloud: CloudModel

    def run(self, seconds: float) -> None:
        self.cluster.engine.run_until(self.clock.now() + seconds)

    def nodes(self) -> list[Obj]:
        return self.cluster.store.list(NODES)

    def node(self, name: str) -> Obj | None:
        return self.cluster.store.get(NODES, "", name)

    def events(self, reason: str) -> list[Obj]:
        return [e for e in self.cluster.store.list(EVENTS) if e["reason"] == reason]

    def nodes_of(self, pool: str) -> list[str]:
        return sorted(i.node_name for i in self.cloud.active_instances(pool))


def start(sc: Scenario | None = None, *, with_api: bool = False) -> Env:
    clock = VirtualClock()
    cluster = Cluster(clock, sc if sc is not None else scenario())
    if with_api:
        from shipshape.emulator.api import Api

        Api(cluster)
    cloud = CloudModel()
    cluster.add(cloud)
    cluster.engine.settle()
    return Env(cluster, clock, cloud)


def pod_body(
    name: str,
    *,
    cpu: str = "500m",
    memory: str = "512Mi",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    node: str | None = None,
    owner_kind: str | None = None,
    affinity: dict[str, Any] | None = None,
) -> Obj:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ]
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    if node:
        spec["nodeName"] = node
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {"app": name}}
    if owner_kind:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner_kind,
                "name": "owner",
                "uid": f"uid-{owner_kind}",
                "controller": True,
            }
        ]
    return {"metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


def add_unschedulable(env: Env, name: str, **kwargs: Any) -> Obj:
    """A pending pod the scheduler has marked Unschedulable now (as the scheduler writes it)."""
    body = pod_body(name, **kwargs)
    body["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient cpu.",
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(env.clock.now()),
        }
    ]
    return env.cluster.store.create(PODS, body)


def add_running(env: Env, name: str, node: str, **kwargs: Any) -> Obj:
    body = pod_body(name, node=node, **kwargs)
    body["status"] = {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(env.clock.now())},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(env.clock.now())},
        ],
    }
    return env.cluster.store.create(PODS, body)
