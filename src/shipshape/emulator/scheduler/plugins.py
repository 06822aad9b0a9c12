"""kube-scheduler's default filter and score plugins, for one pod over a `ClusterSnapshot`.

A `Cycle` is one pod's scheduling cycle: what the PreFilter/PreScore extension points compute
once (topology spread counts, inter-pod affinity counts), then `filter(node)` and `scores(nodes)`.
Filters run in upstream order and stop at the first plugin that rejects a node, so the reasons
and their counts in "0/N nodes are available" read as upstream's.

`filter` takes pods to pretend removed from / added to the node, which is how preemption
evaluates victims and how nominated pods keep the room they were promised.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import orjson

from shipshape.emulator.scheduler import messages as msg
from shipshape.emulator.scheduler.messages import Status
from shipshape.emulator.scheduler.snapshot import (
    AffinityTerm,
    ClusterSnapshot,
    NodeArrays,
    NodeInfo,
    PodInfo,
    SpreadConstraint,
    TaintVerdict,
    affinity_matches,
)
from shipshape.kube import scheduling
from shipshape.kube.labels import Selector

MAX_NODE_SCORE = 100
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_FIXED_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_MB = 1024 * 1024
_IMAGE_MIN_THRESHOLD = 23 * _MB
_IMAGE_MAX_CONTAINER_THRESHOLD = 1000 * _MB

Scoring = Literal["LeastAllocated", "MostAllocated"]

DEFAULT_WEIGHTS: Mapping[str, int] = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodeResourcesFit": 1,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}


@dataclass(frozen=True, slots=True)
class Profile:
    """The scheduling profile: default plugins with upstream weights, and the scoring strategy."""

    scoring: Scoring = "LeastAllocated"
    weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    # 0 = upstream's adaptive percentage (50 % - nodes/125, at least 5 %, at least 100 nodes).
    percentage_of_nodes_to_score: int = 0
    hard_pod_affinity_weight: int = 1
    preemption: bool = True


def _counts_for(pod: PodInfo, other: PodInfo, selector: Selector) -> bool:
    return other.namespace == pod.namespace and not other.terminating and selector.matches(other.labels)


def _untolerated(taints: Iterable[Mapping[str, object]], tolerations: Sequence[Mapping[str, object]]) -> bool:
    return any(
        t.get("effect") in scheduling.DO_NOT_SCHEDULE_EFFECTS and not scheduling.tolerates(tolerations, t)
        for t in taints
    )


# Fewer feasible nodes than this are scored one by one (building their rows costs more than it saves).
_ROWS_AT_LEAST = 16

_NODE_UNSCHEDULABLE = Status.unresolvable("NodeUnschedulable", msg.NODE_UNSCHEDULABLE)
_NODE_NAME = Status.unresolvable("NodeName", msg.NODE_NAME)
_NODE_AFFINITY = Status.unresolvable("NodeAffinity", msg.NODE_AFFINITY)


def _tolerations_text(pod: PodInfo) -> bytes | None:
    """The pod's tolerations as text to key answers by; None when they cannot be written as JSON."""
    try:
        return orjson.dumps(pod.tolerations)
    except TypeError:
        return None


def _static_verdicts(
    pod: PodInfo, snapshot: ClusterSnapshot, names_only: frozenset[str] | None, tolerations: bytes | None
) -> tuple[dict[str, tuple[object, Status | None]], dict[str, TaintVerdict]]:
    """The snapshot's remembered node-only verdicts for pods shaped as this one (same tolerations,
    nodeName and required node affinity), and its taint verdicts for pods with the same tolerations;
    fresh dicts when the tolerations cannot be keyed. A pod whose node affinity names its nodes (a
    DaemonSet's) is a shape of its own: its verdicts are not kept whole, only the taint verdicts."""
    if tolerations is None:
        return {}, {}
    taints = snapshot.taint_verdicts(tolerations)
    if names_only is not None:
        return {}, taints
    return snapshot.static_verdicts((tolerations, pod.node_name, pod.node_affinity)), taints


