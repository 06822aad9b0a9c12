"""The time series' summary (`summarize(..., startup="overall")`, every minute per cluster) gives the
figures the full summary gives: the same overall start-up stats without the groups, the diagnosis and
the node start-up report, over random pods (pulls, probes, init containers, pods not Ready yet,
other namespaces and nodes)."""

from __future__ import annotations

import random

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
        pods.append(pod)
        events.extend(pod_events)
    nodes = [node("node-a", ready=-30.0), node("node-b", capacity="spot", ready=-20.0)]
    return {"nodes": nodes, "pods": pods, "events": events}


def test_the_series_summary_equals_the_full_summary_where_the_series_reads_it() -> None:
    rng = random.Random(11)
    with_latencies = 0
    for _ in range(60):
        objects = cluster(rng)
        full = summary.summarize(objects, slowest=0)
        light = summary.summarize(objects, slowest=0, startup="overall")
        assert light["pod_startup"] == {"overall": full["pod_startup"]["overall"]}
        assert "node_startup" not in light
        assert {k: v for k, v in light.items() if k != "pod_startup"} == {
            k: v for k, v in full.items() if k not in ("pod_startup", "node_startup")
        }
        assert series.figures_of(light) == series.figures_of(full)
        with_latencies += series.figures_of(light)["startup_p99_seconds"] is not None
    assert with_latencies >= 40
