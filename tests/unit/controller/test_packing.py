from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import jsonpatch
import pytest

from shipshape.controller.packing import (
    NodeRoom,
    Room,
    fullest_fitting,
    is_placeholder,
    packing_preferences,
    pod_requests,
    takes_replacements,
)
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType, ControllerConfig, Packing
from shipshape.controller.state import ClusterState, node_pool
from shipshape.kube.objects import is_daemon_pod
from shipshape.kube.scheduling import node_allocatable

from .builders import Harness, added, deployment, namespace, node, pod_of, replicaset, review
from .test_webhook import ENABLED, patch_of

Obj = dict[str, Any]
GI = 2**30


def room(name: str, cpu: int, memory_gi: int, used_cpu: int = 0, used_gi: int = 0, pods: int = 0) -> NodeRoom:
    return NodeRoom(name, f"host-{name}", cpu, memory_gi * GI, 110, used_cpu, used_gi * GI, pods)


def names(rooms: tuple[NodeRoom, ...]) -> tuple[str, ...]:
    return tuple(r.name for r in rooms)


def ready_node(name: str, capacity: str, cpu: str = "8", memory: str = "32Gi", **kwargs: Any) -> Obj:
    body = node(name, capacity, **kwargs)
    body["status"] = {
        "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return body


def sized(pod: Obj, cpu: str, memory: str) -> Obj:
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    return pod


def test_fullest_fitting_ranks_by_fill_after_placement_and_skips_what_does_not_fit() -> None:
    rooms = [
        room("empty", 8000, 32),
        room("half", 8000, 32, used_cpu=4000, used_gi=16),
        room("almost", 8000, 32, used_cpu=7000, used_gi=8),  # 1 cpu free: a 2-cpu pod does not fit
        room("memory-full", 8000, 32, used_cpu=1000, used_gi=31),
        room("three-quarters", 8000, 32, used_cpu=6000, used_gi=24),
    ]
    assert names(fullest_fitting((2000, 4 * GI), rooms)) == ("three-quarters", "half", "empty")
    assert names(fullest_fitting((2000, 4 * GI), rooms, limit=1)) == ("three-quarters",)
    assert names(fullest_fitting((500, GI), rooms)) == ("three-quarters", "almost", "memory-full")
    assert fullest_fitting((9000, GI), rooms) == ()


def test_fullest_fitting_counts_pod_slots_and_breaks_ties_by_host() -> None:
    full_slots = NodeRoom("slots", "slots", 8000, 32 * GI, 2, 0, 0, 2)
    assert fullest_fitting((100, GI), [full_slots]) == ()
    assert names(fullest_fitting((100, GI), [room("b", 4000, 16), room("a", 4000, 16)])) == ("a", "b")


def test_preferences_weigh_the_fullest_host_most() -> None:
    terms = packing_preferences(["n3", "n1", "n2", "n4"])
    assert [t["weight"] for t in terms] == [100, 50, 25]
    assert [t["preference"]["matchExpressions"][0]["values"] for t in terms] == [["n3"], ["n1"], ["n2"]]
    assert terms[0]["preference"]["matchExpressions"][0]["key"] == "kubernetes.io/hostname"


def test_pod_requests_take_the_larger_of_containers_and_init_containers() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "250m"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}],
        }
    }
    assert pod_requests(pod) == (2000, GI)


def two_on_demand_nodes() -> tuple[Harness, Obj]:
    """A harness with a managed Deployment `api` (its ReplicaSet returned) and on-demand nodes od-1, od-2."""
    h = Harness()
    dep = deployment("api", 2, ENABLED)
    rs = replicaset(dep)
    h.add(dep, rs, ready_node("od-1", "on-demand"), ready_node("od-2", "on-demand"))
    return h, rs


