"""One scheduling decision, as kube-scheduler's `schedulePod` + PostFilter make it. Pure.

`schedule_one(pod, snapshot)` filters nodes (stopping after upstream's number of feasible nodes
to find, starting where the previous decision stopped), scores the feasible ones, breaks ties
with the given random source, and on failure runs preemption. `fits` answers "would this pod
fit on this node with these pods", e.g. for a cluster autoscaler's node template.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shipshape.emulator.scheduler import messages as msg
from shipshape.emulator.scheduler import preemption
from shipshape.emulator.scheduler.messages import Status
from shipshape.emulator.scheduler.plugins import Cycle, Profile
from shipshape.emulator.scheduler.snapshot import ClusterSnapshot, NodeInfo, PodInfo, pod_info

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
NO_NODES_AVAILABLE = "no nodes available to schedule pods"


@dataclass(slots=True)
class Decision:
    """The outcome of one scheduling attempt.

    `node` is set on success. On failure, `message` is the FailedScheduling message and, when
    preemption found room, `nominated_node` and `victims` say where and whom to evict.
    """

    pod: PodInfo
    node: str = ""
    message: str = ""
    statuses: dict[str, Status] = field(default_factory=dict)
    nominated_node: str = ""
    victims: list[PodInfo] = field(default_factory=list)
    feasible: int = 0

    @property
    def scheduled(self) -> bool:
        return bool(self.node)

    @property
    def rejected_by(self) -> set[str]:
        """Plugins that rejected at least one node (what re-queueing decisions key on)."""
        return {s.plugin for s in self.statuses.values()}


def num_feasible_nodes_to_find(num_all_nodes: int, percentage: int = 0) -> int:
    """Upstream's adaptive node sampling: all of small clusters, a share of big ones."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage <= 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    if percentage >= 100:
        return num_all_nodes
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def _with_nominated(cycle: Cycle, node: NodeInfo) -> Status | None:
    """Filter a node with the pods nominated to it of no lower priority counted as already there."""
    pod = cycle.pod
    if not cycle.snapshot.nominated:
        return cycle.filter(node)
    nominated = [
        p
        for p in cycle.snapshot.nominated.get(node.name, {}).values()
        if p.key != pod.key and p.priority >= pod.priority
    ]
    if nominated:
        status = cycle.filter(node, added=nominated)
        if status is not None:
            return status
    return cycle.filter(node)


def select_host(nodes: Sequence[NodeInfo], scores: Sequence[int], rng: random.Random) -> NodeInfo:
    """The highest score; ties broken by reservoir sampling, as upstream's `selectHost`."""
    best = nodes[0]
    best_score = scores[0]
    ties = 1
    for node, score in zip(nodes[1:], scores[1:], strict=True):
        if score > best_score:
            best, best_score, ties = node, score, 1
        elif score == best_score:
            ties += 1
            if rng.randrange(ties) == 0:
                best = node
    return best


