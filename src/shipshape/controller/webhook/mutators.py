"""Pure pod mutators. Each one changes a deep copy of the pod; the JSON Patch is the diff afterwards.

Order matters only for readability: node affinity, tolerations, topology spread, decision annotation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonpatch
import orjson

from shipshape.contracts.annotations import DECISION, DecisionRecord
from shipshape.controller.packing import packing_preferences
from shipshape.controller.placement import Decision, Pool
from shipshape.controller.policy import CapacityType
from shipshape.kube import capacity as kube_capacity
from shipshape.kube.wellknown import HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL

Obj = dict[str, Any]
PREFERRED_POOL_WEIGHT = 100
_ABSENT: Any = object()


@dataclass(frozen=True, slots=True)
class MutationInput:
    decision: Decision
    decision_id: str
    # The workload's `spec.selector` (a LabelSelector), used for the topology spread.
    selector: Mapping[str, Any] | None
    spot_tolerations: Sequence[Obj] = ()
    # Hosts of the fullest nodes that fit the pod, fullest first (`packing.fullest_fitting`), and the
    # name of the first, recorded in the decision annotation (the pod counts there until it is bound).
    packing_hosts: Sequence[str] = ()
    packing_node: str = ""
    # Recommend-only mode: the decision annotation (marked dryRun) is the only change.
    dry_run: bool = False
    # Node selector terms (ORed) that select the decided capacity type with the labels the cluster's
    # nodes carry (`kube.capacity.Conventions.terms`); the default convention when not given.
    capacity_terms: Sequence[Sequence[Obj]] | None = None


Mutator = Callable[[MutationInput, Obj], None]


def pins_capacity(
    pod: Mapping[str, Any], conventions: kube_capacity.Conventions = kube_capacity.DEFAULT
) -> bool:
    """True when the pod already chooses a capacity type itself (its own choice is kept)."""
    return conventions.pins_pod(pod)


def _default_terms(decision: Decision) -> list[list[Obj]]:
    key, value = kube_capacity.CAPACITY_LABEL, decision.capacity_type.value
    return [[{"key": key, "operator": "In", "values": [value]}]]


def placement_terms(
    decision: Decision, capacity_terms: Sequence[Sequence[Obj]] | None = None
) -> list[list[Obj]]:
    """The decision as node selector terms (ORed), each a list of match expressions (ANDed).

    `capacity_terms` select the decided capacity type (one term per label convention the nodes carry);
    an empty list of expressions means every node is of that type (no requirement).
    """
    capacities = (
        [list(term) for term in capacity_terms] if capacity_terms is not None else _default_terms(decision)
    )
    if decision.capacity_type is CapacityType.ON_DEMAND:
        return capacities
    if not capacities:  # spot with no convention in use yet (a provisioner's first spot node)
        capacities = [
            [{"key": kube_capacity.KARPENTER_LABEL, "operator": "In", "values": [kube_capacity.SPOT]}]
        ]
    avoid: list[Obj] = []
    if decision.avoided_nodes:
        avoid = [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": list(decision.avoided_nodes)}]
    if not decision.allowed_pools:
        return [[*capacity, *avoid] for capacity in capacities]
    zones_by_type: dict[str, list[str]] = {}
    for pool in sorted(decision.allowed_pools):
        zones_by_type.setdefault(pool.instance_type, []).append(pool.zone)
    return [
        [
            *capacity,
            {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [instance_type]},
            {"key": ZONE_LABEL, "operator": "In", "values": zones},
            *avoid,
        ]
        for capacity in capacities
        for instance_type, zones in zones_by_type.items()
    ]


def inject_node_affinity(data: MutationInput, pod: Obj) -> None:
    """Require the decided capacity type (and allowed pools); prefer the chosen pool, and the fullest
    nodes that fit the pod.

    Existing required terms are kept: our expressions are added to each of them (terms are ORed,
    so adding to every term is how an extra requirement is ANDed).
    """
    spec = pod.setdefault("spec", {})
    node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    terms = placement_terms(data.decision, data.capacity_terms)
    if any(terms):  # no expression at all: every node is of the decided type, nothing to require
        required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        existing = required.get("nodeSelectorTerms") or [{}]
        merged: list[Obj] = []
        for term in existing:
            for ours in terms:
                combined: Obj = dict(term)
                combined["matchExpressions"] = [*(term.get("matchExpressions") or []), *ours]
                merged.append(combined)
        required["nodeSelectorTerms"] = merged
    if data.decision.pool is not None and len(data.decision.allowed_pools) > 1:
        preferred = node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
        preferred.append(_pool_preference(data.decision.pool))
    if data.packing_hosts:
        preferred = node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
        preferred.extend(packing_preferences(data.packing_hosts))
    if not node_affinity:
        del spec["affinity"]["nodeAffinity"]
        if not spec["affinity"]:
            del spec["affinity"]


def _pool_preference(pool: Pool) -> Obj:
    return {
        "weight": PREFERRED_POOL_WEIGHT,
        "preference": {
            "matchExpressions": [
                {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [pool.instance_type]},
                {"key": ZONE_LABEL, "operator": "In", "values": [pool.zone]},
            ]
        },
    }


def _tolerates(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    if existing.get("operator") == "Exists" and not existing.get("key"):
        return not existing.get("effect") or existing.get("effect") == wanted.get("effect")
    if existing.get("key") != wanted.get("key"):
        return False
    if existing.get("effect") and existing.get("effect") != wanted.get("effect"):
        return False
    return existing.get("operator") == "Exists" or existing.get("value") == wanted.get("value")


def inject_spot_tolerations(data: MutationInput, pod: Obj) -> None:
    """Spot-bound pods tolerate the taints spot nodes carry (only those not tolerated already)."""
    if data.decision.capacity_type is not CapacityType.SPOT or not data.spot_tolerations:
        return
    spec = pod.setdefault("spec", {})
    tolerations: list[Obj] = spec.get("tolerations") or []
    added = [t for t in data.spot_tolerations if not any(_tolerates(have, t) for have in tolerations)]
    if added:
        spec["tolerations"] = [*tolerations, *(dict(t) for t in added)]


def inject_topology_spread(data: MutationInput, pod: Obj) -> None:
    """Spread spot pods over zones and instance types (soft: ScheduleAnyway) when several pools may take them.

    The scheduler computes the skew only over nodes that pass the pod's node affinity (the default
    nodeAffinityPolicy Honor), that is over the allowed spot pools.
    """
    decision = data.decision
    if decision.capacity_type is not CapacityType.SPOT or len(decision.allowed_pools) == 1:
        return
    if data.selector is None:
        return
    spec = pod.setdefault("spec", {})
    constraints: list[Obj] = spec.get("topologySpreadConstraints") or []
    taken = {(c.get("topologyKey"), c.get("whenUnsatisfiable")) for c in constraints}
    added = [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": dict(data.selector),
        }
        for key in (ZONE_LABEL, INSTANCE_TYPE_LABEL)
        if (key, "ScheduleAnyway") not in taken
    ]
    if added:
        spec["topologySpreadConstraints"] = [*constraints, *added]


def decision_annotation(decision: Decision, decision_id: str, node: str = "", dry_run: bool = False) -> str:
    """The decision as its record (`contracts.annotations.DecisionRecord`); `node`, when the pod was
    packed, names the node it should fill; `dry_run` marks a decision that was only recommended
    (nothing else of the pod was changed). Built without validation: every field comes from the
    decision's own types (every admission writes one)."""
    return DecisionRecord.model_construct(
        capacity_type=decision.capacity_type.value,
        pool=str(decision.pool) if decision.pool is not None else "",
        reason=decision.reason.value,
        id=decision_id,
        node=node,
        dry_run=dry_run,
    ).dump()


