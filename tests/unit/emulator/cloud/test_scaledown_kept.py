"""What scale-down keeps between plans equals what working it out anew gives, over random changes.

- `NodeTable` (utilization, threshold kind, annotation, free room and name order of every node,
  read again only for nodes whose `Used.version` moved or that are new to the list) against the
  figures of fresh views, and plans made with it against plans made without it;
- the autoscaler's `Used` sums (their versions move with every pod placed or removed), and the
  utilization its views keep, against sums of the pods on each node, through random pod events;
  its plan against one worked out from fresh views.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

import numpy as np

from shipshape.emulator.cloud import scaledown
from shipshape.emulator.cloud.autoscaler import ClusterAutoscaler
from shipshape.emulator.cloud.scaledown import NodeTable, NodeView, PodFacts, Rules, Used
from shipshape.emulator.resources import NODES, PDBS, PODS
from shipshape.kube import scheduling

from .builders import ON_DEMAND_B, SPOT_A, add_running, pod_body, scenario, start

Obj = dict[str, Any]

REQUESTS = [
    {"cpu": 100, "memory": 128 << 20},
    {"cpu": 500, "memory": 1 << 30},
    {"cpu": 1500, "memory": 3 << 30},
    {"cpu": 250},
    {"cpu": 1000, "memory": 2 << 30, "nvidia.com/gpu": 1},
]


def _pod(rng: random.Random, n: int) -> PodFacts:
    requests = dict(rng.choice(REQUESTS))
    owner = rng.choice(["ReplicaSet", "ReplicaSet", "ReplicaSet", "DaemonSet", None])
    md: Obj = {"name": f"p{n}", "namespace": "default", "uid": f"u{n}", "labels": {"app": "a"}}
    if owner:
        md["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    spec: Obj = {
        "containers": [{"name": "c", "resources": {"requests": {k: str(v) for k, v in requests.items()}}}]
    }
    if rng.random() < 0.3:
        spec["nodeSelector"] = {"pool": rng.choice(["a", "b"])}
    return scaledown.pod_facts({"metadata": md, "spec": spec}, requests)


def _view(rng: random.Random, name: str, used: Used, pods: list[PodFacts]) -> NodeView:
    """A view of the node `name`: a new object, as the autoscaler makes one when a node's facts change."""
    allocatable = {"cpu": rng.choice([1930, 3920]), "memory": rng.choice([7, 15]) << 30, "pods": 29}
    gpu = None
    if rng.random() < 0.15:
        allocatable["nvidia.com/gpu"] = rng.choice([1, 4])
        gpu = "nvidia.com/gpu"
    if rng.random() < 0.05:
        allocatable["example.com/dongle"] = 2
    obj = {"metadata": {"name": name, "labels": {"pool": rng.choice(["a", "b"])}}}
    return NodeView(name, "pool", obj, allocatable, used, pods, gpu, disabled=rng.random() < 0.05)


def _fresh(view: NodeView) -> NodeView:
    """The same node read anew: a new view over a copy of its sums (nothing kept)."""
    return NodeView(
        view.name,
        view.pool,
        view.obj,
        dict(view.allocatable),
        Used(dict(view.used)),
        view.pods,
        view.gpu_resource,
        view.disabled,
    )


def static_ok(pod: PodFacts, node: NodeView) -> bool:
    wanted = (pod.obj["spec"].get("nodeSelector") or {}).get("pool")
    return wanted is None or wanted == node.obj["metadata"]["labels"]["pool"]


def fits_with_pods(pod: PodFacts, node: NodeView, others: list[Obj]) -> bool:
    return zlib.crc32(f"{pod.name}/{node.name}/{len(others)}".encode()) % 3 != 0


def _plan(views: list[NodeView], pending: list[PodFacts], before: list[str], table: NodeTable | None) -> Any:
    return scaledown.plan(
        views,
        pending,
        rules=Rules(threshold=0.5, gpu_threshold=0.4, non_empty_candidates=5),
        budgets=scaledown.Budgets([]),
        static_ok=static_ok,
        fits_with_pods=fits_with_pods,
        priority_of=lambda p: 0,
        previously_unneeded=before,
        pool_room={"pool": 12},
        table=table,
    )


