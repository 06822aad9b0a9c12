"""The ReplicaSet controller's set tallies, kept from pod events, equal tallies built anew from the
store's owner index, and their counts equal those read from each claimed pod anew."""

from __future__ import annotations

import random

from shipshape.emulator.controllers.replicaset import (
    PodFactsCache,
    ReplicaSetController,
    SetTally,
    selector_of,
)
from shipshape.emulator.resources import PODS, REPLICASETS
from shipshape.emulator.store import Obj

from .helpers import make_cluster

NS = "default"
SELECTORS: list[Obj] = [
    {"matchLabels": {"app": "web"}},
    {"matchLabels": {"app": "web", "tier": "a"}},
    {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
]


def set_spec(rng: random.Random) -> Obj:
    labels = {"app": "web", "tier": rng.choice(["a", "b"])}
    return {"replicas": 3, "selector": rng.choice(SELECTORS), "template": {"metadata": {"labels": labels}}}


def test_tallies_follow_the_store_and_count_what_a_full_read_counts() -> None:
    rng = random.Random(7)
    cluster, _ = make_cluster(controllers=False)
    ctrl = ReplicaSetController()
    cluster.add(ctrl)
    store = cluster.store
    names = ["r0", "r1"]
    for name in names:
        store.create(REPLICASETS, {"metadata": {"name": name, "namespace": NS}, "spec": set_spec(rng)})
    compared = 0
    for _ in range(800):
        roll = rng.random()
        name = f"p{rng.randrange(14)}"
        current = store.get(PODS, NS, name)
        sets = [s for n in names if (s := store.get(REPLICASETS, NS, n)) is not None]
        if roll < 0.04:
            rs_name = rng.choice(names)
            if store.get(REPLICASETS, NS, rs_name) is None:
                body = {"metadata": {"name": rs_name, "namespace": NS}, "spec": set_spec(rng)}
                store.create(REPLICASETS, body)
            elif rng.random() < 0.3:
                store.delete(REPLICASETS, NS, rs_name)
            else:
                spec = set_spec(rng)
                store.mutate(REPLICASETS, NS, rs_name, lambda new, spec=spec: new.update(spec=spec))
        elif roll < 0.07 and sets:
            rs = rng.choice(sets)
            store.write_status(REPLICASETS, NS, rs["metadata"]["name"], {"replicas": rng.randrange(5)})
        elif current is None:
            md: Obj = {"name": name, "namespace": NS, "labels": {"app": "web", "tier": rng.choice("abc")}}
            if sets and rng.random() < 0.9:
                rs = rng.choice(sets)
                md["ownerReferences"] = [
                    {
                        "kind": "ReplicaSet",
                        "name": rs["metadata"]["name"],
                        "uid": rs["metadata"]["uid"],
                        "controller": rng.random() < 0.85,
                    }
                ]
            store.create(PODS, {"metadata": md, "spec": {}})
        elif roll < 0.35:
            ready = rng.choice(["True", "False"])
            store.write_status(PODS, NS, name, {"conditions": [{"type": "Ready", "status": ready}]})
        elif roll < 0.42:
            phase = rng.choice(["Running", "Succeeded", "Failed"])
            store.write_status(PODS, NS, name, {"phase": phase})
        elif roll < 0.55:
            tier = rng.choice("abc")
            store.mutate(PODS, NS, name, lambda new, t=tier: new["metadata"]["labels"].update(tier=t))
        elif roll < 0.65 and sets:
            rs = rng.choice(sets)
            ref = {"kind": "ReplicaSet", "name": rs["metadata"]["name"], "uid": rs["metadata"]["uid"]}
            refs = [] if rng.random() < 0.2 else [{**ref, "controller": rng.random() < 0.85}]
            store.mutate(PODS, NS, name, lambda new, r=refs: new["metadata"].update(ownerReferences=r))
        elif roll < 0.8:
            store.delete(PODS, NS, name)
        else:
            store.mutate(PODS, NS, name, lambda new: new["metadata"].update(finalizers=["x"]))
            store.delete(PODS, NS, name)
            if rng.random() < 0.5:
                store.mutate(PODS, NS, name, lambda new: new["metadata"].update(finalizers=[]))
        if rng.random() < 0.3 and sets:
            rs = store.get(REPLICASETS, NS, rng.choice(sets)["metadata"]["name"])
            if rs is not None:
                selector = selector_of(rs)
                assert selector is not None
                ctrl._tally(rs, selector)  # as a sync builds it
        for uid, tally in ctrl._tallies.items():
            anew = SetTally(
                {"spec": tally.spec, "metadata": {"uid": uid}}, tally.selector, store.dependents_of(uid, PODS)
            )
            assert tally.state() == anew.state()
            rs = next((s for s in store.list(REPLICASETS, NS) if s["metadata"]["uid"] == uid), None)
            if rs is None or rs["spec"] is not tally.spec or tally.unclaimed:
                continue
            # What a sync reads from the pods when every active dependent is claimed (no orphans here:
            # every pod without an owner is left out of the comparison by the set's candidates).
            facts = PodFactsCache().facts(rs, tally.selector, store.dependents_of(uid, PODS))
            claimed = [f for f in facts.values() if f[1] and f[2]]
            counts = (len(claimed), sum(f[3] for f in claimed), sum(f[4] for f in claimed))
            assert (tally.claimed, tally.labeled, tally.ready) == counts
            from_tally = ctrl._status_of_counts(
                rs, tally.claimed, tally.labeled, tally.ready, tally.ready, None
            )
            assert from_tally == ctrl._status(rs, [f[0] for f in claimed], None)
            compared += 1
    assert compared > 200
