"""DefaultPreemption (the PostFilter plugin): which lower-priority pods to evict, and where.

Pure: works on a `Cycle` and the PodDisruptionBudgets it is given. The model carries out the
result (nominate the preemptor, delete the victims).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shipshape.emulator.scheduler import messages as msg
from shipshape.emulator.scheduler.messages import Code, Status
from shipshape.emulator.scheduler.plugins import Cycle
from shipshape.emulator.scheduler.snapshot import NodeInfo, PodInfo
from shipshape.kube import labels as labelsel
from shipshape.kube.labels import Selector

_PRIORITY_OFFSET = 2**31  # upstream adds MaxInt32+1 so that negative priorities sum sensibly


@dataclass(frozen=True, slots=True)
class Budget:
    """What preemption needs of a PodDisruptionBudget."""

    namespace: str
    selector: Selector
    disruptions_allowed: int
    disrupted: frozenset[str] = frozenset()  # pod names already being disrupted

    @classmethod
    def of(cls, pdb: Mapping[str, Any]) -> Budget:
        md = pdb.get("metadata") or {}
        status = pdb.get("status") or {}
        body = (pdb.get("spec") or {}).get("selector")
        try:
            selector = labelsel.from_label_selector(body)
        except labelsel.SelectorError:
            selector = labelsel.NOTHING
        if body is not None and not body.get("matchLabels") and not body.get("matchExpressions"):
            selector = labelsel.NOTHING  # an empty PDB selector selects nothing for preemption
        return cls(
            namespace=str(md.get("namespace") or "default"),
            selector=selector,
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
            disrupted=frozenset((status.get("disruptedPods") or {}).keys()),
        )


@dataclass(slots=True)
class Candidate:
    node: NodeInfo
    victims: list[PodInfo]
    pdb_violations: int


@dataclass(slots=True)
class Outcome:
    """Either a node to nominate with its victims, or the message saying why preemption cannot help."""

    node: str = ""
    victims: list[PodInfo] = field(default_factory=list)
    message: str = ""


def eligible(cycle: Cycle, nominated_status: Status | None) -> str:
    """Empty when the pod may preempt; else upstream's reason why not."""
    pod = cycle.pod
    if pod.preempt_never:
        return msg.NOT_ELIGIBLE_NEVER
    if pod.nominated_node and (nominated_status is None or nominated_status.code != Code.UNRESOLVABLE):
        node = cycle.snapshot.nodes.get(pod.nominated_node)
        if node is not None and any(p.terminating and p.priority < pod.priority for p in node.pods.values()):
            return msg.NOT_ELIGIBLE_TERMINATING
    return ""


def _violating(pods: Sequence[PodInfo], budgets: Sequence[Budget]) -> tuple[list[PodInfo], list[PodInfo]]:
    """Split pods into those whose eviction would violate a PDB and those whose would not."""
    allowed = [b.disruptions_allowed for b in budgets]
    violating: list[PodInfo] = []
    fine: list[PodInfo] = []
    for pod in pods:
        violates = False
        for i, budget in enumerate(budgets):
            if budget.namespace != pod.namespace or not budget.selector.matches(pod.labels):
                continue
            if pod.key[1] in budget.disrupted:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                violates = True
        (violating if violates else fine).append(pod)
    return violating, fine


def _more_important_first(pods: Iterable[PodInfo]) -> list[PodInfo]:
    return sorted(pods, key=lambda p: (-p.priority, p.start_time))


def select_victims(
    cycle: Cycle, node: NodeInfo, budgets: Sequence[Budget]
) -> tuple[Candidate | None, Status]:
    """Upstream `SelectVictimsOnNode`: remove every lower-priority pod, then reprieve as many as fit."""
    pod = cycle.pod
    potential = [p for p in node.pods.values() if p.priority < pod.priority and not p.terminating]
    if not potential:
        return None, Status.unresolvable("DefaultPreemption", msg.NO_VICTIMS)
    nominated = [
        p
        for p in cycle.snapshot.nominated.get(node.name, {}).values()
        if p.key != pod.key and p.priority >= pod.priority
    ]
    status = cycle.filter(node, removed=potential, added=nominated)
    if status is not None:
        return None, status
    ordered = _more_important_first(potential)
    violating, fine = _violating(ordered, budgets)
    removed = list(potential)
    victims: list[PodInfo] = []
    violations = 0
    for group, counts in ((violating, True), (fine, False)):
        for candidate in group:
            trial = [p for p in removed if p is not candidate]
            if cycle.filter(node, removed=trial, added=nominated) is None:
                removed = trial  # reprieved: it stays
            else:
                victims.append(candidate)
                violations += 1 if counts else 0
    if not victims:
        return None, Status.unresolvable("DefaultPreemption", msg.NO_VICTIMS)
    return Candidate(node, victims, violations), Status.unschedulable("DefaultPreemption")


def _pick(candidates: Sequence[Candidate]) -> Candidate:
    """Upstream `pickOneNodeForPreemption`: fewest PDB violations, then the lowest highest-priority
    victim, the smallest priority sum, the fewest victims, the latest start of the most important
    victims, then the first."""

    def key(c: Candidate) -> tuple[int, int, int, int, float]:
        top = max(v.priority for v in c.victims)
        earliest_top = min(v.start_time for v in c.victims if v.priority == top)
        return (
            c.pdb_violations,
            top,
            sum(v.priority + _PRIORITY_OFFSET for v in c.victims),
            len(c.victims),
            -earliest_top,
        )

    return min(candidates, key=key)


def preempt(
    cycle: Cycle, statuses: Mapping[str, Status], budgets: Sequence[Budget], num_all_nodes: int
) -> Outcome:
    """Find the node where evicting lower-priority pods lets the pod fit, as DefaultPreemption does."""
    reason = eligible(cycle, statuses.get(cycle.pod.nominated_node))
    if reason:
        return Outcome(message="preemption: " + reason)
    candidates: list[Candidate] = []
    node_statuses: dict[str, Status] = {}
    for node in cycle.all_nodes:
        status = statuses.get(node.name)
        if status is None or status.code == Code.UNRESOLVABLE:
            continue  # preemption cannot help there
        candidate, verdict = select_victims(cycle, node, budgets)
        if candidate is not None:
            candidates.append(candidate)
        else:
            node_statuses[node.name] = verdict
    if not candidates:
        names = [n.name for n in cycle.all_nodes]
        return Outcome(message=msg.preemption_message(num_all_nodes, node_statuses, names))
    best = _pick(candidates)
    return Outcome(node=best.node.name, victims=best.victims)
