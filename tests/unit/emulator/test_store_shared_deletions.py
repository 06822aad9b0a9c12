"""Deletions share the unchanged parts of an object with its stored version instead of a deep copy
(`Store.delete`, `Store._remove`). Differential: over randomized objects and write sequences
(finalizers, grace periods, propagation, dry runs, removals), every answer, error, watch event and
stored object is the same as with the copying code they replaced, and no stored or emitted version
ever changes afterwards."""

from __future__ import annotations

import random
from typing import Any

import pytest

from shipshape.emulator.resources import CONFIGMAPS, NAMESPACES, PODS, ResourceType
from shipshape.emulator.store import Obj, Store, WatchEvent, clone
from shipshape.kube import errors
from shipshape.kube.clock import VirtualClock


class CopyingStore(Store):
    """The store as it was before: deletions deep-copy the object."""

    @staticmethod
    def _metadata_version(obj: Obj) -> Obj:
        return clone(obj)


def _store(cls: type[Store], seed: int) -> tuple[Store, VirtualClock, list[WatchEvent]]:
    random.seed(seed)
    clock = VirtualClock()
    store = cls(clock, history=1000)
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
    events: list[WatchEvent] = []
    store.subscribe(events.append)
    return store, clock, events


def _body(rng: random.Random, rt: ResourceType, name: str) -> Obj:
    md: Obj = {"name": name, "namespace": "default", "labels": {"app": rng.choice("ab")}}
    if rng.random() < 0.4:
        md["finalizers"] = rng.sample(["x.io/a", "x.io/b", "x.io/c"], rng.randrange(1, 3))
    if rng.random() < 0.3:
        md["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "owner"}]
    if rt is PODS:
        spec: Obj = {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]}
        if rng.random() < 0.6:
            spec["nodeName"] = "n1"
        if rng.random() < 0.5:
            spec["terminationGracePeriodSeconds"] = rng.choice([0, 5, 30])
        status = {"phase": rng.choice(["Pending", "Running", "Succeeded"]), "conditions": [{"type": "Ready"}]}
        return {"metadata": md, "spec": spec, "status": status}
    return {"metadata": md, "data": {"k": rng.choice(["v", "w"])}}


def _step(store: Store, rng: random.Random) -> str:
    rt = rng.choice([PODS, PODS, CONFIGMAPS])
    name = f"o{rng.randrange(6)}"
    action = rng.randrange(10)
    try:
        if action < 3:
            result: Any = store.create(rt, _body(rng, rt, name))
        elif action < 7:
            result = store.delete(
                rt,
                "default",
                name,
                grace_seconds=rng.choice([None, 0, 1, 10]),
                propagation=rng.choice([None, "Foreground", "Orphan", "Background"]),
                dry_run=rng.random() < 0.2,
            )
        elif action < 8:
            result = store.remove(rt, "default", name)
        else:
            current = store.get(rt, "default", name)
            if current is None:
                return "absent"
            md = dict(current["metadata"])
            finalizers = (md.get("finalizers") or [])[1:]
            md.pop("finalizers", None)
            if finalizers:
                md["finalizers"] = finalizers
            result = store.update(rt, {**current, "metadata": md})
    except errors.ApiError as error:
        return f"error {type(error).__name__} {error.message}"
    return repr(result)


def _run(cls: type[Store], seed: int, steps: int = 80) -> tuple[list[str], list[str], bool]:
    """Answers and events (as text) of a random sequence, and whether every version emitted stayed
    as it was when emitted."""
    store, clock, events = _store(cls, seed)
    rng = random.Random(seed)
    answers: list[str] = []
    seen: list[tuple[Obj, str]] = []
    unchanged = True
    for _ in range(steps):
        clock.advance(rng.random() * 3)
        answers.append(_step(store, rng))
        answers.append(repr(store.list(PODS)) + repr(store.list(CONFIGMAPS)))
        seen.extend((e.object, repr(e.object)) for e in events[len(seen) :])
        unchanged = unchanged and all(repr(obj) == text for obj, text in seen)
    return answers, [f"{e.type} {e.resource_version} {e.object!r}" for e in events], unchanged


@pytest.mark.parametrize("seed", range(40))
def test_deletions_answer_and_store_as_deep_copies_did(seed: int) -> None:
    answers, events, unchanged = _run(Store, seed)
    copied_answers, copied_events, _ = _run(CopyingStore, seed)
    assert answers == copied_answers
    assert events == copied_events
    assert unchanged


def test_a_deletion_changing_a_shared_version_is_caught() -> None:
    class Broken(Store):
        def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
            gone = super()._remove(rt, obj)
            gone.get("spec", {})["gone"] = True  # shared with the stored version before it
            return gone

    assert not all(_run(Broken, seed)[2] for seed in range(40))


def test_a_deletion_that_copies_nothing_is_caught() -> None:
    class Broken(Store):
        def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
            gone = super()._remove(rt, obj)
            obj["metadata"]["resourceVersion"] = gone["metadata"]["resourceVersion"]
            return gone

    assert not all(_run(Broken, seed)[2] for seed in range(40))
