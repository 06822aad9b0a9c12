"""Decisions on a snapshot that has kept its answers (node-only verdicts, taint verdicts, preferred
node affinity scores, the statuses of a pass that found no node) equal decisions on a snapshot
built afresh from the same bodies, through random changes to nodes, pods and nominations."""

from __future__ import annotations

import copy
import random
from typing import Any

from shipshape.emulator.scheduler import framework, preemption
from shipshape.emulator.scheduler.plugins import Cycle, Profile
from shipshape.emulator.scheduler.snapshot import ClusterSnapshot, PodInfo, pod_info
from shipshape.kube import labels as labelsel
from tests.unit.emulator.scheduler.builders import node, pod, taint, toleration

Obj = dict[str, Any]
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def templates() -> list[Obj]:
    spot = toleration("spot", effect="NoSchedule")
    return [
        pod("web", cpu="1", memory="1Gi", labels={"app": "web"}),
        pod("big", cpu="3", memory="2Gi", labels={"app": "big"}),
        pod("huge", cpu="10", memory="1Gi", labels={"app": "huge"}),
        pod(
            "spot",
            cpu="1",
            labels={"app": "spot"},
            spec={"tolerations": [spot], "nodeSelector": {"pool": "spot"}},
        ),
        pod(
            "ds",
            cpu="100m",
            labels={"app": "ds"},
            spec={
                "tolerations": [{"operator": "Exists"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": ["n3"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            },
        ),
        pod(
            "prefers-b",
            cpu="500m",
            labels={"app": "prefers-b"},
            spec={
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 10,
                                "preference": {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "In", "values": ["spot", "general"]}
                                    ]
                                },
                            }
                        ]
                    }
                }
            },
        ),
        pod(
            "spread",
            cpu="2",
            labels={"app": "web"},
            spec={
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "web"}},
                    }
                ]
            },
        ),
        pod("urgent", cpu="3", labels={"app": "urgent"}, priority=1000),
    ]


def node_body(name: str, rng: random.Random) -> Obj:
    spot = rng.random() < 0.4
    return node(
        name,
        cpu=rng.choice(["2", "4"]),
        pods=rng.choice([4, 110]),
        zone=rng.choice(ZONES),
        labels={"pool": "spot" if spot else rng.choice(["general", "batch"])},
        taints=[taint("spot")] if spot and rng.random() < 0.7 else None,
        unschedulable=rng.random() < 0.1,
    )


def decide(snapshot: ClusterSnapshot, info: PodInfo, start: int, rng: random.Random) -> framework.Decision:
    snapshot.next_start_index = start
    return framework.schedule_one(info, snapshot, profile=Profile(), rng=rng)


def plain_pass(info: PodInfo, snapshot: ClusterSnapshot, start: int) -> tuple[dict[str, object], int]:
    """The filter pass of `schedule_one` written plainly: every node from `start` through `filter`,
    up to the number of feasible nodes to find. Statuses (in order) and the number found."""
    cycle, nodes = Cycle(info, snapshot), snapshot.node_list()
    to_find = framework.num_feasible_nodes_to_find(len(nodes))
    statuses: dict[str, object] = {}
    found = 0
    for i in range(len(nodes)):
        node = nodes[(start + i) % len(nodes)]
        status = cycle.filter(node)
        if status is None:
            found += 1
            if found >= to_find:
                break
        else:
            statuses[node.name] = status
    return statuses, found


