"""An in-memory view of the cluster objects the controller needs, fed by watch events.

Pure: `apply(event)` takes a watch event (`{"type": ..., "object": ...}`) and nothing here does I/O,
so the webhook answers from memory with no API round trip. Stored objects are treated as read-only.

Besides the objects, the cache keeps "assumed" placements: a decision made by the webhook counts
for its group at once, before the pod exists, so that a burst of creations from one ReplicaSet lands
exactly on the target split. An assumption ends when the real pod (carrying the decision id in its
decision annotation) appears, or after a TTL (the pod was never created).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from shipshape.contracts import notices as notice_contract
from shipshape.contracts.annotations import EMULATOR_SPOT_INTERRUPTION_TAINT, DecisionRecord
from shipshape.controller import growth
from shipshape.controller.packing import (
    PACKING_WEIGHTS,
    NodeRoom,
    Room,
    is_placeholder,
    pod_requests,
    takes_replacements,
)
from shipshape.controller.placement import Exclusion, GroupCounts, PlacementView, Pool
from shipshape.controller.policy import (
    CapacityType,
    ControllerConfig,
    PolicyResult,
    WorkloadKind,
    WorkloadPolicy,
)
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import workloads
from shipshape.controller.state.records import (
    Assumption,
    GroupKey,
    Managed,
    PodState,
    WorkloadRef,
    WorkloadState,
)
from shipshape.kube import capacity as capacity_labels
from shipshape.kube import wellknown
from shipshape.kube.labels import from_label_selector
from shipshape.kube.objects import controller_ref, is_active, is_daemon_pod, node_ready
from shipshape.kube.scheduling import (
    DO_NOT_SCHEDULE_EFFECTS,
    RequiredNodeAffinity,
    node_allocatable,
    tolerates,
)
from shipshape.kube.wellknown import HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, REGION_LABEL, ZONE_LABEL

Obj = dict[str, Any]

# The notice taint of the node contract (`contracts.notices`): the node-side poller writes it for what the
# instance metadata says (value `<cloud>-metadata`), the leader for a notice the cloud event queue alone
# carried (value `event-queue`), so that every replica's webhook (and kube-scheduler) sees the notice,
# and a restarted controller reads it again.
QUEUE_NOTICE_TAINT = notice_contract.NOTICE_TAINT
# Taints that announce a node is going away (interruption handlers, Karpenter, the emulator's cloud,
# the node-side poller and the leader).
SPOT_NOTICE_TAINTS = frozenset(
    {
        wellknown.AWS_NTH_SPOT_ITN_TAINT,
        wellknown.AWS_NTH_ASG_LIFECYCLE_TAINT,
        wellknown.AWS_NTH_SCHEDULED_MAINTENANCE_TAINT,
        EMULATOR_SPOT_INTERRUPTION_TAINT,
        QUEUE_NOTICE_TAINT,
    }
)
# Karpenter v1 (`karpenter.sh/disrupted`) and v1beta1 (`karpenter.sh/disruption=disrupting`).
NOTICE_TAINTS = SPOT_NOTICE_TAINTS | {
    wellknown.KARPENTER_DISRUPTED_TAINT,
    wellknown.KARPENTER_DISRUPTION_TAINT,
}
# The rebalance-recommendation taint of the node contract (PreferNoSchedule; poller or leader).
QUEUE_REBALANCE_TAINT = notice_contract.REBALANCE_TAINT
# Taints that recommend moving off a node without draining it.
REBALANCE_TAINTS = frozenset({wellknown.AWS_NTH_REBALANCE_TAINT, QUEUE_REBALANCE_TAINT})
# Taint keys clouds and provisioners commonly put on every spot node; spot-bound pods tolerate them.
SPOT_TAINT_KEYS = frozenset({"spot", *capacity_labels.DEFAULT.keys})

# A namespace without labels: one object, so that what is derived from it can be kept by identity.
_NO_LABELS: Mapping[str, str] = MappingProxyType({})

KINDS = (
    "Namespace",
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
    "Pod",
    "Node",
    "PodDisruptionBudget",
    # Where the cluster says which pools can grow (`growth.py`): cluster-autoscaler's status ConfigMap
    # (the only ConfigMap held) and Karpenter NodePools, when the cluster has them.
    "ConfigMap",
    "NodePool",
)


# Deletions remembered (per state) so that an event older than a deletion is known to be stale.
TOMBSTONES = 10_000
# Pod shapes (affinity x tolerations x capacity/pool) whose eligible nodes are kept between node changes.
MAX_ELIGIBLE_SHAPES = 256
# Packing rankings kept (pod shape x requests), and node usage changes remembered for them: a ranking
# further behind is worked out afresh.
MAX_RANKINGS = 256
MAX_USAGE_LOG = 8192
# The reader `managed` takes its own account of the dirty workloads as (`take_dirty`).
_MANAGED_READER = "ClusterState.managed"
_MANAGED_KINDS = {kind.value: kind for kind in workloads.managed_kinds()}

WorkloadKey = tuple[str, str, str]  # (kind, namespace, name), as `DirtyWorkloads` names workloads
# Pods of one group changed between two reads of its workload's state beyond which the state is worked
# out afresh instead of pod by pod (and what a group keeps for a reader that stopped asking is bounded).
MAX_GROUP_CHANGES = 4096


@dataclass(frozen=True, slots=True)
class DirtyWorkloads:
    """What changed since a reader's last `ClusterState.take_dirty`: workloads (kind, namespace, name) whose
    objects, ReplicaSets or pods changed (a pod's placement too: its node came, went or changed capacity
    type or pool), namespaces whose PDBs or labels changed, or `everything` (a capacity-label key new to
    the cluster, so every node's capacity type may have changed)."""

    everything: bool = False
    workloads: frozenset[tuple[str, str, str]] = frozenset()
    namespaces: frozenset[str] = frozenset()

    def covers(self, kind: str, namespace: str, name: str) -> bool:
        return self.everything or namespace in self.namespaces or (kind, namespace, name) in self.workloads


@dataclass(slots=True)
class _ShareSums:
    """The nodes' `NodeShare`s summed: each spot pool's nodes (and a region), the on-demand, avoided
    nodes, the noticed nodes per pool, and the nodes carrying each spot taint."""

    pool_nodes: dict[Pool, set[str]] = field(default_factory=dict)
    regions: dict[Pool, str | None] = field(default_factory=dict)
    on_demand: set[str] = field(default_factory=set)
    avoided: set[str] = field(default_factory=set)
    noticed: dict[Pool, int] = field(default_factory=dict)
    taints: dict[tuple[str, Any, Any], int] = field(default_factory=dict)

    def add(self, name: str, share: NodeShare, sign: int) -> None:
        pool = share.pool
        if pool is not None:
            members = self.pool_nodes.setdefault(pool, set())
            if sign > 0:
                members.add(name)
                self.regions.setdefault(pool, share.region)
            else:
                members.discard(name)
                if not members:
                    del self.pool_nodes[pool]
                    self.regions.pop(pool, None)
            if share.noticed:
                count = self.noticed.get(pool, 0) + sign
                if count > 0:
                    self.noticed[pool] = count
                else:
                    self.noticed.pop(pool, None)
        for names, flag in ((self.on_demand, share.on_demand), (self.avoided, share.avoided)):
            if flag:
                if sign > 0:
                    names.add(name)
                else:
                    names.discard(name)
        for ident in share.taints:
            count = self.taints.get(ident, 0) + sign
            if count > 0:
                self.taints[ident] = count
            else:
                self.taints.pop(ident, None)


@dataclass(slots=True)
class _GroupChanges:
    """The pods of a group that changed since the group's version `since` (None: too many to list)."""

    since: int
    keys: set[tuple[str, str]] | None = field(default_factory=set)


@dataclass(slots=True)
class _Ranking:
    """The nodes of one answer of the node filter (`eligible`) a pod with given requests fits on,
    fullest first once it is on them ((-fill, name), sorted), each node's entry (None: it does not fit)
    and position in `eligible`, and how far into the state's usage-change log it is caught up."""

    eligible: tuple[tuple[str, str, int, int, int], ...]
    seen: int
    positions: dict[str, int]
    keys: dict[str, tuple[float, str] | None] = field(default_factory=dict)
    entries: list[tuple[float, str]] = field(default_factory=list)


@dataclass(slots=True)
class _KeptWorkload:
    """A workload's state and what it was derived from, so that a change of a few of its pods updates it
    pod by pod (`ClusterState.workload_state`): the active pods' names in order, their states in the
    same order, each one's group, and the active pods per group."""

    spec: object
    uid: object
    policy: WorkloadPolicy
    pdb_version: int
    node_version: int
    groups: tuple[GroupKey, ...]
    versions: list[int]
    names: list[str]
    pods: list[PodState]
    group_of: dict[str, GroupKey]
    active: dict[GroupKey, int]
    state: WorkloadState


@dataclass(slots=True)
class _PlacedCounts:
    """A group's active pods by capacity and pool (`ClusterState._placed_counts`) as of a group
    version and a node version, with what each counted pod adds, and the pods that joined, changed
    or left the group since (`pending`), whose shares are worked out again at the next read."""

    group_version: int
    node_version: int
    counts: GroupCounts
    shares: dict[tuple[str, str], tuple[CapacityType, Pool | None]]
    pending: set[tuple[str, str]]


@dataclass(slots=True)
class _DirtyAccount:
    """One reader's `DirtyWorkloads` in the making."""

    everything: bool = False
    workloads: set[tuple[str, str, str]] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)


def resource_version(obj: Mapping[str, Any]) -> int | None:
    """An object's resourceVersion as a number, or None (absent, or not a number: no ordering then).
    Kubernetes calls it opaque; the API server (etcd's revision) and the emulator both number
    versions globally, which is what ordering events by it assumes."""
    raw = (obj.get("metadata") or {}).get("resourceVersion")
    if raw is None or isinstance(raw, bool):
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return str(md.get("namespace") or ""), str(md.get("name") or "")


