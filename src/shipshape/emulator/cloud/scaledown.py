"""Scale-down planning as cluster-autoscaler does it, pure (no store, no clock).

A node is *unneeded* when its utilization (requests of its pods over allocatable, cpu and memory
each, the larger one; GPU nodes by their GPUs alone) is below the threshold and every pod on it
that must move can be placed on another node. What must move, what is left and what blocks the
node follows cluster-autoscaler's drainability rules:

- mirror pods, DaemonSet pods, finished pods and pods already terminating are left alone;
- pods with a priority below the expendable cutoff are dropped (they neither block nor move);
- `cluster-autoscaler.kubernetes.io/safe-to-evict: "true"` makes a pod movable, whatever else;
- pods without a controller (or with one cluster-autoscaler does not know) block;
- kube-system pods without a PodDisruptionBudget block;
- `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` blocks;
- a pod whose PodDisruptionBudget allows no (more) disruption blocks.

The placement simulation runs the pods to move through the scheduler's filters (`static_ok`, the
caller's per pod shape and node verdict) and resource arithmetic on the other nodes, first fit, as
cluster-autoscaler's simulator does with its hints: for pods of one shape the search resumes where
the previous one fitted, since within one plan the free room of a node only shrinks.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from shipshape.kube import labels as labelsel

Obj = dict[str, Any]

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# Controllers cluster-autoscaler knows will recreate a pod elsewhere (DaemonSet pods are left).
REPLICATING_KINDS = frozenset({"ReplicaSet", "ReplicationController", "StatefulSet", "Job"})

LEAVE, DROP, MOVE, BLOCK = "leave", "drop", "move", "block"
DISABLED, NOT_UNDERUTILIZED = "scale-down disabled by annotation", "not underutilized"


def needs_other_pods(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's fit depends on the pods already on a node beyond their resources."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    if affinity.get("podAffinity") or affinity.get("podAntiAffinity"):
        return True
    if any(
        c.get("whenUnsatisfiable") == "DoNotSchedule" for c in spec.get("topologySpreadConstraints") or []
    ):
        return True
    return any(port.get("hostPort") for c in spec.get("containers") or [] for port in c.get("ports") or [])


def signature(pod: Mapping[str, Any]) -> bytes:
    """What a node's filters look at, for pods that do not depend on other pods."""
    spec = pod.get("spec") or {}
    shape = {
        "requests": [(c.get("resources") or {}).get("requests") for c in spec.get("containers") or []],
        "init": [(c.get("resources") or {}).get("requests") for c in spec.get("initContainers") or []],
        "overhead": spec.get("overhead"),
        "nodeSelector": spec.get("nodeSelector"),
        "affinity": spec.get("affinity"),
        "tolerations": spec.get("tolerations"),
    }
    return orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)


@dataclass(slots=True)
class PodFacts:
    """What scale-down needs to know of a pod, taken once per change of the pod."""

    namespace: str
    name: str
    uid: str
    node: str
    obj: Obj
    requests: Mapping[str, int]
    labels: Mapping[str, str]
    daemon: bool
    mirror: bool
    finished: bool
    terminating: bool
    priority: int | None
    priority_class: str
    safe_to_evict: str | None
    controller_kind: str | None
    controller_name: str
    expendable: bool = False  # priority below the cutoff: not counted, never blocks, not moved
    _shape: bytes | None = None
    _needs_others: bool | None = None
    _unbound: Obj | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def counted(self) -> bool:
        """Counted in its node's utilization: cluster-autoscaler counts DaemonSet and mirror pods, and
        leaves expendable pods out of its cluster snapshot."""
        return not self.finished and not self.expendable

    @property
    def shape(self) -> bytes:
        if self._shape is None:
            self._shape = signature(self.obj)
        return self._shape

    @property
    def unbound(self) -> Obj:
        """The pod as the scheduler would see it again once evicted: without its nodeName."""
        if self._unbound is None:
            spec = {k: v for k, v in (self.obj.get("spec") or {}).items() if k != "nodeName"}
            self._unbound = {**self.obj, "spec": spec}
        return self._unbound

    @property
    def needs_others(self) -> bool:
        if self._needs_others is None:
            self._needs_others = needs_other_pods(self.obj)
        return self._needs_others

    def relevance(self) -> tuple[Any, ...]:
        """What scale-down decisions depend on; a change of anything else is not a reason to re-plan."""
        return (
            self.node,
            self.daemon,
            self.mirror,
            self.finished,
            self.terminating,
            self.priority,
            self.safe_to_evict,
            self.controller_kind,
            self.expendable,
            self.uid,
        )


