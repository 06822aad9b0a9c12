"""Which spot pools can grow: pure readings of what the cluster says about its node groups.

Three sources, each optional:
- the configuration (`node_groups`: a pool, whether it can grow, and up to how many nodes);
- cluster-autoscaler's status ConfigMap (`kube-system/cluster-autoscaler-status`, the YAML `status`
  of cluster-autoscaler 1.30 and later): per node group its `maxSize`, `cloudProviderTarget` and a
  scale-up `Backoff` (capacity errors). A node group is matched to the pools whose nodes carry its
  name in a node-group label (`NODE_GROUP_LABELS`: an EKS managed node group's Auto Scaling group
  `eks-<nodegroup>-<id>` holds the nodes labelled `eks.amazonaws.com/nodegroup=<nodegroup>`);
- Karpenter NodePools (`karpenter.sh/v1`): a NodePool whose requirements allow
  `karpenter.sh/capacity-type` spot (Karpenter's default is on-demand only), the pool's instance
  type and zone, and whose limits are not reached, can make nodes of that pool, or of a pool not
  seen yet.

What the configuration says wins, then the autoscaler's status, then Karpenter; a pool nothing speaks
of has unknown growth (`placement.can_land` says what that means).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from shipshape.controller.placement import Pool
from shipshape.controller.policy import NodeGroupSpec
from shipshape.kube.capacity import KARPENTER_LABEL, SPOT
from shipshape.kube.quantity import QuantityError, parse_quantity
from shipshape.kube.wellknown import INSTANCE_TYPE_LABELS, ZONE_LABELS

AUTOSCALER_STATUS = ("kube-system", "cluster-autoscaler-status")
# libyaml's safe loader where PyYAML was built with it (several times faster), else the pure one.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Labels that name the node group (or NodePool) a node belongs to.
NODE_GROUP_LABELS = (
    "eks.amazonaws.com/nodegroup",
    "alpha.eksctl.io/nodegroup-name",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
    "kops.k8s.io/instancegroup",
    "karpenter.sh/nodepool",
)


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """One node group as cluster-autoscaler reports it."""

    name: str
    max_size: int | None
    target: int | None
    backoff: bool

    @property
    def can_grow(self) -> bool:
        if self.backoff:
            return False
        return self.max_size is None or self.target is None or self.target < self.max_size


def node_groups_of(labels: Mapping[str, str]) -> frozenset[str]:
    """The node-group names a node's labels give."""
    return frozenset(labels[key] for key in NODE_GROUP_LABELS if labels.get(key))


def configured_growth(specs: Iterable[NodeGroupSpec], nodes: Mapping[Pool, int]) -> dict[Pool, bool]:
    """Growth of the configured pools: `can_grow`, and below `max_size` nodes where one is given."""
    out: dict[Pool, bool] = {}
    for spec in specs:
        pool = Pool(spec.instance_type, spec.zone)
        below = spec.max_size is None or nodes.get(pool, 0) < spec.max_size
        out[pool] = spec.can_grow and below
    return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def autoscaler_groups(configmap: Mapping[str, Any] | None) -> list[GroupStatus]:
    """The node groups of cluster-autoscaler's status ConfigMap (YAML `status`); [] when unreadable."""
    text = ((configmap or {}).get("data") or {}).get("status")
    if not isinstance(text, str):
        return []
    try:
        doc = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError:
        return []
    groups = doc.get("nodeGroups") if isinstance(doc, dict) else None
    out: list[GroupStatus] = []
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict) or not isinstance(group.get("name"), str):
            continue
        health: Mapping[str, Any] = group["health"] if isinstance(group.get("health"), dict) else {}
        scale_up: Mapping[str, Any] = group["scaleUp"] if isinstance(group.get("scaleUp"), dict) else {}
        out.append(
            GroupStatus(
                name=group["name"],
                max_size=_int(health.get("maxSize")),
                target=_int(health.get("cloudProviderTarget")),
                backoff=scale_up.get("status") == "Backoff",
            )
        )
    return out


def group_matches(group: str, names: Iterable[str]) -> bool:
    """Whether an autoscaler node group is the one named by a node-group label value (equal, or the
    value as one dash-separated part of the group's name, as cloud providers name their groups)."""
    return any(group == name or f"-{name}-" in f"-{group}-" for name in names)


def autoscaler_growth(
    groups: Iterable[GroupStatus], pool_groups: Mapping[Pool, Iterable[str]]
) -> dict[Pool, bool]:
    """Growth of the pools whose nodes' node-group labels name an autoscaler node group. A group goes to
    the pools with the longest name it matches (`eks-spot-a-b-<id>` is node group `spot-a-b`, not
    `spot-a`); a pool in several groups can grow when one of them can."""
    named = {pool: list(names) for pool, names in pool_groups.items()}
    found: dict[Pool, list[bool]] = {}
    for group in groups:
        lengths = {
            pool: max((len(name) for name in names if group_matches(group.name, [name])), default=0)
            for pool, names in named.items()
        }
        best = max(lengths.values(), default=0)
        if best == 0:
            continue
        for pool, length in lengths.items():
            if length == best:
                found.setdefault(pool, []).append(group.can_grow)
    return {pool: any(answers) for pool, answers in found.items()}


def _requirement_allows(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    return True  # Gt/Lt on other keys: not for the keys read here


def _requirements(nodepool: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = ((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [r for r in spec.get("requirements") or [] if isinstance(r, Mapping)]


def _allows(requirements: list[Mapping[str, Any]], keys: tuple[str, ...], value: str | None) -> bool:
    return all(_requirement_allows(r, value) for r in requirements if r.get("key") in keys)


def _below_limits(nodepool: Mapping[str, Any]) -> bool:
    limits = (nodepool.get("spec") or {}).get("limits") or {}
    used = (nodepool.get("status") or {}).get("resources") or {}
    for name, limit in limits.items():
        try:
            if name in used and parse_quantity(str(used[name])) >= parse_quantity(str(limit)):
                return False
        except QuantityError:
            continue
    return True


def spot_nodepools(nodepools: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Karpenter NodePools that may make spot nodes now (spot allowed, limits not reached)."""
    out = []
    for nodepool in nodepools:
        requirements = _requirements(nodepool)
        capacity = [r for r in requirements if r.get("key") == KARPENTER_LABEL]
        # Without a capacity-type requirement Karpenter launches on-demand only.
        if capacity and _allows(capacity, (KARPENTER_LABEL,), SPOT) and _below_limits(nodepool):
            out.append(nodepool)
    return out


def karpenter_growth(nodepools: Iterable[Mapping[str, Any]], pools: Iterable[Pool]) -> dict[Pool, bool]:
    """The known pools a spot NodePool can make nodes of (True); other pools are not spoken of."""
    spot = [_requirements(nodepool) for nodepool in spot_nodepools(nodepools)]
    out: dict[Pool, bool] = {}
    for pool in pools:
        if any(
            _allows(reqs, INSTANCE_TYPE_LABELS, pool.instance_type) and _allows(reqs, ZONE_LABELS, pool.zone)
            for reqs in spot
        ):
            out[pool] = True
    return out


def pool_growth(
    configured: Mapping[Pool, bool], autoscaler: Mapping[Pool, bool], karpenter: Mapping[Pool, bool]
) -> dict[Pool, bool]:
    """The sources together: configuration first, then cluster-autoscaler, then Karpenter."""
    return {**karpenter, **autoscaler, **configured}