def read_decision(pod: Mapping[str, Any]) -> DecisionRecord | None:
    """The webhook's decision record on a pod; None when absent, or (with a logged reason) unreadable."""
    return DecisionRecord.read(pod)


def node_pool(
    node: Mapping[str, Any], conventions: capacity_labels.Conventions = capacity_labels.DEFAULT
) -> Pool | None:
    """A spot node's pool (instance type x zone); None for other nodes. Spot is said by a label value,
    so no knowledge of the cluster's other nodes is needed (`kube.capacity`)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if conventions.classify(labels) != capacity_labels.SPOT:
        return None
    instance_type, zone = labels.get(INSTANCE_TYPE_LABEL), labels.get(ZONE_LABEL)
    if not instance_type or not zone:
        return None
    return Pool(instance_type, zone)


# The capacity types by label value: a dict lookup instead of the enum's call, for the loops that
# read every node's capacity type each round.
_CAPACITY_TYPES = {capacity.value: capacity for capacity in CapacityType}


def node_capacity(
    node: Mapping[str, Any],
    present: Iterable[str] | None = None,
    conventions: capacity_labels.Conventions = capacity_labels.DEFAULT,
) -> CapacityType | None:
    """A node's capacity type by the capacity-label conventions; `present`, the convention keys the
    cluster's nodes carry (an unlabelled node is on-demand where a convention in use labels only spot
    nodes, see `kube.capacity`)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    value = conventions.classify(labels, present)
    return None if value is None else _CAPACITY_TYPES[value]


def _takes_pods(node: Mapping[str, Any]) -> bool:
    """Ready, not cordoned and not being deleted."""
    metadata, spec = node.get("metadata") or {}, node.get("spec") or {}
    if spec.get("unschedulable") or metadata.get("deletionTimestamp"):
        return False
    return node_ready(node)


def taint_keys(node: Mapping[str, Any]) -> set[str]:
    return {str(t.get("key")) for t in (node.get("spec") or {}).get("taints") or []}


@dataclass(frozen=True, slots=True)
class PodUsage:
    """Where a pod's requests count: `packed` (its node, or the node its decision packed it onto while
    it is pending) and `bound` (its node); its role: workload, daemon or placeholder."""

    packed: str
    bound: str
    cpu: int
    memory: int
    role: str
    # The pod spec the requests were read from: another spec object is read again (in-place resize
    # changes requests; an in-process store shares an unchanged spec between versions).
    spec: object = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class NodeSummary:
    spot_pools: Mapping[Pool, str | None]
    # Pools with a node that carries a spot interruption taint right now.
    noticed_pools: frozenset[Pool]
    # Nodes that take no new pods: a termination notice or a rebalance recommendation.
    avoided: frozenset[str]
    tolerations: tuple[Obj, ...]
    # The names of each spot pool's nodes.
    pool_nodes: Mapping[Pool, frozenset[str]] = field(default_factory=dict)
    on_demand_nodes: frozenset[str] = frozenset()


