"""Pure placement decisions: the desired spot/on-demand split of a workload and the choice for one new pod.

Definitions (from the workload's policy):
- `on_demand_base` replicas always run on on-demand;
- of the replicas above the base, `spot_percentage` % go to spot, rounded down (the remainder is
  on-demand, the safe side);
- a workload with exactly one replica follows its single-replica mode instead (`surge` → spot with a
  replacement started before the old pod goes, `on-demand`);
- spot replicas are spread over spot pools (instance type x zone) so that no pool holds more than
  `max_pool_share` of the workload's spot replicas (rounded up, at least one per pool).

The decision for a new pod counts the pods of its group (a ReplicaSet, or a StatefulSet) that exist or
are in flight, fills the base first, then the spot share, then the on-demand share. StatefulSet pods are
decided by ordinal alone, so the same ordinal always gets the same capacity type and the split is exact
for every replica count (a StatefulSet scales down from the highest ordinal).

A StatefulSet cannot surge: a replacement starts only once the old pod is gone, so a reclaim takes its
doomed replicas away together. Its spot replicas are therefore also bounded by its **disruption
allowance** (replicas minus the PDB's minAvailable, else its rolling update's maxUnavailable): at most
that many in any one zone (a zone, and so any pool, can be reclaimed at once), and so at most
allowance x zones in all. The spot ordinals beyond that limit are on-demand, by ordinal, so the
webhook, the rebalancer and a restarted controller all agree (`spot_limit`, `ordinal_capacity`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from shipshape.controller.policy import CapacityType, SingleReplicaMode, WorkloadKind, WorkloadPolicy

# A StatefulSet pod's ordinal: its pod-index label (Kubernetes 1.28+), else its name's suffix.
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
_ORDINAL = re.compile(r"-(\d+)$")


class Pool(NamedTuple):
    """A spot pool: one instance type in one zone.

    A named tuple rather than a dataclass: pools are dictionary keys and set members on every
    admission and in every loop round, and a tuple hashes and compares in C.
    """

    instance_type: str
    zone: str

    def __str__(self) -> str:
        return f"{self.instance_type}/{self.zone}"

    @classmethod
    def parse(cls, text: str) -> Pool:
        instance_type, sep, zone = text.partition("/")
        if not sep or not instance_type or not zone:
            raise ValueError(f"a pool is written <instance-type>/<zone>, got {text!r}")
        return cls(instance_type, zone)


class Reason(StrEnum):
    """Why a pod went where it went (recorded in the decision annotation and the metrics)."""

    BASE = "on-demand-base"
    SPOT_SHARE = "spot-share"
    ON_DEMAND_SHARE = "on-demand-share"
    SINGLE_SURGE = "single-replica-surge"
    SINGLE_ON_DEMAND = "single-replica-on-demand"
    ORDINAL_BASE = "ordinal-below-base"
    ORDINAL_SPOT = "ordinal-spot-share"
    ORDINAL_ON_DEMAND = "ordinal-on-demand-share"
    POOL_SHARE_REACHED = "max-pool-share-reached"
    # A StatefulSet's spot ordinals beyond its disruption allowance x zones.
    ORDINAL_ALLOWANCE = "ordinal-beyond-disruption-allowance"
    # Every usable zone already holds a StatefulSet's disruption allowance of spot replicas.
    ZONE_ALLOWANCE_REACHED = "zone-disruption-allowance-reached"
    NO_SPOT_POOL = "no-safe-spot-pool"
    SPOT_FALLBACK = "spot-fallback"
    # No known spot pool has room for the pod now or can grow.
    NO_SPOT_CAPACITY = "no-spot-capacity"


class Exclusion(StrEnum):
    """Why a spot pool takes no new placements."""

    AT_RISK = "at-risk"
    SHORTAGE = "shortage"


@dataclass(frozen=True, slots=True)
class Split:
    on_demand: int
    spot: int

    @property
    def total(self) -> int:
        return self.on_demand + self.spot


def _multi_replica_split(replicas: int, policy: WorkloadPolicy) -> Split:
    base = min(policy.on_demand_base, replicas)
    spot = (replicas - base) * policy.spot_percentage // 100
    return Split(on_demand=replicas - spot, spot=spot)


def desired_split(replicas: int, policy: WorkloadPolicy) -> Split:
    """How many of `replicas` should run on on-demand and on spot."""
    if replicas <= 0:
        return Split(0, 0)
    if replicas == 1:
        if policy.single_replica is SingleReplicaMode.SURGE and policy.kind is WorkloadKind.DEPLOYMENT:
            return Split(0, 1)
        return Split(1, 0)
    return _multi_replica_split(replicas, policy)


def spot_limit(allowance: int | None, zones: int) -> int | None:
    """Most spot replicas of a workload that cannot surge: its disruption allowance in each zone.

    None (no limit) for workloads that surge; an unknown zone count counts as one zone.
    """
    if allowance is None:
        return None
    return max(0, allowance) * max(1, zones)


def statefulset_split(replicas: int, policy: WorkloadPolicy, limit: int | None) -> Split:
    """`desired_split` with the spot replicas capped at `limit` (see `spot_limit`)."""
    split = desired_split(replicas, policy)
    if limit is None or split.spot <= limit:
        return split
    return Split(on_demand=replicas - limit, spot=limit)


def ordinal_capacity(
    ordinal: int, replicas: int, policy: WorkloadPolicy, limit: int | None = None
) -> tuple[CapacityType, Reason]:
    """Capacity type of a StatefulSet ordinal: a pure function of the ordinal (and the one-replica case).

    Ordinals below the base are on-demand; above it, ordinal `i` is spot exactly when adding it raises
    the spot count of the split, so the first `n` ordinals always form `desired_split(n)`. With a spot
    `limit`, only the first `limit` such ordinals are spot; the later ones are on-demand.
    """
    if replicas == 1 and ordinal == 0:
        single = desired_split(1, policy)
        if single.spot:
            return CapacityType.SPOT, Reason.SINGLE_SURGE
        return CapacityType.ON_DEMAND, Reason.SINGLE_ON_DEMAND
    if ordinal < policy.on_demand_base:
        return CapacityType.ON_DEMAND, Reason.ORDINAL_BASE
    before = _multi_replica_split(ordinal, policy).spot
    after = _multi_replica_split(ordinal + 1, policy).spot
    if after > before:
        if limit is not None and before >= limit:
            return CapacityType.ON_DEMAND, Reason.ORDINAL_ALLOWANCE
        return CapacityType.SPOT, Reason.ORDINAL_SPOT
    return CapacityType.ON_DEMAND, Reason.ORDINAL_ON_DEMAND


def pool_cap(spot_target: int, share: float) -> int:
    """Most spot replicas of one workload allowed in one pool: `ceil(share x spot target)`, at least one.

    Rounding up means the default share (0.5) can always be met once two pools exist.
    """
    if share >= 1.0:
        return max(spot_target, 1)
    return max(1, math.ceil(share * spot_target - 1e-9))


@dataclass(slots=True)
class GroupCounts:
    """Current plus in-flight pods of one group, by capacity type and spot pool."""

    on_demand: int = 0
    spot_by_pool: dict[Pool, int] = field(default_factory=dict)
    # Spot pods whose pool is not known yet (not bound, no pool in their decision).
    spot_unplaced: int = 0

    @property
    def spot(self) -> int:
        return sum(self.spot_by_pool.values()) + self.spot_unplaced

    @property
    def total(self) -> int:
        return self.on_demand + self.spot

    def add(self, capacity: CapacityType, pool: Pool | None, count: int = 1) -> None:
        if capacity is CapacityType.ON_DEMAND:
            self.on_demand += count
        elif pool is None:
            self.spot_unplaced += count
        else:
            remaining = self.spot_by_pool.get(pool, 0) + count
            if remaining:
                self.spot_by_pool[pool] = remaining
            else:
                self.spot_by_pool.pop(pool, None)

    def copy(self) -> GroupCounts:
        return GroupCounts(self.on_demand, dict(self.spot_by_pool), self.spot_unplaced)


@dataclass(frozen=True, slots=True)
class PlacementView:
    """What the cluster looks like to a decision: spot pools, their risk, and what to avoid."""

    pool_risk: Mapping[Pool, float] = field(default_factory=dict)
    excluded: Mapping[Pool, Exclusion] = field(default_factory=dict)
    # Nodes that take no new pods: rebalance recommendation or termination notice.
    avoided_nodes: frozenset[str] = frozenset()
    default_pool_share: float = 0.5
    # Whether each pool can grow (an autoscaler or provisioner adds nodes to it): True, False, or
    # absent when nothing says (`can_land`).
    growth: Mapping[Pool, bool] = field(default_factory=dict)
    # Pools with at least one node now (None: not said; every known pool counts as having nodes).
    populated: frozenset[Pool] | None = None
    # The room (cpu millicores, memory bytes, pods) left on each Ready, schedulable node of a pool that
    # takes new pods; given for the pools whose growth the decision cannot count on.
    rooms: Mapping[Pool, tuple[tuple[int, int, int], ...]] = field(default_factory=dict)
    # A provisioner (Karpenter) makes spot nodes of pools not known yet: spot with no known pool may
    # go to "any spot node".
    spot_anywhere: bool = False
    # An autoscaler or provisioner is visible in the cluster (cluster-autoscaler's status, Karpenter
    # NodePools), though it may not say which pools it grows.
    autoscaled: bool = False

    @property
    def zones(self) -> frozenset[str]:
        """Zones with a known spot pool: the failure domains a reclaim can take at once."""
        return frozenset(pool.zone for pool in self.pool_risk)


@dataclass(frozen=True, slots=True)
class Decision:
    capacity_type: CapacityType
    reason: Reason
    # The preferred spot pool (None for on-demand, or for spot when no pool is known yet).
    pool: Pool | None = None
    # Spot pools the pod may land on; empty for spot means "any spot node".
    allowed_pools: tuple[Pool, ...] = ()
    avoided_nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What is known of the pod being admitted and its workload."""

    policy: WorkloadPolicy
    replicas: int
    ordinal: int | None = None
    # For a workload that cannot surge (StatefulSet): replicas that may be unavailable at once, which
    # bounds its spot replicas per zone. None: no such bound.
    allowance: int | None = None
    # For a Deployment: replicas it may lose at once without going below its floor, which bounds its
    # spot replicas per pool (`spread_cap`). None: only max-pool-share bounds them.
    loss_allowance: int | None = None
    # What the pod requests (cpu millicores, memory bytes): it goes only to pools with room for it now
    # or that can grow (`can_land`).
    requests: tuple[int, int] = (0, 0)


