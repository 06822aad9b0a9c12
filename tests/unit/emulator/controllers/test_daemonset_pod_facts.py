"""The DaemonSet controller's kept pod facts give the pods by node that claiming every pod anew gives."""

from __future__ import annotations

import random
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.daemonset import DaemonSetController, target_node
from shipshape.emulator.resources import DAEMONSETS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj
from shipshape.kube.clock import VirtualClock, rfc3339

from .twins import pods_view, random_step

DS_UID = "00000000-0000-4000-8000-000000000001"
OTHER_UID = "00000000-0000-4000-8000-000000000002"


def daemonset() -> Obj:
    return {
        "metadata": {"name": "agent", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "agent"}]},
            },
        },
    }


def owner_ref(uid: str) -> Obj:
    name = "agent" if uid == DS_UID else "other"
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name, "uid": uid, "controller": True}


def pinned(node: str) -> Obj:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def pod(i: int, rng: random.Random) -> Obj:
    md: Obj = {"name": f"agent-{i}", "namespace": "default", "labels": {"app": rng.choice(["agent", "x"])}}
    owner = rng.choice([DS_UID, DS_UID, OTHER_UID, None])
    if owner is not None:
        md["ownerReferences"] = [owner_ref(owner)]
    spec: Obj = {"containers": [{"name": "c", "image": "agent"}]}
    if rng.random() < 0.9:
        spec["affinity"] = pinned(f"n{rng.randrange(4)}")
    return {"metadata": md, "spec": spec}


def change(rng: random.Random, now: float) -> tuple[Any, str | None]:
    """One random change to a pod (and the subresource it writes), the same in both clusters."""
    roll = rng.random()
    phase = rng.choice(["Running", "Pending", "Succeeded", "Failed"])
    labels = {"app": rng.choice(["agent", "x"])}
    owner = rng.choice([DS_UID, OTHER_UID, None])
    node = f"n{rng.randrange(4)}"

    def apply(new: Obj) -> None:
        if roll < 0.3:
            new["status"] = {"phase": phase}
        elif roll < 0.5:
            new["metadata"]["labels"] = labels
        elif roll < 0.7:
            if owner is None:
                new["metadata"].pop("ownerReferences", None)
            else:
                new["metadata"]["ownerReferences"] = [owner_ref(owner)]
        elif roll < 0.85:
            new["spec"]["affinity"] = pinned(node)
        else:
            new["metadata"]["finalizers"] = ["keep"]
            new["metadata"]["deletionTimestamp"] = rfc3339(now)

    return apply, "status" if roll < 0.3 else None


def cluster() -> tuple[Cluster, DaemonSetController]:
    c = Cluster(VirtualClock())
    controller = DaemonSetController()
    c.add(controller)
    c.store.create(DAEMONSETS, daemonset(), uid=DS_UID)
    return c, controller


def by_node(pods: dict[str, list[Obj]]) -> dict[str, list[tuple[str, str]]]:
    return {
        node: [(p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in ps]
        for node, ps in pods.items()
    }


def scan_anew(controller: DaemonSetController, ds: Obj) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for pod in controller._daemon_pods(ds):
        if podutil.phase(pod) in podutil.TERMINAL_PHASES and podutil.is_terminating(pod):
            continue
        node = target_node(pod)
        if node:
            out.setdefault(node, []).append(pod)
    return out


def test_kept_facts_match_claiming_every_pod_anew() -> None:
    rng = random.Random(13)
    kept, kept_controller = cluster()
    fresh, fresh_controller = cluster()
    next_pod = 0
    for step in range(400):
        next_pod = random_step(rng, (kept, fresh), next_pod, pod, change, "agent")
        if step % 3:
            continue
        got = kept_controller._scan_node_to_pods(kept.store.must_get(DAEMONSETS, "default", "agent"))
        want = scan_anew(fresh_controller, fresh.store.must_get(DAEMONSETS, "default", "agent"))
        assert by_node(got) == by_node(want)
        assert pods_view(kept) == pods_view(fresh)