def _check_table(table: NodeTable, views: list[NodeView]) -> None:
    fresh = [_fresh(v) for v in views]
    columns = scaledown._resource_columns(fresh)
    utils = [scaledown.utilization(v.allocatable, v.used, v.gpu_resource) for v in fresh]
    assert table.names == [v.name for v in views]
    assert table.columns == columns
    assert table.values.tolist() == [u.value for u in utils]
    gpu_bound = [u.resource == v.gpu_resource for u, v in zip(utils, views, strict=True)]
    assert table.gpu_bound.tolist() == gpu_bound
    assert table.disabled.tolist() == [v.disabled for v in views]
    assert table.free.tolist() == [v.free_row(columns) for v in fresh]
    order = sorted(range(len(views)), key=lambda i: (-utils[i].value, views[i].name))
    assert table.destination_order().tolist() == order
    assert [v.utilization() for v in views] == utils


def test_the_table_and_plans_made_with_it_equal_those_worked_out_anew() -> None:
    rng = random.Random(29)
    names = [f"n{i}" for i in range(40)]
    used = {name: Used() for name in names}
    pods = {n: [_pod(rng, i * 100 + k) for k in range(rng.randrange(0, 4))] for i, n in enumerate(names)}
    views = {name: _view(rng, name, used[name], pods[name]) for name in names}
    listed = rng.sample(names, 25)
    table = NodeTable()
    before: list[str] = []
    planned = moved = 0
    for step in range(1500):
        roll = rng.random()
        if roll < 0.5:  # pods come and go: sums change, the views stay
            for name in rng.sample(names, rng.randrange(1, 6)):
                requests = rng.choice(REQUESTS)
                if used[name]["pods"] > 0 and rng.random() < 0.5:
                    used[name].remove(requests)
                else:
                    used[name].add(requests)
        elif roll < 0.65:  # a node's facts change: a new view of it
            name = rng.choice(names)
            views[name] = _view(rng, name, used[name], pods[name])
        elif roll < 0.8:  # nodes leave or join the list, or it comes in another order
            if rng.random() < 0.5 and len(listed) > 1:
                listed.remove(rng.choice(listed))
            else:
                listed.append(rng.choice([n for n in names if n not in listed] or names[:1]))
                listed = list(dict.fromkeys(listed))
            if rng.random() < 0.3:
                rng.shuffle(listed)
        current = [views[name] for name in listed]
        pending = [_pod(rng, 10_000 + step)] if rng.random() < 0.2 else []
        kept = _plan(current, pending, before, table)
        fresh = _plan([_fresh(v) for v in current], pending, before, None)
        assert list(kept.unremovable.items()) == list(fresh.unremovable.items()), step
        assert list(kept.unneeded) == list(fresh.unneeded), step
        for name, unneeded in kept.unneeded.items():
            other = fresh.unneeded[name]
            assert (unneeded.utilization, unneeded.to_move, unneeded.dropped) == (
                other.utilization,
                other.to_move,
                other.dropped,
            )
            moved += bool(unneeded.to_move)
        planned += len(kept.unneeded)
        before = list(kept.unneeded) if rng.random() < 0.7 else []
        _check_table(table, current)
    assert planned > 1000 and moved > 200