def pod_facts(pod: Obj, requests: Mapping[str, int], previous: PodFacts | None = None) -> PodFacts:
    md = pod["metadata"]
    spec = pod.get("spec") or {}
    annotations = md.get("annotations") or {}
    controller = next((ref for ref in md.get("ownerReferences") or [] if ref.get("controller")), None)
    owners = md.get("ownerReferences") or []
    priority = spec.get("priority")
    facts = PodFacts(
        namespace=md.get("namespace", ""),
        name=md["name"],
        uid=md.get("uid") or md["name"],
        node=spec.get("nodeName") or "",
        obj=pod,
        requests=requests,
        labels=md.get("labels") or {},
        daemon=any(ref.get("kind") == "DaemonSet" for ref in owners),
        mirror=MIRROR_ANNOTATION in annotations,
        finished=(pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        terminating=bool(md.get("deletionTimestamp")),
        priority=priority if isinstance(priority, int) else None,
        priority_class=spec.get("priorityClassName") or "",
        safe_to_evict=annotations.get(SAFE_TO_EVICT),
        controller_kind=controller.get("kind") if controller else None,
        controller_name=controller.get("name", "") if controller else "",
    )
    if previous is not None and previous.uid == facts.uid:
        facts._shape, facts._needs_others = previous._shape, previous._needs_others
    return facts


# ---- utilization ----------------------------------------------------------------------------------
def _go_float(x: float) -> str:
    text = repr(x)
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True, slots=True)
class Utilization:
    cpu: float
    memory: float
    gpu: float
    resource: str
    value: float

    def __str__(self) -> str:
        """As cluster-autoscaler prints its UtilizationInfo (`%v`) in its status events."""
        parts = (self.cpu, self.memory, self.gpu)
        return "{" + " ".join(_go_float(x) for x in parts) + f" {self.resource} {_go_float(self.value)}}}"


def utilization(
    allocatable: Mapping[str, int], used: Mapping[str, int], gpu_resource: str | None
) -> Utilization:
    """cluster-autoscaler's node utilization: max(cpu, memory) requested share; GPUs alone on GPU nodes."""

    def share(name: str) -> float:
        capacity = allocatable.get(name, 0)
        return used.get(name, 0) / capacity if capacity > 0 else 0.0

    cpu, memory = share("cpu"), share("memory")
    if gpu_resource is not None and allocatable.get(gpu_resource, 0) > 0:
        gpu = share(gpu_resource)
        return Utilization(cpu, memory, gpu, gpu_resource, gpu)
    if cpu > memory:
        return Utilization(cpu, memory, 0.0, "cpu", cpu)
    return Utilization(cpu, memory, 0.0, "memory", memory)


# ---- PodDisruptionBudgets --------------------------------------------------------------------------
@dataclass(slots=True)
class Budget:
    namespace: str
    name: str
    selector: labelsel.Selector
    allowed: int


