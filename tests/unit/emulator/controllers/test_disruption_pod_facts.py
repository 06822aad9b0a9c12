"""The disruption controller's kept pod facts equal the facts read from each pod anew."""

from __future__ import annotations

import random

from shipshape.emulator.controllers.disruption import PodFactsCache, pod_facts
from shipshape.emulator.resources import PODS
from shipshape.emulator.store import Obj, Store
from shipshape.kube.clock import VirtualClock


def pod(i: int) -> Obj:
    return {"metadata": {"name": f"p{i}", "namespace": "default", "labels": {"app": "web"}}, "spec": {}}


def test_kept_facts_match_facts_read_anew() -> None:
    rng = random.Random(5)
    store = Store(VirtualClock())
    cache = PodFactsCache()
    for i in range(8):
        store.create(PODS, pod(i))
    for _ in range(500):
        name = f"p{rng.randrange(10)}"
        roll = rng.random()
        current = store.get(PODS, "default", name)
        if current is None:
            store.create(PODS, pod(int(name[1:])))
        elif roll < 0.4:
            ready = rng.choice(["True", "False"])
            status: Obj = {"conditions": [{"type": "Ready", "status": ready}]}
            store.write_status(PODS, "default", name, status)
        elif roll < 0.6:
            uid = rng.choice(["a", "b"])
            refs = [{"kind": "ReplicaSet", "name": uid, "uid": uid, "controller": rng.random() < 0.8}]

            def own(new: Obj, refs: list[Obj] = refs) -> None:
                new["metadata"]["ownerReferences"] = refs

            store.mutate(PODS, "default", name, own)
        elif roll < 0.8:
            store.delete(PODS, "default", name)
        else:

            def finalize(new: Obj) -> None:
                new["metadata"]["finalizers"] = ["x"]

            store.mutate(PODS, "default", name, finalize)
            store.delete(PODS, "default", name)
        pods = store.list(PODS, "default")
        if rng.random() < 0.05:
            cache.forget(("default", "budget"))
        assert cache.facts(("default", "budget"), pods) == [pod_facts(p) for p in pods]
