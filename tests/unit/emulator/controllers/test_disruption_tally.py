"""The disruption controller's budget tallies, kept from pod events, equal tallies built anew from
the store, and a sync from a tally writes the status a sync that reads every pod writes."""

from __future__ import annotations

import random

from shipshape.emulator.controllers.disruption import BudgetTally, DisruptionController
from shipshape.emulator.resources import DEPLOYMENTS, PDBS, PODS, REPLICASETS, STATEFULSETS
from shipshape.emulator.store import Obj
from shipshape.kube.clock import rfc3339
from shipshape.kube.labels import from_label_selector

from .helpers import make_cluster

NS = "default"
SELECTORS: list[Obj] = [
    {"matchLabels": {"app": "web"}},
    {"matchLabels": {"app": "web", "tier": "a"}},
    {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
]
SPECS: list[Obj] = [
    {"minAvailable": 2},
    {"minAvailable": "50%"},
    {"maxUnavailable": 1},
    {"maxUnavailable": "30%"},
]


def controller_ref(kind: str, name: str, uid: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": True}


def test_tallies_follow_the_store_and_syncs_match_full_reads() -> None:
    rng = random.Random(11)
    cluster, _ = make_cluster(controllers=False)
    ctrl = DisruptionController()
    cluster.add(ctrl)
    store = cluster.store
    d = store.create(DEPLOYMENTS, {"metadata": {"name": "d", "namespace": NS}, "spec": {"replicas": 5}})
    rs_d = store.create(
        REPLICASETS,
        {
            "metadata": {
                "name": "d-1",
                "namespace": NS,
                "ownerReferences": [controller_ref("Deployment", "d", d["metadata"]["uid"])],
            },
            "spec": {"replicas": 5},
        },
    )
    rs = store.create(REPLICASETS, {"metadata": {"name": "r", "namespace": NS}, "spec": {"replicas": 3}})
    sts = store.create(STATEFULSETS, {"metadata": {"name": "s", "namespace": NS}, "spec": {"replicas": 2}})
    refs: list[Obj | None] = [
        None,
        controller_ref("ReplicaSet", "d-1", rs_d["metadata"]["uid"]),
        controller_ref("ReplicaSet", "r", rs["metadata"]["uid"]),
        controller_ref("StatefulSet", "s", sts["metadata"]["uid"]),
        controller_ref("ReplicaSet", "gone", "no-such-uid"),
    ]
    budgets = ["b0", "b1", "b2"]
    fast_syncs = 0
    answered = ctrl._sync_from_tally

    def counted(*args: object) -> bool:
        nonlocal fast_syncs
        done = answered(*args)  # type: ignore[arg-type]
        fast_syncs += done
        return done

    ctrl._sync_from_tally = counted  # type: ignore[method-assign]
    for step in range(600):
        roll = rng.random()
        name = f"p{rng.randrange(12)}"
        current = store.get(PODS, NS, name)
        if roll < 0.06:
            budget = rng.choice(budgets)
            body = {
                "metadata": {"name": budget, "namespace": NS},
                "spec": {"selector": rng.choice(SELECTORS)},
            }
            body["spec"].update(rng.choice(SPECS))
            if store.get(PDBS, NS, budget) is None:
                store.create(PDBS, body)
            elif rng.random() < 0.3:
                store.delete(PDBS, NS, budget)
            else:
                spec = body["spec"]
                store.mutate(PDBS, NS, budget, lambda new, spec=spec: new.update(spec=spec))
        elif roll < 0.1 and store.get(PDBS, NS, (budget := rng.choice(budgets))) is not None:
            disrupted = {name: rfc3339(cluster.clock.now())} if rng.random() < 0.5 else {}
            store.write_status(PDBS, NS, budget, {"disruptedPods": disrupted})
        elif roll < 0.13:
            replicas = rng.randrange(1, 6)
            store.mutate(REPLICASETS, NS, "r", lambda new, n=replicas: new["spec"].update(replicas=n))
        elif current is None:
            labels = {"app": rng.choice(["web", "db"]), "tier": rng.choice(["a", "b", "c"])}
            ref = rng.choice(refs)
            md: Obj = {"name": name, "namespace": NS, "labels": labels}
            if ref is not None:
                md["ownerReferences"] = [ref]
            store.create(PODS, {"metadata": md, "spec": {}})
        elif roll < 0.4:
            ready = rng.choice(["True", "False"])
            store.write_status(PODS, NS, name, {"conditions": [{"type": "Ready", "status": ready}]})
        elif roll < 0.55:
            tier = rng.choice(["a", "b", "c"])
            store.mutate(PODS, NS, name, lambda new, t=tier: new["metadata"]["labels"].update(tier=t))
        elif roll < 0.65:
            ref = rng.choice(refs)
            store.mutate(
                PODS, NS, name, lambda new, r=ref: new["metadata"].update(ownerReferences=[r] if r else [])
            )
        elif roll < 0.8:
            store.delete(PODS, NS, name)
        else:
            store.mutate(PODS, NS, name, lambda new: new["metadata"].update(finalizers=["x"]))
            store.delete(PODS, NS, name)
            store.mutate(PODS, NS, name, lambda new: new["metadata"].update(finalizers=[]))
        for key, tally in list(ctrl._tallies.items()):
            pdb = store.get(PDBS, *key)
            assert pdb is not None, key
            selector = from_label_selector(tally.selector_spec)
            assert (
                tally.state()
                == BudgetTally(tally.selector_spec, store.list(PODS, NS, selector=selector)).state()
            )
        if step % 3 == 0:
            for budget in budgets:
                if store.get(PDBS, NS, budget) is None:
                    continue
                key = (NS, budget)
                before = store.must_get(PDBS, NS, budget).get("status") or {}
                ctrl.reconcile(key)
                from_tally = store.must_get(PDBS, NS, budget).get("status")
                store.write_status(PDBS, NS, budget, before)
                ctrl._tallies.pop(key, None)
                ctrl.reconcile(key)  # reads every pod, and builds the tally again
                assert store.must_get(PDBS, NS, budget).get("status") == from_tally
    assert fast_syncs > 50