def test_cache_keeps_requests_per_node_across_binding_rebinding_finishing_and_deletion() -> None:
    h, rs = two_on_demand_nodes()
    pod = sized(pod_of(rs, "api-1"), "1500m", "2Gi")
    h.cache.apply(added(pod))
    assert h.cache.requested_on("od-1") == (0, 0, 0)  # not bound yet
    bound = sized(pod_of(rs, "api-1", node="od-1"), "1500m", "2Gi")
    h.cache.apply({"type": "MODIFIED", "object": bound})
    h.cache.apply({"type": "MODIFIED", "object": bound})  # a status update counts once
    assert h.cache.requested_on("od-1") == (1500, 2 * GI, 1)
    moved = sized(pod_of(rs, "api-1", node="od-2"), "1500m", "2Gi")
    h.cache.apply({"type": "MODIFIED", "object": moved})
    assert h.cache.requested_on("od-1") == (0, 0, 0)
    assert h.cache.requested_on("od-2") == (1500, 2 * GI, 1)
    finished = {**moved, "status": {"phase": "Succeeded"}}
    h.cache.apply({"type": "MODIFIED", "object": finished})
    assert h.cache.requested_on("od-2") == (0, 0, 0)
    other = sized(pod_of(rs, "api-2", node="od-2"), "1", "1Gi")
    h.cache.apply(added(other))
    h.cache.apply({"type": "DELETED", "object": other})
    assert h.cache.requested_on("od-2") == (0, 0, 0)
    h.cache.replace("Pod", [bound])
    assert h.cache.requested_on("od-1") == (1500, 2 * GI, 1)


def test_rooms_are_the_nodes_a_pod_could_be_scheduled_on() -> None:
    h = Harness()
    gpu_taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    cordoned = ready_node("od-cordoned", "on-demand")
    cordoned["spec"]["unschedulable"] = True
    not_ready = ready_node("od-not-ready", "on-demand")
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    h.add(
        ready_node("od-1", "on-demand", zone="us-east-1a"),
        ready_node("od-2", "on-demand", zone="us-east-1b"),
        ready_node("od-gpu", "on-demand", taints=[gpu_taint]),
        cordoned,
        not_ready,
        ready_node("spot-1", "spot", instance_type="c5.large"),
        ready_node("spot-2", "spot", instance_type="m5.large"),
    )
    pod: Obj = {"spec": {"containers": [{"name": "app"}]}}
    hosts = {r.host for r in h.cache.packing_rooms(pod, CapacityType.ON_DEMAND)}
    assert hosts == {"od-1", "od-2"}
    assert {r.host for r in h.cache.packing_rooms(pod, CapacityType.ON_DEMAND, avoided=["od-2"])} == {"od-1"}
    zone_b = {
        "spec": {
            "containers": [{"name": "app"}],
            "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1b"},
        }
    }
    assert {r.host for r in h.cache.packing_rooms(zone_b, CapacityType.ON_DEMAND)} == {"od-2"}
    tolerant = {"spec": {"containers": [{"name": "app"}], "tolerations": [{"operator": "Exists"}]}}
    assert {r.host for r in h.cache.packing_rooms(tolerant, CapacityType.ON_DEMAND)} == {
        "od-1",
        "od-2",
        "od-gpu",
    }
    spot = h.cache.packing_rooms(pod, CapacityType.SPOT, Pool("c5.large", "us-east-1a"))
    assert [r.host for r in spot] == ["spot-1"]
    assert h.cache.packing_rooms(pod, CapacityType.SPOT, None) == []


def _admit_base_pod(h: Harness, rs: Obj) -> Obj:
    pod = sized(pod_of(rs), "1", "2Gi")
    mutated: Obj = jsonpatch.apply_patch(pod, patch_of(h.placer.review(review(pod))["response"]))
    return mutated