def annotate_decision(data: MutationInput, pod: Obj) -> None:
    metadata = pod.setdefault("metadata", {})
    annotations = metadata.get("annotations") or {}
    text = decision_annotation(data.decision, data.decision_id, data.packing_node, data.dry_run)
    metadata["annotations"] = {**annotations, DECISION: text}


# Where the chain writes: (top-level key, key under it). `diff` relies on it.
WRITES: tuple[tuple[str, str], ...] = (
    ("spec", "affinity"),
    ("spec", "tolerations"),
    ("spec", "topologySpreadConstraints"),
    ("metadata", "annotations"),
)


def copy_pod(pod: Mapping[str, Any]) -> Obj:
    """A deep copy of a JSON pod (a serialisation round trip: several times faster than copy.deepcopy)."""
    copied: Obj = orjson.loads(orjson.dumps(pod))
    return copied


def _pointer(*parts: str) -> str:
    """RFC 6901 JSON Pointer of a path."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def _rest(pod: Mapping[str, Any]) -> Obj:
    """Everything in the pod outside the fields the chain writes."""
    rest: Obj = {}
    for top, value in pod.items():
        keys = {key for parent, key in WRITES if parent == top}
        rest[top] = (
            {k: v for k, v in value.items() if k not in keys}
            if keys and isinstance(value, Mapping)
            else value
        )
    return rest


def diff(original: Mapping[str, Any], mutated: Mapping[str, Any]) -> list[Obj]:
    """The JSON Patch from `original` to `mutated`.

    Field by field over the fields the chain writes: a field the pod did not have is one `add`, a
    field it had is diffed by jsonpatch under its own path. This keeps the hot path fast; should
    anything else differ, jsonpatch diffs the whole pods instead.
    """
    if _rest(original) != _rest(mutated):
        whole: list[Obj] = jsonpatch.make_patch(original, mutated).patch
        return whole
    ops: list[Obj] = []
    for top, key in WRITES:
        before = (original.get(top) or {}).get(key, _ABSENT)
        after = (mutated.get(top) or {}).get(key, _ABSENT)
        if before == after:
            continue
        path = _pointer(top, key)
        if before is _ABSENT:
            ops.append({"op": "add", "path": path, "value": after})
        elif after is _ABSENT:
            ops.append({"op": "remove", "path": path})
        else:
            for op in jsonpatch.make_patch(before, after).patch:
                moved = {**op, "path": path + op["path"]}
                if "from" in op:
                    moved["from"] = path + op["from"]
                ops.append(moved)
    return ops


CHAIN: tuple[tuple[str, Mutator], ...] = (
    ("node-affinity", inject_node_affinity),
    ("tolerations", inject_spot_tolerations),
    ("topology-spread", inject_topology_spread),
    ("decision-annotation", annotate_decision),
)
# Recommend-only mode writes nothing but the decision.
DRY_RUN_CHAIN: tuple[tuple[str, Mutator], ...] = (("decision-annotation", annotate_decision),)
