"""A metadata-only merge patch of a pod shares the stored spec instead of copying it (`Api.patch`,
`emulator/specfacts.py`). Differential: over randomized pods (valid, undefaulted, undecodable,
invalid, not plain JSON, terminating) and randomized patches (valid, invalid, conflicting, no-ops,
dry runs), the answer, the error, the stored object, the watch events and the earlier stored
versions are the same as with every patch copying the whole pod (the full path), and a broken
shortcut is caught."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import pytest

from shipshape.emulator import defaults, validation
from shipshape.emulator.api import Api
from shipshape.emulator.resources import NAMESPACES, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.specfacts import PodSpecFacts, PodSpecMemo, plain_json
from shipshape.emulator.store import WatchEvent
from shipshape.kube import errors
from shipshape.kube.clock import VirtualClock
from shipshape.kube.patch import MERGE_PATCH, STRATEGIC_MERGE_PATCH

Obj = dict[str, Any]


def _full_path(api: Api) -> Api:
    """`api` with the shortcut off: every patch works on a copy of the whole stored pod."""
    api._kept_spec = lambda *args: None  # type: ignore[method-assign]
    return api


def _run(coro: Any) -> Any:
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("an Api call suspended")


def _spec(rng: random.Random) -> Obj:
    container: Obj = {
        "name": rng.choice(["main", "app"]),
        "image": rng.choice(["nginx:1.27", "busybox"]),
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "ports": [{"containerPort": 8080, "name": "http"}],
        "env": [{"name": "MODE", "value": "x"}],
        "readinessProbe": {"httpGet": {"port": 8080}},
    }
    spec: Obj = {
        "containers": [container],
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "a"},
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]}}
                ]
            }
        },
        "priority": 0,
    }
    if rng.random() < 0.5:
        spec["nodeName"] = rng.choice(["node-1", "node-2"])
    defaults.pod_spec(spec)
    flaw = rng.randrange(12)
    if flaw == 0:
        del spec["restartPolicy"]  # not defaulted
    elif flaw == 1:
        container["resources"]["requests"]["cpu"] = "lots"  # does not decode
    elif flaw == 2:
        container["name"] = "Bad_Name"  # invalid
    elif flaw == 3:
        del container["image"]  # invalid, and the update check reads the image
    elif flaw == 4:
        spec["tolerations"] = tuple(spec["tolerations"])  # not plain JSON
    elif flaw == 5:
        spec["terminationGracePeriodSeconds"] = 30.0  # plain, a float
    elif flaw == 6:
        spec["activeDeadlineSeconds"] = float("nan")  # not plain JSON
    elif flaw == 7:
        spec["containers"] = "not a list"  # does not decode
    elif flaw == 8:
        container["resources"] = {"limits": {"cpu": "1"}}  # requests not defaulted from the limits
    elif flaw == 9:
        spec["nodeSelector"] = {"pool": 5}  # does not decode (map of strings)
    return spec


def _pod(rng: random.Random, i: int) -> Obj:
    md: Obj = {
        "name": f"p{i}",
        "namespace": "default",
        "labels": {"app": rng.choice(["web", "db"])},
        "annotations": {"a": "1"},
    }
    if rng.random() < 0.3:
        md["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": True}
        ]
    if rng.random() < 0.2:
        md["finalizers"] = ["example.com/keep"]
    pod: Obj = {"metadata": md, "spec": _spec(rng), "status": {"phase": "Running"}}
    if rng.random() < 0.1:
        pod["extra"] = {"field": 1}  # a field pods do not have: no sharing
    return pod


def _metadata_patch(rng: random.Random, pod: Obj) -> Obj:
    md = pod["metadata"]
    choice = rng.randrange(20)
    if choice == 0:
        return {"labels": {"app": "bad value!"}}
    if choice == 1:
        return {"labels": {"Not A Key/x/y": "v"}}
    if choice == 2:
        return {"annotations": {"n": 5}}  # not a map of strings: 400
    if choice == 3:
        return {"name": "other"}
    if choice == 4:
        return {"resourceVersion": "1"}  # stale
    if choice == 5:
        return {"uid": "not-the-uid"}
    if choice == 6:
        return {"namespace": "kube-system"}
    if choice == 7:
        return {"ownerReferences": [{"name": ""}]}
    if choice == 8:
        return {"finalizers": None}  # completes a terminating pod's deletion
    if choice == 9:
        return {"finalizers": ["example.com/new"]}  # refused on a terminating pod
    if choice == 10:
        return {"labels": "not an object"}
    if choice == 11:
        return {}
    if choice == 12:
        return {"annotations": dict(md.get("annotations") or {})}  # a no-op
    if choice == 13:
        return {"annotations": None, "labels": {"app": None}}
    if choice == 14:
        return {"resourceVersion": md["resourceVersion"], "annotations": {"rv": "given"}}
    if choice == 15:
        return {"generation": 7, "creationTimestamp": "2020-01-01T00:00:00Z"}  # system fields: kept
    return {"annotations": {"controller.kubernetes.io/pod-deletion-cost": str(rng.randrange(-5, 5))}}


def _patch(rng: random.Random, pod: Obj) -> tuple[str, Any]:
    roll = rng.random()
    if roll < 0.8:
        return MERGE_PATCH, {"metadata": _metadata_patch(rng, pod)}
    if roll < 0.85:
        return MERGE_PATCH, {"metadata": _metadata_patch(rng, pod), "spec": {"activeDeadlineSeconds": 5}}
    if roll < 0.9:
        return MERGE_PATCH, {"metadata": None}
    if roll < 0.95:
        return MERGE_PATCH, {"metadata": "x"}
    return STRATEGIC_MERGE_PATCH, {"metadata": _metadata_patch(rng, pod)}


def _cluster(seed: int, api_of: Callable[[Cluster], Api]) -> tuple[Cluster, Api, list[WatchEvent]]:
    random.seed(seed)
    cluster = Cluster(VirtualClock())
    api = api_of(cluster)
    for name in ("default", "kube-system"):
        cluster.store.create(
            NAMESPACES,
            {
                "metadata": {"name": name},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            },
        )
    events: list[WatchEvent] = []
    cluster.store.subscribe(events.append)
    rng = random.Random(seed)
    for i in range(6):
        pod = _pod(rng, i)
        # Stored as a model would store it (no validation, no defaults, a spec handed over without a
        # copy through JSON, as bindings and status writes do): anything may be stored.
        stored = cluster.store.create(PODS, {**pod, "spec": {}})
        cluster.store.update(
            PODS, {**stored, "metadata": {**stored["metadata"]}, "spec": pod["spec"]}, copy=False
        )
        if rng.random() < 0.2:
            cluster.store.delete(PODS, "default", f"p{i}", grace_seconds=30)
    return cluster, api, events


def _outcome(api: Api, rng: random.Random) -> str:
    pods = api.store.list(PODS, "default")
    if not pods:
        return "no pods"
    pod = rng.choice(pods)
    patch_type, patch = _patch(rng, pod)
    dry_run = rng.random() < 0.1
    try:
        result = _run(api.patch(PODS, "default", pod["metadata"]["name"], patch_type, patch, dry_run=dry_run))
    except errors.ApiError as error:
        return f"error {type(error).__name__} {error.code} {error.message!r} {error.details!r}"
    return f"ok {result!r}"


def _differences(seed: int, shortcut_api: Callable[[Cluster], Api], steps: int = 40) -> list[str]:
    fast, fast_api, fast_events = _cluster(seed, shortcut_api)
    full, full_api, full_events = _cluster(seed, lambda c: _full_path(Api(c)))
    fast_rng, full_rng = random.Random(seed * 7919), random.Random(seed * 7919)
    found: list[str] = []
    for step in range(steps):
        seen_fast = [repr(e.object) for e in fast_events]
        a = _outcome(fast_api, fast_rng)
        b = _outcome(full_api, full_rng)
        if a != b:
            found.append(f"step {step}: {a} != {b}")
        if [repr(e.object) for e in fast_events[: len(seen_fast)]] != seen_fast:
            found.append(f"step {step}: an earlier stored version changed")
        if [(e.type, repr(e.object)) for e in fast_events] != [(e.type, repr(e.object)) for e in full_events]:
            found.append(f"step {step}: watch events differ")
        if repr(fast.store.list(PODS)) != repr(full.store.list(PODS)):
            found.append(f"step {step}: stored pods differ")
        if found:
            break
    return found


@pytest.mark.parametrize("seed", range(60))
def test_metadata_patches_answer_and_store_as_the_full_path(seed: int) -> None:
    assert _differences(seed, Api) == []


def test_the_shortcut_is_taken() -> None:
    _, api, _ = _cluster(0, Api)
    body: Obj = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]},
    }
    created = _run(api.create(PODS, "default", body))
    patched = _run(api.patch(PODS, "default", "web", MERGE_PATCH, {"metadata": {"annotations": {"x": "1"}}}))
    assert patched["spec"] is created["spec"]
    assert patched["metadata"]["annotations"] == {"x": "1"}
    assert api.pod_specs.facts(created["spec"]).shareable


Lie = Callable[[Any, PodSpecFacts], PodSpecFacts]


def test_the_randomized_patches_take_the_shortcut_and_not() -> None:
    taken: list[bool] = []

    def counting(cluster: Cluster) -> Api:
        api = Api(cluster)
        kept_spec = api._kept_spec

        def count(*args: Any) -> Any:
            spec = kept_spec(*args)
            taken.append(spec is not None)
            return spec

        api._kept_spec = count  # type: ignore[method-assign]
        return api

    for seed in range(60):
        _differences(seed, counting)
    assert taken.count(True) > 300 and taken.count(False) > 300


def _lying_api(lie: Lie) -> Callable[[Cluster], Api]:
    def build(cluster: Cluster) -> Api:
        api = Api(cluster)
        facts = api.pod_specs.facts
        api.pod_specs.facts = lambda spec: lie(spec, facts(spec))  # type: ignore[method-assign]
        return api

    return build


def _defaulted(spec: Any) -> bool:
    try:
        return defaults.pod_spec_defaulted(spec)
    except Exception:
        return False


_LIES: dict[str, Lie] = {
    "plain": lambda spec, f: dataclasses.replace(f, plain=True),
    "decodable": lambda spec, f: dataclasses.replace(f, decodable=True, defaulted=_defaulted(spec)),
    "defaulted": lambda spec, f: dataclasses.replace(f, defaulted=f.decodable),
    "causes": lambda spec, f: dataclasses.replace(f, update_causes=()),
}


@pytest.mark.parametrize("lie", _LIES.values(), ids=_LIES.keys())
def test_a_broken_shortcut_is_caught(lie: Lie) -> None:
    assert any(_differences(seed, _lying_api(lie)) for seed in range(60))


def test_defaulting_a_kept_spec_never_changes_the_stored_one() -> None:
    """Guard: were a kept spec not defaulted, the update defaults a copy of it."""
    cluster, _, _ = _cluster(3, Api)
    api = Api(cluster)
    spec: Obj = {"containers": [{"name": "main", "image": "nginx:1.27"}]}  # no defaults at all
    cluster.store.create(PODS, {"metadata": {"name": "raw", "namespace": "default"}, "spec": spec})
    stored = cluster.store.get(PODS, "default", "raw")
    assert stored is not None
    before = repr(stored)
    facts = api.pod_specs.facts(stored["spec"])
    assert facts.decodable and not facts.defaulted
    patched = {**stored, "metadata": {**stored["metadata"], "annotations": {"x": "1"}}}
    with pytest.raises(errors.Invalid) as kept:
        _run(api.update(PODS, "default", "raw", patched, owned=True, kept_spec=stored["spec"]))
    assert repr(stored) == before
    # The defaults make it a change of the spec, which a pod update may not make: as on a copy.
    with pytest.raises(errors.Invalid) as copied:
        _run(api.update(PODS, "default", "raw", patched))
    assert kept.value.status() == copied.value.status()
    assert "restartPolicy" not in stored["spec"]


def test_facts_against_working_them_out() -> None:
    rng = random.Random(5)
    memo = PodSpecMemo(limit=8)
    for i in range(100):
        spec = _spec(rng)
        facts = memo.facts(spec)
        assert facts == PodSpecFacts.of(spec)
        assert memo.facts(spec) is facts
        assert len(memo) <= 8
        assert facts.plain == (repr(spec) == repr(_json_copy(spec)))
        pod: Obj = {"metadata": {"name": f"p{i}", "namespace": "default"}, "spec": spec}
        assert facts.update_causes == tuple(validation.validate(PODS, pod, pod))
        assert validation.validate_pod_update_same_spec(pod, pod, facts.update_causes) == validation.validate(
            PODS, pod, pod
        )


def _json_copy(value: Any) -> Any:
    from shipshape.emulator.store import clone

    return clone({"v": value})["v"]


def test_plain_json() -> None:
    assert plain_json({"a": [1, 2.5, "x", None, True, {"b": []}]})
    deep: Obj = {}
    for _ in range(300):
        deep = {"a": deep}
    for value in ({"a": (1,)}, {1: "a"}, {"a": float("inf")}, {"a": 2**64}, {"a": {"b": set()}}, deep):
        assert not plain_json(value)