def _names_only(affinity: scheduling.RequiredNodeAffinity) -> frozenset[str] | None:
    """The node names a required node affinity of `metadata.name In (name)` terms alone admits (what
    the DaemonSet controller sets on its pods); None for any other affinity. Such a term matches a
    node exactly when the node has that name."""
    if affinity.node_selector or not affinity.terms:
        return None
    names = set()
    for term in affinity.terms:
        if not term.valid or term.labels or len(term.names) != 1:
            return None
        (requirement,) = term.names
        if requirement.operator != "In" or len(requirement.values) != 1:
            return None
        names.add(requirement.values[0])
    return frozenset(names)


class Cycle:
    """One pod's scheduling cycle over a snapshot."""

    def __init__(self, pod: PodInfo, snapshot: ClusterSnapshot, profile: Profile | None = None) -> None:
        self.pod = pod
        self.snapshot = snapshot
        self.profile = profile or Profile()
        self.all_nodes = snapshot.node_list()
        self._affinity_answers = snapshot.affinity_answers(pod.node_affinity)
        self._names_only = self.names_only = _names_only(pod.node_affinity)
        self._tolerations = _tolerations_text(pod)
        self._static_verdicts, self._taint_verdicts = _static_verdicts(
            pod, snapshot, self._names_only, self._tolerations
        )
        self.requests_anything = any(pod.requests.get(r) for r in pod.requests)
        # Only what the pod asks for is checked (a node over-committed on memory still takes a
        # pod that requests none).
        self.fixed_requests = [
            (name, pod.requests[name]) for name in _FIXED_RESOURCES if pod.requests.get(name)
        ]
        self.scalar_requests = sorted(
            (name, amount) for name, amount in pod.requests.items() if name not in _FIXED_RESOURCES and amount
        )
        self._requests = [*self.fixed_requests, *self.scalar_requests]
        self._hard_spread = tuple(c for c in pod.spread if c.hard)
        self._spread_counts: list[dict[str, int]] = []
        self._spread_min: list[int] = []
        if self._hard_spread:
            self._prefilter_spread()
        self._affinity_counts: Counter[tuple[str, str]] = Counter()
        self._anti_counts: Counter[tuple[str, str]] = Counter()
        self._existing_anti: Counter[tuple[str, str]] = Counter()
        self._check_interpod = bool(
            pod.required_affinity or pod.required_anti_affinity or snapshot.with_required_anti_affinity
        )
        if self._check_interpod:
            self._prefilter_interpod()

    def filter_key(self) -> Hashable | None:
        """What `filter` reads of the pod, as a value: pods with equal keys get equal verdicts on a
        snapshot that has not changed. None when the pod's verdicts are not to be shared (inter-pod
        affinity in play, which reads namespaces' labels too; tolerations that cannot be keyed)."""
        pod = self.pod
        if self._check_interpod or self._tolerations is None:
            return None
        return (
            self._tolerations,
            pod.node_name,
            pod.node_affinity,
            tuple(self._requests),
            self._hard_spread,
            (pod.namespace, frozenset(pod.labels.items())) if self._hard_spread else None,
        )

    def _affinity_matches(self, node: NodeInfo) -> bool:
        return affinity_matches(self.pod.node_affinity, self._affinity_answers, node)

    # ---- PreFilter ------------------------------------------------------------------------
    def _spread_eligible(self, c: SpreadConstraint, node: NodeInfo) -> bool:
        if c.honor_node_affinity and not self._affinity_matches(node):
            return False
        return not (c.honor_node_taints and _untolerated(node.taints, self.pod.tolerations))

    def _prefilter_spread(self) -> None:
        keys = [c.topology_key for c in self._hard_spread]
        for c in self._hard_spread:
            counts: dict[str, int] = {}
            eligible: set[str] = set()
            for node in self.all_nodes:
                if all(k in node.labels for k in keys) and self._spread_eligible(c, node):
                    eligible.add(node.name)
                    counts.setdefault(node.labels[c.topology_key], 0)
            for node_name, number in self.snapshot.matching_per_node(self.pod.namespace, c.selector).items():
                if node_name in eligible:
                    counts[self.snapshot.nodes[node_name].labels[c.topology_key]] += number
            self._spread_counts.append(counts)
            self._spread_min.append(min(counts.values()) if counts else 0)

    def _term_pods(self, term: AffinityTerm) -> Iterable[PodInfo]:
        namespace = (
            next(iter(term.namespaces)) if len(term.namespaces) == 1 and not term.namespace_selector else None
        )
        for other in self.snapshot.matching_pods(namespace, term.selector):
            if term.selects(other, self.snapshot.namespace_labels):
                yield other

    def _prefilter_interpod(self) -> None:
        pod, nodes = self.pod, self.snapshot.nodes
        ns_labels = self.snapshot.namespace_labels
        for existing in self.snapshot.with_required_anti_affinity.values():
            node = nodes.get(existing.node_name)
            if node is None or node.obj is None:
                continue
            for term in existing.required_anti_affinity:
                if term.topology_key in node.labels and term.selects(pod, ns_labels):
                    self._existing_anti[(term.topology_key, node.labels[term.topology_key])] += 1
        if pod.required_affinity:
            first, *rest = pod.required_affinity
            for other in self._term_pods(first):
                if not all(t.selects(other, ns_labels) for t in rest):
                    continue
                node = nodes.get(other.node_name)
                if node is None or node.obj is None:
                    continue
                for term in pod.required_affinity:
                    if term.topology_key in node.labels:
                        self._affinity_counts[(term.topology_key, node.labels[term.topology_key])] += 1
        for term in pod.required_anti_affinity:
            for other in self._term_pods(term):
                node = nodes.get(other.node_name)
                if node is not None and node.obj is not None and term.topology_key in node.labels:
                    self._anti_counts[(term.topology_key, node.labels[term.topology_key])] += 1

    # ---- Filter ---------------------------------------------------------------------------
    def filter(
        self, node: NodeInfo, removed: Sequence[PodInfo] = (), added: Sequence[PodInfo] = ()
    ) -> Status | None:
        """None when the pod fits the node; else the first rejecting plugin's status."""
        status = self.static_status(node)
        if status is not None:
            return status
        status = self._fit(node, removed, added)
        if status is not None:
            return status
        if self._hard_spread:
            status = self._spread_filter(node, removed, added)
            if status is not None:
                return status
        if self._check_interpod:
            return self._interpod_filter(node, removed, added)
        return None

    def static_status(self, node: NodeInfo) -> Status | None:
        """The node-only filters' verdict, remembered per node for pods of this shape while the node's
        static key stays the same."""
        if node.obj is None:
            return self._static_filter(node)
        seen = self._static_verdicts.get(node.name)
        if seen is not None and seen[0] is node.static_key:
            return seen[1]
        status = self._static_filter(node)
        self._static_verdicts[node.name] = (node.static_key, status)
        return status

    def passes_static(self, node: NodeInfo) -> bool:
        return self.static_status(node) is None

    def vector_shape(self) -> Hashable | None:
        """The key of the pod's node-only verdicts when every filter but those and the resource fit is
        a no-op for it, so that a pass can filter all nodes at once (`framework.schedule_one`); None
        otherwise (topology spread that must hold, inter-pod affinity in play, a DaemonSet's pod, or
        tolerations that cannot be keyed)."""
        if self._hard_spread or self._check_interpod or self._tolerations is None or self._names_only:
            return None
        return (self._tolerations, self.pod.node_name, self.pod.node_affinity)

    @property
    def checked_requests(self) -> list[tuple[str, int]]:
        """The non-zero requests NodeResourcesFit checks, in its order."""
        return self._requests

    def _static_filter(self, node: NodeInfo) -> Status | None:
        """The filters that depend on the node object and the pod's shape only, in upstream order:
        NodeUnschedulable, NodeName, TaintToleration, NodeAffinity."""
        pod = self.pod
        unschedulable, untolerated = self._kept_taint_filters(node)
        if unschedulable is not None:
            return unschedulable
        if pod.node_name and pod.node_name != node.name:
            return _NODE_NAME
        if untolerated is not None:
            return untolerated
        if self._names_only is not None:
            return None if node.name in self._names_only else _NODE_AFFINITY
        if not self._affinity_matches(node):
            return _NODE_AFFINITY
        return None

    def unnamed_status(self, node: NodeInfo) -> Status:
        """`filter`'s verdict on the node for a pod whose name-only node affinity does not name it."""
        unschedulable, untolerated = self._kept_taint_filters(node)
        if unschedulable is not None:
            return unschedulable
        if self.pod.node_name and self.pod.node_name != node.name:
            return _NODE_NAME
        return untolerated or _NODE_AFFINITY

    def _kept_taint_filters(self, node: NodeInfo) -> tuple[Status | None, Status | None]:
        """`_taint_filters`, remembered per node while its static key stays the same."""
        if node.obj is None:
            return self._taint_filters(node)
        seen = self._taint_verdicts.get(node.name)
        if seen is None or seen[0] is not node.static_key:
            seen = (node.static_key, *self._taint_filters(node))
            self._taint_verdicts[node.name] = seen
        return seen[1], seen[2]

    def unnamed_key(self) -> Hashable | None:
        """What `unnamed_status` reads of the pod; None when its tolerations cannot be keyed."""
        return None if self._tolerations is None else (self._tolerations, self.pod.node_name)

    def _taint_filters(self, node: NodeInfo) -> tuple[Status | None, Status | None]:
        """NodeUnschedulable's and TaintToleration's verdicts on the node (None: it passes)."""
        tolerations = self.pod.tolerations
        unschedulable = None
        if node.unschedulable and not scheduling.tolerates(tolerations, UNSCHEDULABLE_TAINT):
            unschedulable = _NODE_UNSCHEDULABLE
        for taint in node.taints:
            if taint.get("effect") in scheduling.DO_NOT_SCHEDULE_EFFECTS and not scheduling.tolerates(
                tolerations, taint
            ):
                return unschedulable, Status.unresolvable(
                    "TaintToleration",
                    msg.untolerated_taint(str(taint.get("key", "")), str(taint.get("value") or "")),
                )
        return unschedulable, None

    def _fit(self, node: NodeInfo, removed: Sequence[PodInfo], added: Sequence[PodInfo]) -> Status | None:
        if not removed and not added and len(node.pods) < node.allowed_pods:
            # The common case, answered without building reasons: it fits unless a request does not.
            allocatable, used = node.allocatable, node.requested
            for name, want in self._requests:
                if allocatable.get(name, 0) < want + used.get(name, 0):
                    break
            else:
                return None
        reasons: list[str] = []
        unresolvable = False
        pod_count = len(node.pods) - len(removed) + len(added)
        if pod_count + 1 > node.allowed_pods:
            reasons.append(msg.TOO_MANY_PODS)
        if self.requests_anything:
            allocatable = node.allocatable
            used = node.requested
            if removed or added:
                used = dict(used)
                for other, sign in [*((p, -1) for p in removed), *((p, 1) for p in added)]:
                    for name, amount in other.requests.items():
                        used[name] = used.get(name, 0) + sign * amount
            for name, want in self.fixed_requests:
                have = allocatable.get(name, 0)
                if have < want + used.get(name, 0):
                    reasons.append(msg.insufficient(name))
                    unresolvable = unresolvable or want > have
            for name, want in self.scalar_requests:
                have = allocatable.get(name, 0)
                if have < want + used.get(name, 0):
                    reasons.append(msg.insufficient(name))
                    unresolvable = unresolvable or want > have
        if not reasons:
            return None
        if unresolvable:
            return Status.unresolvable("NodeResourcesFit", *reasons)
        return Status.unschedulable("NodeResourcesFit", *reasons)

    def _spread_filter(
        self, node: NodeInfo, removed: Sequence[PodInfo], added: Sequence[PodInfo]
    ) -> Status | None:
        pod = self.pod
        for i, c in enumerate(self._hard_spread):
            value = node.labels.get(c.topology_key)
            if value is None:
                return Status.unresolvable("PodTopologySpread", msg.SPREAD_MISSING_LABEL)
            counts = self._spread_counts[i]
            match_num = counts.get(value, 0)
            min_match = self._spread_min[i]
            if (removed or added) and value in counts:
                delta = sum(1 for p in added if _counts_for(pod, p, c.selector)) - sum(
                    1 for p in removed if _counts_for(pod, p, c.selector)
                )
                if delta:
                    match_num += delta
                    min_match = min([n for v, n in counts.items() if v != value] + [match_num])
            if len(counts) < c.min_domains:
                min_match = 0
            self_match = 1 if c.selector.matches(pod.labels) else 0
            if match_num + self_match - min_match > c.max_skew:
                return Status.unschedulable("PodTopologySpread", msg.SPREAD_CONSTRAINTS)
        return None

    def _interpod_filter(
        self, node: NodeInfo, removed: Sequence[PodInfo], added: Sequence[PodInfo]
    ) -> Status | None:
        pod, ns_labels = self.pod, self.snapshot.namespace_labels
        changes = [*((p, -1) for p in removed), *((p, 1) for p in added)]
        if pod.required_affinity:
            exists = True
            for term in pod.required_affinity:
                value = node.labels.get(term.topology_key)
                if value is None:
                    return Status.unresolvable("InterPodAffinity", msg.AFFINITY_RULES)
                count = self._affinity_counts[(term.topology_key, value)]
                for other, sign in changes:
                    if all(t.selects(other, ns_labels) for t in pod.required_affinity):
                        count += sign
                if count <= 0:
                    exists = False
            if not exists and not (
                not self._affinity_counts and all(t.selects(pod, ns_labels) for t in pod.required_affinity)
            ):
                return Status.unresolvable("InterPodAffinity", msg.AFFINITY_RULES)
        for term in pod.required_anti_affinity:
            value = node.labels.get(term.topology_key)
            if value is None:
                continue
            count = self._anti_counts[(term.topology_key, value)]
            for other, sign in changes:
                if term.selects(other, ns_labels):
                    count += sign
            if count > 0:
                return Status.unschedulable("InterPodAffinity", msg.ANTI_AFFINITY_RULES)
        if self._existing_anti or changes:
            for key, value in node.labels.items():
                count = self._existing_anti.get((key, value), 0)
                for other, sign in changes:
                    count += sign * sum(
                        1
                        for t in other.required_anti_affinity
                        if t.topology_key == key and t.selects(pod, ns_labels)
                    )
                if count > 0:
                    return Status.unschedulable("InterPodAffinity", msg.EXISTING_ANTI_AFFINITY)
        return None

    # ---- Score ----------------------------------------------------------------------------
    def scores(self, nodes: Sequence[NodeInfo]) -> list[int]:
        """Weighted sum of the score plugins for each feasible node (same order as `nodes`)."""
        weights = self.profile.weights
        totals = [0] * len(nodes)
        fit, balanced = self._resource_scores(nodes)
        rows = self._rows(nodes)
        parts: list[tuple[str, list[int]]] = [
            ("NodeResourcesFit", fit),
            ("NodeResourcesBalancedAllocation", balanced),
            ("TaintToleration", self._taint_scores(nodes)),
            ("NodeAffinity", self._node_affinity_scores(nodes)),
            ("PodTopologySpread", self._spread_scores(nodes, rows)),
            ("InterPodAffinity", self._interpod_scores(nodes)),
            ("ImageLocality", self._image_scores(nodes)),
        ]
        for plugin, values in parts:
            weight = weights.get(plugin, 0)
            if weight:
                for i, v in enumerate(values):
                    totals[i] += weight * v
        return totals

    def _rows(self, nodes: Sequence[NodeInfo]) -> np.ndarray | None:
        """The nodes' rows in the snapshot's `NodeArrays` (the score plugins that read kept columns
        score them all at once); None when a node is not in it (not a listed node)."""
        if len(nodes) < _ROWS_AT_LEAST:
            return None
        table = self.snapshot.node_arrays()
        row_of, kept = table.row_of, table.rows
        rows = [row_of.get(n.name, -1) for n in nodes]
        if any(i < 0 or kept[i] is not n for i, n in zip(rows, nodes, strict=True)):
            return None
        return np.array(rows, dtype=np.intp)

    def _resource_scores(self, nodes: Sequence[NodeInfo]) -> tuple[list[int], list[int]]:
        """NodeResourcesFit's and NodeResourcesBalancedAllocation's scores, each node's remembered
        while what is requested on it and its allocatable stay the same."""
        pod = self.pod
        answers = self.snapshot.resource_answers(
            (
                self.profile.scoring,
                pod.non_zero_cpu,
                pod.non_zero_memory,
                pod.requests.get("cpu", 0),
                pod.requests.get("memory", 0),
            )
        )
        fit, balanced = [], []
        for node in nodes:
            seen = answers.get(node.name)
            if seen is None or seen[0] is not node.usage_key:
                seen = answers[node.name] = (
                    node.usage_key,
                    self._resource_score(node),
                    self._balanced_scores((node,))[0],
                )
            fit.append(seen[1])
            balanced.append(seen[2])
        return fit, balanced

    def _resource_score(self, node: NodeInfo) -> int:
        total = 0
        for capacity, requested in (
            (node.allocatable.get("cpu", 0), node.non_zero_cpu + self.pod.non_zero_cpu),
            (node.allocatable.get("memory", 0), node.non_zero_memory + self.pod.non_zero_memory),
        ):
            if capacity == 0:
                continue
            if self.profile.scoring == "MostAllocated":
                total += min(requested, capacity) * MAX_NODE_SCORE // capacity
            elif requested <= capacity:
                total += (capacity - requested) * MAX_NODE_SCORE // capacity
        return total // 2

    def _balanced_scores(self, nodes: Sequence[NodeInfo]) -> list[int]:
        cpu, memory = self.pod.requests.get("cpu", 0), self.pod.requests.get("memory", 0)
        if not cpu and not memory:
            return [0] * len(nodes)
        out = []
        for node in nodes:
            fractions = []
            for name, want in (("cpu", cpu), ("memory", memory)):
                capacity = node.allocatable.get(name, 0)
                if capacity:
                    fractions.append(min(1.0, (node.requested.get(name, 0) + want) / capacity))
            std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
            out.append(int((1 - std) * MAX_NODE_SCORE))
        return out

    def _taint_scores(self, nodes: Sequence[NodeInfo]) -> list[int]:
        tolerations = [
            t for t in self.pod.tolerations if (t.get("effect") or "PreferNoSchedule") == "PreferNoSchedule"
        ]
        raw = [
            sum(
                1
                for t in n.taints
                if t.get("effect") == "PreferNoSchedule" and not scheduling.tolerates(tolerations, t)
            )
            for n in nodes
        ]
        return _normalize(raw, reverse=True)

    def _node_affinity_scores(self, nodes: Sequence[NodeInfo]) -> list[int]:
        terms = self.pod.preferred_node_terms
        if not terms:
            return [0] * len(nodes)
        answers = self.snapshot.preferred_answers(tuple(terms))
        raw = []
        for n in nodes:
            seen = answers.get(n.name)
            if seen is None or seen[0] is not n.labels:
                seen = answers[n.name] = (n.labels, sum(w for w, t in terms if t.matches(n.labels, n.name)))
            raw.append(seen[1])
        return _normalize(raw, reverse=False)

    def _spread_scores(self, nodes: Sequence[NodeInfo], rows: np.ndarray | None = None) -> list[int]:
        pod = self.pod
        constraints: tuple[SpreadConstraint, ...]
        if pod.spread:
            constraints = tuple(c for c in pod.spread if not c.hard)
            require_all = True
        elif pod.default_spread_selector is not None:
            constraints = (
                SpreadConstraint(3, HOSTNAME, pod.default_spread_selector, hard=False),
                SpreadConstraint(5, ZONE, pod.default_spread_selector, hard=False),
            )
            require_all = False
        else:
            constraints = ()
        if not constraints:
            return [0] * len(nodes)
        if rows is not None and not any(c.honor_node_taints for c in constraints):
            return self._spread_scores_at_once(rows, constraints, require_all)
        keys = frozenset(c.topology_key for c in constraints)
        ignored = {n.name for n in nodes if not n.labels.keys() >= keys} if require_all else set[str]()
        domain_counts: list[dict[str, int]] = []
        per_node: list[Mapping[str, int]] = []
        weights: list[float] = []
        for c in constraints:
            counts: dict[str, int] = {}
            matching = self.snapshot.matching_per_node(pod.namespace, c.selector)
            per_node.append(matching)
            if c.topology_key != HOSTNAME:
                key = c.topology_key
                for n in nodes:
                    value = n.labels.get(key)
                    if value is not None and value not in counts and n.name not in ignored:
                        counts[value] = 0
                all_nodes, answers = self.snapshot.nodes, self._affinity_answers
                for node_name, number in matching.items():
                    node = all_nodes.get(node_name)
                    if node is None or node.obj is None:
                        continue
                    labels = node.labels
                    if require_all and not labels.keys() >= keys:
                        continue
                    value = labels.get(key)
                    if value not in counts:
                        continue
                    if c.honor_node_affinity:
                        # `_spread_eligible`, with the remembered node affinity answer read here.
                        seen = answers.get(node_name)
                        if not (
                            seen[1]
                            if seen is not None and seen[0] is labels
                            else self._affinity_matches(node)
                        ):
                            continue
                    if c.honor_node_taints and _untolerated(node.taints, pod.tolerations):
                        continue
                    counts[value] += number
                size = len(counts)
            else:
                size = len(nodes) - len(ignored)
            domain_counts.append(counts)
            weights.append(math.log(size + 2))
        plan = [
            (
                c.topology_key,
                per_node[i] if c.topology_key == HOSTNAME else None,
                domain_counts[i],
                weights[i],
                c.max_skew - 1,
            )
            for i, c in enumerate(constraints)
        ]
        raw: list[int] = []
        for n in nodes:
            if n.name in ignored:
                raw.append(-1)
                continue
            score = 0.0
            labels = n.labels
            for key, hosts, domains, weight, slack in plan:
                value = labels.get(key)
                if value is not None:
                    count = hosts.get(n.name, 0) if hosts is not None else domains.get(value, 0)
                    score += count * weight + slack
            raw.append(math.floor(score + 0.5))  # Go's math.Round: halves away from zero
        valid = [s for s in raw if s >= 0]
        if not valid:
            return [0] * len(nodes)
        lo, hi = min(valid), max(valid)
        out = []
        for s in raw:
            if s < 0:
                out.append(0)
            elif hi == 0:
                out.append(MAX_NODE_SCORE)
            else:
                out.append(MAX_NODE_SCORE * (hi + lo - s) // hi)
        return out

    def _affinity_column(self, table: NodeArrays) -> np.ndarray:
        """Which of the table's nodes the pod's required node affinity admits (kept per affinity)."""
        affinity, answers = self.pod.node_affinity, self._affinity_answers
        return self.snapshot.static_column(
            table, ("affinity", affinity), lambda n: affinity_matches(affinity, answers, n), np.bool_
        )

    def _spread_scores_at_once(
        self, rows: np.ndarray, constraints: tuple[SpreadConstraint, ...], require_all: bool
    ) -> list[int]:
        """`_spread_scores` of the nodes at `rows` of the snapshot's `NodeArrays`, from its kept columns
        (each node's matching pods, the codes of its topology values, which nodes carry every key and
        pass the pod's node affinity) instead of a walk over every node with matching pods; for
        constraints that ignore the nodes' taints (the default). The same arithmetic, in the same
        order, as the walk."""
        snapshot, pod = self.snapshot, self.pod
        table = snapshot.node_arrays()
        keys = frozenset(c.topology_key for c in constraints)
        if require_all:
            has_keys = snapshot.static_column(
                table, ("keys", keys), lambda n: n.labels.keys() >= keys, np.bool_
            )
            ignored = ~has_keys[rows]
        else:
            ignored = np.zeros(len(rows), dtype=np.bool_)
        kept = ~ignored
        score = np.zeros(len(rows), dtype=np.float64)
        for c in constraints:
            matching = snapshot.match_vector(table, pod.namespace, c.selector)
            codes, values = snapshot.label_codes(table, c.topology_key)
            chosen_codes = codes[rows]
            present = chosen_codes >= 0
            if c.topology_key == HOSTNAME:
                size = len(rows) - int(ignored.sum())
                count = matching[rows]
            else:
                domains = np.unique(chosen_codes[present & kept])
                size = len(domains)
                eligible = (codes >= 0) & table.live
                if require_all:
                    eligible &= has_keys
                if c.honor_node_affinity:
                    eligible &= self._affinity_column(table)
                sums = np.bincount(codes[eligible], weights=matching[eligible], minlength=len(values))
                count = sums[np.where(present, chosen_codes, 0)]
            weight = math.log(size + 2)
            score = np.where(present, score + (count * weight + (c.max_skew - 1)), score)
        raw = np.floor(score + 0.5).astype(np.int64)  # Go's math.Round: halves away from zero
        raw[ignored] = -1
        valid = raw[kept]
        if not len(valid):
            return [0] * len(rows)
        lo, hi = int(valid.min()), int(valid.max())
        if hi == 0:
            out = np.full(len(rows), MAX_NODE_SCORE, dtype=np.int64)
        else:
            out = MAX_NODE_SCORE * (hi + lo - raw) // hi
        out[ignored] = 0
        scores: list[int] = out.tolist()
        return scores

    def _interpod_scores(self, nodes: Sequence[NodeInfo]) -> list[int]:
        pod, ns_labels = self.pod, self.snapshot.namespace_labels
        topology: dict[str, Counter[str]] = {}

        def credit(other: PodInfo, key: str, amount: int) -> None:
            node = self.snapshot.nodes.get(other.node_name)
            if node is not None and node.obj is not None and key in node.labels:
                topology.setdefault(key, Counter())[node.labels[key]] += amount

        for term in pod.preferred_affinity:
            for other in self._term_pods(term):
                credit(other, term.topology_key, term.weight)
        for term in pod.preferred_anti_affinity:
            for other in self._term_pods(term):
                credit(other, term.topology_key, -term.weight)
        hard_weight = self.profile.hard_pod_affinity_weight
        for existing in self.snapshot.with_affinity.values():
            for term in existing.required_affinity:
                if hard_weight and term.selects(pod, ns_labels):
                    credit(existing, term.topology_key, hard_weight)
            for term in existing.preferred_affinity:
                if term.selects(pod, ns_labels):
                    credit(existing, term.topology_key, term.weight)
            for term in existing.preferred_anti_affinity:
                if term.selects(pod, ns_labels):
                    credit(existing, term.topology_key, -term.weight)
        if not topology:
            return [0] * len(nodes)
        raw = [
            sum(c.get(n.labels.get(k, ""), 0) for k, c in topology.items() if k in n.labels) for n in nodes
        ]
        lo, hi = min(raw), max(raw)
        if hi == lo:
            return [0] * len(nodes)
        return [int(MAX_NODE_SCORE * (s - lo) / (hi - lo)) for s in raw]

    def _image_scores(self, nodes: Sequence[NodeInfo]) -> list[int]:
        images = self.pod.images
        total_nodes = len(self.all_nodes)
        if not images or not total_nodes or not self.snapshot.image_nodes:
            return [0] * len(nodes)
        spec = self.pod.obj.get("spec") or {}
        containers = len(spec.get("containers") or []) + len(spec.get("initContainers") or [])
        max_threshold = _IMAGE_MAX_CONTAINER_THRESHOLD * max(1, containers)
        out = []
        for n in nodes:
            total = 0
            for image in images:
                size = n.images.get(image)
                if size is not None:
                    total += int(size * self.snapshot.image_nodes.get(image, 0) / total_nodes)
            total = min(max(total, _IMAGE_MIN_THRESHOLD), max_threshold)
            out.append(
                MAX_NODE_SCORE * (total - _IMAGE_MIN_THRESHOLD) // (max_threshold - _IMAGE_MIN_THRESHOLD)
            )
        return out


def _normalize(raw: Sequence[int], *, reverse: bool) -> list[int]:
    """Upstream `DefaultNormalizeScore`: scale to [0, 100] by the maximum, optionally reversed."""
    top = max(raw, default=0)
    if top == 0:
        return [MAX_NODE_SCORE if reverse else 0 for _ in raw]
    out = [MAX_NODE_SCORE * s // top for s in raw]
    return [MAX_NODE_SCORE - s for s in out] if reverse else out
