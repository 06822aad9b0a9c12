"""One contract, every `ClusterOps`: the official client against the served emulator (`KubeOps`), the
emulator's API in process (`ApiOps`, the simulator's) and the recording fake (`RecordingOps`).

Each test runs against each implementation over a world that says what exists and shows what the
writes did: the emulator's store for the first two; for the fake, the objects it was told about with
its recorded calls replayed on them (the calls carry everything a cluster would need). Each test
works in a namespace of its own.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Protocol

import pytest

from shipshape.controller.events import event_for
from shipshape.controller.kube_ops import KubeOps
from shipshape.controller.ops import (
    MANAGED_KINDS,
    ClusterOps,
    EvictionOutcome,
    ObjectRef,
    OpsError,
    RecordingOps,
    SpotMetadata,
    UnscriptedCall,
)
from shipshape.controller.policy import WorkloadKind
from shipshape.emulator import assembly
from shipshape.emulator import resources as r
from shipshape.emulator.api import Api
from shipshape.emulator.resources import ResourceType
from shipshape.emulator.runtime import Cluster
from shipshape.kube.client import load_api_client
from shipshape.kube.clock import RealClock, VirtualClock
from shipshape.kube.patch import MERGE_PATCH, merge_patch
from shipshape.simulate import ops as simulate_ops
from shipshape.simulate.ops import ApiOps, complete
from tests.emulator_fixtures import ServedEmulator, running

Obj = dict[str, Any]
KINDS: dict[str, ResourceType] = {
    "Namespace": r.NAMESPACES,
    "Node": r.NODES,
    "Pod": r.PODS,
    "Deployment": r.DEPLOYMENTS,
    "PodDisruptionBudget": r.PDBS,
    "PriorityClass": r.PRIORITYCLASSES,
    "Event": r.EVENTS,
}
_namespaces = itertools.count()


class World(Protocol):
    ops: ClusterOps

    def create(self, body: Obj) -> Obj:
        """Make an object exist (as a user would: through the API); the object as stored."""
        ...

    def get(self, kind: str, namespace: str, name: str) -> Obj | None: ...

    def relabel(self, kind: str, namespace: str, name: str, labels: dict[str, str]) -> None:
        """Someone else changes the object (its resourceVersion moves on)."""
        ...

    def set_status(self, kind: str, namespace: str, name: str, status: Obj) -> None:
        """What the object's controller (the kubelet, for a pod) reports."""
        ...


def _rt_key(body: Obj) -> tuple[ResourceType, str]:
    rt = KINDS[body["kind"]]
    return rt, str(body["metadata"].get("namespace") or "") if rt.namespaced else ""


class EmulatorWorld:
    """The emulator's store, written through its API; `run` completes an API coroutine."""

    def __init__(self, ops: ClusterOps, cluster: Cluster, run: Callable[[Callable[[], Any]], Any]) -> None:
        self.ops = ops
        self.cluster = cluster
        self.run = run

    @property
    def api(self) -> Api:
        api: Api = self.cluster.services["api"]
        return api

    def create(self, body: Obj) -> Obj:
        rt, namespace = _rt_key(body)
        created: Obj = self.run(lambda: self.api.create(rt, namespace, body))
        return created

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        rt = KINDS[kind]
        found: Obj | None = self.run(lambda: _now(self.cluster.store.get(rt, namespace, name)))
        return found

    def relabel(self, kind: str, namespace: str, name: str, labels: dict[str, str]) -> None:
        patch = {"metadata": {"labels": labels}}
        self.run(lambda: self.api.patch(KINDS[kind], namespace, name, MERGE_PATCH, patch))

    def set_status(self, kind: str, namespace: str, name: str, status: Obj) -> None:
        current = self.get(kind, namespace, name)
        assert current is not None
        body = {**current, "status": status}
        self.run(lambda: self.api.update(KINDS[kind], namespace, name, body, subresource="status"))


async def _now(value: Any) -> Any:
    return value


