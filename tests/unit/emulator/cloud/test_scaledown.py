"""Scale-down planning, pure: utilization, what blocks a node, and where its pods would go."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shipshape.emulator.cloud import fit, nodes, scaledown
from shipshape.emulator.cloud.scaledown import BLOCK, DROP, LEAVE, MOVE, Budgets, NodeView, PodFacts, Rules
from shipshape.kube import scheduling
from shipshape.kube.quantity import resource_amount

from .builders import SPOT_A, pod_body, scenario

# m5.large: allocatable cpu 1930m.
POOL = scenario([SPOT_A]).pools[0]
GPU_POOL = scenario(
    [{**SPOT_A, "name": "gpu", "instanceType": "g4dn.xlarge", "cpu": "4", "memory": "16Gi", "gpus": 1}]
).pools[0]


def node_obj(name: str, pool: Any = POOL, **annotations: str) -> dict[str, Any]:
    obj = nodes.template_node(pool, "us-east-1", "v1.32.0")
    obj["metadata"] = {**obj["metadata"], "name": name, "annotations": dict(annotations)}
    return obj


def facts(name: str, *, node: str = "", owner: str | None = "ReplicaSet", **kwargs: Any) -> PodFacts:
    annotations = kwargs.pop("annotations", None)
    priority = kwargs.pop("priority", None)
    body = pod_body(name, owner_kind=owner, node=node or None, **kwargs)
    body["metadata"]["uid"] = f"uid-{name}"
    if annotations:
        body["metadata"]["annotations"] = annotations
    if priority is not None:
        body["spec"]["priority"] = priority
    return scaledown.pod_facts(body, scheduling.pod_requests(body))


def view(name: str, pods: list[PodFacts], pool: Any = POOL, **annotations: str) -> NodeView:
    obj = node_obj(name, pool, **annotations)
    allocatable = {k: resource_amount(k, v) for k, v in obj["status"]["allocatable"].items()}
    used = scaledown.Used()
    for pod in pods:
        pod.node = name
        if pod.counted:
            used.add(pod.requests)
    gpu = pool.gpu_resource if pool.gpus else None
    return NodeView(
        name,
        pool.name,
        obj,
        allocatable,
        used,
        pods,
        gpu,
        annotations.get(scaledown.SCALE_DOWN_DISABLED) == "true",
    )


def static_ok(pod: PodFacts, node: NodeView) -> bool:
    return not fit.fits(pod.unbound, node.obj, [])


def fits_with_pods(pod: PodFacts, node: NodeView, others: list[dict[str, Any]]) -> bool:
    return not fit.fits(pod.unbound, node.obj, others)


def plan(
    nodes_: list[NodeView],
    pending: Sequence[PodFacts] = (),
    pdbs: Sequence[dict[str, Any]] = (),
    **rules: Any,
) -> scaledown.Plan:
    """The plan worked out anew; with a `NodeTable` it must be the same, in the same order."""
    plans = [
        scaledown.plan(
            nodes_,
            list(pending),
            rules=Rules(**rules),
            budgets=Budgets(pdbs),
            static_ok=static_ok,
            fits_with_pods=fits_with_pods,
            priority_of=lambda p: p.priority or 0,
            table=table,
        )
        for table in (None, scaledown.NodeTable())
    ]
    fresh, kept = plans
    assert list(kept.unremovable.items()) == list(fresh.unremovable.items())
    assert list(kept.unneeded.items()) == list(fresh.unneeded.items())
    return fresh


def pdb(name: str, app: str, allowed: int, namespace: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed},
    }


# ---- utilization --------------------------------------------------------------------------------
def test_utilization_is_the_larger_share_of_cpu_and_memory_and_gpus_alone_on_gpu_nodes() -> None:
    cpu_bound = view("a", [facts("p", cpu="965m", memory="100Mi")]).utilization()
    assert cpu_bound.resource == "cpu" and cpu_bound.value == cpu_bound.cpu == 0.5
    assert cpu_bound.memory < 0.1
    memory_bound = view("b", [facts("q", cpu="100m", memory="6Gi")]).utilization()
    assert memory_bound.resource == "memory" and memory_bound.value == memory_bound.memory > 0.8
    # A GPU node whose GPU is free is unused, however much cpu its pods ask for.
    gpu = view("g", [facts("busy", cpu="3", memory="8Gi")], GPU_POOL).utilization()
    assert (gpu.resource, gpu.value) == ("nvidia.com/gpu", 0.0) and gpu.cpu > 0.7
    assert str(scaledown.Utilization(0.25, 0.5, 0.0, "memory", 0.5)) == "{0.25 0.5 0 memory 0.5}"


def test_daemonset_and_mirror_pods_count_finished_and_expendable_ones_do_not() -> None:
    ds = facts("ds", owner="DaemonSet", cpu="965m")
    mirror = facts("static", owner=None, cpu="965m", annotations={scaledown.MIRROR_ANNOTATION: "x"})
    assert view("a", [ds]).utilization().cpu == 0.5
    assert view("b", [mirror]).utilization().cpu == 0.5
    done = facts("done", cpu="965m")
    done.finished = True
    placeholder = facts("placeholder", cpu="965m", priority=-100)
    placeholder.expendable = True
    assert view("c", [done, placeholder]).utilization().value == 0.0


# ---- what blocks a node --------------------------------------------------------------------------
def classify(pod: PodFacts, budgets: Sequence[scaledown.Budget] = (), **kwargs: Any) -> tuple[str, str]:
    return scaledown.classify(pod, priority=pod.priority or 0, cutoff=-10, budgets=list(budgets), **kwargs)


def test_pods_that_are_left_dropped_or_moved() -> None:
    assert classify(facts("ds", owner="DaemonSet"))[0] == LEAVE
    assert classify(facts("m", owner=None, annotations={scaledown.MIRROR_ANNOTATION: "x"}))[0] == LEAVE
    assert classify(facts("web"))[0] == MOVE
    assert classify(facts("db", owner="StatefulSet"))[0] == MOVE
    assert classify(facts("job", owner="Job"))[0] == MOVE
    # Below the expendable cutoff: dropped even when it would block otherwise.
    assert classify(facts("filler", owner=None, priority=-11)) == (DROP, "expendable")
    assert classify(facts("edge", owner=None, priority=-10))[0] == BLOCK


def test_blocking_pods_with_cluster_autoscaler_reasons() -> None:
    assert classify(facts("bare", owner=None)) == (BLOCK, "default/bare is not replicated")
    assert classify(facts("custom", owner="CronTabController")) == (BLOCK, "default/custom is not replicated")
    assert classify(facts("orphan"), controller_exists=False) == (
        BLOCK,
        "replication controller for default/orphan is not available",
    )
    system = facts("coredns", namespace="kube-system")
    assert classify(system) == (
        BLOCK,
        "non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: coredns",
    )
    budgets = Budgets([pdb("dns", "coredns", 1, namespace="kube-system")])
    assert classify(system, budgets.matching(system))[0] == MOVE
    pinned = facts("pinned", annotations={scaledown.SAFE_TO_EVICT: "false"})
    assert classify(pinned) == (BLOCK, "pod annotated as not safe to evict present: pinned")
    guarded = facts("guarded", labels={"app": "api"})
    closed = Budgets([pdb("api", "api", 0)])
    assert classify(guarded, closed.matching(guarded)) == (
        BLOCK,
        "not enough pod disruption budget to move default/guarded",
    )
    # safe-to-evict "true" overrides the controller and kube-system rules.
    anyway = facts(
        "anyway", owner=None, namespace="kube-system", annotations={scaledown.SAFE_TO_EVICT: "true"}
    )
    assert classify(anyway)[0] == MOVE


def test_budgets_are_spent_across_the_nodes_of_one_plan() -> None:
    pods = [facts(f"api-{i}", labels={"app": "api"}) for i in range(3)]
    budgets = Budgets([pdb("api", "api", 2)])
    assert budgets.can_move(pods[:2]) is None
    assert budgets.can_move(pods) is pods[2]
    budgets.spend(pods[:1])
    assert budgets.can_move(pods[1:2]) is None
    assert budgets.can_move(pods[1:]) is pods[2]


# ---- the plan -------------------------------------------------------------------------------------
def test_of_two_half_empty_nodes_one_is_unneeded_and_the_other_takes_its_pods() -> None:
    a = view("a", [facts("web-1", cpu="600m")])
    b = view("b", [facts("web-2", cpu="500m")])
    out = plan([a, b])
    assert list(out.unneeded) == ["b"]  # the least utilized goes first
    (moved,) = out.unneeded["b"].to_move
    assert moved.name == "web-2"
    assert out.unremovable == {"a": "took pods of another node"}


def test_a_node_above_the_threshold_or_disabled_is_not_a_candidate() -> None:
    busy = view("busy", [facts("big", cpu="1000m")])
    kept = view("kept", [facts("small", cpu="100m")], **{scaledown.SCALE_DOWN_DISABLED: "true"})
    spare = view("spare", [])
    out = plan([busy, kept, spare])
    assert list(out.unneeded) == ["spare"] and out.unneeded["spare"].empty
    assert out.unremovable == {"busy": "not underutilized", "kept": "scale-down disabled by annotation"}
    assert list(plan([busy, kept, spare], threshold=0.6).unneeded) == ["spare", "busy"]


def test_pods_that_fit_nowhere_keep_their_node() -> None:
    a = view("a", [facts("web-1", cpu="900m")])
    b = view("b", [facts("web-2", cpu="1100m")])  # 57 %: not a candidate, and no room for 900m
    out = plan([a, b])
    assert out.unneeded == {}
    assert out.unremovable["a"] == "no place to move default/web-1"
    # A selector no other node matches keeps the pod (and its node) where it is.
    picky = view("c", [facts("picky", cpu="100m", node_selector={"disk": "ssd"})])
    roomy = view("d", [])
    out = plan([picky, roomy])
    assert list(out.unneeded) == ["d"]
    assert out.unremovable["c"] == "no place to move default/picky"


def test_taints_of_the_destinations_are_respected() -> None:
    source = view("a", [facts("web", cpu="200m")])
    tainted = view("b", [facts("other", cpu="1000m")])
    tainted.obj["spec"]["taints"] = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    assert "a" not in plan([source, tainted]).unneeded


def test_a_blocking_pod_keeps_the_node_and_an_expendable_one_does_not() -> None:
    a = view("a", [facts("web", cpu="200m"), facts("bare", owner=None, cpu="10m")])
    b = view("b", [facts("big", cpu="1000m")])
    out = plan([a, b])
    assert out.unremovable["a"] == "default/bare is not replicated"
    filler = facts("filler", owner=None, cpu="1500m", priority=-100)
    filler.expendable = True
    c = view("c", [facts("web", cpu="200m"), filler])
    out = plan([c, b])
    assert list(out.unneeded) == ["c"]
    assert [p.name for p in out.unneeded["c"].to_move] == ["web"]
    assert [p.name for p in out.unneeded["c"].dropped] == ["filler"]


def test_a_budget_is_shared_by_the_nodes_of_one_plan() -> None:
    full = view("full", [facts("big", cpu="1000m")])
    a = view("a", [facts("api-1", cpu="100m", labels={"app": "api"})])
    b = view("b", [facts("api-2", cpu="100m", labels={"app": "api"})])
    c = view("c", [facts("api-3", cpu="100m", labels={"app": "api"})])
    out = plan([full, a, b, c], pdbs=[pdb("api", "api", 1)])
    # One disruption allowed: one node's pod may move; the others wait (the one that took it, or
    # the budget, keeps them).
    assert len(out.unneeded) == 1
    assert any("not enough pod disruption budget" in why for why in out.unremovable.values())


def test_pending_pods_take_their_room_first() -> None:
    a = view("a", [facts("web-1", cpu="900m")])
    b = view("b", [facts("web-2", cpu="1100m")])
    assert plan([a, b]).unneeded == {}
    roomy = view("c", [facts("web-3", cpu="800m")])
    assert list(plan([a, roomy]).unneeded) == ["c"]
    waiting = facts("waiting", cpu="1100m")
    assert plan([a, roomy], pending=[waiting]).unneeded == {}


def test_only_so_many_non_empty_candidates_are_simulated() -> None:
    full = view("full", [facts("big", cpu="1000m")])
    small = [view(f"n{i}", [facts(f"p{i}", cpu="50m")]) for i in range(4)]
    empty = [view(f"e{i}", []) for i in range(3)]
    out = plan([full, *small, *empty], non_empty_candidates=2)
    # Empty nodes need no simulation and do not count against the limit.
    assert sorted(out.unneeded) == ["e0", "e1", "e2", "n0", "n1"]
    assert [n for n, why in out.unremovable.items() if why == "not simulated (candidate limit)"] == [
        "n2",
        "n3",
    ]


def test_nodes_already_unneeded_are_tried_first() -> None:
    a = view("a", [facts("web-1", cpu="400m")])
    b = view("b", [facts("web-2", cpu="500m")])
    assert list(plan([a, b]).unneeded) == ["a"]
    again = scaledown.plan(
        [a, b],
        [],
        rules=Rules(),
        budgets=Budgets([]),
        static_ok=static_ok,
        fits_with_pods=fits_with_pods,
        priority_of=lambda p: 0,
        previously_unneeded={"b"},
    )
    assert list(again.unneeded) == ["b"]


def test_pods_that_depend_on_other_pods_are_checked_against_them() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "zk"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    from shipshape.emulator.scheduler.framework import fits as scheduler_fits

    def full_fits(pod: PodFacts, node: NodeView, others: list[dict[str, Any]]) -> bool:
        return not scheduler_fits(pod.unbound, node.obj, others)

    a = view("a", [facts("zk-1", cpu="100m", labels={"app": "zk"}, affinity=anti)])
    b = view("b", [facts("zk-2", cpu="100m", labels={"app": "zk"}, affinity=anti)])
    out = scaledown.plan(
        [a, b],
        [],
        rules=Rules(),
        budgets=Budgets([]),
        static_ok=static_ok,
        fits_with_pods=full_fits,
        priority_of=lambda p: 0,
    )
    assert out.unneeded == {}
    assert all(why.startswith("no place to move") for why in out.unremovable.values())


def test_a_pool_at_its_minimum_size_keeps_its_nodes_as_destinations() -> None:
    a = view("a", [facts("web-1", cpu="300m")])
    b = view("b", [])
    c = view("c", [])
    out = scaledown.plan(
        [a, b, c],
        [],
        rules=Rules(),
        budgets=Budgets([]),
        static_ok=static_ok,
        fits_with_pods=fits_with_pods,
        priority_of=lambda p: 0,
        pool_room={POOL.name: 1},
    )
    # One node may go (an empty one, the least utilized first); the others stay, and web-1 is not
    # moved onto a node that is about to go.
    assert list(out.unneeded) == ["b"]
    assert out.unremovable["c"] == "node group min size reached"
    assert out.unremovable["a"] == "node group min size reached"
