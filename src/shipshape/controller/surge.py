"""The response to termination notices (pure): the plan, and what the responder writes on workloads.

- `plan_interruptions`: one plan for every notice at hand — the pools and zones reclaimed, the nodes
  no replacement may land on, and per workload with doomed pods how to keep it available:
  - a single-replica Deployment in `surge` mode: a rollout restart that surges (`restart_patch`);
  - a multi-replica Deployment: a surge (`surge_start_patch`: `spec.replicas` grows by the doomed pods,
    whose deletion cost drops to `DOOMED_COST`; `surge_end_patch` gives the replicas back once the
    replacements are Ready, `surge_done`);
  - a StatefulSet: its doomed pods evicted one at a time (`next_replacement`);
- the notes written on a Deployment (`SURGE_NOTE`, `RESTART_NOTE`) say what was done, so that a
  restarted controller neither repeats a restart nor surges twice, and other loops leave a Deployment
  being surged alone (`surging`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shipshape.contracts.annotations import RESTART_NOTE, SURGE_NOTE, RestartNote, SurgeNote
from shipshape.controller.availability import deployment_max_unavailable
from shipshape.controller.notices import Notice, reclaimed_scope
from shipshape.controller.placement import Pool
from shipshape.controller.policy import SingleReplicaMode, WorkloadKind
from shipshape.controller.state import PodState, WorkloadState, node_pool
from shipshape.kube import capacity as kube_capacity
from shipshape.kube.clock import rfc3339
from shipshape.kube.wellknown import RESTARTED_AT

Obj = dict[str, Any]

# Lowest pod-deletion-cost: the ReplicaSet removes doomed pods first when the surge ends.
DOOMED_COST = "-1000000"
# A surge whose deadline passed this long ago ends whatever the pods look like.
SURGE_GRACE_SECONDS = 300.0


def restart_patch(deployment: Mapping[str, Any], nodes: Sequence[str], stamp: float) -> Obj:
    """A rollout restart that surges: maxSurge 1 / maxUnavailable 0 unless the strategy already surges.

    `stamp` must be a function of what caused the restart (the notice), not of the time the patch is
    sent: a patch whose answer was lost (API server unavailable) and is sent again then changes
    nothing, instead of restarting the pods a second time.
    """
    patch: Obj = {
        "metadata": {"annotations": {RESTART_NOTE: RestartNote(nodes=tuple(sorted(nodes)), at=stamp).dump()}},
        "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: rfc3339(stamp)}}}},
    }
    if deployment_max_unavailable(deployment) != 0:
        patch["spec"]["strategy"] = {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        }
    return patch


def surge_start_patch(replicas: int, note: SurgeNote) -> Obj:
    return {"metadata": {"annotations": {SURGE_NOTE: note.dump()}}, "spec": {"replicas": replicas}}


def surge_end_patch(replicas: int, note: SurgeNote) -> Obj:
    """Replicas back; the note kept (done) until the doomed pods are gone."""
    return {
        "metadata": {"annotations": {SURGE_NOTE: note.ended().dump()}},
        "spec": {"replicas": max(0, replicas)},
    }


def surging(deployment: Mapping[str, Any]) -> bool:
    """A surge is under way (other loops leave the Deployment alone meanwhile)."""
    note = SurgeNote.read(deployment)
    return note is not None and note.active


def surge_done(state_pods: Sequence[Any], note: SurgeNote, replicas: int, now: float) -> bool:
    """The surge can end: the replacements are Ready, the doomed pods are gone, or it is long overdue."""
    doomed = set(note.pods)
    doomed_active = [pod for pod in state_pods if pod.name in doomed]
    others_ready = sum(1 for pod in state_pods if pod.ready and pod.name not in doomed)
    base = replicas - note.surge
    return not doomed_active or others_ready >= base or now > note.deadline + SURGE_GRACE_SECONDS


# --- interruptions --------------------------------------------------------------------------------


class ActionKind(StrEnum):
    SURGE_RESTART = "surge-restart"  # single replica: start the replacement first (rollout restart)
    SURGE = "surge"  # bring up replacements for the doomed pods before the node goes
    # Cannot surge (a StatefulSet): evict the doomed pods one at a time, each once the previous
    # replacement is Ready, so the replacements start before the nodes go and the floor holds.
    REPLACE = "replace"
    RESCHEDULE = "reschedule"  # a lone on-demand-mode pod (or StatefulSet pod): only steer the new pods


@dataclass(frozen=True, slots=True)
class WorkloadAction:
    workload: str
    kind: ActionKind
    doomed_pods: tuple[str, ...]
    replacements: int
    ready_now: int
    ready_after_loss: int
    floor: int
    deadline: float
    cpu_millis: int
    memory_bytes: int

    @property
    def below_floor_without_action(self) -> bool:
        return self.ready_after_loss < self.floor or self.ready_after_loss == 0


@dataclass(frozen=True, slots=True)
class InterruptionPlan:
    doomed_nodes: frozenset[str]
    reclaimed_pools: frozenset[Pool]
    reclaimed_zones: frozenset[str]
    # Every spot node no replacement may land on: all nodes of the reclaimed pools and zones.
    avoid_nodes: frozenset[str]
    actions: tuple[WorkloadAction, ...]
    # The earliest deadline of each noticed node.
    deadlines: Mapping[str, float] = field(default_factory=dict)


def plan_interruptions(
    notices: Sequence[Notice],
    nodes: Mapping[str, Mapping[str, Any]],
    workloads: Sequence[WorkloadState],
    conventions: kube_capacity.Conventions = kube_capacity.DEFAULT,
    pool_nodes: Mapping[Pool, Iterable[str]] | None = None,
) -> InterruptionPlan:
    """One plan for every notice at hand: what to avoid, and per workload how to keep it available.

    `pool_nodes`: the names of each spot pool's nodes among `nodes`, where the caller keeps them
    (`ClusterState.pool_nodes`), read instead of every node's labels for the nodes to avoid."""
    if not notices:
        return InterruptionPlan(frozenset(), frozenset(), frozenset(), frozenset(), ())
    deadlines: dict[str, float] = {}
    for notice in notices:
        deadlines[notice.node] = min(deadlines.get(notice.node, math.inf), notice.deadline)
    pools, zones = reclaimed_scope(notices, nodes, conventions)
    if pool_nodes is None:
        avoid = {
            name
            for name, node in nodes.items()
            if (pool := node_pool(node, conventions)) is not None and (pool in pools or pool.zone in zones)
        }
    else:
        avoid = {
            name
            for pool, names in pool_nodes.items()
            if pool in pools or pool.zone in zones
            for name in names
        }
    avoid |= set(deadlines)
    actions: list[WorkloadAction] = []
    for state in workloads:
        doomed = [pod for pod in state.pods if pod.node in deadlines]
        if not doomed:
            continue
        ready_after = state.ready - sum(1 for pod in doomed if pod.ready)
        if state.kind is WorkloadKind.DEPLOYMENT and state.replicas == 1:
            kind = (
                ActionKind.SURGE_RESTART
                if state.policy.single_replica is SingleReplicaMode.SURGE
                else ActionKind.RESCHEDULE
            )
        elif state.kind is WorkloadKind.DEPLOYMENT:
            kind = ActionKind.SURGE
        elif state.replicas > 1:
            kind = ActionKind.REPLACE
        else:
            kind = ActionKind.RESCHEDULE
        actions.append(
            WorkloadAction(
                workload=state.key,
                kind=kind,
                doomed_pods=tuple(pod.name for pod in doomed),
                replacements=len(doomed) if kind is not ActionKind.RESCHEDULE else 0,
                ready_now=state.ready,
                ready_after_loss=ready_after,
                floor=state.floor,
                deadline=min(deadlines[pod.node] for pod in doomed if pod.node is not None),
                cpu_millis=sum(pod.cpu_millis for pod in doomed),
                memory_bytes=sum(pod.memory_bytes for pod in doomed),
            )
        )
    actions.sort(key=lambda a: (a.deadline, not a.below_floor_without_action, a.workload))
    return InterruptionPlan(
        doomed_nodes=frozenset(deadlines),
        reclaimed_pools=pools,
        reclaimed_zones=zones,
        avoid_nodes=frozenset(avoid),
        actions=tuple(actions),
        deadlines=deadlines,
    )


