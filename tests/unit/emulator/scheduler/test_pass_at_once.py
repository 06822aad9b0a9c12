"""The filter pass over all nodes at once (`framework._feasible_at_once`, over the snapshot's kept
`NodeArrays` and node-only masks) finds what the node-by-node pass finds: the same node, feasible
count, statuses, start index and random draws, through random changes to a cluster large enough
that a pass stops before the end of the node list; the kept table, masks and matching pods equal
ones built afresh; and PodTopologySpread's scores from the kept columns equal scores node by node."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from shipshape.emulator.scheduler import framework
from shipshape.emulator.scheduler.plugins import Cycle, Profile
from shipshape.emulator.scheduler.snapshot import ClusterSnapshot, NodeArrays, PodInfo, pod_info
from shipshape.kube import labels as labelsel
from tests.unit.emulator.scheduler.builders import node, pod, taint, toleration

Obj = dict[str, Any]
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def node_body(name: str, rng: random.Random) -> Obj:
    spot = rng.random() < 0.5
    return node(
        name,
        cpu=rng.choice(["2", "4", "8"]),
        memory=rng.choice(["8Gi", "16Gi"]),
        pods=rng.choice([3, 110]),
        zone=rng.choice(ZONES),
        labels={"pool": "spot" if spot else rng.choice(["general", "batch"])},
        taints=[taint("spot")] if spot and rng.random() < 0.7 else None,
        unschedulable=rng.random() < 0.05,
        extra={"example.com/gpu": "1"} if rng.random() < 0.1 else None,
    )


def pod_body(name: str, rng: random.Random) -> Obj:
    spec: Obj = {}
    if rng.random() < 0.4:
        spec["tolerations"] = [toleration("spot", effect="NoSchedule")]
    if rng.random() < 0.4:
        spec["nodeSelector"] = {"pool": rng.choice(["spot", "general", "batch"])}
    return pod(
        name,
        cpu=rng.choice([None, "100m", "1", "3"]),
        memory=rng.choice([None, "256Mi", "4Gi"]),
        labels={"app": rng.choice(["web", "api"])},
        spec=spec,
        extra_requests={"example.com/gpu": "1"} if rng.random() < 0.1 else None,
    )


def fresh_mask(snapshot: ClusterSnapshot, info: PodInfo) -> np.ndarray:
    cycle = Cycle(info, snapshot)
    return np.array([cycle._static_filter(n) is None for n in snapshot.node_list()], dtype=np.bool_)


def assert_table_current(snapshot: ClusterSnapshot) -> None:
    """The kept table, in the node list's order, equals one built afresh; so do its match vectors."""
    kept = snapshot.node_arrays()
    fresh = NodeArrays(snapshot.node_list())
    assert kept.order is fresh.order
    assert [kept.rows[i] for i in kept.positions] == snapshot.node_list()
    assert int(kept.live.sum()) == len(snapshot.node_list())
    rows = kept.positions
    for name, j in fresh.columns.items():
        k = kept.columns[name]
        assert (kept.allocatable[rows, k] == fresh.allocatable[: fresh.size, j]).all()
        assert (kept.requested[rows, k] == fresh.requested[: fresh.size, j]).all()
    for name, k in kept.columns.items():
        if name not in fresh.columns:  # a resource nothing has any more: nothing there
            assert not kept.allocatable[rows, k].any() and not kept.requested[rows, k].any()
    assert (kept.pods[rows] == fresh.pods[: fresh.size]).all()
    assert (kept.allowed_pods[rows] == fresh.allowed_pods[: fresh.size]).all()
    for (namespace, selector), vector in kept.match_vectors.items():
        counts: dict[str, int] = {}
        for other in snapshot.matching_pods(namespace, selector):
            if not other.terminating:
                counts[other.node_name] = counts.get(other.node_name, 0) + 1
        assert vector[rows].tolist() == [counts.get(n.name, 0) for n in snapshot.node_list()]


def test_the_pass_at_once_equals_the_node_by_node_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(2029)
    snapshot = ClusterSnapshot()
    names = [f"n{i:03d}" for i in range(260)]
    for name in names:
        snapshot.set_node(node_body(name, rng))
    assigned: list[tuple[str, str]] = []
    at_once = framework._feasible_at_once
    used = 0

    def counted(*args: Any) -> Any:
        nonlocal used
        found = at_once(*args)
        used += found is not None
        return found

    def change() -> None:
        action = rng.random()
        if action < 0.15:  # what the node-only filters read, the allocatable, or only a heartbeat
            name = rng.choice(names)
            if snapshot.nodes.get(name) is not None and snapshot.nodes[name].obj is not None:
                body = node_body(name, rng) if rng.random() < 0.7 else dict(snapshot.nodes[name].obj or {})
                snapshot.set_node(body)
        elif action < 0.2:  # a node goes or comes back
            name = rng.choice(names)
            if snapshot.nodes.get(name) is not None and snapshot.nodes[name].obj is not None:
                snapshot.remove_node(name)
            else:
                snapshot.set_node(node_body(name, rng))
        elif action < 0.45 and assigned:
            snapshot.remove_pod(assigned.pop(rng.randrange(len(assigned))))
        else:  # a pod bound by another scheduler
            body = pod_body(f"bound-{rng.randrange(400)}", rng)
            body["spec"]["nodeName"] = rng.choice(names)
            info = pod_info(body)
            if info.key in assigned:
                assigned.remove(info.key)
            assigned.append(info.key)
            snapshot.add_pod(info)

    for step in range(400):
        for _ in range(rng.choice([0, 1, 3])):
            change()
        if not snapshot.node_list():
            continue
        info = pod_info(pod_body(f"p{step}", rng))
        start = rng.randrange(400) % len(snapshot.node_list())
        seed = rng.random()
        decisions = []
        draws = []
        for mode in ("at once", "node by node"):
            monkeypatch.setattr(
                framework, "_feasible_at_once", counted if mode == "at once" else (lambda *a: None)
            )
            snapshot.next_start_index = start
            draw = random.Random(seed)
            decision = framework.schedule_one(info, snapshot, profile=Profile(), rng=draw)
            decisions.append((decision.node, decision.feasible, list(decision.statuses.items()),
                              decision.message, snapshot.next_start_index))  # fmt: skip
            draws.append(draw.random())
        assert decisions[0] == decisions[1]
        assert draws[0] == draws[1]
        if decisions[0][0] and rng.random() < 0.5:
            body = dict(info.obj, spec={**info.obj["spec"], "nodeName": decisions[0][0]})
            bound = pod_info(body)
            assigned.append(bound.key)
            snapshot.add_pod(bound)
        if step % 20 == 0:
            assert_table_current(snapshot)
            shape = Cycle(info, snapshot).vector_shape()
            table = snapshot.node_arrays()
            if shape is not None and ("filters", shape) in table.static_columns:
                mask = snapshot.static_mask(table, shape, Cycle(info, snapshot).passes_static)
                assert (mask[table.positions] == fresh_mask(snapshot, info)).all()
    assert used >= 150