def schedule_one(
    pod: PodInfo | dict[str, Any],
    snapshot: ClusterSnapshot,
    *,
    profile: Profile | None = None,
    rng: random.Random | None = None,
    budgets: Sequence[preemption.Budget] = (),
    statuses: bool = True,
) -> Decision:
    """Decide where one pending pod goes.

    The snapshot is left as it was but for its round-robin start index; `assume` accounts a
    successful decision. `budgets` are the PodDisruptionBudgets preemption should respect.
    `statuses=False`: a decision that found a node need not say why the nodes it passed over were
    rejected (`Decision.statuses` stays empty then; a failed one always has them).
    """
    info = pod if isinstance(pod, PodInfo) else pod_info(pod)
    profile = profile or Profile()
    rng = rng or random.Random(0)
    all_nodes = snapshot.node_list()
    decision = Decision(info)
    if not all_nodes:
        decision.message = NO_NODES_AVAILABLE
        return decision
    cycle = Cycle(info, snapshot, profile)
    nominated = snapshot.nodes.get(info.nominated_node) if info.nominated_node else None
    if nominated is not None and nominated.obj is not None and _with_nominated(cycle, nominated) is None:
        decision.node, decision.feasible = nominated.name, 1
        return decision
    to_find = num_feasible_nodes_to_find(len(all_nodes), profile.percentage_of_nodes_to_score)
    start = snapshot.next_start_index % len(all_nodes)
    feasible: list[NodeInfo] = []
    processed = 0
    # A pod like the last one that fit nowhere, on an unchanged snapshot and from the same first node,
    # fits nowhere either: the same statuses in the same order, and the pass over all nodes leaves the
    # start index where it was.
    key = None if snapshot.nominated else (start, cycle.filter_key())
    known = None if key is None or key[1] is None else snapshot.unfeasible(key)
    if known is not None:
        decision.statuses = dict(known)
        snapshot.next_start_index = start
        return _unfeasible(decision, cycle, profile, budgets, len(all_nodes), key)
    names = cycle.names_only
    unnamed_key = None if names is None else cycle.unnamed_key()
    if names is not None and unnamed_key is not None and len(names) < to_find and not snapshot.nominated:
        # A pod whose node affinity names its nodes (a DaemonSet's): every other node gets the same
        # status for each pod with these tolerations, and the pass visits all nodes (it finds fewer
        # than it looks for), leaving the start index where it was. Only the named nodes are filtered;
        # their statuses take the place the pass would give them.
        decision.statuses = dict(
            snapshot.unnamed_statuses(
                (start, unnamed_key),
                lambda: {n.name: cycle.unnamed_status(n) for n in all_nodes[start:] + all_nodes[:start]},
            )
        )
        named = [n for n in map(snapshot.nodes.get, names) if n is not None and n.obj is not None]
        for node in sorted(named, key=lambda n: (all_nodes.index(n) - start) % len(all_nodes)):
            name = node.name
            status = cycle.filter(node)
            if status is None:
                feasible.append(node)
                del decision.statuses[name]
            else:
                decision.statuses[name] = status
        snapshot.next_start_index = start
        decision.feasible = len(feasible)
        if feasible:
            if len(feasible) == 1:
                decision.node = feasible[0].name
            else:
                decision.node = select_host(feasible, cycle.scores(feasible), rng).name
            return decision
        return _unfeasible(decision, cycle, profile, budgets, len(all_nodes))
    at_once = None if snapshot.nominated else _feasible_at_once(cycle, all_nodes, start, to_find)
    if at_once is not None:
        feasible, processed = at_once
        if statuses:
            chosen = {node.name for node in feasible}
            for i in range(processed):
                node = all_nodes[(start + i) % len(all_nodes)]
                if node.name not in chosen:
                    status = cycle.filter(node)
                    assert status is not None  # every feasible node of the window is chosen
                    decision.statuses[node.name] = status
    else:
        # Filtering leaves the snapshot's nominations as they are: without any, each node goes
        # straight to the filters (one call fewer per node on the hottest loop of a decision).
        filter_node: Callable[[NodeInfo], Status | None] = (
            functools.partial(_with_nominated, cycle) if cycle.snapshot.nominated else cycle.filter
        )
        for i in range(len(all_nodes)):
            node = all_nodes[(start + i) % len(all_nodes)]
            processed += 1
            status = filter_node(node)
            if status is None:
                feasible.append(node)
                if len(feasible) >= to_find:
                    break
            else:
                decision.statuses[node.name] = status
    snapshot.next_start_index = (start + processed) % len(all_nodes)
    decision.feasible = len(feasible)
    if feasible:
        if len(feasible) == 1:
            decision.node = feasible[0].name
        else:
            decision.node = select_host(feasible, cycle.scores(feasible), rng).name
        return decision
    if key is not None and key[1] is not None:
        snapshot.remember_unfeasible(key, dict(decision.statuses))
        return _unfeasible(decision, cycle, profile, budgets, len(all_nodes), key)
    return _unfeasible(decision, cycle, profile, budgets, len(all_nodes))


def _feasible_at_once(
    cycle: Cycle, all_nodes: Sequence[NodeInfo], start: int, to_find: int
) -> tuple[list[NodeInfo], int] | None:
    """The pass of `schedule_one` over all nodes at once, for a pod that only the node-only filters
    and NodeResourcesFit can reject (`Cycle.vector_shape`) and with no pod nominated anywhere: the
    feasible nodes it finds from `start` on, in its order, and how many nodes it visits to find them
    (the whole list when it finds fewer than `to_find`). The same nodes a pass filtering one node at a
    time finds: the node-only verdicts are the cycle's (kept per shape and node), the resource fit
    the same comparisons over the snapshot's `NodeArrays`. None when the pod is not such a pod or no
    node is feasible (the node-by-node pass then gives the statuses a failure needs)."""
    shape = cycle.vector_shape()
    if shape is None:
        return None
    snapshot = cycle.snapshot
    table = snapshot.node_arrays()
    size = table.size
    fits = table.pods[:size] < table.allowed_pods[:size]
    for name, want in cycle.checked_requests:
        j = table.columns.get(name)
        if j is None:
            return None  # no node has it, or has it requested
        fits &= table.allocatable[:size, j] >= table.requested[:size, j] + want
    fits &= snapshot.static_mask(table, shape, cycle.passes_static)[:size]
    listed = fits[table.positions]  # in the node list's order
    rotated = np.concatenate((listed[start:], listed[:start])) if start else listed
    positions = np.flatnonzero(rotated)
    if not len(positions):
        return None
    if len(positions) >= to_find:
        positions = positions[:to_find]
        processed = int(positions[-1]) + 1
    else:
        processed = len(all_nodes)
    count = len(all_nodes)
    return [all_nodes[(start + k) % count] for k in positions.tolist()], processed


