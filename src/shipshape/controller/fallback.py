"""Spot fallback's decisions (`loops/fallback.py`): spot-bound pods stuck unschedulable are re-decided
to on-demand (`fallback_candidates`), and their pools get no new spot placements until a back-off
ends (`ShortageTracker`, which every replica's webhook reads).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType
from shipshape.controller.state import read_decision
from shipshape.kube import capacity as kube_capacity
from shipshape.kube.clock import parse_time
from shipshape.kube.objects import is_active
from shipshape.kube.wellknown import INSTANCE_TYPE_LABEL, ZONE_LABEL


@dataclass(frozen=True, slots=True)
class Fallback:
    """A spot-bound pod unschedulable for too long: delete it so that it is re-decided."""

    namespace: str
    pod: str
    pools: tuple[Pool, ...]
    since: float


def allowed_pools_of(
    pod: Mapping[str, Any], conventions: kube_capacity.Conventions = kube_capacity.DEFAULT
) -> tuple[Pool, ...]:
    """Spot pools a pod's required node affinity allows (empty: any spot pool)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or []
    pools: set[Pool] = set()
    for term in terms:
        expressions = term.get("matchExpressions") or []
        if not any(conventions.is_spot_requirement(e) for e in expressions):
            continue
        values = {e.get("key"): e.get("values") or [] for e in expressions if e.get("operator") == "In"}
        for instance_type in values.get(INSTANCE_TYPE_LABEL, []):
            for zone in values.get(ZONE_LABEL, []):
                pools.add(Pool(instance_type, zone))
    return tuple(sorted(pools))


def unschedulable_since(pod: Mapping[str, Any]) -> float | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            stamp = condition.get("lastTransitionTime") or (pod.get("metadata") or {}).get(
                "creationTimestamp"
            )
            return parse_time(stamp) if stamp else None
    return None


def fallback_candidates(
    pods: Iterable[Mapping[str, Any]],
    now: float,
    threshold_seconds: float,
    known_pools: Iterable[Pool],
    conventions: kube_capacity.Conventions = kube_capacity.DEFAULT,
) -> list[Fallback]:
    """Spot-decided pods, not bound, unschedulable for longer than the threshold."""
    known = tuple(sorted(known_pools))
    found: list[Fallback] = []
    for pod in pods:
        if not is_active(pod) or (pod.get("spec") or {}).get("nodeName"):
            continue
        decision = read_decision(pod)
        if decision is None or decision.capacity_type != CapacityType.SPOT.value:
            continue
        since = unschedulable_since(pod)
        if since is None or now - since < threshold_seconds:
            continue
        metadata = pod.get("metadata") or {}
        found.append(
            Fallback(
                str(metadata.get("namespace")),
                str(metadata.get("name")),
                allowed_pools_of(pod, conventions) or known,
                since,
            )
        )
    return sorted(found, key=lambda f: (f.since, f.namespace, f.pod))


@dataclass(slots=True)
class ShortageTracker:
    """Spot pools without capacity: no new spot placements there until a back-off ends.

    The back-off doubles with each consecutive shortage of a pool (up to a maximum) and resets when
    capacity is seen again (a spot pod bound in the pool, or a new node of the pool).
    """

    retry_seconds: float = 300.0
    max_retry_seconds: float = 3600.0
    _until: dict[Pool, float] = field(default_factory=dict)
    _strikes: dict[Pool, int] = field(default_factory=dict)
    # The fallback loop marks, every replica's webhook reads (another thread in a controller process).
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def mark(self, pools: Iterable[Pool], now: float) -> list[Pool]:
        """Record a shortage; returns the pools newly marked (already marked ones are left alone)."""
        newly: list[Pool] = []
        with self._lock:
            for pool in pools:
                if self._until.get(pool, -math.inf) > now:
                    continue
                strikes = self._strikes.get(pool, 0)
                self._until[pool] = now + min(self.max_retry_seconds, self.retry_seconds * 2**strikes)
                self._strikes[pool] = strikes + 1
                newly.append(pool)
        return newly

    def capacity_seen(self, pool: Pool) -> None:
        with self._lock:
            self._until.pop(pool, None)
            self._strikes.pop(pool, None)

    def shortages(self, now: float) -> frozenset[Pool]:
        with self._lock:
            return frozenset(pool for pool, until in self._until.items() if until > now)