def test_without_statuses_a_found_node_is_all_a_decision_says() -> None:
    snapshot = ClusterSnapshot.of(
        [node(f"n{i:03d}", cpu="1" if i % 2 else "4") for i in range(300)],
    )
    info = pod_info(pod("web", cpu="2"))
    with_statuses = framework.schedule_one(info, snapshot)
    snapshot.next_start_index = 0
    without = framework.schedule_one(info, snapshot, statuses=False)
    # 48 % of 300 nodes are to be found: 144, the even nodes up to n286.
    assert without.node == with_statuses.node and without.feasible == with_statuses.feasible == 144
    assert without.statuses == {}
    assert {s.plugin for s in with_statuses.statuses.values()} == {"NodeResourcesFit"}
    assert list(with_statuses.statuses) == [f"n{i:03d}" for i in range(1, 287, 2)]
    assert snapshot.next_start_index == 287


def spread_pod(name: str, rng: random.Random) -> tuple[Obj, labelsel.Selector | None]:
    """A pod with soft topology spread constraints of random keys and policies, or none (then the
    system default's selector); `pod_body` gives some a nodeSelector, which spreading honours."""
    body = pod_body(name, rng)
    constraints = [
        {
            "maxSkew": rng.choice([1, 2]),
            "topologyKey": rng.choice(["topology.kubernetes.io/zone", "kubernetes.io/hostname", "pool"]),
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": rng.choice(["web", "api"])}},
            **({"nodeAffinityPolicy": "Ignore"} if rng.random() < 0.3 else {}),
        }
        for _ in range(rng.choice([0, 1, 2]))
    ]
    if constraints:
        body["spec"]["topologySpreadConstraints"] = constraints
    default = None if constraints else labelsel.from_label_selector({"matchLabels": {"app": "web"}})
    return body, default


def test_spread_scores_from_the_kept_columns_equal_scores_node_by_node() -> None:
    rng = random.Random(2030)
    snapshot = ClusterSnapshot()
    names = [f"n{i:03d}" for i in range(150)]
    for name in names:
        body = node_body(name, rng)
        if rng.random() < 0.05:  # a node without a zone
            del body["metadata"]["labels"]["topology.kubernetes.io/zone"]
        snapshot.set_node(body)
    assigned: list[tuple[str, str]] = []
    compared = 0
    for step in range(300):
        action = rng.random()
        if action < 0.1:
            snapshot.set_node(node_body(rng.choice(names), rng))
        elif action < 0.2:  # a node goes (its pods stay until deleted), or one that went comes back
            gone = [n for n in names if snapshot.nodes.get(n) is None or snapshot.nodes[n].obj is None]
            name = rng.choice(names)
            if gone and rng.random() < 0.5:
                snapshot.set_node(node_body(rng.choice(gone), rng))
            elif rng.random() < 0.3:  # gone and back between two reads of the table
                for other in list(snapshot.nodes[name].pods) if name in snapshot.nodes else []:
                    snapshot.remove_pod(other)
                    assigned.remove(other)
                snapshot.remove_node(name)
                snapshot.set_node(node_body(name, rng))
            else:
                snapshot.remove_node(name)
        elif action < 0.35 and assigned:
            snapshot.remove_pod(assigned.pop(rng.randrange(len(assigned))))
        else:
            for _ in range(rng.choice([1, 5])):
                body = pod_body(f"bound-{rng.randrange(600)}", rng)
                body["spec"]["nodeName"] = rng.choice(names)
                if rng.random() < 0.1:
                    body["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
                info = pod_info(body)
                if info.key in assigned:
                    assigned.remove(info.key)
                assigned.append(info.key)
                snapshot.add_pod(info)
        listed = snapshot.node_list()
        if len(listed) < 20:
            continue
        body, default = spread_pod(f"p{step}", rng)
        info = pod_info(body, default_spread_selector=default)
        cycle = Cycle(info, snapshot)
        nodes = rng.sample(listed, rng.randrange(16, len(listed)))
        rows = cycle._rows(nodes)
        assert rows is not None
        assert cycle._spread_scores(nodes, rows) == cycle._spread_scores(nodes)
        compared += 1
        if step % 10 == 0:
            assert_table_current(snapshot)
    assert compared >= 250
