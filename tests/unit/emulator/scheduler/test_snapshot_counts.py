"""The snapshot's per-selector pod counts stay equal to a recount as pods come and go."""

from __future__ import annotations

import random

import pytest

from shipshape.emulator.scheduler import snapshot as snap
from shipshape.emulator.scheduler.snapshot import ClusterSnapshot, pod_info
from shipshape.kube import labels as labelsel
from tests.unit.emulator.scheduler.builders import node, pod


def recount(snapshot: ClusterSnapshot, namespace: str, selector: labelsel.Selector) -> dict[str, int]:
    counts: dict[str, int] = {}
    for other in snapshot.pods.values():
        if other.namespace == namespace and not other.terminating and selector.matches(other.labels):
            counts[other.node_name] = counts.get(other.node_name, 0) + 1
    return counts


def terminating(body: dict[str, object]) -> dict[str, object]:
    metadata = dict(body["metadata"])  # type: ignore[call-overload]
    metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {**body, "metadata": metadata}


def test_counts_follow_adds_updates_and_removals() -> None:
    rng = random.Random(7)
    snapshot = ClusterSnapshot.of([node(f"n{i}") for i in range(5)])
    web = labelsel.parse("app=web")
    web_blue = labelsel.parse("app=web,track=blue")
    anything = labelsel.parse("")
    selectors = [web, web_blue, anything]
    # Asked before any pod exists: the counts must then be kept up to date, not recomputed.
    assert snapshot.matching_per_node("default", web) == {}
    for step in range(300):
        name = f"p{rng.randrange(40)}"
        namespace = rng.choice(["default", "other"])
        action = rng.random()
        if action < 0.2:
            snapshot.remove_pod((namespace, name))
        else:
            labels = {"app": rng.choice(["web", "db"]), "track": rng.choice(["blue", "green"])}
            body = pod(name, namespace=namespace, labels=labels, node_name=f"n{rng.randrange(5)}")
            snapshot.add_pod(pod_info(terminating(body) if action > 0.9 else body))
        if step == 100:
            snapshot.matching_per_node("other", web_blue)  # starts being counted half-way
        for namespace in ("default", "other"):
            for selector in selectors:
                assert snapshot.matching_per_node(namespace, selector) == recount(
                    snapshot, namespace, selector
                )
    assert any(snapshot.matching_per_node("default", web).values())


def test_cache_is_bounded_and_answers_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snap, "MATCH_COUNT_CACHE", 3)
    snapshot = ClusterSnapshot.of(
        [node("n0"), node("n1")],
        [pod(f"p{i}", labels={"app": f"a{i % 4}"}, node_name=f"n{i % 2}") for i in range(8)],
    )
    for round_ in range(3):
        for i in range(4):
            selector = labelsel.parse(f"app=a{i}")
            assert snapshot.matching_per_node("default", selector) == recount(snapshot, "default", selector)
        snapshot.add_pod(pod_info(pod(f"extra{round_}", labels={"app": "a0"}, node_name="n1")))
    assert snapshot._match_count_entries <= 3
    assert sum(len(v) for v in snapshot._match_counts.values()) == snapshot._match_count_entries
