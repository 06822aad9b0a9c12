"""The time series' summary (`summarize(..., startup="end-to-end")`, every minute per cluster) gives
the figures the full summary gives: the same end-to-end start-up stats from the pods alone, without
timelines, events, groups, the diagnosis and the node start-up report, over random pods (pulls,
probes, init containers, pods not Ready yet or no longer, a Ready condition written twice, pods
without a creation time, other namespaces and nodes)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from shipshape.backend import series, summary
from tests.unit.analyzers.startup.builders import C, PodPlan, node, pod_and_events


def cluster(rng: random.Random) -> dict[str, list[dict[str, object]]]:
    pods, events = [], []
    for i in range(rng.randrange(0, 40)):
        pull = rng.choice([0.0, 0.5, 4.0, 30.0])
        started = 3.0 + pull + rng.random() * 2
        ready = None if rng.random() < 0.1 else started + rng.random() * 10
        container = (
            C("app", started=started, pull_start=2.0, pull=pull) if pull else C("app", started=started)
        )
        init = [C("setup", started=2.5, finished=2.9)] if rng.random() < 0.2 else []
        plan = PodPlan(
            name=f"web-{i}",
            namespace=rng.choice(["default", "shop"]),
            node=rng.choice(["node-a", "node-b"]),
            created=rng.random() * 5,
            scheduled=6.0,
            sandbox=7.0,
            initialized=0.0 if not init else 3.0,
            containers_ready=ready,
            ready=ready,
            containers=[container],
            init=init,
        )
        pod, pod_events = pod_and_events(plan)
        pods.append(oddity(rng, pod))
        events.extend(pod_events)
    nodes = [node("node-a", ready=-30.0), node("node-b", capacity="spot", ready=-20.0)]
    return {"nodes": nodes, "pods": pods, "events": events}


def oddity(rng: random.Random, pod: dict[str, Any]) -> dict[str, Any]:
    """Now and then a pod that the Ready condition alone does not settle."""
    pod = copy.deepcopy(pod)
    conditions = pod.get("status", {}).get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    roll = rng.random()
    if roll < 0.05:
        del pod["metadata"]["creationTimestamp"]
    elif roll < 0.1 and ready:
        ready[0]["status"] = "False"  # was Ready, is not now
    elif roll < 0.15 and ready:
        conditions.append({**ready[0], "status": "False"})  # the last of a type counts
    elif roll < 0.2 and ready:
        ready[0].pop("lastTransitionTime", None)
    return pod


def test_the_series_summary_equals_the_full_summary_where_the_series_reads_it() -> None:
    rng = random.Random(11)
    with_latencies = 0
    for _ in range(60):
        objects = cluster(rng)
        full = summary.summarize(objects, slowest=0)
        light = summary.summarize(objects, slowest=0, startup="end-to-end")
        expected = full["pod_startup"]["overall"]["endToEnd"]
        found = light["pod_startup"]["endToEnd"]
        if expected is None:
            assert found is None
        else:
            # The mean is summed in another order.
            assert {**found, "mean": pytest.approx(expected["mean"])} == expected
        assert "node_startup" not in light
        assert {k: v for k, v in light.items() if k != "pod_startup"} == {
            k: v for k, v in full.items() if k not in ("pod_startup", "node_startup")
        }
        # The full summary's figures, its overall end-to-end stats where the series reads them.
        as_series = {**full, "pod_startup": {"endToEnd": full["pod_startup"]["overall"]["endToEnd"]}}
        assert series.figures_of(light) == series.figures_of(as_series)
        with_latencies += series.figures_of(light)["startup_p99_seconds"] is not None
    assert with_latencies >= 40
