"""Scale-down of under-utilized nodes in a whole emulated cluster (every model, objects created
through the API, a virtual clock): the drain goes through the eviction subresource, the
ReplicaSet recreates the pods elsewhere, and what blocks a node keeps it."""

from __future__ import annotations

import re
from collections.abc import Coroutine
from typing import Any

from shipshape.emulator import assembly
from shipshape.emulator.api import Api
from shipshape.emulator.cloud.model import CloudModel
from shipshape.emulator.resources import DEPLOYMENTS, EVENTS, NODES, PDBS, PODS, PRIORITYCLASSES, ResourceType
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import parse
from shipshape.emulator.store import Obj
from shipshape.kube.clock import VirtualClock

from .builders import SPOT_A

POOL = "spot-a"


def _complete(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("an in-process API call waited on I/O")


class Env:
    def __init__(self, pool: dict[str, Any] | None = None, **autoscaler: Any) -> None:
        settings = {"scaleDownUnneeded": "1m", "scaleDownDelayAfterAdd": "0s", **autoscaler}
        doc = {
            "name": "scale-down",
            "seed": 3,
            # Two m5.large nodes (1930m allocatable cpu each), nothing else.
            "pools": [{**SPOT_A, "initialSize": 2, "minSize": 0, "interruptionRate": 0, **(pool or {})}],
            "interruptions": {"enabled": False},
            "autoscaler": settings,
            "kubelet": {"preloadedImages": ["app:1", "registry.k8s.io/pause:3.10"]},
        }
        self.clock = VirtualClock()
        self.cluster: Cluster = assembly.build(parse(doc), self.clock)
        self.api: Api = self.cluster.services["api"]
        self.cloud: CloudModel = self.cluster.services["cloud"]
        self.cluster.engine.settle()

    def create(self, rt: ResourceType, body: Obj, namespace: str = "default") -> Obj:
        created: Obj = _complete(self.api.create(rt, namespace if rt.namespaced else "", body))
        return created

    def run(self, seconds: float) -> None:
        self.cluster.engine.run_until(self.clock.now() + seconds)

    def nodes(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.cluster.store.list(NODES))

    def pods(self, app: str) -> list[Obj]:
        return [
            p
            for p in self.cluster.store.list(PODS, "default")
            if p["metadata"].get("labels", {}).get("app") == app
            and not p["metadata"].get("deletionTimestamp")
        ]

    def ready(self, app: str) -> list[Obj]:
        return [
            p
            for p in self.pods(app)
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or []
            )
        ]

    def events(self, reason: str) -> list[Obj]:
        return [e for e in self.cluster.store.list(EVENTS) if e["reason"] == reason]


def deployment(name: str, replicas: int, cpu: str, **template: Any) -> Obj:
    annotations = template.pop("annotations", None)
    metadata: dict[str, Any] = {"labels": {"app": name}}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": metadata,
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "app",
                            "image": "app:1",
                            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
                        }
                    ],
                    **template,
                },
            },
        },
    }


def spread_web(env: Env, **template: Any) -> None:
    """Two 400m pods, one per node (the scheduler spreads them): both nodes about 21 % used."""
    env.create(DEPLOYMENTS, deployment("web", 2, "400m", **template))
    env.run(60)
    assert len(env.ready("web")) == 2
    assert len({p["spec"]["nodeName"] for p in env.pods("web")}) == 2


