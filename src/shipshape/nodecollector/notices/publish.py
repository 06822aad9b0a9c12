"""What a notice becomes on the Node (pure), and the writes that put it there.

`plan(node, notice, now)` compares the Node as it is with what the notice asks for and returns only
what is missing: the taint (`contracts.notices`: NoSchedule for an interruption, PreferNoSchedule for
a rebalance recommendation; none when the node already carries a notice taint of the same key, e.g.
written by the controller for the event queue), the `SpotInterruptionNotice` condition, and an Event
named after the notice. Everything is read back from the cluster, so a restarted poller writes
nothing twice: the taint and condition are seen on the Node, and the Event's name is taken (409).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shipshape.contracts import notices as contract
from shipshape.kube import client
from shipshape.kube.clock import rfc3339
from shipshape.nodecollector.notices.model import Kind, NodeNotice

Obj = dict[str, Any]
COMPONENT = "shipshape-node-notices"
EVENT_NAMESPACE = "default"


def taint_time(notice: NodeNotice, now: float) -> float:
    """`timeAdded` of the notice taint: the deadline minus the cloud's lead, never after now."""
    if notice.deadline is None:
        return now
    return min(now, notice.deadline - contract.LEAD_SECONDS.get(notice.cloud, 120.0))


def taint_for(notice: NodeNotice, now: float) -> Obj:
    value = contract.metadata_value(notice.cloud)
    if notice.kind is Kind.REBALANCE:
        return {"key": contract.REBALANCE_TAINT, "value": value, "effect": "PreferNoSchedule"}
    return {
        "key": contract.NOTICE_TAINT,
        "value": value,
        "effect": "NoSchedule",
        "timeAdded": rfc3339(taint_time(notice, now)),
    }


def message_of(notice: NodeNotice) -> str:
    if notice.kind is Kind.REBALANCE:
        return f"{notice.detail}: new pods are steered away from this node"
    deadline = rfc3339(notice.deadline) if notice.deadline is not None else "soon"
    return f"{notice.detail}: the instance goes at {deadline}"


def condition_for(notice: NodeNotice, now: float) -> Obj:
    stamp = rfc3339(now)
    return {
        "type": contract.CONDITION,
        "status": "True",
        "reason": f"{notice.cloud.upper()}{notice.reason}",
        "message": message_of(notice),
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def event_name(node: str, notice: NodeNotice) -> str:
    return f"{node[:200]}.{notice.event_id}"


def event_for(node: Mapping[str, Any], notice: NodeNotice, now: float) -> Obj:
    metadata = node.get("metadata") or {}
    name = str(metadata.get("name"))
    stamp = rfc3339(now)
    involved: Obj = {"apiVersion": "v1", "kind": "Node", "name": name}
    if metadata.get("uid"):
        involved["uid"] = metadata["uid"]
    reason = contract.CONDITION if notice.kind is Kind.INTERRUPTION else "SpotRebalanceRecommendation"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(name, notice), "namespace": EVENT_NAMESPACE},
        "involvedObject": involved,
        "reason": reason,
        "message": message_of(notice)[:1024],
        "type": "Warning",
        "source": {"component": COMPONENT, "host": name},
        "reportingComponent": COMPONENT,
        "reportingInstance": name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


@dataclass(frozen=True, slots=True)
class Writes:
    """What is missing on the Node: its new taint list (None: taints as they are), the condition to
    set (None: already set), and the Event to post."""

    taints: list[Obj] | None
    condition: Obj | None
    event: Obj


def plan(node: Mapping[str, Any], notice: NodeNotice, now: float) -> Writes:
    taints = [dict(t) for t in (node.get("spec") or {}).get("taints") or []]
    keys = {str(t.get("key")) for t in taints}
    wanted = taint_for(notice, now)
    already = (
        {contract.NOTICE_TAINT}
        if notice.kind is Kind.INTERRUPTION
        else {
            contract.NOTICE_TAINT,
            contract.REBALANCE_TAINT,
        }
    )
    new_taints = None if keys & already else [*taints, wanted]
    condition: Obj | None = None
    if notice.kind is Kind.INTERRUPTION:
        conditions = (node.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == contract.CONDITION), None)
        if current is None or current.get("status") != "True":
            condition = condition_for(notice, now)
    return Writes(new_taints, condition, event_for(node, notice, now))


class NodeWriter:
    """The writes of `plan` through the official client: the taints as a merge patch conditional on
    the Node's resourceVersion (a concurrent change is a 409, retried from a fresh read), the condition
    as a strategic merge patch of `nodes/status` (merged by type), the Event created by name."""

    def __init__(self, api: Any, node_name: str) -> None:  # a kubernetes ApiClient
        self.api = api
        self.node_name = node_name

    def read(self) -> Obj:
        return client.get_node(self.api, self.node_name)

    def apply(self, node: Mapping[str, Any], writes: Writes) -> list[str]:
        """Make the writes; returns what was written ("taint", "condition", "event")."""
        done: list[str] = []
        if writes.taints is not None:
            version = str((node.get("metadata") or {}).get("resourceVersion") or "")
            body: Obj = {"spec": {"taints": writes.taints}}
            if version:
                body["metadata"] = {"resourceVersion": version}
            client.patch_node(self.api, self.node_name, body)
            done.append("taint")
        if writes.condition is not None:
            client.patch_node_status(self.api, self.node_name, {"status": {"conditions": [writes.condition]}})
            done.append("condition")
        try:
            client.create_event(self.api, EVENT_NAMESPACE, writes.event)
            done.append("event")
        except client.KubeClientError as error:
            if error.status != 409:  # 409: posted before (this notice, an earlier run)
                raise
        return done