def has_room(pool: Pool, requests: tuple[int, int], view: PlacementView) -> bool:
    """Whether a Ready, schedulable node of the pool has room for the requests now."""
    cpu, memory = requests
    return any(c >= cpu and m >= memory and p >= 1 for c, m, p in view.rooms.get(pool, ()))


def can_land(pool: Pool, requests: tuple[int, int], view: PlacementView, strict: bool = False) -> bool:
    """Whether a pod with these requests would be scheduled in the pool: room now, or the pool can grow.

    A pool known to grow can take it; one known not to grow only with room now. Where nothing says
    whether it grows, a pool that still has nodes is taken to grow as it did (an autoscaler adds what
    pending pods need; the spot fallback re-decides a pod that waits too long); for a `strict` check
    (a move that would evict a running pod) only where an autoscaler is visible in the cluster, else
    it needs room now. A pool whose nodes are all gone and that nothing says can grow takes nothing.
    """
    growth = view.growth.get(pool)
    if growth is True:
        return True
    populated = view.populated is None or pool in view.populated
    if growth is None and populated and (not strict or view.autoscaled):
        return True
    return has_room(pool, requests, view)


def zone_counts(counts: GroupCounts) -> dict[str, int]:
    """A group's spot pods per zone (pods whose pool is not known yet count nowhere)."""
    zones: dict[str, int] = {}
    for pool, count in counts.spot_by_pool.items():
        zones[pool.zone] = zones.get(pool.zone, 0) + count
    return zones


