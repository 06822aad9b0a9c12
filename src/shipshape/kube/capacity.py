"""Capacity type (spot or on-demand) as clusters label their nodes: one table of conventions.

Whoever made a node labels its capacity type its own way:

| convention | spot | on-demand |
|---|---|---|
| `node.kubernetes.io/capacity` | `spot` | `on-demand` |
| `karpenter.sh/capacity-type` | `spot` | `on-demand` |
| `eks.amazonaws.com/capacityType` | `SPOT` | `ON_DEMAND` |
| `cloud.google.com/gke-spot` | `true` | label absent |
| `cloud.google.com/gke-preemptible` | `true` | label absent |
| `kubernetes.azure.com/scalesetpriority` | `spot` | `regular`, or label absent |

`capacity_type_of(labels)` classifies one node; `Conventions.classify(labels, present)` does it knowing
which conventions the cluster's nodes carry (a GKE or AKS node without the label is on-demand only in a
cluster where that convention is in use). `Conventions.terms(capacity, present)` builds the node
selector terms (ORed; each a list of ANDed match expressions) that steer a pod to one capacity type
with the labels the nodes actually carry: for on-demand in a GKE cluster, `cloud.google.com/gke-spot
DoesNotExist`; with several conventions in one cluster, one term per convention. The classification
and the terms agree: a node matches the terms of the type it is classified as, and no other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

SPOT: Literal["spot"] = "spot"
ON_DEMAND: Literal["on-demand"] = "on-demand"
CapacityName = Literal["spot", "on-demand"]

# The original design's label, the one the emulator puts on its nodes by default.
CAPACITY_LABEL = "node.kubernetes.io/capacity"
KARPENTER_LABEL = "karpenter.sh/capacity-type"
EKS_LABEL = "eks.amazonaws.com/capacityType"
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
GKE_PREEMPTIBLE_LABEL = "cloud.google.com/gke-preemptible"
AKS_LABEL = "kubernetes.azure.com/scalesetpriority"

# A qualified label key: an optional DNS subdomain prefix and a name of at most 63 characters.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")


class ConventionError(ValueError):
    """A capacity-label convention that cannot be used."""


@dataclass(frozen=True, slots=True)
class Convention:
    """One label that says a node's capacity type.

    `absent_means_on_demand`: the cloud labels only its spot nodes (GKE, AKS), so a node without the
    label is on-demand, in a cluster where the convention is in use.
    """

    key: str
    spot: tuple[str, ...]
    on_demand: tuple[str, ...] = ()
    absent_means_on_demand: bool = False

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not _KEY.match(self.key) or len(self.key) > 316:
            problems.append(f"{self.key!r} is not a valid label key")
        if not self.spot:
            problems.append("needs at least one spot value")
        for value in (*self.spot, *self.on_demand):
            if not _VALUE.match(value):
                problems.append(f"{value!r} is not a valid label value")
        overlap = sorted(set(self.spot) & set(self.on_demand))
        if overlap:
            problems.append(f"values {', '.join(overlap)} cannot mean both spot and on-demand")
        if not self.on_demand and not self.absent_means_on_demand:
            problems.append("needs on-demand values, or absent_means_on_demand")
        if problems:
            raise ConventionError(f"capacity label {self.key!r}: {'; '.join(problems)}")

    def of(self, labels: Mapping[str, str]) -> CapacityName | None:
        """What this label alone says of a node: spot, on-demand, or nothing (absent or another value)."""
        value = labels.get(self.key)
        if value is None:
            return None
        if value in self.spot:
            return SPOT
        if value in self.on_demand:
            return ON_DEMAND
        return None

    def spot_expression(self) -> dict[str, Any]:
        return {"key": self.key, "operator": "In", "values": list(self.spot)}

    def not_spot_expression(self) -> dict[str, Any]:
        return {"key": self.key, "operator": "NotIn", "values": list(self.spot)}

    def on_demand_expression(self) -> dict[str, Any]:
        return {"key": self.key, "operator": "In", "values": list(self.on_demand)}


DEFAULT_CONVENTIONS: tuple[Convention, ...] = (
    Convention(CAPACITY_LABEL, (SPOT,), (ON_DEMAND,)),
    Convention(KARPENTER_LABEL, (SPOT,), (ON_DEMAND,)),
    Convention(EKS_LABEL, ("SPOT",), ("ON_DEMAND",)),
    Convention(GKE_SPOT_LABEL, ("true",), (), absent_means_on_demand=True),
    Convention(GKE_PREEMPTIBLE_LABEL, ("true",), (), absent_means_on_demand=True),
    Convention(AKS_LABEL, (SPOT,), ("regular",), absent_means_on_demand=True),
)

# The convention names a scenario (or a test) may label nodes with, and the labels a node of each
# capacity type gets under it (on-demand: {} where the cloud leaves on-demand nodes unlabelled).
NODE_LABELS: Mapping[str, Mapping[CapacityName, Mapping[str, str]]] = {
    "capacity": {SPOT: {CAPACITY_LABEL: SPOT}, ON_DEMAND: {CAPACITY_LABEL: ON_DEMAND}},
    "karpenter": {SPOT: {KARPENTER_LABEL: SPOT}, ON_DEMAND: {KARPENTER_LABEL: ON_DEMAND}},
    "eks": {SPOT: {EKS_LABEL: "SPOT"}, ON_DEMAND: {EKS_LABEL: "ON_DEMAND"}},
    "gke": {SPOT: {GKE_SPOT_LABEL: "true"}, ON_DEMAND: {}},
    "gke-preemptible": {SPOT: {GKE_PREEMPTIBLE_LABEL: "true"}, ON_DEMAND: {}},
    "aks": {SPOT: {AKS_LABEL: SPOT}, ON_DEMAND: {}},
}


# The label naming a node's node group (or NodePool) under each named convention's provisioner.
NODE_GROUP_LABEL: Mapping[str, str] = {
    "karpenter": "karpenter.sh/nodepool",
    "eks": "eks.amazonaws.com/nodegroup",
    "gke": "cloud.google.com/gke-nodepool",
    "gke-preemptible": "cloud.google.com/gke-nodepool",
    "aks": "kubernetes.azure.com/agentpool",
}


def node_group_of(labels: Mapping[str, str]) -> str | None:
    """The node group (or NodePool) a node belongs to, by its provisioner's label (Karpenter, EKS, GKE,
    AKS: `NODE_GROUP_LABEL`); None where none of them labels it."""
    for label in dict.fromkeys(NODE_GROUP_LABEL.values()):
        group = labels.get(label)
        if group:
            return group
    return None


def node_labels(convention: str, capacity: CapacityName) -> dict[str, str]:
    """The capacity labels a node of `capacity` carries under a named convention (see `NODE_LABELS`)."""
    try:
        return dict(NODE_LABELS[convention][capacity])
    except KeyError:
        raise ConventionError(
            f"unknown capacity-label convention {convention!r} (known: {', '.join(NODE_LABELS)})"
        ) from None


@dataclass(frozen=True, slots=True)
class Conventions:
    """The conventions in force, in order (the first that speaks of a node wins on a conflict)."""

    table: tuple[Convention, ...] = DEFAULT_CONVENTIONS

    @classmethod
    def with_overrides(cls, extra: Iterable[Convention]) -> Conventions:
        """The defaults with `extra` added; one for a key already known replaces it."""
        added = list(extra)
        keys = {c.key for c in added}
        if len(keys) != len(added):
            raise ConventionError("capacity labels: each key may be given once")
        return cls((*added, *(c for c in DEFAULT_CONVENTIONS if c.key not in keys)))

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(c.key for c in self.table)

    def present_in(self, labels: Mapping[str, str]) -> frozenset[str]:
        """The keys of the conventions a node's labels carry."""
        return frozenset(c.key for c in self.table if c.key in labels)

    def classify(
        self, labels: Mapping[str, str], present: Iterable[str] | None = None
    ) -> CapacityName | None:
        """A node's capacity type from its labels; `present`, the keys the cluster's nodes carry.

        An explicit spot value anywhere makes it spot; else an explicit on-demand value makes it
        on-demand; else it is on-demand when a convention in use labels only spot nodes, or when no
        convention is in use at all (no node says it is spot); else unknown (None).
        """
        said: CapacityName | None = None
        for convention in self.table:
            found = convention.of(labels)
            if found == SPOT:
                return SPOT
            if found == ON_DEMAND:
                said = ON_DEMAND
        if said is not None:
            return said
        if present is None:
            return None
        in_use = [c for c in self.table if c.key in set(present)]
        if not in_use or any(c.absent_means_on_demand for c in in_use):
            return ON_DEMAND
        return None

    def terms(self, capacity: CapacityName, present: Iterable[str]) -> list[list[dict[str, Any]]]:
        """Node selector terms (ORed; expressions ANDed) for the nodes `classify` calls `capacity`.

        Spot: one term per convention in use. On-demand: a node spot by no convention in use and, unless
        a convention in use labels only spot nodes, labelled on-demand by one. No convention in use at
        all: on-demand is every node (a single empty term), spot none (no term).
        """
        keys = set(present)
        in_use = [c for c in self.table if c.key in keys]
        if capacity == SPOT:
            return [[c.spot_expression()] for c in in_use]
        if not in_use:
            return [[]]
        not_spot = [c.not_spot_expression() for c in in_use]
        if any(c.absent_means_on_demand for c in in_use):
            return [not_spot]
        return [
            [c.on_demand_expression(), *(o.not_spot_expression() for o in in_use if o is not c)]
            for c in in_use
            if c.on_demand
        ]

    def pins(self, node_selector: Mapping[str, Any] | None, terms: Sequence[Mapping[str, Any]]) -> bool:
        """Whether a pod's nodeSelector or required node affinity terms already choose a capacity type."""
        keys = self.keys
        if any(key in keys for key in node_selector or {}):
            return True
        return any(expr.get("key") in keys for term in terms for expr in term.get("matchExpressions") or [])

    def pins_pod(self, pod: Mapping[str, Any]) -> bool:
        """Whether a pod (or a pod template) already chooses a capacity type itself: a nodeSelector or a
        required node affinity on any capacity label of these conventions."""
        spec = pod.get("spec") or {}
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        return self.pins(spec.get("nodeSelector"), required.get("nodeSelectorTerms") or [])

    def is_spot_requirement(self, expression: Mapping[str, Any]) -> bool:
        """Whether a match expression asks for spot nodes (`<key> In <spot values>` of a convention)."""
        if expression.get("operator") != "In":
            return False
        values = set(expression.get("values") or ())
        return any(c.key == expression.get("key") and values and values <= set(c.spot) for c in self.table)


DEFAULT = Conventions()


def capacity_type_of(
    labels: Mapping[str, str] | None, present: Iterable[str] | None = None, conventions: Conventions = DEFAULT
) -> CapacityName | None:
    """A node's capacity type by the default conventions (see `Conventions.classify`)."""
    return conventions.classify(labels or {}, present)