def next_replacement(state: WorkloadState, deadlines: Mapping[str, float]) -> str | None:
    """The doomed pod of a workload that cannot surge to evict now, or None (wait).

    One at a time: only while every other pod exists and is Ready (the previous replacement is up),
    and only if evicting a Ready pod leaves at least the floor ready. Earliest deadline first, then
    pods not Ready (evicting those costs nothing), then the highest ordinal.
    """
    doomed = [pod for pod in state.pods if pod.node is not None and pod.node in deadlines]
    if not doomed or len(state.pods) < state.replicas:
        return None
    doomed_names = {pod.name for pod in doomed}
    if any(not pod.ready for pod in state.pods if pod.name not in doomed_names):
        return None
    victim = min(
        doomed,
        key=lambda p: (deadlines.get(p.node or "", math.inf), p.ready, -(p.ordinal or 0), p.name),
    )
    if victim.ready and state.ready - 1 < state.floor:
        return None
    return victim.name


def doomed_nodes(state: WorkloadState, action: WorkloadAction) -> frozenset[str]:
    """The nodes under an action's doomed pods."""
    doomed = set(action.doomed_pods)
    return frozenset(pod.node for pod in state.pods if pod.name in doomed and pod.node)


def action_done(action: WorkloadAction, deployment: Mapping[str, Any], nodes: frozenset[str]) -> bool:
    """The Deployment's notes already answer a restart or a surge for these doomed nodes / pods."""
    if action.kind is ActionKind.SURGE_RESTART:
        restarted = RestartNote.read(deployment)
        return nodes <= set(restarted.nodes if restarted is not None else ())
    surge = SurgeNote.read(deployment)
    return surge is not None and set(action.doomed_pods) <= set(surge.pods)