def spread_cap(spot_target: int, share: float, usable_pools: int, loss_allowance: int | None = None) -> int:
    """Most spot replicas of one workload allowed in one pool.

    `pool_cap` (max-pool-share), and, given the workload's loss allowance (passed only when the
    workload does not set max-pool-share itself), no more than the larger of that allowance and an
    even share of the usable pools: losing any one pool then costs the workload no more than it can
    lose without going below its floor (so no headroom has to be held for it), unless the pools are
    too few for that, in which case the pods are spread evenly.
    """
    cap = pool_cap(spot_target, share)
    if loss_allowance is None or usable_pools <= 1:
        return cap
    even = math.ceil(spot_target / usable_pools)
    return min(cap, max(loss_allowance, even, 1))


def choose_pool(
    spot_target: int,
    counts: GroupCounts,
    view: PlacementView,
    policy: WorkloadPolicy,
    zone_cap: int | None = None,
    loss_allowance: int | None = None,
    requests: tuple[int, int] = (0, 0),
    strict: bool = False,
) -> tuple[Pool | None, tuple[Pool, ...], Reason | None]:
    """Pick a spot pool: below the pool cap (`spread_cap`; and the zone cap), not excluded; fewest of
    this group's pods, then lowest risk.

    Returns (preferred pool, allowed pools, None) or (None, (), reason) when no spot pool may take the pod.
    Only pools where a pod with `requests` can land count (`can_land`; `strict` for moves that evict).
    With no spot pool known at all, spot goes to any spot node only where a provisioner makes spot nodes
    of any pool (`view.spot_anywhere`); otherwise no spot pool may take the pod. A zone cap of 0
    forbids spot altogether.
    """
    if zone_cap is not None and zone_cap <= 0:
        return None, (), Reason.ZONE_ALLOWANCE_REACHED
    known = sorted(view.pool_risk)
    if not known:
        return (None, (), None) if view.spot_anywhere else (None, (), Reason.NO_SPOT_CAPACITY)
    usable = [pool for pool in known if pool not in view.excluded]
    if not usable:
        if all(view.excluded[pool] is Exclusion.SHORTAGE for pool in known):
            return None, (), Reason.SPOT_FALLBACK
        return None, (), Reason.NO_SPOT_POOL
    usable = [pool for pool in usable if can_land(pool, requests, view, strict)]
    if not usable:
        return None, (), Reason.NO_SPOT_CAPACITY
    share = policy.pool_share(len(known), view.default_pool_share)
    cap = spread_cap(
        spot_target, share, len(usable), loss_allowance if policy.max_pool_share is None else None
    )
    below_cap = [pool for pool in usable if counts.spot_by_pool.get(pool, 0) < cap]
    if not below_cap:
        return None, (), Reason.POOL_SHARE_REACHED
    if zone_cap is not None:
        per_zone = zone_counts(counts)
        below_cap = [pool for pool in below_cap if per_zone.get(pool.zone, 0) < zone_cap]
        if not below_cap:
            return None, (), Reason.ZONE_ALLOWANCE_REACHED
    preferred = min(
        below_cap, key=lambda pool: (counts.spot_by_pool.get(pool, 0), view.pool_risk[pool], pool)
    )
    return preferred, tuple(below_cap), None


