"""Running the analyzers over a cluster's stored state (in the workers), into recommendations.

Analyzers are pure; this module reads the stored objects, supplies what they need from outside the
cluster (instance prices from the shipped catalog) and stores their findings.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from shipshape.analyzers import spot_adoption
from shipshape.backend.store import repository as repo
from shipshape.kube import capacity as kube_capacity
from shipshape.kube import wellknown
from shipshape.pricing.catalog import default_catalog

Obj = Mapping[str, Any]
KINDS = (spot_adoption.KIND,)
NEEDED = ("nodes", "pods", "deployments", "replicasets", "statefulsets")
DEFAULT_REGION = "us-east-1"


def capacity_of(node: Obj) -> str:
    """`spot` or `on-demand` by the capacity-label conventions the node carries (`kube.capacity`)."""
    kind = kube_capacity.capacity_type_of(node.get("metadata", {}).get("labels") or {})
    return "spot" if kind is not None and str(kind) == "spot" else "on-demand"


def price_of(node: Obj) -> spot_adoption.NodePrice | None:
    labels = node.get("metadata", {}).get("labels") or {}
    instance_type = labels.get(wellknown.INSTANCE_TYPE_LABEL)
    if not instance_type:
        return None
    region = labels.get(wellknown.REGION_LABEL) or DEFAULT_REGION
    catalog = default_catalog()
    on_demand = catalog.on_demand_price(instance_type, region)
    spot = catalog.spot_price(instance_type, region)
    if on_demand is None or spot is None:
        return None
    return spot_adoption.NodePrice(on_demand=on_demand, spot=spot)


def analyze_cluster(session: Session, org_id: str, cluster_id: str, now: datetime) -> int:
    """Run the analyzers on the stored state and store their findings; returns how many."""
    objects = {kind: repo.cluster_objects(session, org_id, cluster_id, kind) for kind in NEEDED}
    findings = spot_adoption.recommend(objects, capacity_of, price_of)
    repo.upsert_recommendations(session, cluster_id, KINDS, findings, now)
    return len(findings)