def test_kept_answers_equal_a_fresh_snapshot() -> None:
    rng = random.Random(2026)
    nodes = {f"n{i}": node_body(f"n{i}", rng) for i in range(6)}
    assigned: dict[tuple[str, str], Obj] = {}
    nominations: dict[tuple[str, str], tuple[PodInfo, str]] = {}
    warm = ClusterSnapshot.of(nodes.values())
    pending = templates()
    served_from_memory = 0

    def change() -> None:
        action = rng.random()
        if action < 0.12:  # a node changes what the filters read (or only its heartbeat)
            name = rng.choice(sorted(nodes))
            body = node_body(name, rng) if rng.random() < 0.7 else copy.deepcopy(nodes[name])
            nodes[name] = body
            warm.set_node(body)
        elif action < 0.16:  # a node goes, or comes back
            name = rng.choice([*sorted(nodes), "n-extra"])
            if name in nodes and len(nodes) > 3:
                del nodes[name]
                warm.remove_node(name)
            else:
                nodes[name] = node_body(name, rng)
                warm.set_node(nodes[name])
        elif action < 0.26 and assigned:  # a pod goes
            key = rng.choice(sorted(assigned))
            del assigned[key]
            warm.remove_pod(key)
        elif action < 0.36 and nodes:  # a pod is bound elsewhere (another scheduler, a static pod)
            body = copy.deepcopy(rng.choice(pending))
            body["metadata"]["name"] = f"bound-{rng.randrange(30)}"
            body["spec"]["nodeName"] = rng.choice(sorted(nodes))
            info = pod_info(body)
            assigned.pop(info.key, None)  # (re-added last, as the snapshot re-adds a replaced pod)
            assigned[info.key] = body
            warm.add_pod(info)
        elif action < 0.4:  # a nomination comes or goes
            template = rng.choice(pending)
            key = ("default", f"nominee-{rng.randrange(3)}")
            if key in nominations or not nodes:
                nominations.pop(key, None)
                warm.nominate(key, None)
            else:
                body = copy.deepcopy(template)
                body["metadata"]["name"] = key[1]
                info = pod_info(body)
                target = rng.choice(sorted(nodes))
                nominations[key] = (info, target)
                warm.nominate(key, info, target)

    for step in range(500):
        # The same pod two or three times in a row, a change or none before each: a pod after one that
        # fit nowhere may be answered from memory.
        template = rng.choice(pending)
        for _ in range(rng.choice([1, 2, 3])):
            change()
            body = copy.deepcopy(template)
            body["metadata"]["name"] = f"{template['metadata']['name']}-{step}"
            info = pod_info(body)
            fresh = ClusterSnapshot.of(nodes.values(), assigned.values())
            for key, (nominee, target) in nominations.items():
                fresh.nominate(key, nominee, target)
            start = rng.randrange(20) if rng.random() < 0.5 else warm.next_start_index
            key = Cycle(info, warm).filter_key()
            if key is not None and not warm.nominated and warm.unfeasible((start, key)) is not None:
                served_from_memory += 1
            # Every node's scores, feasible or not (scoring reads the kept resource and affinity answers).
            assert Cycle(info, warm).scores(warm.node_list()) == Cycle(info, fresh).scores(fresh.node_list())
            if not warm.nominated and warm.node_list():
                expected = plain_pass(info, fresh, start % len(fresh.node_list()))
            else:
                expected = None
            seed = rng.random()
            got = decide(warm, info, start, random.Random(seed))
            want = decide(fresh, info, start, random.Random(seed))
            assert (got.node, got.message, got.nominated_node) == (
                want.node,
                want.message,
                want.nominated_node,
            )
            assert got.statuses == want.statuses
            if expected is not None:
                assert (list(got.statuses.items()), got.feasible) == (list(expected[0].items()), expected[1])
            assert list(got.statuses) == list(want.statuses)
            assert [v.key for v in got.victims] == [v.key for v in want.victims]
            assert warm.next_start_index == fresh.next_start_index
            if got.node and rng.random() < 0.6:
                body["spec"]["nodeName"] = got.node
                assigned[info.key] = body
                warm.add_pod(pod_info(body))
    assert served_from_memory >= 5
    assert len(assigned) >= 3


def test_daemonset_pod_fits_its_node_alone() -> None:
    snapshot = ClusterSnapshot.of(
        [node("n1"), node("n2", taints=[taint("dedicated")]), node("n3", unschedulable=True), node("n4")]
    )
    (ds,) = [t for t in templates() if t["metadata"]["name"] == "ds"]
    body = copy.deepcopy(ds)
    body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchFields"][0]["values"] = ["n4"]
    decision = framework.schedule_one(pod_info(body), snapshot)
    assert decision.node == "n4"
    assert {name: s.plugin for name, s in decision.statuses.items()} == {
        "n1": "NodeAffinity",
        "n2": "NodeAffinity",  # tolerated taint: its affinity rejects it
        "n3": "NodeAffinity",  # tolerates the unschedulable taint too (operator Exists)
    }