def decide(request: PodRequest, counts: GroupCounts, view: PlacementView) -> Decision:
    """Capacity type (and spot pool) for one new pod, given its group's current and in-flight pods."""
    policy = request.policy
    zone_cap: int | None = None
    if request.ordinal is not None:
        limit = spot_limit(request.allowance, len(view.zones))
        capacity, reason = ordinal_capacity(request.ordinal, request.replicas, policy, limit)
        spot_target = _multi_replica_split(max(request.replicas, request.ordinal + 1), policy).spot
        if limit is not None:
            spot_target = min(spot_target, limit)
            zone_cap = request.allowance
    elif request.replicas == 1:
        capacity, reason = (
            (CapacityType.SPOT, Reason.SINGLE_SURGE)
            if desired_split(1, policy).spot
            else (CapacityType.ON_DEMAND, Reason.SINGLE_ON_DEMAND)
        )
        spot_target = 1
    else:
        target = _multi_replica_split(max(request.replicas, counts.total + 1), policy)
        spot_target = target.spot
        if counts.on_demand < min(policy.on_demand_base, target.total):
            capacity, reason = CapacityType.ON_DEMAND, Reason.BASE
        elif counts.spot < target.spot:
            capacity, reason = CapacityType.SPOT, Reason.SPOT_SHARE
        else:
            capacity, reason = CapacityType.ON_DEMAND, Reason.ON_DEMAND_SHARE
    if capacity is CapacityType.ON_DEMAND:
        return Decision(CapacityType.ON_DEMAND, reason)
    pool, allowed, refusal = choose_pool(
        spot_target, counts, view, policy, zone_cap, request.loss_allowance, request.requests
    )
    if refusal is not None:
        return Decision(CapacityType.ON_DEMAND, refusal)
    return Decision(
        CapacityType.SPOT,
        reason,
        pool=pool,
        allowed_pools=allowed,
        avoided_nodes=tuple(sorted(view.avoided_nodes)),
    )


def statefulset_ordinal(pod: Mapping[str, Any]) -> int | None:
    metadata = pod.get("metadata") or {}
    index = (metadata.get("labels") or {}).get(POD_INDEX_LABEL)
    if index is not None and str(index).isdigit():
        return int(index)
    match = _ORDINAL.search(str(metadata.get("name") or ""))
    return int(match.group(1)) if match else None