def test_the_autoscalers_sums_and_utilization_follow_every_pod_event() -> None:
    rng = random.Random(31)
    env = start(
        scenario(
            [{**SPOT_A, "initialSize": 4}, {**ON_DEMAND_B, "initialSize": 3}],
            interruptions={"enabled": False},
            autoscaler={"enabled": False},
        )
    )
    scaler = ClusterAutoscaler(env.cloud)
    scaler.start()
    env.run(600)
    store = env.cluster.store
    nodes = [v.name for v in scaler._views()]
    assert len(nodes) == 7
    store.create(
        PDBS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 3},
        },
    )
    settings = env.cloud.autoscaler_settings
    rules = Rules(
        threshold=settings.scale_down_utilization_threshold,
        gpu_threshold=settings.scale_down_gpu_utilization_threshold,
        cutoff=settings.expendable_pods_priority_cutoff,
        non_empty_candidates=settings.scale_down_non_empty_candidates_count,
    )
    live: list[str] = []
    for step in range(600):
        roll = rng.random()
        if roll < 0.45 or not live:
            name = f"p{step}"
            add_running(
                env,
                name,
                rng.choice(nodes),
                cpu=rng.choice(["100m", "300m", "700m"]),
                memory=rng.choice(["128Mi", "1Gi"]),
                owner_kind=rng.choice(["ReplicaSet", "ReplicaSet", "DaemonSet"]),
                labels={"app": rng.choice(["web", "api"])},
            )
            live.append(name)
        elif roll < 0.7:
            name = live.pop(rng.randrange(len(live)))
            store.delete(PODS, "default", name)
        elif roll < 0.8:  # finished: no longer counted

            def finish(pod: Obj) -> None:
                pod["status"] = {**pod["status"], "phase": "Succeeded"}

            store.mutate(PODS, "default", rng.choice(live), finish)
        elif roll < 0.9:  # a pending pod, placed when a plan runs
            store.create(PODS, pod_body(f"q{step}", cpu="200m"))
        else:
            env.run(rng.choice([1.0, 10.0]))
        views = scaler._views()
        for view in views:
            counted = [p for p in scaler._on_node.get(view.name, {}).values() if p.counted]
            sums = Used()
            for facts in counted:
                sums.add(scheduling.pod_requests(facts.obj))
            assert {k: v for k, v in view.used.items() if v} == {k: v for k, v in sums.items() if v}, step
            fresh = scaledown.utilization(view.allocatable, sums, view.gpu_resource)
            assert view.utilization() == fresh, step
        if step % 5 == 0:
            scaler._dirty = True
            before = list(scaler._unneeded_since)
            kept = scaler.update_unneeded(force=True)
            _check_table(scaler._table, views)
            fresh_plan = scaledown.plan(
                [_fresh(v) for v in views],
                [f for key, f in scaler._pending.items() if key not in scaler._unschedulable],
                rules=rules,
                budgets=scaledown.Budgets(store.iter(PDBS)),
                static_ok=scaler._static_ok,
                fits_with_pods=scaler._fits_with_pods,
                priority_of=scaler.priority,
                controller_exists=scaler._controller_exists,
                previously_unneeded=before,
                pool_room=scaler._pool_room(),
            )
            assert list(kept.unremovable.items()) == list(fresh_plan.unremovable.items()), step
            assert {n: u.to_move for n, u in kept.unneeded.items()} == {
                n: u.to_move for n, u in fresh_plan.unneeded.items()
            }, step
    assert np.all(scaler._table.versions >= 0)


def test_the_kept_node_views_are_those_of_a_walk_over_every_instance() -> None:
    rng = random.Random(37)
    env = start(
        scenario(
            [{**SPOT_A, "initialSize": 3, "minSize": 0}, {**ON_DEMAND_B, "initialSize": 2, "minSize": 0}],
            interruptions={"enabled": False},
            autoscaler={"enabled": False},
        )
    )
    scaler = ClusterAutoscaler(env.cloud)
    scaler.start()
    cloud, store = env.cloud, env.cluster.store
    names = list(cloud.pools)
    hits = changes = 0
    for step in range(1500):
        roll = rng.random()
        pool = rng.choice(names)
        live = cloud.active_instances()
        if roll < 0.15:
            cloud.set_desired(pool, rng.randrange(0, 6))
        elif roll < 0.22 and live:
            cloud.remove_node(rng.choice(live).node_name, "test")
        elif roll < 0.3 and live:  # notices, before and after the node registers
            spot = [i.node_name for i in live if cloud.pools[i.pool].spot]
            if spot:
                cloud.interrupt(node=rng.choice(spot), notice=rng.choice([5.0, 120.0]))
        elif roll < 0.38:  # a drain begins (it ends, one way or the other, as time runs)
            ready = [v.name for v in scaler._walk_views()]
            if ready:
                inst = cloud.instance_for(rng.choice(ready))
                assert inst is not None
                util = scaledown.utilization({}, {}, None)
                scaler._start_drain(inst, scaledown.Unneeded(inst.node_name, inst.pool, util, [], []))
        elif roll < 0.48 and live:  # the node object changes: cordoned, or a label
            node = rng.choice(live).node_name

            def edit(obj: Obj) -> None:
                if rng.random() < 0.5:
                    obj["spec"] = {**obj["spec"], "unschedulable": rng.random() < 0.5}
                else:
                    obj["metadata"]["labels"] = {**obj["metadata"]["labels"], "x": str(rng.randrange(3))}

            store.mutate(NODES, "", node, edit)
        elif roll < 0.6 and live:
            add_running(env, f"p{step}", rng.choice(live).node_name, owner_kind="ReplicaSet")
        else:
            env.run(rng.choice([1.0, 5.0, 20.0, 60.0]))
        before = scaler._views_kept
        kept = scaler._views()
        walked = scaler._walk_views()
        assert [v.name for v in kept] == [v.name for v in walked], step
        assert all(a is b for a, b in zip(kept, walked, strict=True)), step
        hits += before is not None and scaler._views_kept is before
        changes += scaler._views_kept is not before
    assert hits > 100 and changes > 300