def test_one_of_two_half_empty_nodes_is_drained_and_removed() -> None:
    env = Env()
    before = env.nodes()
    spread_web(env)
    names_before = {p["metadata"]["name"] for p in env.pods("web")}
    env.run(240)
    (kept,) = env.nodes()
    assert kept in before
    assert env.cloud.pools[POOL].desired == 1
    # The ReplicaSet recreated the evicted pod on the node that stays; both are Ready.
    ready = env.ready("web")
    assert len(ready) == 2 and {p["spec"]["nodeName"] for p in ready} == {kept}
    assert len(names_before - {p["metadata"]["name"] for p in ready}) == 1
    (gone,) = set(before) - {kept}
    node_events = [e for e in env.events("ScaleDown") if e["involvedObject"]["kind"] == "Node"]
    assert [(e["involvedObject"]["name"], e["message"]) for e in node_events] == [
        (gone, "marked the node as toBeDeleted/unschedulable")
    ]
    pod_events = [e for e in env.events("ScaleDown") if e["involvedObject"]["kind"] == "Pod"]
    assert [e["message"] for e in pod_events] == ["deleting pod for node scale down"]
    assert {e["source"]["component"] for e in node_events + pod_events} == {"cluster-autoscaler"}
    evicted = pod_events[0]["involvedObject"]["name"]
    status = [e["message"] for e in env.events("ScaleDown") if e["involvedObject"]["kind"] == "ConfigMap"]
    cpu = 400 / 1930  # the web pod's request over the node's allocatable cpu
    assert re.fullmatch(
        rf"Scale-down: removing node {re.escape(gone)}, utilization: "
        rf"\{{{re.escape(repr(cpu))} 0\.\d+ 0 cpu {re.escape(repr(cpu))}\}}, "
        rf"pods to reschedule: default/{evicted}",
        status[0],
    ), status[0]
    assert status[1] == f"Scale-down: node {gone} removed with drain"


def test_a_budget_that_allows_no_disruption_keeps_the_node() -> None:
    env = Env()
    env.create(
        PDBS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    spread_web(env)
    before = env.nodes()
    env.run(600)
    assert env.nodes() == before
    assert env.events("ScaleDown") == []
    assert len(env.ready("web")) == 2


def test_a_pod_not_safe_to_evict_keeps_the_node() -> None:
    env = Env()
    spread_web(env, annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    before = env.nodes()
    env.run(600)
    assert env.nodes() == before
    assert env.events("ScaleDown") == []


def test_expendable_placeholders_neither_keep_a_node_nor_trigger_a_scale_up() -> None:
    env = Env()
    env.create(
        PRIORITYCLASSES,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "filler"},
            "value": -100,
        },
    )
    # A 1000m placeholder on each node: with a web pod, 73 % of its cpu requested, but expendable.
    env.create(DEPLOYMENTS, deployment("filler", 2, "1000m", priorityClassName="filler"))
    env.run(5)
    env.create(DEPLOYMENTS, deployment("web", 2, "400m"))
    env.run(30)
    assert len({p["spec"].get("nodeName") for p in env.ready("filler")}) == 2
    assert len({p["spec"].get("nodeName") for p in env.ready("web")}) == 2
    env.run(300)
    assert len(env.nodes()) == 1
    assert env.cloud.pools[POOL].desired == 1
    assert len(env.ready("web")) == 2
    # The placeholder pod of the removed node is recreated and stays pending: no scale-up for it.
    env.run(120)
    assert env.cloud.pools[POOL].desired == 1
    assert env.events("TriggeredScaleUp") == [] and env.events("NotTriggerScaleUp") == []
    assert len(env.pods("filler")) == 2 and len(env.ready("filler")) == 1


def test_empty_only_keeps_the_older_behaviour() -> None:
    env = Env(scaleDownEmptyOnly=True)
    spread_web(env)
    before = env.nodes()
    env.run(600)
    assert env.nodes() == before


def _taint_and_removal_times(env: Env) -> tuple[dict[str, float], dict[str, float]]:
    tainted: dict[str, float] = {}
    removed: dict[str, float] = {}

    def seen(event: Any) -> None:
        if event.resource is not NODES:
            return
        name = event.object["metadata"]["name"]
        if event.type == "DELETED":
            removed[name] = env.clock.now()
        elif any(
            t["key"] == "ToBeDeletedByClusterAutoscaler" for t in event.object["spec"].get("taints") or []
        ):
            tainted.setdefault(name, env.clock.now())

    env.cluster.store.subscribe(seen)
    return tainted, removed