def _unfeasible(
    decision: Decision,
    cycle: Cycle,
    profile: Profile,
    budgets: Sequence[preemption.Budget],
    num_all_nodes: int,
    key: Hashable | None = None,
) -> Decision:
    """PostFilter and the message, for a pod no node fits.

    `key`: the pass's statuses are the snapshot's kept ones for this key (`remember_unfeasible`).
    A pod like the last one that fit nowhere, which preemption could not help either, gets the same
    message while the snapshot is the same and so are the pod's priority, its preemption policy and
    its nomination: preemption reads nothing else to find that no node has victims (the nodes'
    pods, their priorities and whether they terminate all move the snapshot's generation; nothing
    is kept while any pod is nominated), and the message is made of the statuses and preemption's
    own. The budgets only order the victims of a node that has some.
    """
    pod = cycle.pod
    inputs = (profile.preemption, pod.priority, pod.preempt_never, pod.nominated_node)
    if key is not None:
        message = cycle.snapshot.unfeasible_message(key, inputs)
        if message is not None:
            decision.message = message
            return decision
    post_filter = ""
    if profile.preemption:
        outcome = preemption.preempt(cycle, decision.statuses, budgets, num_all_nodes)
        decision.nominated_node, decision.victims = outcome.node, outcome.victims
        post_filter = outcome.message
    decision.message = msg.no_nodes_available(num_all_nodes, decision.statuses.values(), post_filter)
    if key is not None and not decision.nominated_node:
        cycle.snapshot.remember_unfeasible_message(key, inputs, decision.message)
    return decision


def assume(snapshot: ClusterSnapshot, decision: Decision) -> PodInfo:
    """Account a successful decision in the snapshot (what the scheduler cache's assume does)."""
    if not decision.node:
        raise ValueError("cannot assume a pod that was not scheduled")
    bound = pod_info(
        {**decision.pod.obj, "spec": {**(decision.pod.obj.get("spec") or {}), "nodeName": decision.node}},
        priority=decision.pod.priority,
        default_spread_selector=decision.pod.default_spread_selector,
    )
    snapshot.add_pod(bound)
    return bound


def schedule_all(
    pods: Iterable[dict[str, Any]],
    snapshot: ClusterSnapshot,
    *,
    profile: Profile | None = None,
    rng: random.Random | None = None,
) -> list[Decision]:
    """Schedule pods one after another on a snapshot (a what-if run without preemption side effects)."""
    rng = rng or random.Random(0)
    infos = sorted((pod_info(p) for p in pods), key=lambda p: -p.priority)
    out = []
    for info in infos:
        decision = schedule_one(info, snapshot, profile=profile, rng=rng)
        if decision.scheduled:
            assume(snapshot, decision)
        out.append(decision)
    return out


class PodInfos:
    """`pod_info` of pod bodies that are never changed (stored versions, a scale-down plan's pods),
    compiled once per object: the cluster-autoscaler asks `fits` for the same pods on many nodes.
    Each object is kept with its answer, so its identity cannot be reused; at `limit` entries the
    memory starts over."""

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self._by_id: dict[int, tuple[Mapping[str, Any], PodInfo]] = {}

    def __call__(self, pod: Mapping[str, Any]) -> PodInfo:
        kept = self._by_id.get(id(pod))
        if kept is not None and kept[0] is pod:
            return kept[1]
        if len(self._by_id) >= self.limit:
            self._by_id.clear()
        info = pod_info(dict(pod))
        self._by_id[id(pod)] = (pod, info)
        return info


def _compiled(pod: Mapping[str, Any]) -> PodInfo:
    return pod_info(dict(pod))


def fits(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    pods_on_node: Iterable[Mapping[str, Any]] = (),
    infos: Callable[[Mapping[str, Any]], PodInfo] = _compiled,
) -> list[str]:
    """Whether `pod` would pass every filter on `node` holding `pods_on_node`: [] if so, else the reasons.

    `infos` compiles a pod body (`PodInfos` to compile each unchanged body once). The pods on the
    node are placed there by their compiled form's node name (all that binding changes of it)."""
    name = str((node.get("metadata") or {}).get("name") or "template")
    snapshot = ClusterSnapshot()
    snapshot.set_node({**node, "metadata": {**(node.get("metadata") or {}), "name": name}})
    for other in pods_on_node:
        snapshot.add_pod(dataclasses.replace(infos(other), node_name=name))
    info = infos(pod)
    status = Cycle(info, snapshot).filter(snapshot.nodes[name])
    return [] if status is None else list(status.reasons)