def _same_pdb_facts(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether what workload states derive from a PodDisruptionBudget (its spec: selector, minAvailable,
    maxUnavailable; its labels) is the same in both versions: a renewed guard's expiry annotation or a
    status update rebuilds no workload state."""
    old_md, new_md = old.get("metadata") or {}, new.get("metadata") or {}
    return old.get("spec") == new.get("spec") and old_md.get("labels") == new_md.get("labels")


def _same_node_facts(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether everything the cache derives from a node (labels, taints and the rest of the spec,
    deletion, capacity, allocatable, readiness) is the same in both versions. Cheap where the two
    share their unchanged parts, as an in-process store's versions do; otherwise False (work it out)."""
    old_md, new_md = old.get("metadata") or {}, new.get("metadata") or {}
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    return (
        old.get("spec") is new.get("spec")
        and old_md.get("labels") is new_md.get("labels")
        and old_md.get("deletionTimestamp") == new_md.get("deletionTimestamp")
        and old_status.get("allocatable") is new_status.get("allocatable")
        and old_status.get("capacity") is new_status.get("capacity")
        and node_ready(old) == node_ready(new)
    )


# Keys whose change may change a node's capacity type (those of any convention, configured ones
# included, are read by `ClusterState`; this set is what the summary compares).
_CAPACITY_KEYS: frozenset[str] = capacity_labels.DEFAULT.keys


def _summary_facts(node: Mapping[str, Any], keys: frozenset[str] = _CAPACITY_KEYS) -> tuple[Any, ...]:
    """What `summarize_nodes` reads of a node: a change elsewhere (status, heartbeats) keeps the summary."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    taints = tuple(
        (t.get("key"), t.get("value"), t.get("effect")) for t in (node.get("spec") or {}).get("taints") or []
    )
    return (
        tuple(sorted((key, value) for key, value in labels.items() if key in keys)),
        tuple(sorted((key, value) for key, value in labels.items() if key in growth.NODE_GROUP_LABELS)),
        labels.get(INSTANCE_TYPE_LABEL),
        labels.get(ZONE_LABEL),
        labels.get(REGION_LABEL),
        taints,
    )


@dataclass(frozen=True, slots=True)
class NodeShare:
    """What one node adds to the `NodeSummary`: its spot pool (and region), whether it is on-demand,
    avoided (a notice or rebalance taint), noticed (a spot notice taint on a spot pool's node), and
    the spot taints a spot-bound pod must tolerate there, as (key, value, effect)."""

    pool: Pool | None
    region: str | None
    on_demand: bool
    avoided: bool
    noticed: bool
    taints: tuple[tuple[str, Any, Any], ...]


def node_share(
    node: Mapping[str, Any],
    present: frozenset[str] | None = None,
    conventions: capacity_labels.Conventions = capacity_labels.DEFAULT,
) -> NodeShare:
    """`NodeShare` of a node (what `summarize_nodes` reads of it)."""
    metadata = node.get("metadata") or {}
    pool = node_pool(node, conventions)
    keys = taint_keys(node)
    capacity = node_capacity(node, present, conventions)
    taints: list[tuple[str, Any, Any]] = []
    if capacity is CapacityType.SPOT:
        for taint in (node.get("spec") or {}).get("taints") or []:
            key = str(taint.get("key"))
            if (key not in SPOT_TAINT_KEYS and key not in conventions.keys) or taint.get("effect") not in (
                "NoSchedule",
                "NoExecute",
            ):
                continue
            taints.append((key, taint.get("value"), taint.get("effect")))
    return NodeShare(
        pool=pool,
        region=(metadata.get("labels") or {}).get(REGION_LABEL) if pool is not None else None,
        on_demand=capacity is CapacityType.ON_DEMAND,
        avoided=bool(keys & (NOTICE_TAINTS | REBALANCE_TAINTS)),
        noticed=pool is not None and bool(keys & SPOT_NOTICE_TAINTS),
        taints=tuple(taints),
    )


def _toleration(ident: tuple[str, Any, Any]) -> Obj:
    key, value, effect = ident
    toleration: Obj = {"key": key, "operator": "Equal", "effect": effect}
    if value is not None:
        toleration["value"] = value
    return toleration


def _spot_tolerations(config: ControllerConfig, idents: Iterable[tuple[str, Any, Any]]) -> tuple[Obj, ...]:
    """The configured spot tolerations, plus one per spot taint found on spot nodes, in ident order."""
    found: dict[tuple[str, Any, Any], Obj] = {}
    for spec in config.spot_tolerations:
        found[(spec.key, spec.value, spec.effect)] = spec.to_toleration()
    for ident in idents:
        if ident not in found:
            found[ident] = _toleration(ident)
    ordered = sorted(found, key=lambda i: (i[0], i[1] or "", i[2] or ""))
    return tuple(found[i] for i in ordered)


def summarize_nodes(
    nodes: Iterable[Mapping[str, Any]],
    config: ControllerConfig,
    present: Iterable[str] | None = None,
    conventions: capacity_labels.Conventions = capacity_labels.DEFAULT,
) -> NodeSummary:
    present = frozenset(present) if present is not None else None
    pools: dict[Pool, str | None] = {}
    pool_nodes: dict[Pool, set[str]] = {}
    on_demand: set[str] = set()
    noticed: set[Pool] = set()
    avoided: set[str] = set()
    idents: dict[tuple[str, Any, Any], None] = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        share = node_share(node, present, conventions)
        if share.pool is not None:
            pools.setdefault(share.pool, share.region)
            pool_nodes.setdefault(share.pool, set()).add(name)
            if share.noticed:
                noticed.add(share.pool)
        if share.avoided:
            avoided.add(name)
        if share.on_demand:
            on_demand.add(name)
        idents.update(dict.fromkeys(share.taints))
    return NodeSummary(
        pools,
        frozenset(noticed),
        frozenset(avoided),
        _spot_tolerations(config, idents),
        {pool: frozenset(names) for pool, names in pool_nodes.items()},
        frozenset(on_demand),
    )


class ClusterState:
    """Objects by kind and key, plus the indexes the webhook and the loops read."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.conventions = config.conventions()
        self._capacity_keys = self.conventions.keys
        # The capacity-label keys the cluster's nodes carry or carried (they outlive the nodes: a GKE
        # cluster whose spot nodes are gone still labels on-demand by the label's absence).
        self._present: frozenset[str] = frozenset()
        # Spot pools ever seen (or configured), with their region and the node-group names their nodes
        # carried: a pool outlives its nodes, with its risk history and cool-down.
        self._known_pools: dict[Pool, str | None] = {
            Pool(spec.instance_type, spec.zone): config.region for spec in config.node_groups
        }
        self._known_groups: dict[Pool, frozenset[str]] = {}
        self._growth: dict[Pool, bool] | None = None
        self._spot_anywhere = False
        self._autoscaled = False
        self._autoscaler_groups: list[growth.GroupStatus] | None = None
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {kind: {} for kind in KINDS}
        self._pods_by_group: dict[GroupKey, dict[tuple[str, str], Obj]] = {}
        # In insertion order, which is expiry order (one TTL, time never goes back).
        self._assumed: dict[str, Assumption] = {}
        self._assumed_by_group: dict[GroupKey, dict[str, Assumption]] = {}
        self._assumed_totals: dict[GroupKey, GroupCounts] = {}
        self._node_summary: NodeSummary | None = None
        # Each node's share of the summary, and their sums, kept per node event (`_share`) so that the
        # summary is put together without reading every node again; None: every share is read again
        # at the next `_nodes` (a capacity-label key new to the cluster changes how nodes classify).
        self._shares: dict[str, NodeShare] | None = {}
        self._share_sums = _ShareSums()
        # `packing_rooms`' node filter per (capacity, pool, affinity, tolerations): the nodes a pod of
        # that shape may land on, with their host and allocatable. Cleared whenever a node changes
        # anything the filter reads (`_nodes_changed`); pods of one workload share one entry.
        self._eligible: dict[Hashable, tuple[tuple[str, str, int, int, int], ...]] = {}
        # `fullest_rooms`' rankings per (pod shape, requests), and the nodes whose requested sums changed
        # (in order, numbered from `_usage_log_base`; kept only while there are rankings to catch up).
        self._rankings: dict[tuple[Hashable, tuple[int, int]], _Ranking] = {}
        self._usage_log: list[str] = []
        self._usage_log_base = 0
        # Where each pod counts (capacity, pool); dropped when the pod changes, or when its node's
        # placement (its capacity type or pool) does, or its node comes or goes.
        self._placements: dict[tuple[str, str], tuple[CapacityType | None, Pool | None]] = {}
        # The pods bound to each node name (`spec.nodeName`, whether or not the node is known): the
        # placements a node's move changes.
        self._pods_on_node: dict[str, dict[tuple[str, str], None]] = {}
        # Per node name: the node object and its (capacity, pool), read once per node object (every
        # pod placement read again after a node move asks its node's).
        self._node_placements: dict[str, tuple[Obj, tuple[CapacityType | None, Pool | None]]] = {}
        # Versions of what a workload's state is derived from, so that the loops rebuild only the
        # workloads whose inputs changed: pods per group (and the ReplicaSet itself; a node's move
        # touches the groups of its pods), PDBs per namespace, every node's placement (`_node_version`,
        # after a capacity-label key new to the cluster) (`workload_state`).
        self._versions = itertools.count(1)
        self._group_versions: dict[GroupKey, int] = {}
        # Per group: its pods' counts, brought up to date for the pods changed since (`_placed_counts`).
        self._placed: dict[GroupKey, _PlacedCounts] = {}
        self._pdb_versions: dict[str, int] = {}
        self._pdb_answers: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Obj, ...]] = {}
        # Each pod's state as the loops see it, with the pod object and the inputs it was derived from.
        self._pod_states: dict[tuple[str, str], tuple[Mapping[str, Any], Hashable, PodState]] = {}
        self._node_version = 0
        # Changes of anything the loops' view of managed workloads reads (every kind but Node, and
        # node placements): equal versions give the same `Reconciler.managed` answer.
        self._workloads_version = 0
        # `managed`'s answer: the workloads version and the config it was worked out for. It is brought
        # up to date from its own account of the dirty workloads (`take_dirty`): each Deployment's and
        # StatefulSet's entry (None: not managed), the position of the managed ones in the answer, and
        # whether a workload object came or went since (the answer's order follows the objects').
        self._managed: tuple[int, ControllerConfig, tuple[Managed, ...]] | None = None
        self._managed_entries: dict[WorkloadKey, Managed | None] = {}
        self._managed_positions: dict[WorkloadKey, int] = {}
        self._workloads_moved = True
        self._replicasets_of: dict[tuple[str, str], set[str]] = {}
        # Each workload's state (`workload_state`), with the workload's spec and uid (all it reads of the
        # object: a status update shares the spec) and the inputs it was derived from; and, per group
        # of a kept workload, the pods that changed since the version it was read at.
        self._workload_states: dict[WorkloadKey, _KeptWorkload] = {}
        self._group_changes: dict[GroupKey, _GroupChanges] = {}
        # Each workload's policy, with the annotations (all it reads of the object), namespace labels and
        # config it was read from.
        self._policies: dict[
            tuple[str, str, str], tuple[object, Mapping[str, str], ControllerConfig, PolicyResult]
        ] = {}
        # Pods not bound to a node yet (what the spot fallback scans).
        self._unbound: dict[tuple[str, str], Obj] = {}
        # What the pods on each node, and the pending ones packed onto it, request (cpu, memory, pods),
        # kept per pod event, and each node's allocatable (cpu, memory, pods): the rooms the webhook
        # packs pods into.
        self._pod_usage: dict[tuple[str, str], PodUsage] = {}
        self._node_usage: dict[str, list[int]] = {}
        self._allocatable: dict[str, tuple[int, int, int]] = {}
        # Per node: its capacity type and whether it takes replacements (`packing.takes_replacements`).
        self._node_facts: dict[str, tuple[CapacityType | None, bool]] = {}
        # The nodes of each capacity type by name, in the cache's node order (`nodes_of_capacity`: the
        # metadata poll's list of spot nodes); None: to be read again from every node (after a node's
        # capacity type changed).
        self._capacity_nodes: dict[CapacityType | None, dict[str, Obj]] | None = None
        # What the bound pods other than placeholders request per node (cpu, memory, pods) and how
        # many of them are not DaemonSet pods: the room the headroom counts on (`spare_rooms`).
        self._bound_usage: dict[str, list[int]] = {}
        # Nodes by name in the cache's order, and the names of those with a notice taint.
        self._node_by_name: dict[str, Obj] = {}
        self._noticed: set[str] = set()
        # `spare_rooms`' answer until one of its inputs changes (None: work it out again).
        self._spare_rooms: tuple[Room, ...] | None = None
        # Ordering: the resourceVersion of each object held and of recent deletions, per kind, and
        # the newest version the last relist of each kind held; an older event is stale and dropped.
        self._seen: dict[str, dict[tuple[str, str], int]] = {kind: {} for kind in KINDS}
        self._tombstones: deque[tuple[str, tuple[str, str]]] = deque()
        self._floors: dict[str, int] = {}
        # What changed since the last `take_dirty` of any reader, and each reader's account of what
        # changed since it last asked.
        self._dirty_groups: set[GroupKey] = set()
        self._dirty_namespaces: set[str] = set()
        self._dirty_all = True
        self._dirty_readers: dict[Hashable, _DirtyAccount] = {}

    # --- feeding ---------------------------------------------------------------------------------

    def apply(self, event: Mapping[str, Any], kind: str | None = None) -> None:
        """Apply one watch event; `kind` for list items, which carry no `kind` of their own."""
        obj = event.get("object") or {}
        obj_kind = kind or obj.get("kind")
        if obj_kind not in self._objects:
            return
        key = _key(obj)
        version = resource_version(obj)
        if version is not None and self._stale(obj_kind, key, version):
            return
        if event.get("type") == "DELETED":
            self._remove(obj_kind, key)
            if version is not None:
                self._bury(obj_kind, key, version)
        elif event.get("type") in ("ADDED", "MODIFIED"):
            self._put(obj_kind, key, dict(obj))
            if version is not None:
                self._seen[obj_kind][key] = version
        if not self._dirty_readers:
            self._drop_unread_marks()

    def replace(self, kind: str, items: Iterable[Obj]) -> None:
        """Replace every object of a kind (after a relist). The newest version listed becomes the kind's
        floor: an event older than it is already reflected in the list."""
        held = list(self._objects[kind])
        for key in held:
            self._remove(kind, key)
        seen = self._seen[kind]
        listed: list[int] = []
        for item in items:
            key = _key(item)
            self._put(kind, key, item)
            version = resource_version(item)
            if version is not None:
                seen[key] = version
                listed.append(version)
        if listed:
            self._floors[kind] = max(self._floors.get(kind, 0), *listed)
        # What the list no longer holds keeps its last known version, as a tombstone.
        for key in held:
            if key in seen and key not in self._objects[kind]:
                self._tombstones.append((kind, key))
        self._trim_tombstones()
        if not self._dirty_readers:
            self._drop_unread_marks()

    def _stale(self, kind: str, key: tuple[str, str], version: int) -> bool:
        """Whether an event is older than what the state knows of its object (held, deleted, or listed)."""
        known = self._seen[kind].get(key)
        if known is not None:
            return version < known
        return version < self._floors.get(kind, 0)

    def _bury(self, kind: str, key: tuple[str, str], version: int) -> None:
        """Remember a deletion's version (the last `TOMBSTONES` deletions)."""
        self._seen[kind][key] = version
        self._tombstones.append((kind, key))
        self._trim_tombstones()

    def _trim_tombstones(self) -> None:
        while len(self._tombstones) > TOMBSTONES:
            old_kind, old_key = self._tombstones.popleft()
            if old_key not in self._objects[old_kind]:
                self._seen[old_kind].pop(old_key, None)

    def take_dirty(self, reader: Hashable = "") -> DirtyWorkloads:
        """What changed since `reader` last asked (every workload at its first call): the workloads to
        look at again. Each reader (a loop) has its own account, so one taking its changes leaves the
        others theirs."""
        self._spread_dirty()
        kept = self._dirty_readers.get(reader)
        self._dirty_readers[reader] = _DirtyAccount()
        if kept is None:
            return DirtyWorkloads(everything=True)
        return DirtyWorkloads(kept.everything, frozenset(kept.workloads), frozenset(kept.namespaces))

    def _drop_unread_marks(self) -> None:
        """Marks with no reader to go to: a reader's first `take_dirty` answers everything anyway,
        and a replica no loop reads (the webhook's) would otherwise keep every workload name it saw."""
        self._dirty_groups.clear()
        self._dirty_namespaces.clear()

    def _spread_dirty(self) -> None:
        """What changed since the last spread, resolved to workloads, onto every reader's account."""
        if not (self._dirty_all or self._dirty_groups or self._dirty_namespaces):
            return
        workloads: set[tuple[str, str, str]] = set()
        for group in self._dirty_groups:
            if group.kind != "ReplicaSet":
                workloads.add((group.kind, group.namespace, group.name))
                continue
            rs = self._objects["ReplicaSet"].get((group.namespace, group.name))
            owner = controller_ref(rs) if rs is not None else None
            if owner is not None and owner.get("kind") == "Deployment":
                workloads.add(("Deployment", group.namespace, str(owner.get("name"))))
        for account in self._dirty_readers.values():
            if self._dirty_all:
                account.everything = True
            if not account.everything:
                account.workloads |= workloads
                account.namespaces |= self._dirty_namespaces
        self._dirty_groups.clear()
        self._dirty_namespaces.clear()
        self._dirty_all = False

    def _put(self, kind: str, key: tuple[str, str], obj: Obj) -> None:
        if kind in ("ConfigMap", "NodePool"):
            if kind == "ConfigMap" and key != growth.AUTOSCALER_STATUS:
                return
            self._objects[kind][key] = obj
            self._growth = self._autoscaler_groups = None
            return
        if kind != "Node":
            self._workloads_version = next(self._versions)
        if kind == "Node":
            old = self._objects["Node"].get(key)
            self._see_conventions(obj)
            if old is not None and _same_node_facts(old, obj):
                # A status report or heartbeat: nothing derived from the node changes.
                self._node_by_name[key[1]] = obj
                if self._capacity_nodes is not None:
                    self._capacity_nodes[self._node_facts[key[1]][0]][key[1]] = obj
                placement = self._node_placements.get(key[1])
                if placement is not None:
                    self._node_placements[key[1]] = (obj, placement[1])
                self._objects[kind][key] = obj
                return
            self._eligible.clear()  # readiness, taints, labels or allocatable may have changed
            if old is None or _summary_facts(old, self._capacity_keys) != _summary_facts(
                obj, self._capacity_keys
            ):
                self._node_summary = None
                self._share(key[1], obj)
            if old is None or self.node_placement(old) != self.node_placement(obj):
                self._node_moved(key[1])
            allocatable = node_allocatable(obj)
            amounts = (allocatable.get("cpu", 0), allocatable.get("memory", 0), allocatable.get("pods", 0))
            self._know_pool(obj)
            capacity = self.node_capacity(obj)
            facts = (capacity, takes_replacements(obj, capacity))
            before = self._node_facts.get(key[1])
            if self._allocatable.get(key[1]) != amounts or before != facts:
                self._spare_rooms = None
            self._allocatable[key[1]] = amounts
            self._node_facts[key[1]] = facts
            if self._capacity_nodes is not None:
                if before is not None and before[0] is not capacity:
                    self._capacity_nodes = None  # its place among the others of its new type: read again
                else:  # the same place, or a new node: the last, as in `_objects`
                    self._capacity_nodes.setdefault(capacity, {})[key[1]] = obj
            self._node_by_name[key[1]] = obj
            if taint_keys(obj) & NOTICE_TAINTS:
                self._noticed.add(key[1])
            else:
                self._noticed.discard(key[1])
        elif kind == "Pod":
            self._placements.pop(key, None)
            self._unindex_pod(key)
            decision = read_decision(obj)
            self._account(key, obj, decision)
            node_name = (obj.get("spec") or {}).get("nodeName")
            if node_name:
                self._pods_on_node.setdefault(str(node_name), {})[key] = None
                self._unbound.pop(key, None)
            else:
                self._unbound[key] = obj
            group = self._group_of_pod(obj)
            if group is not None:
                self._pods_by_group.setdefault(group, {})[key] = obj
                self._touch(group, key)
            if decision is not None:
                self._forget(decision.id)
        elif kind == "ReplicaSet":
            self._unindex_replicaset(key)
            owner = controller_ref(obj)
            if owner is not None and owner.get("kind") == "Deployment":
                self._replicasets_of.setdefault((key[0], str(owner.get("name"))), set()).add(key[1])
                self._dirty_groups.add(GroupKey(key[0], "Deployment", str(owner.get("name"))))
            self._touch(GroupKey(key[0], "ReplicaSet", key[1]))
        elif kind == "PodDisruptionBudget":
            old = self._objects[kind].get(key)
            if old is None or not _same_pdb_facts(old, obj):
                # A renewed guard's expiry or a status update changes no workload's state.
                self._pdb_versions[key[0]] = next(self._versions)
                self._dirty_namespaces.add(key[0])
            self._pdb_answers.clear()
        elif kind == "Namespace":
            self._dirty_namespaces.add(key[1])
        elif kind in ("Deployment", "StatefulSet"):
            self._dirty_groups.add(GroupKey(key[0], kind, key[1]))
            if key not in self._objects[kind]:
                self._workloads_moved = True
        self._objects[kind][key] = obj

    def _remove(self, kind: str, key: tuple[str, str]) -> None:
        if kind in ("ConfigMap", "NodePool"):
            if self._objects[kind].pop(key, None) is not None:
                self._growth = self._autoscaler_groups = None
            return
        if kind != "Node":
            self._workloads_version = next(self._versions)
        if kind == "Node":
            self._node_placements.pop(key[1], None)
            self._node_summary = None
            self._share(key[1], None)
            self._eligible.clear()
            self._spare_rooms = None
            self._allocatable.pop(key[1], None)
            facts = self._node_facts.pop(key[1], None)
            if self._capacity_nodes is not None and facts is not None:
                self._capacity_nodes.get(facts[0], {}).pop(key[1], None)
            self._node_by_name.pop(key[1], None)
            self._noticed.discard(key[1])
            if key in self._objects["Node"]:
                self._node_moved(key[1])
        elif kind == "Pod":
            self._placements.pop(key, None)
            self._pod_states.pop(key, None)
            self._unindex_pod(key)
            self._account(key, None)
            self._unbound.pop(key, None)
        elif kind == "ReplicaSet":
            self._unindex_replicaset(key)
            self._touch(GroupKey(key[0], "ReplicaSet", key[1]))
        elif kind == "PodDisruptionBudget":
            self._pdb_versions[key[0]] = next(self._versions)
            self._pdb_answers.clear()
            self._dirty_namespaces.add(key[0])
        elif kind == "Namespace":
            self._dirty_namespaces.add(key[1])
        elif kind in ("Deployment", "StatefulSet"):
            self._dirty_groups.add(GroupKey(key[0], kind, key[1]))
            self._workload_states.pop((kind, key[0], key[1]), None)
            self._policies.pop((kind, key[0], key[1]), None)
            if key in self._objects[kind]:
                self._workloads_moved = True
        self._objects[kind].pop(key, None)

    def _account(
        self, key: tuple[str, str], pod: Mapping[str, Any] | None, decision: DecisionRecord | None = None
    ) -> None:
        """Move the pod's requests to the nodes it counts on now (none once it is gone or finished).

        For packing, a pod not bound yet counts on the node its decision packed it onto (the decision's
        `node`), as kube-scheduler's assumed pods do: a burst of creations then fills one node after
        another instead of every pod preferring the same node. For the headroom's room, only bound
        pods count, placeholders not at all. A pod's requests are parsed again only from another spec
        object (`PodUsage.spec`).
        """
        packed, bound = "", ""
        if pod is not None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            bound = str((pod.get("spec") or {}).get("nodeName") or "")
            packed = bound or (decision.node if decision is not None else "")
        old = self._pod_usage.get(key)
        spec = pod.get("spec") if pod is not None else None
        if old is not None and old.spec is spec and old.packed == packed and old.bound == bound:
            return
        if pod is None or not (packed or bound):
            if old is not None:
                self._count(old, -1)
            self._pod_usage.pop(key, None)
            return
        if old is not None and old.spec is spec:
            usage = PodUsage(packed, bound, old.cpu, old.memory, old.role, spec)
        else:
            role = "placeholder" if is_placeholder(pod) else "daemon" if is_daemon_pod(pod) else "workload"
            usage = PodUsage(packed, bound, *pod_requests(pod), role, spec)
            if old is not None and old == usage:  # the same requests from another spec object
                self._pod_usage[key] = usage
                return
        if old is not None:
            self._count(old, -1)
        self._pod_usage[key] = usage
        self._count(usage, 1)

    def _count(self, usage: PodUsage, sign: int) -> None:
        if usage.packed:
            if self._rankings:  # the packing rankings rank this node again (`fullest_rooms`)
                self._usage_log.append(usage.packed)
                if len(self._usage_log) > MAX_USAGE_LOG:
                    self._usage_log_base += len(self._usage_log)
                    self._usage_log.clear()
            used = self._node_usage.setdefault(usage.packed, [0, 0, 0])
            used[0] += sign * usage.cpu
            used[1] += sign * usage.memory
            used[2] += sign
            if used[2] <= 0:
                del self._node_usage[usage.packed]
        if usage.bound and usage.role != "placeholder":
            self._spare_rooms = None
            held = self._bound_usage.setdefault(usage.bound, [0, 0, 0, 0])
            held[0] += sign * usage.cpu
            held[1] += sign * usage.memory
            held[2] += sign
            held[3] += sign if usage.role == "workload" else 0
            if held[2] <= 0:
                del self._bound_usage[usage.bound]

    def spare_rooms(self) -> tuple[Room, ...]:
        """The room left on each node that takes replacements and runs a workload pod, in the cache's
        node order, from the per-node sums of bound pods' requests.

        The room placeholders hold counts as free (replacements preempt them), which keeps the answer
        independent of where the placeholders landed. Nodes without a workload pod (only DaemonSet
        pods and placeholders) count for nothing: the autoscaler may remove them, unless the
        placeholders the headroom asks for keep them. Worked out again only after a node or a bound
        pod changed what it reads.
        """
        if self._spare_rooms is not None:
            return self._spare_rooms
        rooms: list[Room] = []
        for (_, name), node in self._objects["Node"].items():
            held = self._bound_usage.get(name)
            allocatable = self._allocatable.get(name)
            if held is None or held[3] <= 0 or allocatable is None or not self._node_facts[name][1]:
                continue
            cpu, memory, pods = (allocatable[0] - held[0], allocatable[1] - held[1], allocatable[2] - held[2])
            if cpu > 0 and memory > 0 and pods > 0:
                rooms.append(Room(self._kept_node_placement(name, node)[1], cpu, memory, pods))
        self._spare_rooms = tuple(rooms)
        return self._spare_rooms

    def requested_on(self, node: str) -> tuple[int, int, int]:
        """What the pods on a node, and the pending ones packed onto it, request: cpu millicores, memory
        bytes, pods."""
        used = self._node_usage.get(node)
        return (used[0], used[1], used[2]) if used is not None else (0, 0, 0)

    def packing_rooms(
        self,
        pod: Mapping[str, Any],
        capacity: CapacityType,
        pool: Pool | None = None,
        tolerations: Iterable[Mapping[str, Any]] = (),
        avoided: Iterable[str] = (),
    ) -> list[NodeRoom]:
        """The nodes of `capacity` (of `pool`, for spot) a new pod could be scheduled on, with their room.

        Ready, schedulable nodes not being deleted, not `avoided`, whose NoSchedule/NoExecute taints the
        pod (with the extra `tolerations`) tolerates and that pass its nodeSelector and required node
        affinity.
        """
        _, eligible = self._eligible_for(pod, capacity, pool, tolerations)
        skipped = set(avoided)
        rooms: list[NodeRoom] = []
        for name, host, cpu_allocatable, memory_allocatable, pods_allocatable in eligible:
            if name in skipped:
                continue
            cpu, memory, pods = self.requested_on(name)
            rooms.append(
                NodeRoom(name, host, cpu_allocatable, memory_allocatable, pods_allocatable, cpu, memory, pods)
            )
        return rooms

    def fullest_rooms(
        self,
        pod: Mapping[str, Any],
        requests: tuple[int, int],
        capacity: CapacityType,
        pool: Pool | None = None,
        tolerations: Iterable[Mapping[str, Any]] = (),
        avoided: Iterable[str] = (),
        limit: int = len(PACKING_WEIGHTS),
    ) -> tuple[NodeRoom, ...]:
        """`packing.fullest_fitting(requests, self.packing_rooms(...))`, from a ranking kept per pod
        shape and requests (the webhook asks for every pod it places; the same arithmetic, so the same
        answer): the `limit` nodes fullest once a pod requesting `requests` is on them, among those it
        fits and not `avoided`, fullest first, ties by name.

        The ranking holds every eligible node the pod fits on, sorted; a node whose requested sums
        changed since (a pod came, went or was packed onto it) is ranked again at the next question,
        and a new answer of the node filter (a node changed) ranks them all again."""
        shape, eligible = self._eligible_for(pod, capacity, pool, tolerations)
        ranking = self._rankings.get((shape, requests))
        log, base = self._usage_log, self._usage_log_base
        if ranking is None or ranking.eligible is not eligible or ranking.seen < base:
            if ranking is None and len(self._rankings) >= MAX_RANKINGS:
                self._rankings.clear()
            ranking = self._rankings[(shape, requests)] = self._rank(eligible, requests)
        elif ranking.seen < base + len(log):
            for name in set(log[ranking.seen - base :]):
                if name in ranking.positions:
                    self._rerank(ranking, name, requests)
        ranking.seen = base + len(log)
        skipped = avoided if isinstance(avoided, (set, frozenset)) else set(avoided)
        usage = self._node_usage
        rooms: list[NodeRoom] = []
        for _, name in ranking.entries:
            if len(rooms) == limit:
                break
            if name in skipped:
                continue
            _, host, cpu_allocatable, memory_allocatable, pods_allocatable = eligible[ranking.positions[name]]
            used = usage.get(name)
            cpu, memory, pods = (used[0], used[1], used[2]) if used else (0, 0, 0)
            rooms.append(
                NodeRoom(name, host, cpu_allocatable, memory_allocatable, pods_allocatable, cpu, memory, pods)
            )
        return tuple(rooms)

    def _rank(
        self, eligible: tuple[tuple[str, str, int, int, int], ...], requests: tuple[int, int]
    ) -> _Ranking:
        ranking = _Ranking(eligible, 0, {entry[0]: position for position, entry in enumerate(eligible)})
        for name in ranking.positions:
            entry = ranking.keys[name] = self._rank_entry(eligible[ranking.positions[name]], requests)
            if entry is not None:
                ranking.entries.append(entry)
        ranking.entries.sort()
        return ranking

    def _rerank(self, ranking: _Ranking, name: str, requests: tuple[int, int]) -> None:
        old = ranking.keys.get(name)
        if old is not None:
            del ranking.entries[bisect.bisect_left(ranking.entries, old)]
        new = ranking.keys[name] = self._rank_entry(ranking.eligible[ranking.positions[name]], requests)
        if new is not None:
            bisect.insort(ranking.entries, new)

    def _rank_entry(
        self, node: tuple[str, str, int, int, int], requests: tuple[int, int]
    ) -> tuple[float, str] | None:
        """(-fill, name) of a node once a pod requesting `requests` is on it (`NodeRoom.fill_with`'s
        arithmetic); None when the pod does not fit."""
        name, _, cpu_allocatable, memory_allocatable, pods_allocatable = node
        used = self._node_usage.get(name)
        cpu_requested, memory_requested, pods = (used[0], used[1], used[2]) if used else (0, 0, 0)
        cpu_after, memory_after = cpu_requested + requests[0], memory_requested + requests[1]
        if (
            cpu_after > cpu_allocatable
            or memory_after > memory_allocatable
            or pods + 1 > pods_allocatable
            or cpu_allocatable <= 0
            or memory_allocatable <= 0
        ):
            return None
        return (-((cpu_after / cpu_allocatable + memory_after / memory_allocatable) / 2), name)

    def _eligible_for(
        self,
        pod: Mapping[str, Any],
        capacity: CapacityType,
        pool: Pool | None,
        tolerations: Iterable[Mapping[str, Any]],
    ) -> tuple[Hashable, tuple[tuple[str, str, int, int, int], ...]]:
        """The pod's shape and the nodes a pod of that shape may land on (`_eligible_nodes`), kept per
        shape."""
        own = [*((pod.get("spec") or {}).get("tolerations") or []), *tolerations]
        affinity = RequiredNodeAffinity.of(pod)
        # repr of JSON data is exact: equal text, equal tolerations
        key = (capacity, pool, affinity, repr(own))
        eligible = self._eligible.get(key)
        if eligible is None:
            if len(self._eligible) >= MAX_ELIGIBLE_SHAPES:
                self._eligible.clear()
            eligible = self._eligible[key] = self._eligible_nodes(capacity, pool, affinity, own)
        return key, eligible

    def _eligible_nodes(
        self,
        capacity: CapacityType,
        pool: Pool | None,
        affinity: RequiredNodeAffinity,
        tolerations: Sequence[Mapping[str, Any]],
    ) -> tuple[tuple[str, str, int, int, int], ...]:
        """`packing_rooms`' filter worked out over every node: (name, host, allocatable cpu, memory,
        pods) of the nodes that take pods and pass the affinity and taints."""
        summary = self._nodes()
        if capacity is CapacityType.ON_DEMAND:
            names: Iterable[str] = summary.on_demand_nodes
        elif pool is not None:
            names = summary.pool_nodes.get(pool, frozenset())
        else:
            return ()
        out = []
        for name in names:  # any order: `fullest_fitting` breaks ties by name
            node = self._objects["Node"].get(("", name))
            allocatable = self._allocatable.get(name)
            if node is None or allocatable is None or not _takes_pods(node):
                continue
            labels = (node.get("metadata") or {}).get("labels") or {}
            if not affinity.matches(labels, name) or any(
                taint.get("effect") in DO_NOT_SCHEDULE_EFFECTS and not tolerates(tolerations, taint)
                for taint in (node.get("spec") or {}).get("taints") or []
            ):
                continue
            out.append((name, str(labels.get(HOSTNAME_LABEL, name)), *allocatable))
        return tuple(out)

    def _node_moved(self, name: str) -> None:
        """A node came, went or changed capacity type or pool: the placements of the pods bound to it
        are read again (no other pod's placement reads the node), and their groups changed."""
        pods = self._objects["Pod"]
        for key in self._pods_on_node.get(name, ()):
            self._placements.pop(key, None)
            pod = pods.get(key)
            group = self._group_of_pod(pod) if pod is not None else None
            if group is not None:
                self._touch(group, key)
        self._workloads_version = next(self._versions)
        self._spare_rooms = None

    def _nodes_moved(self) -> None:
        """Every node may have changed capacity type (a capacity-label key new to the cluster): every
        placement is read again."""
        self._placements.clear()
        self._node_version = next(self._versions)
        self._workloads_version = self._node_version
        self._spare_rooms = None
        self._dirty_all = True

    def _touch(self, group: GroupKey, pod: tuple[str, str] | None = None) -> None:
        """A group changed: `pod` (its key) joined, changed or left it, or (None) its ReplicaSet did."""
        version = next(self._versions)
        kept = self._placed.get(group)
        if kept is not None and kept.group_version == self._group_versions.get(group, 0):
            # The kept counts follow: the pod's share is worked out again at the next read (a
            # ReplicaSet's own change moves no pod of it).
            if pod is not None:
                kept.pending.add(pod)
            kept.group_version = version
            if len(kept.pending) > MAX_GROUP_CHANGES:
                del self._placed[group]
        self._group_versions[group] = version
        self._dirty_groups.add(group)
        if pod is None:
            return
        changes = self._group_changes.get(group)
        if changes is not None and changes.keys is not None:
            changes.keys.add(pod)
            if len(changes.keys) > MAX_GROUP_CHANGES:
                changes.keys = None

    def _unindex_replicaset(self, key: tuple[str, str]) -> None:
        old = self._objects["ReplicaSet"].get(key)
        owner = controller_ref(old) if old is not None else None
        if owner is None or owner.get("kind") != "Deployment":
            return
        deployment = (key[0], str(owner.get("name")))
        self._dirty_groups.add(GroupKey(key[0], "Deployment", deployment[1]))
        names = self._replicasets_of.get(deployment)
        if names is not None:
            names.discard(key[1])
            if not names:
                del self._replicasets_of[deployment]

    def _unindex_pod(self, key: tuple[str, str]) -> None:
        old = self._objects["Pod"].get(key)
        if old is None:
            return
        node_name = (old.get("spec") or {}).get("nodeName")
        if node_name:
            on_node = self._pods_on_node.get(str(node_name))
            if on_node is not None:
                on_node.pop(key, None)
                if not on_node:
                    del self._pods_on_node[str(node_name)]
        group = self._group_of_pod(old)
        if group is not None:
            self._touch(group, key)
            members = self._pods_by_group.get(group)
            if members is not None:
                members.pop(key, None)
                if not members:
                    del self._pods_by_group[group]

    # --- lookups ---------------------------------------------------------------------------------

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self._objects[kind].get((namespace, name))

    def objects(self, kind: str) -> Iterator[Obj]:
        return iter(list(self._objects[kind].values()))

    def unbound_pods(self) -> list[Obj]:
        """Pods with no node yet, in the order they were first seen unbound."""
        return list(self._unbound.values())

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        ns = self._objects["Namespace"].get(("", namespace))
        labels: Mapping[str, str] = ((ns or {}).get("metadata") or {}).get("labels") or _NO_LABELS
        return labels

    @staticmethod
    def _group_of_pod(pod: Mapping[str, Any]) -> GroupKey | None:
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") not in ("ReplicaSet", "StatefulSet"):
            return None
        return GroupKey(_key(pod)[0], str(ref["kind"]), str(ref.get("name")))

    def workload_of(self, pod: Mapping[str, Any], namespace: str | None = None) -> WorkloadRef | None:
        """Pod -> ReplicaSet -> Deployment, or Pod -> StatefulSet; None for anything else or unknown."""
        ns = namespace or _key(pod)[0]
        ref = controller_ref(pod)
        if ref is None:
            return None
        if ref.get("kind") == "StatefulSet":
            sts = self.get("StatefulSet", ns, str(ref.get("name")))
            if sts is None:
                return None
            name = sts["metadata"]["name"]
            return WorkloadRef(WorkloadKind.STATEFULSET, ns, name, sts, GroupKey(ns, "StatefulSet", name))
        if ref.get("kind") != "ReplicaSet":
            return None
        rs = self.get("ReplicaSet", ns, str(ref.get("name")))
        if rs is None:
            return None
        owner = controller_ref(rs)
        if owner is None or owner.get("kind") != "Deployment":
            return None
        deployment = self.get("Deployment", ns, str(owner.get("name")))
        if deployment is None:
            return None
        return WorkloadRef(
            WorkloadKind.DEPLOYMENT,
            ns,
            deployment["metadata"]["name"],
            deployment,
            GroupKey(ns, "ReplicaSet", rs["metadata"]["name"]),
        )

    def pods_of_group(self, group: GroupKey) -> list[Obj]:
        return list(self._pods_by_group.get(group, {}).values())

    def pods_of_workload(self, workload: WorkloadRef) -> list[Obj]:
        """Every pod of a workload (all ReplicaSets of a Deployment)."""
        return [pod for _, pod in self.keyed_pods_of_workload(workload)]

    def keyed_pods_of_workload(self, workload: WorkloadRef) -> list[tuple[tuple[str, str], Obj]]:
        """`pods_of_workload` with each pod's (namespace, name): the key of the per-pod memos."""
        by_group = self._pods_by_group
        return [item for group in self._workload_groups(workload) for item in by_group.get(group, {}).items()]

    def _workload_groups(self, workload: WorkloadRef) -> tuple[GroupKey, ...]:
        """The groups whose pods are the workload's: a StatefulSet's own; a Deployment's ReplicaSets
        (those of its uid), in name order."""
        if workload.kind is WorkloadKind.STATEFULSET:
            return (workload.group,)
        uid = workload.obj.get("metadata", {}).get("uid")
        groups: list[GroupKey] = []
        for name in self._replicaset_names(workload):
            rs = self._objects["ReplicaSet"][(workload.namespace, name)]
            owner = controller_ref(rs)
            if uid and owner is not None and owner.get("uid") not in (None, uid):
                continue
            groups.append(GroupKey(workload.namespace, "ReplicaSet", name))
        return tuple(groups)

    def _replicaset_names(self, workload: WorkloadRef) -> list[str]:
        """Names of the ReplicaSets a Deployment controls, in name order (from the owner index)."""
        return sorted(self._replicasets_of.get((workload.namespace, workload.name), ()))

    # --- state derived per workload ---------------------------------------------------------------

    def workload_state(self, workload: WorkloadRef, policy: WorkloadPolicy) -> WorkloadState:
        """The workload as the loops see it: its active pods with placement, readiness and requests.

        Kept between changes of its inputs: the workload's spec and uid (a status update of the
        workload shares its spec with the version before, as an in-process store's versions do), its
        groups (ReplicaSets) and their pods, the PDBs of its namespace, every node's placement (a
        capacity-label key new to the cluster), the policy. When only some of its pods changed (a
        pod came, went or changed, or its node moved), the kept state is updated for those pods alone,
        and when the spec, the PDBs or the policy changed, its replicas, policy and floor are read
        again (`state.workloads.workload_head`); another uid or set of groups, or every node's
        placement, works it out afresh (`state.workloads.build_workload_state`). The same inputs give
        the same state object.
        """
        key = (workload.kind.value, workload.namespace, workload.name)
        spec = workload.obj.get("spec")
        uid = (workload.obj.get("metadata") or {}).get("uid")
        groups = self._workload_groups(workload)
        kept = self._workload_states.get(key)
        if (
            kept is not None
            and kept.uid == uid
            and kept.groups == groups
            and kept.node_version == self._node_version
        ):
            changed = self._take_changes(kept)
            if changed is not None:
                if changed:
                    self._update_pods(kept, changed, workload.kind)
                pdb_version = self._pdb_versions.get(workload.namespace, 0)
                if kept.spec is not spec or kept.pdb_version != pdb_version or kept.policy != policy:
                    replicas, floor = workloads.workload_head(workload, self._pdbs_of(workload))
                    kept.state = dataclasses.replace(
                        kept.state, replicas=replicas, policy=policy, floor=floor
                    )
                    kept.spec, kept.pdb_version, kept.policy = spec, pdb_version, policy
                return kept.state
        return self._build_state(key, workload, policy, spec, uid, groups)

    def _pdbs_of(self, workload: WorkloadRef) -> list[Obj]:
        """The PDBs of the workload's namespace matching its selector's labels."""
        labels = ((workload.obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return self.pdbs_matching(workload.namespace, labels)

    def _take_changes(self, kept: _KeptWorkload) -> set[tuple[str, str]] | None:
        """The pods of the kept workload's groups that changed since it was read (None: not all known, so
        work it out afresh); the groups' changes are taken (reset to the groups' versions now)."""
        versions = self._group_versions
        moved: list[int] = []
        changed: set[tuple[str, str]] = set()
        for index, group in enumerate(kept.groups):
            version = versions.get(group, 0)
            if version == kept.versions[index]:
                continue
            changes = self._group_changes.get(group)
            if changes is None or changes.since != kept.versions[index] or changes.keys is None:
                return None
            changed |= changes.keys
            moved.append(index)
        for index in moved:
            group = kept.groups[index]
            version = versions.get(group, 0)
            kept.versions[index] = version
            self._group_changes[group] = _GroupChanges(version)
        return changed

    def _update_pods(self, kept: _KeptWorkload, changed: set[tuple[str, str]], kind: WorkloadKind) -> None:
        """Bring a kept workload state up to date for the pods that changed (each one now in one of its
        groups, active or not, or gone)."""
        members = [self._pods_by_group.get(group) or {} for group in kept.groups]
        names, pods, group_of, active = kept.names, kept.pods, kept.group_of, kept.active
        for pod_key in changed:
            pod: Obj | None = None
            group: GroupKey | None = None
            for candidate, pods_of_group in zip(kept.groups, members, strict=True):
                pod = pods_of_group.get(pod_key)
                if pod is not None:
                    group = candidate
                    break
            name = pod_key[1]
            index = bisect.bisect_left(names, name)
            present = index < len(names) and names[index] == name
            if present:
                before = group_of.pop(name)
                active[before] -= 1
            if pod is None or group is None or not is_active(pod):
                if present:
                    del names[index], pods[index]
                continue
            state = self._pod_state(pod_key, pod, kind)
            if present:
                pods[index] = state
            else:
                names.insert(index, name)
                pods.insert(index, state)
            group_of[name] = group
            active[group] = active.get(group, 0) + 1
        total = sum(len(pods_of_group) for pods_of_group in members)
        groups_with_active = sum(1 for count in active.values() if count > 0)
        kept.state = dataclasses.replace(
            kept.state, pods=tuple(pods), settling=groups_with_active > 1 or len(names) != total
        )

    def _build_state(
        self,
        key: WorkloadKey,
        workload: WorkloadRef,
        policy: WorkloadPolicy,
        spec: object,
        uid: object,
        groups: tuple[GroupKey, ...],
    ) -> WorkloadState:
        """`workload_state` worked out from every pod of the workload; kept, with the changes of its
        groups followed from now on."""
        members = [(group, self._pods_by_group.get(group) or {}) for group in groups]
        total = sum(len(pods_of_group) for _, pods_of_group in members)
        active = [
            (pod_key, pod, group)
            for group, pods_of_group in members
            for pod_key, pod in pods_of_group.items()
            if is_active(pod)
        ]
        states = [self._pod_state(pod_key, pod, workload.kind) for pod_key, pod, _ in active]
        state = workloads.build_workload_state(
            workload, policy, [pod for _, pod, _ in active], total, states, self._pdbs_of(workload)
        )
        versions = [self._group_versions.get(group, 0) for group in groups]
        for group, version in zip(groups, versions, strict=True):
            self._group_changes[group] = _GroupChanges(version)
        per_group: dict[GroupKey, int] = {}
        for _, _, group in active:
            per_group[group] = per_group.get(group, 0) + 1
        self._workload_states[key] = _KeptWorkload(
            spec=spec,
            uid=uid,
            policy=policy,
            pdb_version=self._pdb_versions.get(workload.namespace, 0),
            node_version=self._node_version,
            groups=groups,
            versions=versions,
            names=[pod.name for pod in state.pods],
            pods=list(state.pods),
            group_of={pod_key[1]: group for pod_key, _, group in active},
            active=per_group,
            state=state,
        )
        return state

    def _pod_state(self, key: tuple[str, str], pod: Mapping[str, Any], kind: WorkloadKind) -> PodState:
        """A pod's state, worked out once per pod object, placement and workload kind."""
        placement = self.placement_of(pod, key)
        inputs = (placement, kind)
        kept = self._pod_states.get(key)
        if kept is not None and kept[0] is pod and kept[1] == inputs:
            return kept[2]
        state = workloads.pod_state(pod, placement, kind)
        if self._objects["Pod"].get(key) is pod:
            self._pod_states[key] = (pod, inputs, state)
        return state

    def policy_of(self, kind: WorkloadKind, obj: Obj, config: ControllerConfig) -> PolicyResult:
        """A workload's policy, read again only when the workload's annotations (another object: a
        status update shares them with the version before), its namespace's labels or the config
        changed."""
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        labels = self.namespace_labels(namespace)
        annotations = metadata.get("annotations")
        key = (kind.value, namespace, str(metadata.get("name")))
        kept = self._policies.get(key)
        if kept is not None and kept[0] is annotations and kept[1] is labels and kept[2] is config:
            return kept[3]
        result = workloads.resolve(kind, obj, labels, config)
        self._policies[key] = (annotations, labels, config, result)
        return result

    def managed(self, config: ControllerConfig) -> tuple[Managed, ...]:
        """Managed Deployments and StatefulSets with a valid policy, with their state, in the order the
        state holds the objects (Deployments first).

        Every loop asks each round. The answer is kept until something it reads changed (workloads,
        pods, ReplicaSets, PDBs, namespaces, node placements), and then only the workloads the state
        marks dirty since the last answer (`take_dirty`, an account of its own) are worked out again:
        every one at the first call, for another config, or after a capacity-label key new to the
        cluster.
        """
        kept = self._managed
        if kept is not None and kept[0] == self._workloads_version and kept[1] is config:
            return kept[2]
        dirty = self.take_dirty(_MANAGED_READER)
        if kept is None or kept[1] is not config or dirty.everything:
            self._managed_entries = {
                (kind.value, *key): self._managed_entry(kind, obj, config)
                for kind in workloads.managed_kinds()
                for key, obj in self._objects[kind.value].items()
            }
            return self._order_managed(config)
        keys = {key for key in dirty.workloads if key[0] in _MANAGED_KINDS}
        entries = self._managed_entries
        if dirty.namespaces:
            keys.update(key for key in entries if key[1] in dirty.namespaces)
        answer = list(kept[2])
        positions = self._managed_positions
        moved = self._workloads_moved
        for key in keys:
            kind, namespace, name = key
            obj = self._objects[kind].get((namespace, name))
            old = entries.pop(key, None)
            if obj is None:
                moved = moved or old is not None
                continue
            entry = entries[key] = self._managed_entry(_MANAGED_KINDS[kind], obj, config)
            if (old is None) != (entry is None):
                moved = True
            elif entry is not None and not moved:
                answer[positions[key]] = entry
        if moved:
            return self._order_managed(config)
        result = tuple(answer)
        self._managed = (self._workloads_version, config, result)
        return result

    def _managed_entry(self, kind: WorkloadKind, obj: Obj, config: ControllerConfig) -> Managed | None:
        """One workload's entry in `managed`: None unless it is managed with a valid policy."""
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return None
        result = self.policy_of(kind, obj, config)
        if not result.valid or result.policy is None:
            return None
        ref = workloads.workload_ref(kind, obj)
        return Managed(ref, self.workload_state(ref, result.policy))

    def _order_managed(self, config: ControllerConfig) -> tuple[Managed, ...]:
        """`managed`'s answer from the entries, in the objects' order (a workload came, went, or became
        managed or unmanaged)."""
        entries = self._managed_entries
        found: list[Managed] = []
        positions: dict[WorkloadKey, int] = {}
        for kind in workloads.managed_kinds():
            for namespace, name in self._objects[kind.value]:
                key = (kind.value, namespace, name)
                entry = entries.get(key)
                if entry is not None:
                    positions[key] = len(found)
                    found.append(entry)
        answer = tuple(found)
        self._managed = (self._workloads_version, config, answer)
        self._managed_positions = positions
        self._workloads_moved = False
        return answer

    def placement_of(
        self, pod: Mapping[str, Any], key: tuple[str, str] | None = None
    ) -> tuple[CapacityType | None, Pool | None]:
        """Where a pod runs (its node's labels) or, while unbound, where its decision sends it. `key` is
        the pod's (namespace, name) where the caller has it."""
        key = key or _key(pod)
        if self._objects["Pod"].get(key) is pod:
            placement = self._placements.get(key)
            if placement is None:
                placement = self._placements[key] = self._placement_of(pod)
            return placement
        return self._placement_of(pod)

    def _kept_node_placement(self, name: str, node: Obj) -> tuple[CapacityType | None, Pool | None]:
        """`node_placement` of the node, read once per node object."""
        kept = self._node_placements.get(name)
        if kept is not None and kept[0] is node:
            return kept[1]
        placement = self.node_placement(node)
        self._node_placements[name] = (node, placement)
        return placement

    def _placement_of(self, pod: Mapping[str, Any]) -> tuple[CapacityType | None, Pool | None]:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            node = self._objects["Node"].get(("", node_name))
            if node is not None:
                return self._kept_node_placement(node_name, node)
        decision = read_decision(pod)
        if decision is None:
            return None, None
        try:
            pool = Pool.parse(decision.pool) if decision.pool else None
        except ValueError:
            pool = None
        return CapacityType(decision.capacity_type), pool

    def group_counts(self, group: GroupKey, now: float) -> GroupCounts:
        """Active pods of the group by capacity and pool, plus unexpired assumptions."""
        self._expire(now)
        assumed = self._assumed_totals.get(group)
        counts = assumed.copy() if assumed is not None else GroupCounts()
        placed = self._placed_counts(group)
        # Adding the pods' counts pool by pool (in the order the pods first name them) gives the
        # same counts, pools in the same order, as adding the pods one by one.
        counts.on_demand += placed.on_demand
        counts.spot_unplaced += placed.spot_unplaced
        for pool, number in placed.spot_by_pool.items():
            counts.add(CapacityType.SPOT, pool, number)
        return counts

    def _placed_counts(self, group: GroupKey) -> GroupCounts:
        """The group's active pods by capacity and pool (the caller must not change them).

        The webhook asks for every pod it admits, and a burst of admissions for one workload changes
        its group with every pod: the counts are kept with each pod's share, and brought up to date
        for the pods that changed since (`_touch`); a node's move touches its pods' groups, and every
        placement read again (the node version) counts every group afresh. The pools' order in
        `spot_by_pool` follows the changes (no reader depends on it)."""
        group_version = self._group_versions.get(group, 0)
        kept = self._placed.get(group)
        placements = self._placements
        if (
            kept is not None
            and kept.group_version == group_version
            and kept.node_version == self._node_version
        ):
            if kept.pending:
                members = self._pods_by_group.get(group, {})
                counts, shares = kept.counts, kept.shares
                for key in kept.pending:
                    share = shares.pop(key, None)
                    if share is not None:
                        counts.add(share[0], share[1], -1)
                    pod = members.get(key)
                    if pod is None or not is_active(pod):
                        continue
                    placement = placements.get(key)
                    if placement is None:
                        placement = placements[key] = self._placement_of(pod)
                    capacity, pool = placement
                    if capacity is not None:
                        counts.add(capacity, pool)
                        shares[key] = (capacity, pool)
                kept.pending.clear()
            return kept.counts
        on_demand = unplaced = 0
        by_pool: dict[Pool, int] = {}
        counted: dict[tuple[str, str], tuple[CapacityType, Pool | None]] = {}
        for key, pod in self._pods_by_group.get(group, {}).items():
            if not is_active(pod):
                continue
            placement = placements.get(key)
            if placement is None:
                placement = placements[key] = self._placement_of(pod)
            capacity, pool = placement
            if capacity is None:
                continue
            counted[key] = (capacity, pool)
            if capacity is CapacityType.ON_DEMAND:
                on_demand += 1
            elif pool is None:
                unplaced += 1
            else:
                by_pool[pool] = by_pool.get(pool, 0) + 1
        counts = GroupCounts(on_demand, by_pool, unplaced)
        self._placed[group] = _PlacedCounts(group_version, self._node_version, counts, counted, set())
        return counts

    def assume(
        self, decision_id: str, group: GroupKey, capacity: CapacityType, pool: Pool | None, now: float
    ) -> None:
        self._forget(decision_id)
        assumption = Assumption(group, capacity, pool, now + self.config.assume_ttl_seconds)
        self._assumed[decision_id] = assumption
        self._assumed_by_group.setdefault(group, {})[decision_id] = assumption
        self._assumed_totals.setdefault(group, GroupCounts()).add(capacity, pool)

    def assumed_count(self, now: float) -> int:
        self._expire(now)
        return len(self._assumed)

    def expire(self, now: float) -> None:
        """Drop the assumptions whose TTL passed by `now`."""
        self._expire(now)

    def _expire(self, now: float) -> None:
        while self._assumed:
            key, oldest = next(iter(self._assumed.items()))
            if oldest.expires > now:
                break
            self._forget(key)

    def _forget(self, decision_id: str) -> None:
        assumption = self._assumed.pop(decision_id, None)
        if assumption is None:
            return
        members = self._assumed_by_group.get(assumption.group)
        if members is not None:
            members.pop(decision_id, None)
            if not members:
                del self._assumed_by_group[assumption.group]
        totals = self._assumed_totals.get(assumption.group)
        if totals is not None:
            totals.add(assumption.capacity, assumption.pool, -1)
            if totals.total == 0:
                del self._assumed_totals[assumption.group]

    # --- nodes and pools -------------------------------------------------------------------------

    def node_capacity(self, node: Mapping[str, Any]) -> CapacityType | None:
        """A node's capacity type by the configured conventions and the keys the cluster's nodes carry."""
        return node_capacity(node, self._present, self.conventions)

    def pool_of(self, node: Mapping[str, Any]) -> Pool | None:
        """A spot node's pool by the configured conventions (None for other nodes)."""
        return node_pool(node, self.conventions)

    def node_placement(self, node: Mapping[str, Any]) -> tuple[CapacityType | None, Pool | None]:
        return self.node_capacity(node), self.pool_of(node)

    def capacity_terms(self, capacity: CapacityType) -> list[list[Obj]]:
        """Node selector terms (ORed) that steer a pod to `capacity` with the labels the nodes carry."""
        return self.conventions.terms(capacity.value, self._present)

    def pins_capacity(self, pod: Mapping[str, Any]) -> bool:
        """Whether a pod already chooses a capacity type, by the conventions in force."""
        return self.conventions.pins_pod(pod)

    def _see_conventions(self, node: Mapping[str, Any]) -> None:
        """Record the capacity-label keys a node carries; a key new to the cluster can change how the
        other nodes are classified (an unlabelled node becomes on-demand), so every node is read again."""
        keys = self.conventions.present_in((node.get("metadata") or {}).get("labels") or {})
        if keys <= self._present:
            return
        self._present = self._present | keys
        self._node_summary = None
        self._shares = None
        self._eligible.clear()
        self._node_placements.clear()
        for (_, name), other in self._objects["Node"].items():
            capacity = self.node_capacity(other)
            self._node_facts[name] = (capacity, takes_replacements(other, capacity))
        self._capacity_nodes = None
        self._nodes_moved()

    def _know_pool(self, node: Mapping[str, Any]) -> None:
        """Remember a spot node's pool, region and node-group names (they outlive the node)."""
        pool = self.pool_of(node)
        if pool is None:
            return
        labels = (node.get("metadata") or {}).get("labels") or {}
        if self._known_pools.get(pool) is None:
            self._known_pools[pool] = labels.get(REGION_LABEL)
        names = growth.node_groups_of(labels)
        if not names <= self._known_groups.get(pool, frozenset()):
            self._known_groups[pool] = self._known_groups.get(pool, frozenset()) | names
            self._growth = None

    def spot_pools(self) -> dict[Pool, str | None]:
        """Known spot pools and their region: every pool seen on a node or configured, also after its
        last node is gone."""
        self._nodes()
        return dict(self._known_pools)

    def pool_nodes(self) -> Mapping[Pool, frozenset[str]]:
        """The names of each spot pool's nodes (read-only)."""
        return self._nodes().pool_nodes

    def nodes_of_capacity(self, capacity: CapacityType) -> list[Obj]:
        """The nodes of one capacity type, in the cache's node order (kept per capacity type between
        node events)."""
        kept = self._capacity_nodes
        if kept is None:
            kept = {}
            facts = self._node_facts
            for (_, name), node in self._objects["Node"].items():
                kept.setdefault(facts[name][0], {})[name] = node
            self._capacity_nodes = kept
        return list(kept.get(capacity, {}).values())

    def nodes_by_name(self) -> dict[str, Obj]:
        """Every node by name, in the cache's node order (a copy: the loops read it outside the lock)."""
        return dict(self._node_by_name)

    def noticed_nodes(self) -> list[Obj]:
        """The nodes carrying an interruption handler's notice taint (`NOTICE_TAINTS`), in the cache's
        node order (usually none: no scan then)."""
        if not self._noticed:
            return []
        return [node for name, node in self._node_by_name.items() if name in self._noticed]

    def _share(self, name: str, node: Mapping[str, Any] | None) -> None:
        """A node's share of the summary is `node`'s now (None: the node is gone)."""
        shares = self._shares
        if shares is None:
            return  # every share is read again at the next `_nodes`
        old = shares.pop(name, None)
        if old is not None:
            self._share_sums.add(name, old, -1)
        if node is not None:
            share = shares[name] = node_share(node, self._present, self.conventions)
            self._share_sums.add(name, share, 1)

    def _nodes(self) -> NodeSummary:
        """What the webhook needs from nodes (`summarize_nodes`), put together again only after a Node
        event that changed a node's share (the hot path reads it), from the shares' sums. A pool's
        region in `spot_pools` is that of the first of its nodes the sums saw."""
        if self._node_summary is None:
            if self._shares is None:
                self._shares, self._share_sums = {}, _ShareSums()
                for (_, name), node in self._objects["Node"].items():
                    self._share(name, node)
            sums = self._share_sums
            self._node_summary = NodeSummary(
                dict(sums.regions),
                frozenset(sums.noticed),
                frozenset(sums.avoided),
                _spot_tolerations(self.config, sums.taints),
                {pool: frozenset(names) for pool, names in sums.pool_nodes.items()},
                frozenset(sums.on_demand),
            )
            self._growth = None
        return self._node_summary

    def pool_growth(self) -> dict[Pool, bool]:
        """Which known pools can grow (True) or cannot (False), from the configuration, cluster-autoscaler's
        status and Karpenter NodePools (`growth.py`); pools nothing speaks of are absent."""
        nodes = self._nodes()
        if self._growth is None:
            counts = {pool: len(names) for pool, names in nodes.pool_nodes.items()}
            status = self._objects["ConfigMap"].get(growth.AUTOSCALER_STATUS)
            if self._autoscaler_groups is None:  # parsed once per version of the ConfigMap
                self._autoscaler_groups = growth.autoscaler_groups(status)
            nodepools = list(self._objects["NodePool"].values())
            self._growth = growth.pool_growth(
                growth.configured_growth(self.config.node_groups, counts),
                growth.autoscaler_growth(self._autoscaler_groups, self._known_groups),
                growth.karpenter_growth(nodepools, self._known_pools),
            )
            self._spot_anywhere = bool(growth.spot_nodepools(nodepools))
            self._autoscaled = status is not None or bool(nodepools)
        return self._growth

    def pool_rooms(
        self, pools: Iterable[Pool], avoided: frozenset[str]
    ) -> dict[Pool, tuple[tuple[int, int, int], ...]]:
        """The room (cpu millicores, memory bytes, pods) left on each Ready, schedulable node of each pool
        that is not avoided, from the per-node sums of the pods' requests."""
        summary = self._nodes()
        out: dict[Pool, tuple[tuple[int, int, int], ...]] = {}
        for pool in pools:
            rooms: list[tuple[int, int, int]] = []
            for name in sorted(summary.pool_nodes.get(pool, ())):
                node = self._node_by_name.get(name)
                allocatable = self._allocatable.get(name)
                if node is None or allocatable is None or name in avoided or not _takes_pods(node):
                    continue
                cpu, memory, pods = self.requested_on(name)
                rooms.append((allocatable[0] - cpu, allocatable[1] - memory, allocatable[2] - pods))
            out[pool] = tuple(rooms)
        return out

    def placement_view(
        self, now: float, risk: RiskModel, shortages: Iterable[Pool] = (), strict: bool = False
    ) -> PlacementView:
        """Pools with their risk, pools excluded (notice now or in cool-down, shortage), nodes avoided,
        which pools can grow and, for those whose growth a decision cannot count on, their room now
        (`placement.can_land`; `strict` for a move that evicts)."""
        nodes = self._nodes()
        pool_growth = self.pool_growth()
        excluded: dict[Pool, Exclusion] = dict.fromkeys(shortages, Exclusion.SHORTAGE)
        for pool in risk.at_risk(now) | nodes.noticed_pools:
            excluded[pool] = Exclusion.AT_RISK
        uncertain = [
            pool
            for pool in self._known_pools
            if pool not in excluded
            and pool_growth.get(pool) is not True
            and (pool in pool_growth or (strict and not self._autoscaled))
        ]
        return PlacementView(
            pool_risk=risk.scores(self._known_pools, now),
            excluded=excluded,
            avoided_nodes=nodes.avoided,
            default_pool_share=self.config.max_pool_share,
            growth=pool_growth,
            populated=frozenset(nodes.pool_nodes),
            rooms=self.pool_rooms(uncertain, nodes.avoided) if uncertain else {},
            spot_anywhere=self._spot_anywhere,
            autoscaled=self._autoscaled,
        )

    def spot_tolerations(self) -> list[Obj]:
        """Tolerations a spot-bound pod needs: configured ones, plus well-known spot taints on spot nodes."""
        return [dict(toleration) for toleration in self._nodes().tolerations]

    def pdbs_matching(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        """The namespace's PDBs whose selector matches `labels`; remembered until a PDB changes
        (the webhook asks for every pod it admits)."""
        key = (namespace, tuple(sorted(labels.items())))
        kept = self._pdb_answers.get(key)
        if kept is None:
            kept = self._pdb_answers[key] = tuple(self._match_pdbs(namespace, labels))
        return list(kept)

    def _match_pdbs(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        matches: list[Obj] = []
        for pdb in self._objects["PodDisruptionBudget"].values():
            if _key(pdb)[0] != namespace:
                continue
            selector = (pdb.get("spec") or {}).get("selector")
            if selector is None:
                continue
            if from_label_selector(selector).matches(labels):
                matches.append(pdb)
        return matches