def test_non_empty_nodes_are_drained_one_at_a_time() -> None:
    env = Env(pool={"initialSize": 3})
    tainted, removed = _taint_and_removal_times(env)
    env.create(DEPLOYMENTS, deployment("web", 3, "300m"))
    env.run(30)
    assert len({p["spec"]["nodeName"] for p in env.ready("web")}) == 3
    env.run(400)
    assert len(env.nodes()) == 1
    assert len(tainted) == 2 and set(removed) == set(tainted)
    first, second = sorted(tainted, key=tainted.__getitem__)
    assert tainted[second] >= removed[first]  # the second drain began after the first node was gone
    assert len(env.ready("web")) == 3


def test_a_drain_refused_by_the_budget_is_aborted_and_the_node_kept() -> None:
    env = Env()
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    env.create(PDBS, budget)
    tainted, removed = _taint_and_removal_times(env)
    closed = False

    def close_budget(event: Any) -> None:
        # Once the drain has begun (the node tainted, no eviction sent yet), the budget is
        # tightened: every eviction is refused from then on.
        nonlocal closed
        if event.resource is NODES and tainted and not closed:
            closed = True

            def tighten(pdb: Obj) -> None:
                pdb["spec"]["minAvailable"] = 2

            def refuse(pdb: Obj) -> None:
                pdb["status"]["disruptionsAllowed"] = 0

            env.cluster.store.mutate(PDBS, "default", "web", tighten)
            env.cluster.store.mutate(PDBS, "default", "web", refuse, subresource="status")

    env.cluster.store.subscribe(close_budget)
    # Spread web with the budget closed only after the drain starts: at planning one disruption
    # is allowed.
    env.create(DEPLOYMENTS, deployment("web", 2, "400m"))
    env.run(60)
    before = env.nodes()
    env.run(120)
    assert len(tainted) == 1 and removed == {}
    env.run(180)
    assert env.nodes() == before
    (node,) = tainted
    taints = [t["key"] for t in (env.cluster.store.get(NODES, "", node) or {})["spec"].get("taints") or []]
    assert "ToBeDeletedByClusterAutoscaler" not in taints
    (failed,) = env.events("ScaleDownFailed")
    assert failed["type"] == "Warning" and failed["involvedObject"]["name"] == node
    assert failed["message"] == "failed to drain the node, aborting ScaleDown"
    assert len(env.ready("web")) == 2


def test_no_scale_down_within_the_delay_after_a_scale_up() -> None:
    env = Env(scaleDownDelayAfterAdd="5m")
    tainted, _ = _taint_and_removal_times(env)
    start = env.clock.now()
    env.create(DEPLOYMENTS, deployment("web", 3, "1500m"))  # one pod per node: a third node is needed
    env.run(15)
    (scaled,) = env.events("ScaledUpGroup")
    assert scaled["message"] == "Scale-up: setting group spot-a size to 3 instead of 2 (max: 6)"
    scaled_at = start + 10  # the first scan

    def scale(d: Obj) -> None:
        d["spec"]["replicas"] = 1

    env.cluster.store.mutate(DEPLOYMENTS, "default", "web", scale)
    env.run(420)
    # Two of the three nodes were unneeded a minute later, but went only once the delay was over.
    assert len(env.nodes()) == 1
    assert len(tainted) == 2
    assert min(tainted.values()) >= scaled_at + 300


def test_the_scale_down_disabled_annotation_keeps_a_node() -> None:
    env = Env()
    first = env.nodes()[0]

    def disable(node: Obj) -> None:
        node["metadata"].setdefault("annotations", {})[
            "cluster-autoscaler.kubernetes.io/scale-down-disabled"
        ] = "true"

    env.cluster.store.mutate(NODES, "", first, disable)
    env.run(300)
    assert env.nodes() == [first]