def extended_surge(
    note: SurgeNote | None, action: WorkloadAction, nodes: frozenset[str], now: float
) -> tuple[list[str], SurgeNote]:
    """The doomed pods a surge has not answered yet, and the note once it answers them too (a later
    notice for the same workload, a zone after a pool, extends an ongoing surge)."""
    recorded = set(note.pods) if note is not None else set()
    new = [name for name in action.doomed_pods if name not in recorded]
    ongoing = note if note is not None and note.active else None
    updated = SurgeNote(
        surge=(ongoing.surge if ongoing is not None else 0) + len(new),
        pods=tuple(sorted(recorded | set(new))),
        nodes=tuple(sorted(set(note.nodes if note is not None else ()) | nodes)),
        since=ongoing.since if ongoing is not None else now,
        deadline=min(action.deadline, ongoing.deadline) if ongoing is not None else action.deadline,
    )
    return new, updated


def restarted_elsewhere(pods: Sequence[PodState], nodes: frozenset[str]) -> bool:
    """A restart's replacement is Ready: a Ready pod off the nodes it was restarted for."""
    return any(pod.ready and pod.node not in nodes for pod in pods)


# A restart whose replacement is not Ready after this long is no longer waited for.
RESTART_WATCH_SECONDS = 3600.0


class RestartWatch:
    """Restarts waiting for their replacement, for the notice-to-ready time: workload key -> when the
    restart was sent and the nodes it moves off."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[float, frozenset[str]]] = {}

    def add(self, key: str, since: float, nodes: frozenset[str]) -> None:
        self._waiting[key] = (since, nodes)

    def __len__(self) -> int:
        return len(self._waiting)

    def ready(self, states: Mapping[str, WorkloadState], now: float) -> list[float]:
        """The seconds each restart took whose replacement is Ready now (those are no longer watched,
        nor are workloads gone or restarts older than `RESTART_WATCH_SECONDS`)."""
        took: list[float] = []
        for key, (since, nodes) in list(self._waiting.items()):
            state = states.get(key)
            if state is None or now - since > RESTART_WATCH_SECONDS:
                del self._waiting[key]
            elif restarted_elsewhere(state.pods, nodes):
                took.append(now - since)
                del self._waiting[key]
        return took
