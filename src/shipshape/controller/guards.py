"""Guard PodDisruptionBudgets for single-replica `surge` Deployments (pure): which to keep, renew or
remove, and which guarded pods to restart because their node is being drained.

An interruption handler that drains at the notice evicts at once, before any controller can react: a
single-replica `surge` Deployment that no PodDisruptionBudget selects gets a guard (`minAvailable: 1`,
owned by the Deployment, labelled `GUARD_LABEL`) that makes the eviction wait until the surged
replacement is Ready. A guard carries its deadline (`GUARD_EXPIRES`) and the replica keeping it
(`GUARD_OWNER`): the leader renews it once half of its time is gone, and a guard past its deadline is
kept by nobody. So that a guard does not hold up an ordinary drain for good, a cordoned node under a
guarded pod gets the same surge restart as a notice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shipshape.contracts.annotations import GUARD_EXPIRES, GUARD_LABEL, GUARD_OWNER
from shipshape.controller.placement import desired_split
from shipshape.controller.policy import WorkloadKind
from shipshape.controller.state import WorkloadState
from shipshape.kube.clock import parse_time, rfc3339

Obj = dict[str, Any]

# Guard PDBs (and cordoned nodes under guarded pods) are looked at this often.
GUARD_INTERVAL_SECONDS = 10.0


def guard_name(deployment: str) -> str:
    name = f"{deployment}-surge-guard"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(deployment.encode()).hexdigest()[:10]
    return f"{deployment[:200]}-{digest}-surge-guard"


def guard_pdb(deployment: Mapping[str, Any], owner: str = "", expires_at: float | None = None) -> Obj:
    """minAvailable 1 over a single-replica Deployment's pods, owned by the Deployment; `owner` (the
    replica keeping it) and `expires_at` (its deadline) are annotations anyone can check."""
    metadata = deployment.get("metadata") or {}
    name = str(metadata.get("name"))
    annotations = {GUARD_OWNER: owner}
    if expires_at is not None:
        annotations[GUARD_EXPIRES] = rfc3339(expires_at)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": guard_name(name),
            "namespace": metadata.get("namespace"),
            "annotations": annotations,
            "labels": {GUARD_LABEL: name if len(name) <= 63 else name[:63].rstrip("-._")},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": metadata.get("uid")}
            ],
        },
        "spec": {"minAvailable": 1, "selector": (deployment.get("spec") or {}).get("selector") or {}},
    }


def is_guard(pdb: Mapping[str, Any]) -> bool:
    return GUARD_LABEL in ((pdb.get("metadata") or {}).get("labels") or {})


def guard_expiry(pdb: Mapping[str, Any]) -> float:
    """A guard's deadline; one without a readable deadline counts as expired."""
    text = ((pdb.get("metadata") or {}).get("annotations") or {}).get(GUARD_EXPIRES)
    try:
        return parse_time(str(text)) if text else float("-inf")
    except ValueError:
        return float("-inf")


def guard_owner(pdb: Mapping[str, Any]) -> str:
    return str(((pdb.get("metadata") or {}).get("annotations") or {}).get(GUARD_OWNER) or "")


def needs_guard(state: WorkloadState, other_pdbs: Sequence[Mapping[str, Any]]) -> bool:
    """A single-replica Deployment in `surge` mode (on spot) that no other PDB protects."""
    return (
        state.kind is WorkloadKind.DEPLOYMENT
        and state.replicas == 1
        and desired_split(1, state.policy).spot == 1
        and not other_pdbs
    )


def guards_to_remove(
    pdbs: Iterable[Mapping[str, Any]], *, expired_at: float | None = None, owner: str | None = None
) -> list[Mapping[str, Any]]:
    """The guards past their deadline at `expired_at`, or kept by `owner`."""
    found: list[Mapping[str, Any]] = []
    for pdb in pdbs:
        if not is_guard(pdb):
            continue
        expired = expired_at is not None and guard_expiry(pdb) <= expired_at
        owned = owner is not None and guard_owner(pdb) == owner
        if expired or owned:
            found.append(pdb)
    return found


def guard_current(have: Mapping[str, Any] | None, now: float, ttl: float, instance: str) -> bool:
    """An existing guard that needs no write: ours, minAvailable 1, and more than half its time left."""
    return (
        have is not None
        and (have.get("spec") or {}).get("minAvailable") == 1
        and guard_owner(have) == instance
        and guard_expiry(have) - now > ttl / 2
    )


@dataclass(frozen=True, slots=True)
class GuardCandidate:
    """A single-replica Deployment as the guards see it (gathered from the cache)."""

    deployment: Obj
    state: WorkloadState
    # The PDBs selecting its pods other than its guard.
    other_pdbs: tuple[Mapping[str, Any], ...]
    # The cordoned nodes its pods run on, in its pods' order.
    cordoned: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GuardPlan:
    # The guards to apply (created, or renewed), by (namespace, name).
    apply: dict[tuple[str, str], Obj]
    # The existing guards no workload needs any more.
    delete: tuple[tuple[str, str], ...]
    # Guarded workloads to restart off a cordoned node: (its candidate, the node).
    drained: tuple[tuple[GuardCandidate, str], ...]


def plan_guards(
    candidates: Sequence[GuardCandidate],
    existing: Mapping[tuple[str, str], Mapping[str, Any]],
    now: float,
    ttl: float,
    instance: str,
) -> GuardPlan:
    """A guard exactly for the candidates that need one (renewed once half of its time is gone), none
    for the others, and a restart for a guarded pod on a cordoned node (a drain)."""
    wanted: dict[tuple[str, str], Obj] = {}
    drained: list[tuple[GuardCandidate, str]] = []
    for candidate in candidates:
        if not needs_guard(candidate.state, candidate.other_pdbs):
            continue
        body = guard_pdb(candidate.deployment, instance, now + ttl)
        wanted[(candidate.state.namespace, body["metadata"]["name"])] = body
        drained.extend((candidate, node) for node in candidate.cordoned)
    apply = {
        key: body for key, body in wanted.items() if not guard_current(existing.get(key), now, ttl, instance)
    }
    delete = tuple(key for key in existing if key not in wanted)
    return GuardPlan(apply, delete, tuple(drained))
