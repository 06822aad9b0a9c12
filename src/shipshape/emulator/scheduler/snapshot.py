"""The scheduler's view of the cluster: nodes with what is requested on them, kept incrementally.

`ClusterSnapshot` is plain data, with no store behind it: the scheduler model feeds it from
watch events, while simulations and the autoscaler build one from lists of bodies. Per-node
aggregates (requested resources, pod count) and a label index of pods are updated on every
change, so a scheduling decision never re-sums all pods.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from shipshape.emulator.scheduler.messages import Status
from shipshape.kube import labels as labelsel
from shipshape.kube import scheduling
from shipshape.kube.clock import parse_time
from shipshape.kube.labels import Selector

Obj = dict[str, Any]
PodKey = tuple[str, str]  # (namespace, name)
Taint = tuple[str, str, str]  # (key, value, effect)

# A node's verdict from the filters that read its taints and unschedulable flag alone, for pods with
# the same tolerations: (the node's static key, NodeUnschedulable's status, TaintToleration's status).
TaintVerdict = tuple[object, Status | None, Status | None]

# How many (namespace, selector) pod counts a snapshot keeps up to date (see matching_per_node).
MATCH_COUNT_CACHE = 128


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A compiled PodAffinityTerm: which pods it selects and over which topology."""

    selector: Selector
    namespaces: frozenset[str]
    namespace_selector: Selector | None
    topology_key: str
    weight: int = 0

    def selects(self, pod: PodInfo, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        if pod.namespace not in self.namespaces and (
            self.namespace_selector is None
            or not self.namespace_selector.matches(namespace_labels.get(pod.namespace, {}))
        ):
            return False
        return self.selector.matches(pod.labels)


def _compile_terms(items: Iterable[Any] | None, namespace: str, weighted: bool) -> tuple[AffinityTerm, ...]:
    out = []
    for item in items or ():
        term = (item.get("podAffinityTerm") or {}) if weighted else item
        weight = int(item.get("weight") or 0) if weighted else 0
        if weighted and not weight:
            continue
        try:
            selector = labelsel.from_label_selector(term.get("labelSelector"))
            ns_selector_body = term.get("namespaceSelector")
            ns_selector = None if ns_selector_body is None else labelsel.from_label_selector(ns_selector_body)
        except labelsel.SelectorError:
            continue
        namespaces = frozenset(term.get("namespaces") or ())
        if not namespaces and ns_selector is None:
            namespaces = frozenset({namespace})
        out.append(AffinityTerm(selector, namespaces, ns_selector, str(term.get("topologyKey", "")), weight))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    selector: Selector
    hard: bool  # whenUnsatisfiable: DoNotSchedule
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy: Honor (default)
    honor_node_taints: bool = False  # nodeTaintsPolicy: Ignore (default)


def _compile_spread(pod: Obj, pod_labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    out = []
    for c in (pod.get("spec") or {}).get("topologySpreadConstraints") or []:
        try:
            selector = labelsel.from_label_selector(c.get("labelSelector"))
        except labelsel.SelectorError:
            continue
        extra = [
            labelsel.Requirement(k, "In", (pod_labels[k],))
            for k in c.get("matchLabelKeys") or ()
            if k in pod_labels
        ]
        if extra:
            selector = Selector((*extra, *selector.requirements), selector.match_nothing)
        out.append(
            SpreadConstraint(
                max_skew=int(c.get("maxSkew") or 1),
                topology_key=str(c.get("topologyKey", "")),
                selector=selector,
                hard=c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule",
                min_domains=int(c.get("minDomains") or 1),
                honor_node_affinity=c.get("nodeAffinityPolicy", "Honor") == "Honor",
                honor_node_taints=c.get("nodeTaintsPolicy", "Ignore") == "Honor",
            )
        )
    return tuple(out)


@dataclass(slots=True, eq=False)
class PodInfo:
    """What scheduling needs of a pod, computed once per pod version."""

    obj: Obj
    key: PodKey
    uid: str
    namespace: str
    labels: Mapping[str, str]
    priority: int
    requests: dict[str, int]
    non_zero_cpu: int
    non_zero_memory: int
    node_name: str
    terminating: bool
    start_time: float
    preempt_never: bool
    tolerations: list[Obj]
    node_affinity: scheduling.RequiredNodeAffinity
    preferred_node_terms: list[tuple[int, scheduling.NodeSelectorTerm]]
    spread: tuple[SpreadConstraint, ...]
    required_affinity: tuple[AffinityTerm, ...]
    required_anti_affinity: tuple[AffinityTerm, ...]
    preferred_affinity: tuple[AffinityTerm, ...]
    preferred_anti_affinity: tuple[AffinityTerm, ...]
    images: tuple[str, ...]
    nominated_node: str
    # The selector the system-default spreading uses (owner/services); None when there is none.
    default_spread_selector: Selector | None = None

    @property
    def has_pod_affinity(self) -> bool:
        return bool(
            self.required_affinity
            or self.required_anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )


def normalized_image(name: str) -> str:
    """An image name as the ImageLocality plugin compares them (":latest" added when untagged)."""
    last = name.rsplit("/", 1)[-1]
    if "@" in name or ":" in last:
        return name
    return name + ":latest"


def start_time(pod: Obj) -> float:
    """When the pod started (status.startTime), else when it was created; what preemption ranks by."""
    started = (pod.get("status") or {}).get("startTime") or (pod.get("metadata") or {}).get(
        "creationTimestamp"
    )
    return parse_time(started) if isinstance(started, str) else 0.0


# Compiled preferred node affinity terms by the text of the pod's nodeAffinity (see `_preferred_terms`).
_PREFERRED: dict[str, list[tuple[int, scheduling.NodeSelectorTerm]]] = {}


def _preferred_terms(pod: Obj) -> list[tuple[int, scheduling.NodeSelectorTerm]]:
    """`scheduling.preferred_terms`, compiled once per distinct text: pods of one workload carry the
    same terms, and a pod is compiled again at each version. repr of JSON data is exact, so equal text
    is an equal value. The compiled lists are shared, and only read."""
    affinity = (pod.get("spec") or {}).get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else affinity
    if not node_affinity:
        return scheduling.preferred_terms(pod)
    return scheduling.compiled_once(_PREFERRED, repr(node_affinity), scheduling.preferred_terms, pod)


def pod_info(
    pod: Obj, *, priority: int | None = None, default_spread_selector: Selector | None = None
) -> PodInfo:
    """Compile a pod body. `priority` overrides `spec.priority` (e.g. resolved from its PriorityClass)."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    namespace = str(md.get("namespace") or "default")
    pod_labels: Mapping[str, str] = md.get("labels") or {}
    affinity = spec.get("affinity") or {}
    pa = affinity.get("podAffinity") or {}
    paa = affinity.get("podAntiAffinity") or {}
    cpu, memory = scheduling.pod_non_zero_requests(pod)
    return PodInfo(
        obj=pod,
        key=(namespace, str(md.get("name", ""))),
        uid=str(md.get("uid", "")),
        namespace=namespace,
        labels=pod_labels,
        priority=scheduling.pod_priority(pod) if priority is None else priority,
        requests=scheduling.pod_requests(pod),
        non_zero_cpu=cpu,
        non_zero_memory=memory,
        node_name=str(spec.get("nodeName") or ""),
        terminating=bool(md.get("deletionTimestamp")),
        start_time=start_time(pod),
        preempt_never=spec.get("preemptionPolicy") == "Never",
        tolerations=list(spec.get("tolerations") or []),
        node_affinity=scheduling.RequiredNodeAffinity.of(pod),
        preferred_node_terms=_preferred_terms(pod),
        spread=_compile_spread(pod, pod_labels),
        required_affinity=_compile_terms(
            pa.get("requiredDuringSchedulingIgnoredDuringExecution"), namespace, False
        ),
        required_anti_affinity=_compile_terms(
            paa.get("requiredDuringSchedulingIgnoredDuringExecution"), namespace, False
        ),
        preferred_affinity=_compile_terms(
            pa.get("preferredDuringSchedulingIgnoredDuringExecution"), namespace, True
        ),
        preferred_anti_affinity=_compile_terms(
            paa.get("preferredDuringSchedulingIgnoredDuringExecution"), namespace, True
        ),
        images=tuple(
            normalized_image(str(c.get("image", ""))) for c in spec.get("containers") or [] if c.get("image")
        ),
        nominated_node=str(status.get("nominatedNodeName") or ""),
        default_spread_selector=default_spread_selector,
    )


@dataclass(slots=True, eq=False)
class NodeInfo:
    """A node with the pods bound to it and what they request."""

    name: str
    obj: Obj | None  # None while pods reference a node the snapshot has not seen (yet)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Obj, ...] = ()
    unschedulable: bool = False
    allocatable: dict[str, int] = field(default_factory=dict)
    images: dict[str, int] = field(default_factory=dict)  # normalized image name -> size in bytes
    pods: dict[PodKey, PodInfo] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    allowed_pods: int = 0
    # Replaced whenever what the node-only filters read (labels, taints, unschedulable) changes, and
    # only then: their verdicts are remembered per node while it stays the same, across the status
    # updates (heartbeats, images) that replace the node object.
    static_key: object = field(default_factory=object)
    # The status' capacity, allocatable and images objects `allocatable` and `images` were read
    # from: a status write that keeps them (a heartbeat) needs neither read again. Kept, so their
    # identities cannot be reused.
    sources: tuple[Any, Any, Any] | None = None
    # Replaced whenever what is requested on the node or its allocatable changes: the resource scores
    # remembered per node (`ClusterSnapshot.resource_answers`) hold while it stays the same.
    usage_key: object = field(default_factory=object)

    def set_node(self, node: Obj) -> None:
        md = node.get("metadata") or {}
        spec = node.get("spec") or {}
        labels = md.get("labels") or {}
        taints = tuple(spec.get("taints") or ())
        unschedulable = bool(spec.get("unschedulable"))
        if (
            self.obj is None
            or labels != self.labels
            or taints != self.taints
            or unschedulable != self.unschedulable
        ):
            # Equal labels and taints keep their objects, so answers remembered per labels object
            # (`affinity_matches`) stay valid too.
            self.labels, self.taints, self.unschedulable = labels, taints, unschedulable
            self.static_key = object()
        self.obj = node
        status = node.get("status") or {}
        sources = (status.get("capacity"), status.get("allocatable"), status.get("images"))
        kept = self.sources
        if kept is None or kept[0] is not sources[0] or kept[1] is not sources[1]:
            self.allocatable = scheduling.node_allocatable(node)
            self.allowed_pods = self.allocatable.get("pods", scheduling.DEFAULT_MAX_PODS)
            self.usage_key = object()
        if kept is None or kept[2] is not sources[2]:
            images: dict[str, int] = {}
            for image in sources[2] or []:
                for name in image.get("names") or []:
                    images[normalized_image(str(name))] = int(image.get("sizeBytes") or 0)
            self.images = images
        self.sources = sources

    def add(self, pod: PodInfo, sign: int = 1) -> None:
        for name, amount in pod.requests.items():
            self.requested[name] = self.requested.get(name, 0) + sign * amount
        self.non_zero_cpu += sign * pod.non_zero_cpu
        self.non_zero_memory += sign * pod.non_zero_memory
        self.usage_key = object()
        if sign > 0:
            self.pods[pod.key] = pod
        else:
            self.pods.pop(pod.key, None)


def _zone_of(node: NodeInfo) -> str:
    return (
        node.labels.get("topology.kubernetes.io/region", "")
        + ":"
        + node.labels.get("topology.kubernetes.io/zone", "")
    )


def affinity_matches(
    affinity: scheduling.RequiredNodeAffinity,
    answers: dict[str, tuple[Mapping[str, str], bool]],
    node: NodeInfo,
) -> bool:
    """`affinity.matches` for the node, remembered while the node keeps the same labels object."""
    seen = answers.get(node.name)
    if seen is not None and seen[0] is node.labels:
        return seen[1]
    ok = affinity.matches(node.labels, node.name)
    answers[node.name] = (node.labels, ok)
    return ok


class NodeArrays:
    """What the resource filter reads of the listed nodes (`node_list()`), as arrays, so a pass can
    filter every node at once (`framework.schedule_one`): each node's allocatable and requested
    amounts per resource (a column per resource any node has or has requested), its pods and how
    many it may hold; and answers kept per node for the score plugins (`ClusterSnapshot.static_column`,
    `match_vector`). A node keeps its row while it is listed (`row_of`; `positions` gives the rows in
    the list's order), so a node that comes or goes costs one row, not a new table. The snapshot
    brings the rows of changed nodes up to date before each read (`ClusterSnapshot.node_table`)."""

    def __init__(self, order: list[NodeInfo]) -> None:
        self.order = order
        names = sorted({name for node in order for name in (*node.allocatable, *node.requested)})
        self.columns = {name: j for j, name in enumerate(names)}
        capacity = 2 * len(order) + 16
        self.rows: list[NodeInfo | None] = []  # None: the row of a node no longer listed
        self.row_of: dict[str, int] = {}
        self.live = np.zeros(capacity, dtype=np.bool_)
        self.allocatable = np.zeros((capacity, len(names)), dtype=np.int64)
        self.requested = np.zeros((capacity, len(names)), dtype=np.int64)
        self.pods = np.zeros(capacity, dtype=np.int64)
        self.allowed_pods = np.zeros(capacity, dtype=np.int64)
        # Answers that read a node's name, labels, taints and unschedulable flag alone, per question,
        # as a column over the rows (see `ClusterSnapshot.static_column`; the node-only filter
        # verdicts per pod shape among them): the position in the snapshot's log of static changes
        # each column is current at, and the column.
        self.static_columns: dict[Any, tuple[int, np.ndarray]] = {}
        # Codes of each label key's values, for `label_codes` columns (a code is never reused).
        self.value_codes: dict[str, dict[str, int]] = {}
        # Per (namespace, selector): the rows' `matching_per_node` counts, kept in step by the
        # snapshot's pod changes (`ClusterSnapshot.match_vector`).
        self.match_vectors: dict[tuple[str, Selector], np.ndarray] = {}
        for node in order:
            self._add_row(node)
        self.positions = np.arange(len(order), dtype=np.intp)

    @property
    def size(self) -> int:
        """Rows in use (live or not): the arrays' rows past it are unused."""
        return len(self.rows)

    def _add_row(self, node: NodeInfo) -> int:
        i = len(self.rows)
        if i == len(self.live):
            self._grow()
        self.rows.append(node)
        self.row_of[node.name] = i
        self.live[i] = True
        self._fill(i, node)
        return i

    def _grow(self) -> None:
        """Twice the rows; the kept static columns go (asked again when next needed)."""
        capacity = 2 * len(self.live)

        def grown(array: np.ndarray) -> np.ndarray:
            out = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
            out[: len(array)] = array
            return out

        self.live, self.pods, self.allowed_pods = grown(self.live), grown(self.pods), grown(self.allowed_pods)
        self.allocatable, self.requested = grown(self.allocatable), grown(self.requested)
        self.match_vectors = {key: grown(vector) for key, vector in self.match_vectors.items()}
        self.static_columns.clear()

    def _fill(self, i: int, node: NodeInfo) -> None:
        row, used, columns = self.allocatable[i], self.requested[i], self.columns
        row[:] = 0
        used[:] = 0
        for name, amount in node.allocatable.items():
            row[columns[name]] = amount
        for name, amount in node.requested.items():
            used[columns[name]] = amount
        self.pods[i] = len(node.pods)
        self.allowed_pods[i] = node.allowed_pods

    def _holds(self, node: NodeInfo) -> bool:
        columns = self.columns
        return all(name in columns for name in node.allocatable) and all(
            name in columns for name in node.requested
        )

    def refresh(self, name: str) -> bool:
        """Read the named node's row again; False when the table cannot hold it (a resource without a
        column): the caller builds a new table."""
        i = self.row_of.get(name)
        if i is None:
            return True  # not a listed node (pods of a node not seen yet): not in the table
        node = self.rows[i]
        assert node is not None
        if not self._holds(node):
            return False
        self._fill(i, node)
        return True

    def follow(self, order: list[NodeInfo], counts_of: Callable[[str, Selector], Mapping[str, int]]) -> bool:
        """Take `order` as the node list: a row for each node new to it (its matching pods counted
        from `counts_of`), none for the nodes it no longer lists. False when a new table is due
        instead: a node with a resource the table has no column for, or more rows gone than live."""
        row_of: dict[str, int] = {}
        for node in order:
            i = self.row_of.get(node.name)
            if i is None or self.rows[i] is not node:
                if not self._holds(node):
                    return False
                if i is not None:  # gone and back since: a new NodeInfo, a row of its own
                    self.rows[i] = None
                    self.live[i] = False
                i = self._add_row(node)
                for (namespace, selector), vector in self.match_vectors.items():
                    vector[i] = counts_of(namespace, selector).get(node.name, 0)
            row_of[node.name] = i
        for name, i in self.row_of.items():
            if row_of.get(name) != i:
                self.rows[i] = None
                self.live[i] = False
        self.row_of = row_of
        self.order = order
        self.positions = np.fromiter((row_of[n.name] for n in order), dtype=np.intp, count=len(order))
        return len(self.rows) <= 2 * len(order) + 64


class ClusterSnapshot:
    """Nodes and the pods assigned to them, updated incrementally."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[PodKey, PodInfo] = {}
        self.namespace_labels: dict[str, Mapping[str, str]] = {}
        # Pods nominated to a node by preemption, not bound yet: node -> pod key -> pod.
        self.nominated: dict[str, dict[PodKey, PodInfo]] = {}
        self._by_label: dict[tuple[str, str, str], dict[PodKey, PodInfo]] = {}
        self._by_namespace: dict[str, dict[PodKey, PodInfo]] = {}
        self.with_affinity: dict[PodKey, PodInfo] = {}
        self.with_required_anti_affinity: dict[PodKey, PodInfo] = {}
        # Per namespace and selector: node name -> number of assigned, non-terminating pods the
        # selector matches (topology spreading asks this for every pod of a workload).
        self._match_counts: dict[str, dict[Selector, dict[str, int]]] = {}
        self._match_count_entries = 0
        self.image_nodes: dict[str, int] = {}  # normalized image -> number of nodes that have it
        # Required node affinity answers per affinity and node, with the node's labels they were
        # computed for (a node's labels object is replaced, never changed, when the node changes).
        self._affinity_answers: dict[
            scheduling.RequiredNodeAffinity, dict[str, tuple[Mapping[str, str], bool]]
        ] = {}
        # The node-only filters' verdicts (unschedulable, node name, taints, node affinity) per pod
        # shape and node, with the node object they were computed for (see `Cycle.filter`).
        self._static_verdicts: dict[Any, dict[str, tuple[object, Any]]] = {}
        # NodeUnschedulable's and TaintToleration's verdicts per tolerations (as JSON) and node.
        self._taint_verdicts: dict[bytes, dict[str, TaintVerdict]] = {}
        # NodeResourcesFit's and NodeResourcesBalancedAllocation's scores per pod requests and node,
        # with the node's usage key they were computed for.
        self._resource_answers: dict[Hashable, dict[str, tuple[object, int, int]]] = {}
        # Preferred node affinity sums (NodeAffinity's raw score) per terms and node, with the node's
        # labels they were computed for.
        self._preferred_answers: dict[Any, dict[str, tuple[Mapping[str, str], int]]] = {}
        self._order: list[NodeInfo] | None = None
        # The node list's resource numbers as arrays, with the nodes whose rows changed since
        # (`node_table`), and the names of the nodes whose static key changed, in order (`static_mask`).
        self._table: NodeArrays | None = None
        self._table_stale: set[str] = set()
        self._static_log: list[str] = []
        self.next_start_index = 0
        # Moves on with every change the filters can see (a node's labels, taints, allocatable or
        # presence; a pod assigned, changed or gone; a nomination): equal generations, equal verdicts.
        self.generation = 0
        # Moves on with every change to the node list or to a node's labels, taints or unschedulable
        # flag (what the node-only filters read).
        self.node_generation = 0
        # Statuses of all nodes, in the order a pass from a start index visits them, for a pod whose
        # node affinity names other nodes: per (start, tolerations, nodeName), with the node generation.
        self._unnamed: dict[Hashable, tuple[int, dict[str, Status]]] = {}
        # The filter statuses of the last pass over all nodes that found none feasible: its
        # generation, the filter key of the pod (`Cycle.filter_key`), the statuses per node.
        self._unfeasible: tuple[int, Hashable, dict[str, Status]] | None = None
        # The FailedScheduling message of the last pod that fit nowhere, with what it was worked out
        # from besides the statuses (see `unfeasible_message`).
        self._unfeasible_message: tuple[int, Hashable, Any, str] | None = None

    @classmethod
    def of(cls, nodes: Iterable[Obj], pods: Iterable[Obj] = ()) -> ClusterSnapshot:
        snapshot = cls()
        for node in nodes:
            snapshot.set_node(node)
        for pod in pods:
            if (pod.get("spec") or {}).get("nodeName"):
                snapshot.add_pod(pod_info(pod))
        return snapshot

    # ---- nodes ----------------------------------------------------------------------------
    def set_node(self, node: Obj) -> NodeInfo:
        """Add or update a node."""
        name = str(node["metadata"]["name"])
        info = self.nodes.get(name)
        if info is None:
            info = self.nodes[name] = NodeInfo(name, None)
        old_zone = _zone_of(info) if info.obj is not None else None
        was_known = info.obj is not None
        counted = info.images if was_known else None
        static_key, allocatable = info.static_key, info.allocatable
        info.set_node(node)
        if not was_known or info.static_key is not static_key or info.allocatable is not allocatable:
            self.generation += 1
        if not was_known or info.static_key is not static_key:
            self.node_generation += 1
            self._static_log.append(name)
        if info.allocatable is not allocatable:
            self._table_stale.add(name)
        if info.images is not counted:  # (the same dict: the same images, counted already)
            if counted is not None:
                self._count_images(counted, -1)
            self._count_images(info.images, 1)
        if not was_known or old_zone != _zone_of(info):
            self._order = None
        return info

    def node_arrays(self) -> NodeArrays:
        """`node_list()`'s nodes as a `NodeArrays`, up to date."""
        order = self.node_list()
        table = self._table
        if table is not None and len(self._static_log) > 10_000:
            table = None
        if table is not None and table.order is not order and not table.follow(order, self._match_counts_of):
            table = None
        if table is not None:
            for name in self._table_stale:
                if not table.refresh(name):
                    table = None
                    break
        if table is None:
            table = self._table = NodeArrays(order)
            self._static_log.clear()
        self._table_stale.clear()
        return table

    def _match_counts_of(self, namespace: str, selector: Selector) -> Mapping[str, int]:
        return self._match_counts.get(namespace, {}).get(selector) or {}

    def static_mask(
        self,
        table: NodeArrays,
        shape: Any,
        passes: Callable[[NodeInfo], bool],
    ) -> np.ndarray:
        """Which of the table's nodes pass the node-only filters for pods of `shape` (`passes` asks for
        one node): a `static_column`."""
        return self.static_column(table, ("filters", shape), passes, np.bool_)

    def static_column(
        self,
        table: NodeArrays,
        question: Hashable,
        answer: Callable[[NodeInfo], Any],
        dtype: Any,
        default: Any = 0,
    ) -> np.ndarray:
        """`answer` for each of the table's nodes (`default` for rows no longer listed), for a question
        whose answer reads only the node's name, labels, taints and unschedulable flag: kept per
        question in the table and asked again only of the nodes whose static key changed since (a new
        node's among them). The array is the table's own: read it, never change it."""
        kept = table.static_columns.get(question)
        log = self._static_log
        if kept is None:
            if len(table.static_columns) > 256:
                table.static_columns.clear()
            column = np.full(len(table.live), default, dtype=dtype)
            for i, node in enumerate(table.rows):
                if node is not None:
                    column[i] = answer(node)
        else:
            position, column = kept
            if position == len(log):
                return column
            for name in set(log[position:]):
                row = table.row_of.get(name)
                if row is not None:
                    node = table.rows[row]
                    assert node is not None
                    column[row] = answer(node)
        table.static_columns[question] = (len(log), column)
        return column

    def label_codes(self, table: NodeArrays, key: str) -> tuple[np.ndarray, dict[str, int]]:
        """Each of the table's nodes' value of label `key` as a code (-1: no such label), and the codes."""
        codes = table.value_codes.setdefault(key, {})

        def code(node: NodeInfo) -> int:
            value = node.labels.get(key)
            return -1 if value is None else codes.setdefault(value, len(codes))

        return self.static_column(table, ("label", key), code, np.int64, -1), codes

    def match_vector(self, table: NodeArrays, namespace: str, selector: Selector) -> np.ndarray:
        """`matching_per_node` over the table's rows (the snapshot's own: read it, never change it)."""
        key = (namespace, selector)
        vector = table.match_vectors.get(key)
        if vector is None or self._match_counts.get(namespace, {}).get(selector) is None:
            counts = self.matching_per_node(namespace, selector)
            vector = np.zeros(len(table.live), dtype=np.int64)
            for name, i in table.row_of.items():
                vector[i] = counts.get(name, 0)
            table.match_vectors[key] = vector
        return vector

    def remove_node(self, name: str) -> None:
        info = self.nodes.get(name)
        if info is None or info.obj is None:
            return
        self._count_images(info.images, -1)
        self._order = None
        self.generation += 1
        self.node_generation += 1
        self._static_log.append(name)
        if info.pods:
            info.obj = None  # keep the pods until they are deleted, as upstream's cache does
        else:
            del self.nodes[name]

    def _count_images(self, images: Mapping[str, int], sign: int) -> None:
        for image in images:
            self.image_nodes[image] = self.image_nodes.get(image, 0) + sign
            if self.image_nodes[image] <= 0:
                del self.image_nodes[image]

    def affinity_answers(
        self, affinity: scheduling.RequiredNodeAffinity
    ) -> dict[str, tuple[Mapping[str, str], bool]]:
        """The remembered answers of `affinity` per node name (see `affinity_matches`)."""
        return _per_node(self._affinity_answers, affinity)

    def static_verdicts(self, shape: Any) -> dict[str, tuple[object, Any]]:
        """The remembered node-only filter verdicts for pods of one shape, per node name."""
        return _per_node(self._static_verdicts, shape)

    def taint_verdicts(self, tolerations: bytes) -> dict[str, TaintVerdict]:
        """The remembered taint verdicts for pods with these tolerations (as JSON), per node name."""
        return _per_node(self._taint_verdicts, tolerations)

    def resource_answers(self, requests: Hashable) -> dict[str, tuple[object, int, int]]:
        """The remembered (usage key, NodeResourcesFit score, NodeResourcesBalancedAllocation score)
        per node name, for pods with these requests under one scoring strategy."""
        return _per_node(self._resource_answers, requests)

    def preferred_answers(self, terms: Any) -> dict[str, tuple[Mapping[str, str], int]]:
        """The remembered raw NodeAffinity scores of preferred `terms` per node name, each with the
        labels object it was computed for (an answer is valid while the node keeps that object)."""
        return _per_node(self._preferred_answers, terms)

    def unfeasible(self, key: Hashable) -> dict[str, Status] | None:
        """The statuses per node of the last pass over all nodes that found none feasible for pods
        with this filter key, if nothing the filters read has changed since; the snapshot's own."""
        known = self._unfeasible
        if known is None or known[0] != self.generation or known[1] != key:
            return None
        return known[2]

    def remember_unfeasible(self, key: Hashable, statuses: dict[str, Status]) -> None:
        """Keep the statuses of a pass over all nodes that found none feasible (see `unfeasible`)."""
        self._unfeasible = (self.generation, key, statuses)

    def unfeasible_message(self, key: Hashable, post_filter: Any) -> str | None:
        """The message of the last pod with this filter key that fit nowhere and that preemption
        could not help, if nothing the filters read has changed since and PostFilter's inputs
        (`post_filter`: the pod's priority and preemption policy, the budgets) are equal."""
        known = self._unfeasible_message
        if known is None or known[0] != self.generation or known[1] != key or known[2] != post_filter:
            return None
        return known[3]

    def remember_unfeasible_message(self, key: Hashable, post_filter: Any, message: str) -> None:
        """Keep the message of a pod that fit nowhere and had no preemption candidate."""
        self._unfeasible_message = (self.generation, key, post_filter, message)

    def unnamed_statuses(self, key: Hashable, compute: Callable[[], dict[str, Status]]) -> dict[str, Status]:
        """The statuses `compute` gives for nodes a pod's affinity does not name, remembered under
        `key` while the node list and the nodes' labels, taints and unschedulable flags stay the
        same. The dict is the snapshot's own: copy it to change it."""
        known = self._unnamed.get(key)
        if known is not None and known[0] == self.node_generation:
            return known[1]
        if len(self._unnamed) > 64:
            self._unnamed.clear()
        statuses = compute()
        self._unnamed[key] = (self.node_generation, statuses)
        return statuses

    def node_list(self) -> list[NodeInfo]:
        """Real nodes, interleaved by zone as upstream's node tree lists them."""
        if self._order is None:
            zones: dict[str, list[NodeInfo]] = {}
            for info in sorted((n for n in self.nodes.values() if n.obj is not None), key=lambda n: n.name):
                zones.setdefault(_zone_of(info), []).append(info)
            columns = [zones[z] for z in sorted(zones)]
            order: list[NodeInfo] = []
            for i in range(max((len(c) for c in columns), default=0)):
                order.extend(c[i] for c in columns if i < len(c))
            self._order = order
        return self._order

    # ---- pods -----------------------------------------------------------------------------
    def add_pod(self, pod: PodInfo) -> None:
        """Account an assigned pod (replacing an older version of it)."""
        if pod.key in self.pods:
            self.remove_pod(pod.key)
        if not pod.node_name:
            raise ValueError(f"pod {pod.key[0]}/{pod.key[1]} is not assigned to a node")
        self.generation += 1
        self.pods[pod.key] = pod
        node = self.nodes.get(pod.node_name)
        if node is None:
            node = self.nodes[pod.node_name] = NodeInfo(pod.node_name, None)
        node.add(pod)
        self._table_stale.add(pod.node_name)
        self._by_namespace.setdefault(pod.namespace, {})[pod.key] = pod
        for k, v in pod.labels.items():
            self._by_label.setdefault((pod.namespace, k, v), {})[pod.key] = pod
        if pod.has_pod_affinity:
            self.with_affinity[pod.key] = pod
        if pod.required_anti_affinity:
            self.with_required_anti_affinity[pod.key] = pod
        self._count_match(pod, 1)
        self.nominate(pod.key, None)

    def remove_pod(self, key: PodKey) -> PodInfo | None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return None
        self.generation += 1
        node = self.nodes.get(pod.node_name)
        if node is not None:
            node.add(pod, -1)
            self._table_stale.add(pod.node_name)
            if node.obj is None and not node.pods:
                del self.nodes[pod.node_name]
        self._by_namespace.get(pod.namespace, {}).pop(key, None)
        for k, v in pod.labels.items():
            bucket = self._by_label.get((pod.namespace, k, v))
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._by_label[(pod.namespace, k, v)]
        self.with_affinity.pop(key, None)
        self.with_required_anti_affinity.pop(key, None)
        self._count_match(pod, -1)
        return pod

    def _count_match(self, pod: PodInfo, sign: int) -> None:
        if pod.terminating:
            return
        table = self._table
        row = None if table is None else table.row_of.get(pod.node_name)
        for selector, counts in self._match_counts.get(pod.namespace, {}).items():
            if selector.matches(pod.labels):
                number = counts.get(pod.node_name, 0) + sign
                if number > 0:
                    counts[pod.node_name] = number
                else:
                    counts.pop(pod.node_name, None)
                if row is not None:
                    assert table is not None
                    vector = table.match_vectors.get((pod.namespace, selector))
                    if vector is not None:
                        vector[row] += sign

    def matching_per_node(self, namespace: str, selector: Selector) -> Mapping[str, int]:
        """Node name -> assigned, non-terminating pods in `namespace` that the selector matches.

        Counted once per selector and then kept up to date as pods come and go, so each pod of
        a large workload costs O(nodes) rather than a label match per replica. The mapping is
        the snapshot's own: read it, never change it. At most `MATCH_COUNT_CACHE` selectors are
        kept (beyond that, the first one counted in a namespace is dropped).
        """
        known = self._match_counts.get(namespace, {}).get(selector)
        if known is not None:
            return known
        counts: dict[str, int] = {}
        for other in self.matching_pods(namespace, selector):
            if not other.terminating:
                counts[other.node_name] = counts.get(other.node_name, 0) + 1
        if self._match_count_entries >= MATCH_COUNT_CACHE:
            self._forget_one_match_count()
        self._match_counts.setdefault(namespace, {})[selector] = counts
        self._match_count_entries += 1
        return counts

    def _forget_one_match_count(self) -> None:
        for namespace, by_selector in list(self._match_counts.items()):
            if by_selector:
                selector = next(iter(by_selector))
                del by_selector[selector]
                if self._table is not None:
                    self._table.match_vectors.pop((namespace, selector), None)
                self._match_count_entries -= 1
                if not by_selector:
                    del self._match_counts[namespace]
                return

    def nominate(self, key: PodKey, pod: PodInfo | None, node: str = "") -> None:
        """Record (or with `pod=None`, forget) that a pending pod is nominated to a node."""
        for bucket_node, bucket in list(self.nominated.items()):
            if key in bucket:
                del bucket[key]
                self.generation += 1
                if not bucket:
                    del self.nominated[bucket_node]
        if pod is not None and node:
            self.nominated.setdefault(node, {})[key] = pod
            self.generation += 1

    def matching_pods(self, namespace: str | None, selector: Selector) -> Iterator[PodInfo]:
        """Assigned pods in `namespace` (None: any) whose labels the selector matches, via the label index."""
        if selector.match_nothing:
            return iter(())
        candidates: Iterable[PodInfo]
        exact = next((r for r in selector.requirements if r.operator == "In" and len(r.values) == 1), None)
        if exact is not None and namespace is not None:
            candidates = self._by_label.get((namespace, exact.key, exact.values[0]), {}).values()
        elif namespace is not None:
            candidates = self._by_namespace.get(namespace, {}).values()
        else:
            candidates = self.pods.values()
        return (p for p in candidates if selector.matches(p.labels))

    def namespaces(self) -> Iterable[str]:
        return self._by_namespace.keys()

    def pods_where(self, predicate: Callable[[PodInfo], bool]) -> list[PodInfo]:
        return [p for p in self.pods.values() if predicate(p)]


_Answer = TypeVar("_Answer")


def _per_node(table: dict[Any, dict[str, _Answer]], key: Any) -> dict[str, _Answer]:
    """The per-node answers `table` keeps for `key` (a new, empty one at first); the table is cleared
    once it holds 10,000 keys, which bounds what pods of ever new shapes can make it keep."""
    answers = table.get(key)
    if answers is None:
        if len(table) > 10_000:
            table.clear()
        answers = table[key] = {}
    return answers
