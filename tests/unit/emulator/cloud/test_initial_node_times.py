"""Nodes that exist when the emulated cluster starts carry one consistent timeline: their creation,
conditions and kubelet Events all lie in the past, in boot order, so start-up analysis of the example
scenarios reports the boot timeline's node-ready times and no pool that stands out."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipshape.analyzers.startup import nodes as startup
from shipshape.emulator import assembly, scenario
from shipshape.emulator.resources import EVENTS, NODES, PODS
from shipshape.kube.clock import VirtualClock, parse_time
from shipshape.simulate.run import complete

SCENARIOS = sorted((Path(__file__).parents[4] / "examples" / "scenarios").glob("*.yaml"))


@pytest.fixture(scope="module", params=SCENARIOS, ids=lambda p: p.stem)
def cluster_state(request: pytest.FixtureRequest) -> tuple[float, list[dict], list[dict], list[dict]]:
    loaded = scenario.load(request.param)
    clock = VirtualClock()
    cluster = assembly.build(loaded, clock)
    start = clock.now()
    complete(assembly.apply_objects(cluster))
    cluster.engine.run_until(start + 60)
    store = cluster.store
    return start, list(store.iter(NODES)), list(store.iter(PODS)), list(store.iter(EVENTS))


def test_initial_nodes_have_one_timeline(cluster_state: tuple[float, list, list, list]) -> None:
    start, nodes, _, events = cluster_state
    initial = [n for n in nodes if parse_time(n["metadata"]["creationTimestamp"]) < start]
    assert initial
    by_node: dict[str, dict[str, dict]] = {}
    for event in events:
        if event["involvedObject"].get("kind") == "Node":
            by_node.setdefault(event["involvedObject"]["name"], {})[event["reason"]] = event
    for node in initial:
        name = node["metadata"]["name"]
        registered = parse_time(node["metadata"]["creationTimestamp"])
        conditions = {c["type"]: c for c in node["status"]["conditions"]}
        ready_at = parse_time(conditions["Ready"]["lastTransitionTime"])
        assert registered < ready_at < start
        assert parse_time(conditions["MemoryPressure"]["lastTransitionTime"]) == registered
        seen = by_node[name]
        assert parse_time(seen["Starting"]["firstTimestamp"]) == registered
        assert parse_time(seen["NodeReady"]["firstTimestamp"]) == ready_at
        for event in seen.values():  # an Event is created when it is first recorded
            assert event["metadata"]["creationTimestamp"] == event["firstTimestamp"]


def test_startup_nodes_reports_plausible_times_and_no_false_finding(
    cluster_state: tuple[float, list, list, list],
) -> None:
    _, nodes, pods, events = cluster_state
    timelines = startup.analyze_nodes(nodes, pods, events)
    ready = [t.time_to_ready for t in timelines]
    assert all(r is not None and 5.0 <= r <= 60.0 for r in ready), sorted(r or -1 for r in ready)
    for comparison in startup.compare_pools(timelines):
        assert abs(comparison.delta) < 5.0, comparison.sentence()