class FakeWorld:
    """What the test told the fake exists, with the fake's recorded calls replayed on it."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.versions = itertools.count(1)
        self.ops = RecordingOps(objects=lambda kind, ns, name: self.objects.get((kind, ns, name)))

    def create(self, body: Obj) -> Obj:
        stored = merge_patch(body, {"metadata": {"resourceVersion": str(next(self.versions))}})
        _, namespace = _rt_key(body)
        self.objects[(body["kind"], namespace, body["metadata"]["name"])] = stored
        return stored

    def relabel(self, kind: str, namespace: str, name: str, labels: dict[str, str]) -> None:
        key = (kind, namespace, name)
        version = str(next(self.versions))
        self.objects[key] = merge_patch(
            self.objects[key], {"metadata": {"labels": labels, "resourceVersion": version}}
        )

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        world = {**self.objects, **self.ops.made}
        for key in self.ops.gone:
            world.pop(key, None)
        for call in self.ops.calls:
            args = call.args
            if call.op == "annotate_pod" and ("Pod", args[0], args[1]) in world:
                key = ("Pod", args[0], args[1])
                world[key] = merge_patch(world[key], {"metadata": {"annotations": args[2]}})
            elif call.op == "patch_workload" and (args[0].value, args[1], args[2]) in world:
                key = (args[0].value, args[1], args[2])
                world[key] = merge_patch(world[key], args[3])
            elif call.op == "taint_node" and ("Node", "", args[0]) in world:
                key = ("Node", "", args[0])
                world[key] = merge_patch(world[key], {"spec": {"taints": args[1]}})
        return world.get((kind, namespace, name))

    def set_status(self, kind: str, namespace: str, name: str, status: Obj) -> None:
        key = (kind, namespace, name)
        self.objects[key] = {**self.objects[key], "status": status}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedEmulator]:
    cluster = assembly.build(None, RealClock(), models=False)
    with running(cluster, tmp_path_factory.mktemp("served")) as emulator:
        yield emulator


def _kube_world(served: ServedEmulator) -> EmulatorWorld:
    def run(make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        return asyncio.run_coroutine_threadsafe(make(), served.loop).result(10)

    return EmulatorWorld(KubeOps(load_api_client(served.kubeconfig)), served.cluster, run)


def _simulator_world() -> EmulatorWorld:
    cluster = assembly.build(None, VirtualClock(), models=False)
    return EmulatorWorld(ApiOps(cluster.services["api"]), cluster, lambda make: complete(make()))


@pytest.fixture(params=["kube", "simulator", "fake"])
def world(request: pytest.FixtureRequest) -> World:
    if request.param == "kube":
        return _kube_world(request.getfixturevalue("served"))
    if request.param == "simulator":
        return _simulator_world()
    return FakeWorld()


@pytest.fixture
def ns(world: World) -> str:
    name = f"t-{next(_namespaces)}"
    world.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def pod(namespace: str, name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]},
    }


def deployment(namespace: str, name: str, replicas: int = 1, labels: dict[str, str] | None = None) -> Obj:
    metadata: Obj = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]},
            },
        },
    }


def pdb(namespace: str, name: str, app: str = "web") -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
    }


def node(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}}


def _annotations(obj: Obj | None) -> dict[str, str]:
    assert obj is not None
    return dict((obj.get("metadata") or {}).get("annotations") or {})


# ---- evict, delete_pod ------------------------------------------------------------------------------
def test_evict_removes_a_pod_and_a_second_eviction_finds_it_gone(world: World, ns: str) -> None:
    world.create(pod(ns, "web-1"))
    assert world.ops.evict(ns, "web-1") is EvictionOutcome.EVICTED
    assert world.get("Pod", ns, "web-1") is None
    assert world.ops.evict(ns, "web-1") is EvictionOutcome.GONE
    assert world.ops.evict(ns, "never-was") is EvictionOutcome.GONE


def test_evict_is_blocked_by_a_budget_that_allows_no_disruption(world: World, ns: str) -> None:
    world.create(pod(ns, "web-1"))
    world.set_status(
        "Pod", ns, "web-1", {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    )
    world.create(pdb(ns, "web"))  # not processed by a disruption controller yet: it allows nothing
    if isinstance(world.ops, RecordingOps):  # the fake knows no budgets: a refusal is scripted
        world.ops.evictions[f"{ns}/web-1"] = EvictionOutcome.BLOCKED
    assert world.ops.evict(ns, "web-1") is EvictionOutcome.BLOCKED
    assert world.get("Pod", ns, "web-1") is not None


def test_delete_pod_says_whether_it_deleted_something(world: World, ns: str) -> None:
    world.create(pod(ns, "web-1"))
    assert world.ops.delete_pod(ns, "web-1") is True
    assert world.get("Pod", ns, "web-1") is None
    assert world.ops.delete_pod(ns, "web-1") is False


# ---- annotate_pod, patch_workload -------------------------------------------------------------------
def test_annotate_pod_merges_and_none_removes(world: World, ns: str) -> None:
    world.create(
        {**pod(ns, "web-1"), "metadata": {**pod(ns, "web-1")["metadata"], "annotations": {"keep": "1"}}}
    )
    world.ops.annotate_pod(ns, "web-1", {"controller.kubernetes.io/pod-deletion-cost": "-5"})
    assert _annotations(world.get("Pod", ns, "web-1")) == {
        "keep": "1",
        "controller.kubernetes.io/pod-deletion-cost": "-5",
    }
    world.ops.annotate_pod(ns, "web-1", {"controller.kubernetes.io/pod-deletion-cost": None})
    assert _annotations(world.get("Pod", ns, "web-1")) == {"keep": "1"}


def test_writes_to_a_missing_object_are_a_404_not_worth_retrying(world: World, ns: str) -> None:
    for write in (
        lambda: world.ops.annotate_pod(ns, "nobody", {"a": "b"}),
        lambda: world.ops.patch_workload(WorkloadKind.DEPLOYMENT, ns, "nobody", {"spec": {"replicas": 2}}),
        lambda: world.ops.taint_node("no-such-node", [], ""),
    ):
        with pytest.raises(OpsError) as raised:
            write()
        assert raised.value.status == 404 and not raised.value.retryable


def test_patch_workload_is_a_merge_patch(world: World, ns: str) -> None:
    world.create(deployment(ns, "web", 2))
    world.ops.patch_workload(
        WorkloadKind.DEPLOYMENT,
        ns,
        "web",
        {"metadata": {"annotations": {"note": "x"}}, "spec": {"replicas": 3}},
    )
    found = world.get("Deployment", ns, "web")
    assert found is not None and found["spec"]["replicas"] == 3 and _annotations(found)["note"] == "x"


# ---- apply, delete ----------------------------------------------------------------------------------
def test_apply_creates_then_finds_the_same_object_unchanged_whatever_the_server_added(
    world: World, ns: str
) -> None:
    body = deployment(ns, "placeholder", 1, labels={"spot.shipshape.dev/headroom": "true"})
    assert world.ops.apply(body) == "created"
    # The API server defaulted strategy, revisionHistoryLimit, the template's pull policy, ...: no change.
    again = deployment(ns, "placeholder", 1, labels={"spot.shipshape.dev/headroom": "true"})
    assert world.ops.apply(again) == "unchanged"
    priority = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": f"{ns}-low"},
        "value": -10,
    }
    assert world.ops.apply(priority) == "created"
    assert world.ops.apply(dict(priority)) == "unchanged"


def test_apply_updates_a_changed_spec_label_or_annotation(world: World, ns: str) -> None:
    assert world.ops.apply(deployment(ns, "placeholder", 1)) == "created"
    assert world.ops.apply(deployment(ns, "placeholder", 2)) == "updated"
    found = world.get("Deployment", ns, "placeholder")
    assert found is not None and found["spec"]["replicas"] == 2
    assert world.ops.apply(deployment(ns, "placeholder", 2, labels={"tier": "low"})) == "updated"
    guard = pdb(ns, "solo-guard", app="solo")
    assert world.ops.apply(guard) == "created"
    renewed = merge_patch(guard, {"metadata": {"annotations": {"spot.shipshape.dev/guard-expires-at": "x"}}})
    assert world.ops.apply(renewed) == "updated"
    assert _annotations(world.get("PodDisruptionBudget", ns, "solo-guard")) == {
        "spot.shipshape.dev/guard-expires-at": "x"
    }
    assert world.ops.apply(renewed) == "unchanged"


def test_apply_finds_an_object_someone_else_created_and_keeps_what_they_added(world: World, ns: str) -> None:
    theirs = pdb(ns, "guard")
    theirs["metadata"]["annotations"] = {"added-by": "someone"}
    world.create(theirs)
    assert world.ops.apply(pdb(ns, "guard")) == "unchanged"


def test_delete_says_whether_it_deleted_something(world: World, ns: str) -> None:
    world.ops.apply(pdb(ns, "guard"))
    ref = ObjectRef("policy/v1", "PodDisruptionBudget", ns, "guard")
    assert world.ops.delete(ref) is True
    assert world.get("PodDisruptionBudget", ns, "guard") is None
    assert world.ops.delete(ref) is False
    world.ops.apply(deployment(ns, "placeholder"))
    assert world.ops.delete(ObjectRef("apps/v1", "Deployment", ns, "placeholder")) is True


def test_only_the_kinds_the_loops_own_are_applied_or_deleted(world: World, ns: str) -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": ns}}
    for write in (
        lambda: world.ops.apply(config_map),
        lambda: world.ops.delete(ObjectRef("v1", "ConfigMap", ns, "c")),
    ):
        with pytest.raises(OpsError) as raised:
            write()
        assert not raised.value.retryable


# ---- post_event, taint_node, spot_metadata ----------------------------------------------------------
def test_post_event_records_an_event_in_its_objects_namespace(world: World, ns: str) -> None:
    about = world.create(deployment(ns, "web"))
    body = event_for(about, "Deployment", "InterruptionResponse", "surging", now=1_700_000_000.0)
    world.ops.post_event(body)
    if not isinstance(world.ops, RecordingOps):
        found = world.get("Event", ns, body["metadata"]["name"])
        assert found is not None and found["reason"] == "InterruptionResponse"
    else:
        assert world.ops.of("post_event") == [(body,)]


def test_taint_node_is_conditional_on_the_version_it_read(world: World, ns: str) -> None:
    name = f"{ns}-node"
    created = world.create(node(name))
    version = created["metadata"]["resourceVersion"]
    taint = {"key": "spot.shipshape.dev/interruption-notice", "value": "event-queue", "effect": "NoSchedule"}
    world.ops.taint_node(name, [taint], version)
    found = world.get("Node", "", name)
    assert found is not None and found["spec"]["taints"] == [taint]
    world.relabel("Node", "", name, {"changed": "by-someone-else"})
    with pytest.raises(OpsError) as raised:
        world.ops.taint_node(name, [], version)  # the node changed since `version`
    assert raised.value.status == 409 and raised.value.retryable


def test_spot_metadata_answers_only_for_the_nodes_asked_about(world: World, ns: str) -> None:
    nodes = [world.create(node(f"{ns}-a")), world.create(node(f"{ns}-b"))]
    answers = world.ops.spot_metadata(nodes)
    assert set(answers) <= {f"{ns}-a", f"{ns}-b"}
    assert all(isinstance(answer, SpotMetadata) for answer in answers.values())


# ---- the fake fails loudly ----------------------------------------------------------------------------
def test_the_fake_refuses_to_answer_about_a_cluster_it_was_not_told_about() -> None:
    ops = RecordingOps()
    for call in (
        lambda: ops.evict("shop", "web-1"),
        lambda: ops.delete_pod("shop", "web-1"),
        lambda: ops.annotate_pod("shop", "web-1", {"a": "b"}),
        lambda: ops.apply(pdb("shop", "guard")),
        lambda: ops.delete(ObjectRef("policy/v1", "PodDisruptionBudget", "shop", "guard")),
        lambda: ops.taint_node("n1", [], "1"),
    ):
        with pytest.raises(UnscriptedCall, match="was given no `objects`"):
            call()
    # What a test scripts is answered without a world.
    scripted = RecordingOps(evictions={"shop/web-1": EvictionOutcome.BLOCKED})
    assert scripted.evict("shop", "web-1") is EvictionOutcome.BLOCKED


def test_the_simulators_ops_manage_the_same_kinds() -> None:
    assert set(simulate_ops._OWNED) == MANAGED_KINDS