class Budgets:
    """The disruptions each PodDisruptionBudget still allows, spent as the plan removes nodes."""

    def __init__(self, pdbs: Iterable[Mapping[str, Any]]) -> None:
        self._by_namespace: dict[str, list[Budget]] = {}
        self._matched: dict[str, list[Budget]] = {}
        for pdb in pdbs:
            selector = (pdb.get("spec") or {}).get("selector")
            if selector is None:
                continue
            md = pdb["metadata"]
            allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
            compiled = labelsel.from_label_selector(selector)
            budget = Budget(md.get("namespace", ""), md["name"], compiled, allowed)
            self._by_namespace.setdefault(budget.namespace, []).append(budget)

    def matching(self, pod: PodFacts) -> list[Budget]:
        found = self._matched.get(pod.uid)
        if found is None:
            found = self._matched[pod.uid] = [
                b for b in self._by_namespace.get(pod.namespace, ()) if b.selector.matches(pod.labels)
            ]
        return found

    def can_move(self, pods: Sequence[PodFacts]) -> PodFacts | None:
        """The first pod whose budget cannot take the moves of all `pods`, or None when all can go."""
        spent: dict[int, int] = {}
        for pod in pods:
            for budget in self.matching(pod):
                spent[id(budget)] = spent.get(id(budget), 0) + 1
                if spent[id(budget)] > budget.allowed:
                    return pod
        return None

    def spend(self, pods: Sequence[PodFacts]) -> None:
        for pod in pods:
            for budget in self.matching(pod):
                budget.allowed -= 1


# ---- drainability ----------------------------------------------------------------------------------
def leave_reason(pod: PodFacts) -> str | None:
    """Why scale-down leaves the pod where it is whatever else is true of it (it neither moves nor
    blocks): a mirror pod, a terminating or finished one, a DaemonSet's; None otherwise."""
    if pod.mirror:
        return "mirror pod"
    if pod.terminating:
        return "terminating"
    if pod.daemon:
        return "DaemonSet pod"
    if pod.finished:
        return "finished"
    return None


def classify(
    pod: PodFacts,
    *,
    priority: int,
    cutoff: int,
    budgets: Sequence[Budget],
    controller_exists: bool = True,
) -> tuple[str, str]:
    """What scale-down does with a pod on a node it removes: LEAVE, DROP, MOVE or BLOCK, and why.

    The reasons of BLOCK are cluster-autoscaler's drain messages.
    """
    left = leave_reason(pod)
    if left is not None:
        return LEAVE, left
    if priority < cutoff:
        return DROP, "expendable"
    if pod.safe_to_evict == "true":
        return MOVE, ""
    ref = f"{pod.namespace}/{pod.name}"
    if pod.controller_kind not in REPLICATING_KINDS:
        return BLOCK, f"{ref} is not replicated"
    if not controller_exists:
        return BLOCK, f"replication controller for {ref} is not available"
    if pod.namespace == "kube-system" and not budgets:
        return BLOCK, f"non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: {pod.name}"
    if pod.safe_to_evict == "false":
        return BLOCK, f"pod annotated as not safe to evict present: {pod.name}"
    if len(budgets) > 1:
        return BLOCK, f"{ref} has more than one PodDisruptionBudget"
    if budgets and budgets[0].allowed < 1:
        return BLOCK, f"not enough pod disruption budget to move {ref}"
    return MOVE, ""


# ---- the placement simulation ------------------------------------------------------------------------
class Used(Counter[str]):
    """A node's summed requests of its counted pods (and their number, `pods`).

    `version` moves with every `add` and `remove`, so what a node view works out from the sums (its
    utilization, its row of free room) is kept until they change: a plan reads every node, and
    between two plans few nodes gain or lose a pod. Change the sums only through `add` and `remove`.
    """

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        super().__init__(counts or {})
        self.version = 0

    def add(self, requests: Mapping[str, int]) -> None:
        self.update(requests)
        self["pods"] += 1
        self.version += 1

    def remove(self, requests: Mapping[str, int]) -> None:
        self.subtract(requests)
        self["pods"] -= 1
        self.version += 1


@dataclass(slots=True)
class NodeView:
    """A Ready node scale-down may remove or move pods to.

    Its `allocatable` and `gpu_resource` stay the same for the view's life (the autoscaler makes a
    new view when the node's facts change); its utilization is kept while `used.version` does.
    """

    name: str
    pool: str
    obj: Obj
    allocatable: Mapping[str, int]
    used: Used
    pods: Collection[PodFacts]
    gpu_resource: str | None = None
    disabled: bool = False  # annotated scale-down-disabled
    _util: Utilization | None = field(default=None, repr=False, compare=False)
    _util_at: int = field(default=-1, repr=False, compare=False)  # the `used.version` it was read at
    _names: frozenset[str] | None = field(default=None, repr=False, compare=False)

    def utilization(self) -> Utilization:
        if self._util is None or self._util_at != self.used.version:
            self._util = utilization(self.allocatable, self.used, self.gpu_resource)
            self._util_at = self.used.version
        return self._util

    def resource_names(self) -> frozenset[str]:
        """The resources its allocatable names, pods aside."""
        if self._names is None:
            self._names = frozenset(self.allocatable) - {"pods"}
        return self._names

    def free_row(self, columns: Sequence[str]) -> list[int]:
        """Its free room per column (0 for a resource its allocatable does not name), then pods."""
        allocatable, used = self.allocatable, self.used
        row = [allocatable[name] - used.get(name, 0) if name in allocatable else 0 for name in columns]
        row.append(allocatable.get("pods", 110) - used.get("pods", 0))
        return row