def test_a_pod_like_one_that_fit_nowhere_sees_each_change() -> None:
    """The statuses of a pass that found no node are reused only while nothing they read changed."""
    snapshot = ClusterSnapshot.of(
        [node("n1", cpu="2", pods=3), node("n2", cpu="2", pods=3)],
        [pod("a", cpu="1500m", node_name="n1"), pod("b", cpu="1500m", node_name="n2")],
    )
    attempts = iter(range(100))

    def attempt() -> framework.Decision:
        return framework.schedule_one(pod_info(pod(f"p{next(attempts)}", cpu="1")), snapshot)

    first = attempt()
    assert not first.scheduled
    assert first.message.startswith("0/2 nodes are available: 2 Insufficient cpu.")
    assert attempt().message == first.message
    # A pod bound: one node more is full of pods too.
    snapshot.add_pod(pod_info(pod("c", cpu=None, memory=None, node_name="n1")))
    snapshot.add_pod(pod_info(pod("d", cpu=None, memory=None, node_name="n1")))
    assert "1 Too many pods" in attempt().message
    # A pod gone: room again.
    snapshot.remove_pod(("default", "b"))
    assert attempt().node == "n2"
    snapshot.add_pod(pod_info(pod("b", cpu="1500m", node_name="n2")))
    assert not attempt().scheduled
    # A node grown.
    snapshot.set_node(node("n2", cpu="4", pods=3))
    assert attempt().node == "n2"
    snapshot.set_node(node("n2", cpu="2", pods=3))
    assert not attempt().scheduled
    # A node tainted.
    snapshot.set_node(node("n2", cpu="2", pods=3, taints=[taint("dedicated")]))
    assert "1 node(s) had untolerated taint {dedicated: }" in attempt().message
    # A node gone.
    snapshot.remove_node("n2")
    assert attempt().message.startswith("0/1 nodes are available: 1 Insufficient cpu, 1 Too many pods.")


def test_a_kept_failure_message_equals_preemption_worked_out_anew() -> None:
    """Pods that fit nowhere, of several priorities and preemption policies, with budgets that change
    beside the snapshot (they are not part of what the message is kept for): the message kept for a
    pod like the last one equals preemption run afresh."""
    rng = random.Random(14)
    names = [f"n{i}" for i in range(5)]
    nodes = {name: node(name, cpu=rng.choice(["2", "4"]), pods=110, zone=rng.choice(ZONES)) for name in names}
    assigned: dict[tuple[str, str], Obj] = {}
    warm = ClusterSnapshot.of(nodes.values())
    budgets: list[preemption.Budget] = []
    served_from_memory = 0

    def bind(name: str, target: str) -> None:
        body = pod(
            name,
            cpu=rng.choice(["500m", "1", "1500m"]),
            labels={"app": rng.choice(["web", "batch"])},
            priority=rng.choice([0, 10, 100]),
            node_name=target,
        )
        info = pod_info(body)
        assigned.pop(info.key, None)
        assigned[info.key] = body
        warm.add_pod(info)

    for i in range(12):
        bind(f"low-{i}", rng.choice(names))
    for step in range(3000):
        action = rng.random()
        if action < 0.05 and assigned:
            key = rng.choice(sorted(assigned))
            del assigned[key]
            warm.remove_pod(key)
        elif action < 0.10:
            bind(f"low-{rng.randrange(20)}", rng.choice(names))
        elif action < 0.16:  # a budget's allowance moves: the snapshot does not see it
            budgets = [
                preemption.Budget(
                    "default",
                    labelsel.from_label_selector({"matchLabels": {"app": app}}),
                    rng.randrange(3),
                )
                for app in rng.sample(["web", "batch"], rng.randrange(3))
            ]
        elif action < 0.18:
            name = rng.choice(names)
            nodes[name] = node(name, cpu=rng.choice(["2", "4"]), pods=110, zone=rng.choice(ZONES))
            warm.set_node(nodes[name])
        spec = {"preemptionPolicy": "Never"} if rng.random() < 0.2 else None
        body = pod(f"p-{step}", cpu=rng.choice(["3", "5"]), priority=rng.choice([5, 50, 1000]), spec=spec)
        info = pod_info(body)
        fresh = ClusterSnapshot.of(nodes.values(), assigned.values())
        start = rng.randrange(10) if rng.random() < 0.1 else warm.next_start_index
        key = Cycle(info, warm).filter_key()
        profile = Profile()
        inputs = (profile.preemption, info.priority, info.preempt_never, info.nominated_node)
        if warm.unfeasible_message((start, key), inputs) is not None:
            served_from_memory += 1
        seed = rng.random()
        warm.next_start_index = fresh.next_start_index = start
        got = framework.schedule_one(info, warm, profile=profile, rng=random.Random(seed), budgets=budgets)
        want = framework.schedule_one(info, fresh, profile=profile, rng=random.Random(seed), budgets=budgets)
        assert (got.node, got.message, got.nominated_node) == (want.node, want.message, want.nominated_node)
        assert [v.key for v in got.victims] == [v.key for v in want.victims]
        assert got.statuses == want.statuses
    assert served_from_memory >= 50
