"""The ReplicaSet controller's kept pod facts give what claiming and counting every pod anew gives."""

from __future__ import annotations

import random
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.claims import claim
from shipshape.emulator.controllers.replicaset import ReplicaSetController, selector_of
from shipshape.emulator.resources import PODS, REPLICASETS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj
from shipshape.kube.clock import VirtualClock, rfc3339

from .twins import pods_view, random_step

RS_UID = "00000000-0000-4000-8000-000000000001"
OTHER_UID = "00000000-0000-4000-8000-000000000002"


def replicaset() -> Obj:
    return {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 3,
            "minReadySeconds": 5,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }


def owner_ref(uid: str) -> Obj:
    name = "web" if uid == RS_UID else "other"
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": uid, "controller": True}


def pod(i: int, rng: random.Random) -> Obj:
    labels = {"app": rng.choice(["web", "web", "db"])}
    if rng.random() < 0.7:
        labels["tier"] = "front"
    md: Obj = {"name": f"web-{i}", "namespace": "default", "labels": labels}
    owner = rng.choice([RS_UID, RS_UID, RS_UID, OTHER_UID, None])
    if owner is not None:
        md["ownerReferences"] = [owner_ref(owner)]
    return {"metadata": md, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


def change(rng: random.Random, now: float) -> tuple[Any, str | None]:
    """One random change to a pod (and the subresource it writes), the same in both clusters."""
    roll = rng.random()
    ready = rng.choice(["True", "False"])
    phase = rng.choice(["Running", "Running", "Pending", "Succeeded"])
    labels = {"app": rng.choice(["web", "db"]), **({"tier": "front"} if rng.random() < 0.6 else {})}
    owner = rng.choice([RS_UID, OTHER_UID, None])

    def apply(new: Obj) -> None:
        if roll < 0.5:
            stamp = rfc3339(now - rng.choice([0, 3, 30]))
            new["status"] = {
                "phase": phase,
                "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": stamp}],
            }
        elif roll < 0.7:
            new["metadata"]["labels"] = labels
        elif roll < 0.85:
            if owner is None:
                new["metadata"].pop("ownerReferences", None)
            else:
                new["metadata"]["ownerReferences"] = [owner_ref(owner)]
        else:
            new["metadata"]["deletionTimestamp"] = rfc3339(now)

    return apply, "status" if roll < 0.5 else None


def cluster() -> tuple[Cluster, ReplicaSetController]:
    c = Cluster(VirtualClock())
    controller = ReplicaSetController()
    c.add(controller)
    c.store.create(REPLICASETS, replicaset(), uid=RS_UID)
    return c, controller


def test_kept_facts_match_claiming_and_counting_every_pod() -> None:
    rng = random.Random(11)
    kept, kept_controller = cluster()
    fresh, fresh_controller = cluster()
    next_pod = 0
    for step in range(400):
        for clock in (kept.clock, fresh.clock):
            assert isinstance(clock, VirtualClock)
            clock.advance(1.0)
        next_pod = random_step(rng, (kept, fresh), next_pod, pod, change, "web")
        if step % 3:
            continue
        rs_kept = kept.store.must_get(REPLICASETS, "default", "web")
        rs_fresh = fresh.store.must_get(REPLICASETS, "default", "web")
        selector = selector_of(rs_kept)
        assert selector is not None
        candidates = kept_controller._orphans.candidates(kept.store, rs_kept)
        pods, facts = kept_controller._facts.claim(kept.store, rs_kept, selector, candidates)
        status = kept_controller._status(rs_kept, pods, None, facts)

        active = [
            p for p in fresh_controller._orphans.candidates(fresh.store, rs_fresh) if podutil.is_active(p)
        ]
        expected_pods = claim(fresh.store, PODS, rs_fresh, active, selector)
        expected_status = fresh_controller._status(rs_fresh, expected_pods, None)

        assert [p["metadata"]["name"] for p in pods] == [p["metadata"]["name"] for p in expected_pods]
        assert status == expected_status
        assert pods_view(kept) == pods_view(fresh)