@pytest.mark.parametrize("packing", [Packing.ON_DEMAND, Packing.ALL])
def test_on_demand_pod_prefers_the_fullest_on_demand_nodes_that_fit(packing: Packing) -> None:
    h = Harness(ControllerConfig(packing=packing))
    dep = deployment("api", 3, ENABLED)
    rs = replicaset(dep)
    other = replicaset(deployment("db", 1), "def34")
    h.add(namespace("shop"), dep, rs, ready_node("od-a", "on-demand"), ready_node("od-b", "on-demand"))
    h.add(ready_node("od-c", "on-demand"), ready_node("s1", "spot"))
    h.cache.apply(added(sized(pod_of(other, "db-0", node="od-b"), "6", "8Gi")))
    h.cache.apply(added(sized(pod_of(other, "db-1", node="od-c"), "7500m", "8Gi")))  # no room for 1 cpu
    mutated = _admit_base_pod(h, rs)
    preferred = mutated["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == packing_preferences(["od-b", "od-a"])


def test_packing_off_adds_no_preference_and_spot_packs_only_with_all() -> None:
    for packing, spot_packed in ((Packing.OFF, False), (Packing.ON_DEMAND, False), (Packing.ALL, True)):
        h = Harness(ControllerConfig(packing=packing, on_demand_base=0))
        dep = deployment("api", 3, ENABLED)
        rs = replicaset(dep)
        h.add(namespace("shop"), dep, rs, ready_node("s1", "spot"), ready_node("s2", "spot"))
        h.cache.apply(added(sized(pod_of(rs, "api-x", node="s2"), "2", "2Gi")))
        mutated = _admit_base_pod(h, rs)
        affinity = mutated["spec"]["affinity"]["nodeAffinity"]
        preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution", [])
        hosts = [
            term["preference"]["matchExpressions"][0]["values"][0]
            for term in preferred
            if term["preference"]["matchExpressions"][0]["key"] == "kubernetes.io/hostname"
        ]
        assert hosts == (["s2", "s1"] if spot_packed else []), packing


def test_a_pending_pod_counts_on_the_node_its_decision_packed_it_onto_until_bound() -> None:
    h, rs = two_on_demand_nodes()
    pod = sized(pod_of(rs, "api-1"), "1", "1Gi")
    pod["metadata"]["annotations"] = {
        "spot.shipshape.dev/decision": '{"capacityType": "on-demand", "pool": "", "reason": "on-demand-base",'
        ' "id": "d-1", "node": "od-1"}'
    }
    h.cache.apply(added(pod))
    assert h.cache.requested_on("od-1") == (1000, GI, 1)
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "od-2"}, "status": {"phase": "Running"}}
    h.cache.apply({"type": "MODIFIED", "object": bound})
    assert (h.cache.requested_on("od-1"), h.cache.requested_on("od-2")) == ((0, 0, 0), (1000, GI, 1))
    h.cache.apply({"type": "DELETED", "object": bound})
    assert h.cache.requested_on("od-2") == (0, 0, 0)


def test_a_burst_fills_one_node_after_another() -> None:
    """Each admitted pod is seen by the cache (unbound, as the watch delivers it) before the next one is
    admitted: the pods pending for the fullest node count there, so the burst moves on once it is full."""
    h = Harness(ControllerConfig(on_demand_base=0, spot_percentage=0))
    dep = deployment("api", 4, ENABLED)
    rs = replicaset(dep)
    other = replicaset(deployment("db", 1), "def34")
    h.add(
        namespace("shop"),
        dep,
        rs,
        ready_node("od-a", "on-demand", cpu="4"),
        ready_node("od-b", "on-demand", cpu="4"),
    )
    h.cache.apply(added(sized(pod_of(other, "db-0", node="od-b"), "2", "2Gi")))
    first_choice = []
    for index in range(4):
        pod = sized(pod_of(rs, f"api-{index}"), "1", "1Gi")
        mutated = jsonpatch.apply_patch(pod, patch_of(h.placer.review(review(pod))["response"]))
        preferred = mutated["spec"]["affinity"]["nodeAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        first_choice.append(preferred[0]["preference"]["matchExpressions"][0]["values"][0])
        assert (
            '"node":"' + first_choice[-1] + '"'
            in mutated["metadata"]["annotations"]["spot.shipshape.dev/decision"]
        )
        h.cache.apply(added(mutated))
    assert first_choice == ["od-b", "od-b", "od-a", "od-a"]


def test_packing_is_counted_by_capacity_type_and_outcome() -> None:
    h = Harness(ControllerConfig(packing=Packing.ON_DEMAND))
    dep = deployment("api", 3, ENABLED)
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, ready_node("od-a", "on-demand", cpu="2"), ready_node("s1", "spot"))
    _admit_base_pod(h, rs)  # 1 cpu: fits on od-a
    h.cache.apply(added(sized(pod_of(rs, "api-big", node="od-a"), "1500m", "1Gi")))
    h.placer.review(review(sized(pod_of(rs), "1", "1Gi")))  # base already met: this one goes to spot
    db = deployment("db", 1, {**ENABLED, "spot.shipshape.dev/single-replica": "on-demand"})
    big = replicaset(db, "x1")
    h.add(db, big)
    h.placer.review(review(sized(pod_of(big), "1", "1Gi")))  # on-demand, but od-a has no room left
    assert (
        h.metric("shipshape_packing_preferences_total", {"capacity_type": "on-demand", "packed": "true"}) == 1
    )
    assert (
        h.metric("shipshape_packing_preferences_total", {"capacity_type": "on-demand", "packed": "false"})
        == 1
    )
    assert h.metric("shipshape_packing_preferences_total", {"capacity_type": "spot", "packed": "true"}) == 0