def _resource_columns(views: Iterable[NodeView]) -> list[str]:
    """The free-room matrix's resource columns: every resource an allocatable names, pods aside."""
    return sorted(frozenset().union(*{v.resource_names() for v in views}))


class NodeTable:
    """What a plan reads of every node, kept between plans: utilization, threshold kind,
    annotation, free room, name order.

    Between two plans few nodes gain or lose a pod, and the node list is mostly the same objects:
    `refresh` reads again only the nodes whose `used.version` moved or that are new to the list, so
    a plan finds its candidates, orders its destinations and fills the placer's matrix with numpy
    instead of a pass in Python over every node. `plan` without a table works it all out anew.
    """

    def __init__(self) -> None:
        self.views: list[NodeView] = []
        self.names: list[str] = []
        self.columns: list[str] = []
        self.versions = np.zeros(0, dtype=np.int64)  # used.version per node when read; -1: not read
        self.values = np.zeros(0, dtype=np.float64)  # utilization value
        self.gpu_bound = np.zeros(0, dtype=np.bool_)  # utilization by the node's GPUs
        self.disabled = np.zeros(0, dtype=np.bool_)
        self.free = np.zeros((0, 1), dtype=np.int64)
        self.rank = np.zeros(0, dtype=np.intp)  # position in name order

    def refresh(self, views: Sequence[NodeView]) -> None:
        """Bring the table up to date for `views` (in their order)."""
        if len(views) != len(self.views) or not all(map(operator.is_, views, self.views)):
            self._rebuild(views)
        versions = np.array([v.used.version for v in views], dtype=np.int64)
        stale = np.flatnonzero(versions != self.versions).tolist()
        for i in stale:
            view = views[i]
            util = view.utilization()
            self.values[i] = util.value
            self.gpu_bound[i] = util.resource == view.gpu_resource
            self.free[i] = view.free_row(self.columns)
        self.versions = versions

    def _rebuild(self, views: Sequence[NodeView]) -> None:
        """A new node list: rows of nodes already in the table are moved, the others marked unread."""
        n = len(views)
        where = {id(v): i for i, v in enumerate(self.views)}  # (the old views are alive: ids are theirs)
        old = np.array([where.get(id(v), -1) for v in views], dtype=np.intp)
        columns = _resource_columns(views)
        versions = np.full(n, -1, dtype=np.int64)
        values = np.zeros(n, dtype=np.float64)
        gpu_bound = np.zeros(n, dtype=np.bool_)
        free = np.zeros((n, len(columns) + 1), dtype=np.int64)
        if columns == self.columns:  # else every row is read again (a resource came or went)
            known = np.flatnonzero(old >= 0)
            versions[known] = self.versions[old[known]]
            values[known] = self.values[old[known]]
            gpu_bound[known] = self.gpu_bound[old[known]]
            free[known] = self.free[old[known]]
        self.views = list(views)
        self.names = [v.name for v in views]
        self.columns = columns
        self.versions, self.values, self.gpu_bound, self.free = versions, values, gpu_bound, free
        self.disabled = np.array([v.disabled for v in views], dtype=np.bool_).reshape(n)
        self.rank = np.empty(n, dtype=np.intp)
        self.rank[sorted(range(n), key=self.names.__getitem__)] = np.arange(n)

    def destination_order(self) -> np.ndarray:
        """Positions of the nodes, the fullest first, then by name (as `plan` orders destinations)."""
        return np.lexsort((self.rank, -self.values))


