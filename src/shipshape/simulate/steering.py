"""Pure pod and scenario rewrites the baseline strategies apply (no cluster, no I/O).

- `spot_eligible`: whether a pod template's nodeSelector leaves any spot pool of the scenario (a GPU
  workload pinned to an on-demand GPU pool does not); only those workloads are steered to spot, by
  every strategy alike.
- `require_capacity` / `prefer_spot`: a required or preferred node affinity on
  `node.kubernetes.io/capacity`, plus tolerations for the spot pools' taints.
- `all_on_demand`: the scenario with every spot pool bought on-demand, the baseline for savings.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shipshape.contracts.annotations import EMULATOR_POOL_LABEL
from shipshape.controller.webhook.mutators import pins_capacity
from shipshape.emulator.scenario import Pool, Scenario
from shipshape.kube.capacity import CAPACITY_LABEL
from shipshape.kube.objects import controller_ref
from shipshape.kube.wellknown import INSTANCE_TYPE_LABEL, REGION_LABEL, ZONE_LABEL
from shipshape.pricing.catalog import default_catalog

Obj = dict[str, Any]
POOL_LABEL = EMULATOR_POOL_LABEL
# Pods of these owners are workload replicas a placement strategy steers (DaemonSet pods are not).
STEERED_OWNERS = frozenset({"ReplicaSet", "StatefulSet"})
WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet"})
EXCLUDED_NAMESPACES = frozenset({"kube-system"})


class StrategyError(ValueError):
    """A scenario a strategy cannot run (e.g. no on-demand price for a spot pool's instance type)."""


def pool_node_labels(pool: Pool, region: str) -> dict[str, str]:
    """The labels the cloud model puts on a node of the pool that a nodeSelector could name."""
    return {
        **pool.labels,
        INSTANCE_TYPE_LABEL: pool.instance_type,
        ZONE_LABEL: pool.zone,
        REGION_LABEL: region,
        **pool.capacity_node_labels(),
        POOL_LABEL: pool.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }


def spot_pools(scenario: Scenario) -> list[Pool]:
    return [pool for pool in scenario.pools if pool.capacity_type == "spot"]


def spot_eligible(pod_spec: Mapping[str, Any], scenario: Scenario) -> bool:
    """The pod's nodeSelector matches the nodes of at least one spot pool."""
    selector = pod_spec.get("nodeSelector") or {}
    for pool in spot_pools(scenario):
        labels = pool_node_labels(pool, scenario.region)
        if all(labels.get(key) == value for key, value in selector.items()):
            return True
    return False


def spot_tolerations(scenario: Scenario) -> list[Obj]:
    """Tolerations for every taint a spot pool's nodes carry, deduplicated, in a stable order."""
    seen: dict[tuple[str, str, str], Obj] = {}
    for pool in spot_pools(scenario):
        for taint in pool.taints:
            key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
            toleration: Obj = {"key": key, "operator": "Equal", "effect": effect}
            if value:
                toleration["value"] = value
            seen[(key, value, effect)] = toleration
    return [seen[k] for k in sorted(seen)]


def is_steered(pod: Mapping[str, Any], namespace: str) -> bool:
    """A workload replica (ReplicaSet or StatefulSet pod) outside kube-system that chose no capacity."""
    if namespace in EXCLUDED_NAMESPACES or pins_capacity(dict(pod)):
        return False
    controller = controller_ref(pod)
    return controller is not None and controller.get("kind") in STEERED_OWNERS


def _tolerate(spec: Obj, tolerations: Iterable[Obj]) -> None:
    current: list[Obj] = list(spec.get("tolerations") or [])
    for toleration in tolerations:
        if toleration not in current:
            current.append(dict(toleration))
    if current:
        spec["tolerations"] = current


def require_capacity(pod: Obj, capacity: str, tolerations: Sequence[Obj] = ()) -> Obj:
    """A copy of the pod whose every required node selector term also demands `capacity`."""
    out = copy.deepcopy(pod)
    spec = out.setdefault("spec", {})
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms: list[Obj] = required.get("nodeSelectorTerms") or [{}]
    expression = {"key": CAPACITY_LABEL, "operator": "In", "values": [capacity]}
    required["nodeSelectorTerms"] = [
        {**term, "matchExpressions": [*(term.get("matchExpressions") or []), expression]} for term in terms
    ]
    if capacity == "spot":
        _tolerate(spec, tolerations)
    return out


def prefer_spot(pod: Obj, tolerations: Sequence[Obj] = ()) -> Obj:
    """A copy of the pod that prefers spot nodes (weight 100) and tolerates their taints."""
    out = copy.deepcopy(pod)
    spec = out.setdefault("spec", {})
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    preferred: list[Obj] = list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    preferred.append(
        {
            "weight": 100,
            "preference": {
                "matchExpressions": [{"key": CAPACITY_LABEL, "operator": "In", "values": ["spot"]}]
            },
        }
    )
    affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    _tolerate(spec, tolerations)
    return out


def all_on_demand(scenario: Scenario) -> Scenario:
    """The same cluster with every spot pool bought on-demand (same instance types, zones and sizes).

    Timeline events aimed at those pools (reclaims, shortages, rebalance recommendations) no longer
    apply and are dropped; zone-wide ones stay (they find no spot node).
    """
    catalog = default_catalog()
    converted: set[str] = set()
    pools: list[Pool] = []
    for pool in scenario.pools:
        if pool.capacity_type != "spot":
            pools.append(pool)
            continue
        price = catalog.on_demand_price(pool.instance_type, scenario.region)
        if price is None:
            raise StrategyError(
                f"pool {pool.name}: no on-demand price for {pool.instance_type!r} in {scenario.region} "
                "in the catalog, so the all-on-demand baseline cannot be priced"
            )
        pools.append(pool.model_copy(update={"capacity_type": "on-demand", "price_per_hour": price}))
        converted.add(pool.name)
    timeline = [event for event in scenario.timeline if event.pool not in converted and event.node is None]
    return scenario.model_copy(update={"pools": pools, "timeline": timeline})


def opt_in_workloads(scenario: Scenario, annotations: Mapping[str, str]) -> Scenario:
    """The scenario with `annotations` added to each spot-eligible Deployment and StatefulSet.

    A workload whose template already pins a capacity type, or that lives in kube-system, is left
    as it is, as is one that carries any of the annotations already (the user's choice wins).
    """
    objects: list[Obj] = []
    for manifest in scenario.objects:
        metadata = manifest.get("metadata") or {}
        template = (manifest.get("spec") or {}).get("template") or {}
        pod_spec = template.get("spec") or {}
        wanted = (
            manifest.get("kind") in WORKLOAD_KINDS
            and metadata.get("namespace", "default") not in EXCLUDED_NAMESPACES
            and not pins_capacity({"spec": pod_spec})
            and spot_eligible(pod_spec, scenario)
            and not set(annotations) & set(metadata.get("annotations") or {})
        )
        if wanted:
            manifest = copy.deepcopy(manifest)
            manifest["metadata"].setdefault("annotations", {}).update(annotations)
        objects.append(manifest)
    return scenario.model_copy(update={"objects": objects})