def scanned_rooms(
    nodes: Iterable[Obj],
    pods: Iterable[Obj],
) -> list[Room]:
    """The room left on each node that takes replacements and runs a workload pod, by a scan of every
    node and pod: what `ClusterState.spare_rooms` keeps from pod events."""
    free: dict[str, list[int]] = {}
    pools: dict[str, Pool | None] = {}
    for item in nodes:
        if takes_replacements(item):
            allocatable = node_allocatable(item)
            name = str((item.get("metadata") or {}).get("name"))
            free[name] = [
                allocatable.get("cpu", 0),
                allocatable.get("memory", 0),
                allocatable.get("pods", 110),
            ]
            pools[name] = node_pool(item)
    held: set[str] = set()
    for pod in pods:
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        slot = free.get(node_name)
        if slot is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if is_placeholder(pod):
            continue
        if not is_daemon_pod(pod):
            held.add(node_name)
        cpu, memory = pod_requests(pod)
        slot[0] -= cpu
        slot[1] -= memory
        slot[2] -= 1
    return [
        Room(pools[name], *slot)
        for name, slot in free.items()
        if name in held and slot[0] > 0 and slot[1] > 0 and slot[2] > 0
    ]


def _random_pod(rng: random.Random, index: int, nodes: list[str]) -> Obj:
    role = rng.choice(["workload", "workload", "daemon", "placeholder"])
    pod: Obj = {
        "kind": "Pod",
        "metadata": {"name": f"p{index}", "namespace": "shop", "labels": {}},
        "spec": {
            "containers": [
                {
                    "resources": {
                        "requests": {
                            "cpu": f"{rng.randint(1, 20) * 100}m",
                            "memory": f"{rng.randint(1, 8)}Gi",
                        }
                    }
                }
            ]
        },
        "status": {"phase": "Running"},
    }
    if role == "daemon":
        pod["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "agent", "controller": True}]
    elif role == "placeholder":
        pod["metadata"]["labels"] = {"spot.shipshape.dev/headroom": "true"}
    if rng.random() < 0.8:
        pod["spec"]["nodeName"] = rng.choice(nodes)
    return pod


def test_spare_rooms_from_the_per_node_sums_equal_a_scan_of_every_pod() -> None:
    """The cache's incremental sums give what a scan of all nodes and pods gives,
    through random creations, bindings, moves, finished pods, deletions and node changes."""
    rng = random.Random(11)
    cache = ClusterState(ControllerConfig())
    names = [f"n{i}" for i in range(6)]
    for i, name in enumerate(names):
        cache.apply(added(ready_node(name, "spot" if i % 2 else "on-demand", cpu="4", memory="16Gi")))
    pods: dict[str, Obj] = {}
    seen_rooms = 0
    for step in range(400):
        action = rng.random()
        if action < 0.4 or not pods:
            pod = _random_pod(rng, step, names)
            pods[pod["metadata"]["name"]] = pod
            cache.apply(added(pod))
        elif action < 0.6:
            pod = pods[rng.choice(sorted(pods))]
            pod = {**pod, "spec": {**pod["spec"], "nodeName": rng.choice(names)}}
            pods[pod["metadata"]["name"]] = pod
            cache.apply({"type": "MODIFIED", "object": pod})
        elif action < 0.7:
            pod = pods[rng.choice(sorted(pods))]
            pod = {**pod, "status": {"phase": rng.choice(["Succeeded", "Failed"])}}
            pods[pod["metadata"]["name"]] = pod
            cache.apply({"type": "MODIFIED", "object": pod})
        elif action < 0.85:
            pod = pods.pop(rng.choice(sorted(pods)))
            cache.apply({"type": "DELETED", "object": pod})
        else:
            node = ready_node(rng.choice(names), rng.choice(["spot", "on-demand"]), cpu="4", memory="16Gi")
            if rng.random() < 0.3:
                node["spec"]["unschedulable"] = True
            cache.apply({"type": "MODIFIED", "object": node})
        rooms = cache.spare_rooms()
        assert list(rooms) == scanned_rooms(cache.objects("Node"), cache.objects("Pod")), step
        seen_rooms += len(rooms)
    assert seen_rooms > 400  # the comparison was not between empty lists


def test_spare_rooms_count_nodes_running_a_workload_pod_and_free_what_placeholders_hold() -> None:
    cache = ClusterState(ControllerConfig())
    for name in ("daemons-only", "busy", "cordoned"):
        cache.apply(added(ready_node(name, "on-demand", cpu="4", memory="16Gi")))
    cordoned = ready_node("cordoned", "on-demand", cpu="4", memory="16Gi")
    cordoned["spec"]["unschedulable"] = True
    cache.apply({"type": "MODIFIED", "object": cordoned})
    daemon = {
        "kind": "Pod",
        "metadata": {
            "name": "agent-1",
            "namespace": "kube-system",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "agent",
                    "uid": "a",
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": "daemons-only", "containers": [{"resources": {"requests": {"cpu": "100m"}}}]},
    }
    placeholder = {
        "kind": "Pod",
        "metadata": {"name": "hold-1", "namespace": "x", "labels": {"spot.shipshape.dev/headroom": "true"}},
        "spec": {
            "nodeName": "busy",
            "containers": [{"resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}],
        },
    }
    work: Obj = {
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {
            "nodeName": "busy",
            "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
    }
    on_cordoned = {
        **work,
        "metadata": {"name": "web-2", "namespace": "shop"},
        "spec": {**work["spec"], "nodeName": "cordoned"},
    }
    for pod in (daemon, placeholder, work, on_cordoned):
        cache.apply(added(pod))
    assert list(cache.spare_rooms()) == [Room(None, 3000, 15 * GI, 109)]
    cache.apply({"type": "DELETED", "object": work})
    assert list(cache.spare_rooms()) == []


def test_node_versions_that_share_their_unchanged_parts_are_read_for_readiness_only() -> None:
    cache = ClusterState(ControllerConfig())
    first = ready_node("od-1", "on-demand", cpu="4", memory="16Gi")
    cache.apply(added(first))
    work: Obj = {
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {
            "nodeName": "od-1",
            "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
    }
    cache.apply(added(work))
    assert [room.cpu_millis for room in cache.spare_rooms()] == [3000]

    def status_write(previous: Obj, ready: str) -> Obj:
        """A new version as an in-process store writes it: status replaced, the rest shared."""
        status = {**previous["status"], "conditions": [{"type": "Ready", "status": ready}]}
        return {**previous, "metadata": {**previous["metadata"]}, "status": status}

    heartbeat = status_write(first, "True")
    cache.apply({"type": "MODIFIED", "object": heartbeat})
    assert cache.nodes_by_name()["od-1"]["status"] is heartbeat["status"]
    assert [room.cpu_millis for room in cache.spare_rooms()] == [3000]
    not_ready = status_write(heartbeat, "False")
    cache.apply({"type": "MODIFIED", "object": not_ready})
    assert list(cache.spare_rooms()) == []  # a node that is not Ready takes no replacements
    cache.apply({"type": "MODIFIED", "object": status_write(not_ready, "True")})
    assert [room.cpu_millis for room in cache.spare_rooms()] == [3000]
    relabelled = {**heartbeat, "metadata": {**heartbeat["metadata"], "labels": {}}}
    cache.apply({"type": "MODIFIED", "object": relabelled})  # no capacity label: not a candidate
    assert list(cache.spare_rooms()) == []
