"""The DaemonSet controller's kept node rows give what working out every node anew in each walk gives.

Two clusters go through the same random stream of node, pod and DaemonSet changes; one controller
reuses its rows (`NodeRows`), the other has them off. After every step both must have written the
same pods, statuses and Events (generated names and uids are drawn from `random`, reseeded alike
for both, so any difference in what was created shows up too).
"""

from __future__ import annotations

import random
from typing import Any

from shipshape.emulator.controllers.daemonset import DaemonSetController, target_node
from shipshape.emulator.resources import DAEMONSETS, EVENTS, NODES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj
from shipshape.kube.clock import rfc3339

from .helpers import make_cluster, node_body, pod_template

SETS = ("agent", "picky")


def daemonset(name: str) -> Obj:
    labels = {"app": name}
    spec: Obj = {}
    if name == "picky":  # only nodes of pool a, and no toleration of the "bad" taint
        spec["nodeSelector"] = {"pool": "a"}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": labels}, "template": pod_template(labels, **spec)},
    }


def cluster(reuse: bool) -> tuple[Cluster, DaemonSetController]:
    c, _ = make_cluster(nodes=(), controllers=False)
    controller = DaemonSetController()
    controller.reuse_rows = reuse
    c.add(controller)
    for i, name in enumerate(SETS):
        c.store.create(DAEMONSETS, daemonset(name), uid=f"00000000-0000-4000-8000-{i + 1:012d}")
    return c, controller


def view(c: Cluster) -> Any:
    """What the controller wrote, in both clusters' terms."""
    pods = [
        (p["metadata"]["name"], p["metadata"]["resourceVersion"], p["metadata"].get("labels"), p["spec"])
        for p in c.store.list(PODS)
    ]
    sets = [(d["metadata"]["name"], d.get("status")) for d in c.store.list(DAEMONSETS)]
    events = sorted(
        (e["involvedObject"]["name"], e["reason"], e["message"], e["count"]) for e in c.store.list(EVENTS)
    )
    return pods, sets, events


def step(c: Cluster, rng: random.Random) -> None:
    """One random change of the cluster, drawn from `rng` (the same draws in both twins)."""
    store, now = c.store, c.clock.now()
    roll = rng.random()
    node = f"n{rng.randrange(8)}"
    existing = store.get(NODES, "", node)
    pods = store.list(PODS)
    pod = pods[rng.randrange(len(pods))] if pods else None
    choice = rng.random()
    if roll < 0.12:
        if existing is None:
            labels = {"pool": rng.choice("ab")}
            taints = (
                [{"key": "bad", "effect": rng.choice(["NoSchedule", "NoExecute"])}] if choice < 0.2 else None
            )
            store.create(NODES, node_body(node, labels=labels, taints=taints))
        elif choice < 0.5:
            store.remove(NODES, "", node)
    elif roll < 0.24 and existing is not None:
        if choice < 0.5:

            def relabel(new: Obj) -> None:
                new["metadata"]["labels"]["pool"] = rng.choice("ab")

            store.mutate(NODES, "", node, relabel)
        else:  # a spec write that keeps the labels object (as a status write keeps both)
            effect = rng.choice(["NoSchedule", "NoExecute", None])
            taints = [{"key": "bad", "effect": effect}] if effect else []
            body = {**existing, "metadata": {**existing["metadata"]}, "spec": {"taints": taints}}
            store.update(NODES, body, copy=False)
    elif roll < 0.32 and existing is not None:
        status = rng.choice(["True", "False", "Unknown"])
        store.write_status(NODES, "", node, {"conditions": [{"type": "Ready", "status": status}]})
    elif roll < 0.72 and pod is not None:
        md = pod["metadata"]
        if choice < 0.3 and not pod["spec"].get("nodeName") and target_node(pod):

            def bind(new: Obj) -> None:
                new["spec"]["nodeName"] = target_node(pod)

            store.mutate(PODS, md["namespace"], md["name"], bind)
        elif choice < 0.7:
            phase = rng.choice(["Running", "Running", "Running", "Failed", "Succeeded", "Pending"])
            ready = rng.choice(["True", "True", "False"]) if phase == "Running" else "False"
            since = rfc3339(now - rng.choice([0, 2, 30]))
            status = {
                "phase": phase,
                "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since}],
            }
            store.write_status(PODS, md["namespace"], md["name"], status)
        elif choice < 0.85 and not md.get("deletionTimestamp"):

            def terminate(new: Obj) -> None:
                new["metadata"]["finalizers"] = ["keep"]
                new["metadata"]["deletionTimestamp"] = rfc3339(now)

            store.mutate(PODS, md["namespace"], md["name"], terminate)
        elif choice < 0.92:
            store.remove(PODS, md["namespace"], md["name"])
        else:  # released: no controller owns it now (the set may claim it again)

            def release(new: Obj) -> None:
                new["metadata"].pop("ownerReferences", None)

            store.mutate(PODS, md["namespace"], md["name"], release)
    elif roll < 0.75 and existing is not None:  # a pod no controller owns, on a node
        labels = {"app": rng.choice(SETS)}
        body = {
            "metadata": {"name": f"bare-{rng.randrange(10**6)}", "namespace": "default", "labels": labels}
        }
        body["spec"] = {**pod_template(labels)["spec"], "nodeName": node}
        store.create(PODS, body)
    elif roll < 0.8:
        name = rng.choice(SETS)

        def respec(new: Obj) -> None:
            spec = new["spec"]
            if choice < 0.4:
                spec["template"]["spec"]["containers"][0]["image"] = f"agent:{rng.randrange(3)}"
            elif choice < 0.7:
                surge = rng.choice([0, 0, 1, "50%"])
                unavailable = 0 if surge and choice < 0.55 else rng.choice([1, 2, "25%"])
                spec["updateStrategy"] = {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
                }
            else:
                spec["minReadySeconds"] = rng.choice([0, 0, 5])

        store.mutate(DAEMONSETS, "default", name, respec)
    c.engine.run_until(now + rng.choice([0.0, 0.0, 1.0, 10.0]))


def test_kept_rows_match_working_every_node_out_anew() -> None:
    kept, kept_controller = cluster(reuse=True)
    fresh, _ = cluster(reuse=False)
    seed = random.Random(23)
    for n in range(1500):
        draws = seed.random()
        for c in (kept, fresh):
            random.seed(n)  # generated pod names and uids
            step(c, random.Random(draws))
        assert view(kept) == view(fresh), f"step {n}"
    kept_rows = [row for _, rows in kept_controller._rows._by_set.values() for row in rows.values()]
    assert any(row.manage is not None for row in kept_rows)  # the rows were used, not just made


def test_rows_start_over_for_a_new_template_and_go_with_their_node() -> None:
    c, controller = cluster(reuse=True)
    for i in range(3):
        c.store.create(NODES, node_body(f"n{i}", labels={"pool": "a"}))
    c.engine.run_until(c.clock.now() + 10)
    ds = c.store.must_get(DAEMONSETS, "default", "agent")
    hash_value = next(iter(controller._rows._by_set[ds["metadata"]["uid"]][0][1:2]))
    rows = controller._rows.of(ds, hash_value)
    assert sorted(rows) == ["n0", "n1", "n2"]
    c.store.remove(NODES, "", "n1")
    assert sorted(rows) == ["n0", "n2"]
    assert controller._rows.of(ds, "another") is not rows