StaticOk = Callable[[PodFacts, NodeView], bool]
FitsWithPods = Callable[[PodFacts, NodeView, list[Obj]], bool]


class Placer:
    """First-fit placement of pods onto destination nodes, with rollback for one node's pods.

    The free room of every destination is one integer matrix (a row per destination, a column
    per resource named in any allocatable, plus pods), so the destinations with room for a pod
    are found in one comparison instead of one check per destination in Python: a plan places
    every pod of up to 30 candidates, and one that fits nowhere looked at every node. The filters'
    verdict (`static_ok`, per pod shape and node) is asked of the destinations with room in order,
    as before, and kept for the plan. A resource no allocatable names has no room anywhere.

    `free` and `columns`, when given, are that matrix (the placer's own, it changes it) and its
    resource columns, as a `NodeTable` keeps them; else they are worked out from the destinations.
    """

    def __init__(
        self,
        dests: Sequence[NodeView],
        static_ok: StaticOk,
        fits_with_pods: FitsWithPods,
        *,
        free: np.ndarray | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        self.dests = list(dests)
        self.index = {d.name: i for i, d in enumerate(self.dests)}
        self.static_ok = static_ok
        self.fits_with_pods = fits_with_pods
        names = list(columns) if columns is not None else _resource_columns(self.dests)
        self.columns = {name: j for j, name in enumerate(names)}
        self._pods_column = len(names)
        if free is None:
            rows = [d.free_row(names) for d in self.dests]
            free = np.array(rows, dtype=np.int64).reshape(len(self.dests), len(names) + 1)
        self.free = free
        self.columns["pods"] = self._pods_column
        self.excluded: set[int] = set()
        self._excluded = np.zeros(len(self.dests), dtype=np.bool_)
        self.received: set[str] = set()  # nodes that took a pod in this plan
        self.added: dict[int, list[Obj]] = {}
        self.cursor: dict[bytes, int] = {}
        # pod shape -> per destination: 1 passes the filters, 0 does not, -1 not asked yet
        self._verdicts: dict[bytes, np.ndarray] = {}
        # pod requests (the object) -> (columns, amounts) of its non-zero requests, None: a resource
        # no destination has
        self._needs: dict[int, tuple[Mapping[str, int], tuple[list[int], np.ndarray] | None]] = {}
        self._journal: list[tuple[int, PodFacts]] | None = None
        self._saved_cursor: dict[bytes, int] = {}
        self._saved_received: set[str] = set()

    def _columns_of(self, pod: PodFacts) -> tuple[list[int], np.ndarray] | None:
        kept = self._needs.get(id(pod.requests))
        if kept is not None and kept[0] is pod.requests:
            return kept[1]
        columns: list[int] = []
        amounts: list[int] = []
        need: tuple[list[int], np.ndarray] | None = None
        for name, amount in pod.requests.items():
            if not amount:
                continue
            j = self.columns.get(name)
            if j is None:
                break
            columns.append(j)
            amounts.append(amount)
        else:
            need = (columns, np.array(amounts, dtype=np.int64))
        self._needs[id(pod.requests)] = (pod.requests, need)
        return need

    def _candidates(self, pod: PodFacts, start: int) -> Iterator[int]:
        """Destinations from `start` on, in order, not excluded, with room for the pod and passing
        the filters."""
        need = self._columns_of(pod)
        if need is None or start >= len(self.dests):
            return
        free = self.free[start:]
        room = free[:, self._pods_column] >= 1
        columns, amounts = need
        if columns:
            room &= (free[:, columns] >= amounts).all(axis=1)
        room &= ~self._excluded[start:]
        verdicts = self._verdicts.get(pod.shape)
        if verdicts is None:
            verdicts = self._verdicts[pod.shape] = np.full(len(self.dests), -1, dtype=np.int8)
        room &= verdicts[start:] != 0
        for k in np.flatnonzero(room).tolist():
            i = start + k
            if verdicts[i] < 0:
                verdicts[i] = 1 if self.static_ok(pod, self.dests[i]) else 0
            if verdicts[i]:
                yield i

    def _take(self, i: int, pod: PodFacts, sign: int = 1) -> None:
        row = self.free[i]
        row[self._pods_column] -= sign
        for name, amount in pod.requests.items():
            j = self.columns.get(name)
            if j is not None:  # (room for it was checked: any other amount is 0)
                row[j] -= sign * amount

    def _place_at(self, i: int, pod: PodFacts) -> None:
        self._take(i, pod)
        self.received.add(self.dests[i].name)
        if pod.needs_others:
            self.added.setdefault(i, []).append(pod.obj)
        if self._journal is not None:
            self._journal.append((i, pod))

    def place(self, pod: PodFacts) -> str | None:
        """Put the pod on the first node that takes it; the node's name, or None."""
        if pod.needs_others:
            for i in self._candidates(pod, 0):
                dest = self.dests[i]
                if not self.fits_with_pods(pod, dest, [p.obj for p in dest.pods] + self.added.get(i, [])):
                    continue
                self._place_at(i, pod)
                return dest.name
            return None
        shape = pod.shape
        for i in self._candidates(pod, self.cursor.get(shape, 0)):
            self.cursor[shape] = i
            self._place_at(i, pod)
            return self.dests[i].name
        self.cursor[shape] = len(self.dests)
        return None

    def begin(self) -> None:
        self._journal = []
        self._saved_cursor = dict(self.cursor)
        self._saved_received = set(self.received)

    def commit(self) -> None:
        self._journal = None

    def rollback(self) -> None:
        for i, pod in reversed(self._journal or []):
            self._take(i, pod, -1)
            if pod.needs_others:
                self.added[i].remove(pod.obj)
        self._journal = None
        self.cursor = self._saved_cursor
        self.received = self._saved_received

    def exclude(self, name: str) -> None:
        i = self.index.get(name)
        if i is not None:
            self.excluded.add(i)
            self._excluded[i] = True

    def include(self, name: str) -> None:
        i = self.index.get(name)
        if i is not None:
            self.excluded.discard(i)
            self._excluded[i] = False


@dataclass(slots=True)
class Rules:
    threshold: float = 0.5
    gpu_threshold: float = 0.5
    cutoff: int = -10
    non_empty_candidates: int = 30


@dataclass(slots=True)
class Unneeded:
    node: str
    pool: str
    utilization: Utilization
    to_move: list[PodFacts]
    dropped: list[PodFacts]

    @property
    def empty(self) -> bool:
        return not self.to_move


@dataclass(slots=True)
class Plan:
    unneeded: dict[str, Unneeded] = field(default_factory=dict)
    unremovable: dict[str, str] = field(default_factory=dict)  # node -> why


def plan(
    nodes: Sequence[NodeView],
    pending: Sequence[PodFacts],
    *,
    rules: Rules,
    budgets: Budgets,
    static_ok: StaticOk,
    fits_with_pods: FitsWithPods,
    priority_of: Callable[[PodFacts], int],
    controller_exists: Callable[[PodFacts], bool] = lambda _: True,
    previously_unneeded: Iterable[str] = (),
    pool_room: Mapping[str, int] | None = None,
    table: NodeTable | None = None,
) -> Plan:
    """Which of `nodes` are unneeded now, and why the other candidates are not.

    Pending pods are placed first (they will take room the scheduler gives them). Candidates are
    tried nodes that were already unneeded first (their timers keep running), then the least
    utilized; at most `rules.non_empty_candidates` nodes that need pods moved are simulated.
    Pods of a removable node stay placed for the next candidates, as cluster-autoscaler's simulation
    does, and a node that took moved pods is no longer a candidate. `pool_room` caps how many
    nodes of each pool may be unneeded (its size above minSize); the others stay destinations.
    `table`, kept by the caller between plans, spares reading again the nodes that did not change.
    """
    out = Plan()
    unremovable = out.unremovable
    candidates: list[NodeView] = []
    if table is None:
        for n in nodes:
            if n.disabled:
                unremovable[n.name] = DISABLED
                continue
            u = n.utilization()
            if u.value >= (rules.gpu_threshold if u.resource == n.gpu_resource else rules.threshold):
                unremovable[n.name] = NOT_UNDERUTILIZED
            else:
                candidates.append(n)
    else:
        table.refresh(nodes)
        below = table.values < np.where(table.gpu_bound, rules.gpu_threshold, rules.threshold)
        # 0: disabled, 1: not underutilized, 2: a candidate
        codes = np.where(table.disabled, 0, np.where(below, 2, 1))
        reasons, names, kinds = (DISABLED, NOT_UNDERUTILIZED), table.names, codes.tolist()
        unremovable.update({names[i]: reasons[kinds[i]] for i in np.flatnonzero(codes < 2).tolist()})
        candidates = [nodes[i] for i in np.flatnonzero(codes == 2).tolist()]
    before = set(previously_unneeded)
    candidates.sort(key=lambda n: (n.name not in before, n.utilization().value, n.name))
    room = dict(pool_room) if pool_room is not None else None
    if room is not None:
        for n in [n for n in candidates if room.get(n.pool, 0) <= 0]:
            out.unremovable[n.name] = "node group min size reached"
            candidates.remove(n)
    if not candidates:
        return out
    waiting = [pod for pod in pending if priority_of(pod) >= rules.cutoff]
    placer: Placer | None = None
    excluded: list[str] = []

    def simulation() -> Placer:
        """The placement simulation, made when first needed (most plans find no candidate to try)."""
        nonlocal placer
        if placer is None:
            # Destinations: the fullest first, so moved pods fill busy nodes, not other candidates.
            if table is None:
                dests = sorted(nodes, key=lambda n: (-n.utilization().value, n.name))
                placer = Placer(dests, static_ok, fits_with_pods)
            else:
                order = table.destination_order()
                dests = [nodes[i] for i in order.tolist()]
                free = table.free[order]
                placer = Placer(dests, static_ok, fits_with_pods, free=free, columns=table.columns)
            for pod in waiting:
                placer.place(pod)
            for name in excluded:
                placer.exclude(name)
        return placer

    if waiting:
        simulation()  # pending pods take their room before any node is found unneeded
    simulated = 0
    for node in candidates:
        if room is not None and room.get(node.pool, 0) <= 0:
            out.unremovable[node.name] = "node group min size reached"
            continue
        if placer is not None and node.name in placer.received:
            out.unremovable[node.name] = "took pods of another node"
            continue
        to_move: list[PodFacts] = []
        dropped: list[PodFacts] = []
        blocked = ""
        for pod in node.pods:
            if leave_reason(pod) is not None:
                continue  # left (DaemonSet pods are on every node): its priority and budgets not asked
            action, why = classify(
                pod,
                priority=priority_of(pod),
                cutoff=rules.cutoff,
                budgets=budgets.matching(pod),
                controller_exists=controller_exists(pod),
            )
            if action == BLOCK:
                blocked = why
                break
            if action == MOVE:
                to_move.append(pod)
            elif action == DROP:
                dropped.append(pod)
        if blocked:
            out.unremovable[node.name] = blocked
            continue
        if to_move:
            if simulated >= rules.non_empty_candidates:
                out.unremovable[node.name] = "not simulated (candidate limit)"
                continue
            simulated += 1
            over = budgets.can_move(to_move)
            if over is not None:
                out.unremovable[node.name] = (
                    f"not enough pod disruption budget to move {over.namespace}/{over.name}"
                )
                continue
            sim = simulation()
            sim.exclude(node.name)
            sim.begin()
            stuck = next((pod for pod in to_move if sim.place(pod) is None), None)
            if stuck is not None:
                sim.rollback()
                sim.include(node.name)
                out.unremovable[node.name] = f"no place to move {stuck.namespace}/{stuck.name}"
                continue
            sim.commit()
            budgets.spend(to_move)
        elif placer is not None:
            placer.exclude(node.name)
        else:
            excluded.append(node.name)
        out.unneeded[node.name] = Unneeded(node.name, node.pool, node.utilization(), to_move, dropped)
        if room is not None:
            room[node.pool] = room.get(node.pool, 0) - 1
    return out
