"""Termination notices and rebalance recommendations: where they come from and what they mean (pure).

The notice watcher (`loops/notices.py`) takes its decisions here:

- `notices_from_taints`: interruption handlers', provisioners' and the node-side poller's taints, one
  `Notice` per node with the earliest deadline; `notice_from_instance_action` and
  `rebalance_from_metadata`: the instance-metadata answers (a simulation reads them in process);
- `first_deadlines`: a noticed node keeps the deadline it was first seen with (a taint without a time
  gives the same deadline in every round, so a write derived from it and sent again is the same write);
- `reclaimed_scope` and `risk_notes`: the pools with a noticed node, the zones reclaimed as a whole (two
  or more of their pools noticed), and what the pool risk model records for them;
- `queue_notice_taint` / `queue_rebalance_taint` and `needs_taint`: how the leader publishes on the Node
  what only the event queue said.

**A cloud event queue** as a notice source: EventBridge EC2 events delivered at least once. The queue
itself is behind `EventQueue` (`queue_client.SqsQueue` reads SQS through the AWS SDK).
`QueueNoticeSource.poll` receives what is visible, maps each event's instance id to a node through
the nodes' `spec.providerID` (`aws:///<zone>/<instance-id>`), deduplicates (SQS delivers again what
was not deleted in time, and EventBridge may send an event twice), and keeps:

- "EC2 Spot Instance Interruption Warning", "EC2 Instance State-change Notification" (stopping,
  stopped, shutting-down, terminated) and "AWS Health Event" scheduled changes for EC2 (e.g. instance
  retirement) as a `Notice` (deadline: a warning's time plus the lead time, a state change's time, a
  scheduled change acted on as a warning), fed to the same plan as taint notices. Its message is
  deleted only once the node is gone or its deadline has passed: until then it comes back after each
  visibility timeout, so a controller that restarts (or another replica that takes over) receives it
  again;
- "EC2 Instance Rebalance Recommendation" as a recommended node (no new pods there, no drain); its
  message is deleted once handled.

Events for instances that are not nodes of this cluster are deleted and dropped; messages of any
other kind are deleted and counted (`unknown`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any, Protocol

from shipshape.contracts import notices as notice_contract
from shipshape.controller.ops import OpsError
from shipshape.controller.placement import Pool
from shipshape.controller.state import (
    NOTICE_TAINTS,
    QUEUE_NOTICE_TAINT,
    QUEUE_REBALANCE_TAINT,
    node_pool,
    taint_keys,
)
from shipshape.kube import capacity as kube_capacity
from shipshape.kube.clock import parse_time, rfc3339

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.notices")
INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
HEALTH = "AWS Health Event"
SPOT_ACTIONS = ("terminate", "stop", "hibernate")
# States of an instance that is going away (the ones aws-node-termination-handler and Karpenter act on).
GOING_STATES = ("stopping", "stopped", "shutting-down", "terminated")
SOURCE = "event-queue"
# Receives per poll at most (ten messages each): a zone reclaimed at once is read in one poll.
MAX_BATCHES = 20
SEEN_EVENTS_SECONDS = 86400.0


@dataclass(frozen=True, slots=True)
class Notice:
    node: str
    deadline: float
    source: str


# --- notices on nodes and from the instance metadata ------------------------------------------------


def notices_from_taints(nodes: Iterable[Mapping[str, Any]], now: float, lead_seconds: float) -> list[Notice]:
    """Notices read from node taints (interruption handlers, Karpenter, the node-side poller), one per
    node; the deadline is the taint's time (now when it carries none) plus the lead time: the lead of
    the cloud a node-side poller's taint names (`gcp-metadata`: 30 s), else `lead_seconds`. A node
    carrying several notice taints gives the earliest deadline."""
    found: list[Notice] = []
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        best: Notice | None = None
        for taint in (node.get("spec") or {}).get("taints") or []:
            key = taint.get("key")
            if key not in NOTICE_TAINTS:
                continue
            added = taint.get("timeAdded")
            try:
                start = parse_time(added) if added else now
            except ValueError:
                start = now
            lead = notice_contract.lead_of(taint.get("value")) if key == QUEUE_NOTICE_TAINT else None
            notice = Notice(name, start + (lead if lead is not None else lead_seconds), f"taint:{key}")
            if best is None or notice.deadline < best.deadline:
                best = notice
        if best is not None:
            found.append(best)
    return found


def notice_from_instance_action(node: str, body: Mapping[str, Any] | None) -> Notice | None:
    """The metadata endpoint's answer (`{"action": "terminate", "time": "<RFC 3339>"}`) as a notice."""
    if not body or body.get("action") not in ("terminate", "stop", "hibernate") or not body.get("time"):
        return None
    try:
        deadline = parse_time(str(body["time"]))
    except ValueError:
        return None
    return Notice(node, deadline, "instance-metadata")


def rebalance_from_metadata(body: Mapping[str, Any] | None) -> bool:
    """Whether the metadata endpoint's `events/recommendations/rebalance` answer
    (`{"noticeTime": "<RFC 3339>"}`) is a recommendation."""
    return bool(body) and isinstance((body or {}).get("noticeTime"), str)


def first_deadlines(
    notices: Sequence[Notice], first: Mapping[str, float], nodes: Container[str]
) -> tuple[list[Notice], dict[str, float]]:
    """Each notice with the deadline its node was first seen with, and the deadlines to keep (those of
    the nodes still there, plus the new ones)."""
    kept = {node: deadline for node, deadline in first.items() if node in nodes}
    return [Notice(n.node, kept.setdefault(n.node, n.deadline), n.source) for n in notices], kept


# --- what a set of notices reclaims -----------------------------------------------------------------


def reclaimed_scope(
    notices: Sequence[Notice],
    nodes: Mapping[str, Mapping[str, Any]],
    conventions: kube_capacity.Conventions = kube_capacity.DEFAULT,
) -> tuple[frozenset[Pool], frozenset[str]]:
    """Pools with a noticed node, and zones reclaimed as a whole (notices in two or more of their pools)."""
    noticed = {n.node for n in notices if n.node in nodes}
    pools = frozenset(pool for name in noticed if (pool := node_pool(nodes[name], conventions)) is not None)
    pools_per_zone = Counter(pool.zone for pool in pools)
    return pools, frozenset(zone for zone, hit in pools_per_zone.items() if hit >= 2)


@dataclass(frozen=True, slots=True)
class RiskNote:
    """A notice for the pool risk model: `key` is the noticed node (or `zone-reclaim/<pool>` for the
    other pools of a zone reclaimed as a whole), recorded once."""

    key: str
    pool: Pool
    at: float
    # The notice's source; None for a pool at risk because its zone is reclaimed.
    source: str | None


def risk_notes(
    notices: Sequence[Notice],
    nodes: Mapping[str, Mapping[str, Any]],
    now: float,
    lead_seconds: float,
    conventions: kube_capacity.Conventions = kube_capacity.DEFAULT,
) -> list[RiskNote]:
    """What the risk model learns from the notices: each noticed spot node's pool from the notice's time
    (its deadline less the lead, never later than now), then, for a zone reclaimed as a whole, its other
    pools from now."""
    notes: list[RiskNote] = []
    for notice in notices:
        node = nodes.get(notice.node)
        pool = node_pool(node, conventions) if node is not None else None
        if pool is not None:
            notes.append(RiskNote(notice.node, pool, min(now, notice.deadline - lead_seconds), notice.source))
    pools, zones = reclaimed_scope(notices, nodes, conventions)
    if zones:
        for node in nodes.values():
            pool = node_pool(node, conventions)
            if pool is not None and pool.zone in zones and pool not in pools:
                notes.append(RiskNote(f"zone-reclaim/{pool}", pool, now, None))
    return notes


# --- what only the event queue said, published on the node -------------------------------------------


def queue_notice_taint(notice: Notice, now: float, lead_seconds: float) -> Obj:
    """A queue warning as a NoSchedule taint, `timeAdded` at the warning's time (never in the future)."""
    return {
        "key": QUEUE_NOTICE_TAINT,
        "value": notice_contract.QUEUE_VALUE,
        "effect": "NoSchedule",
        "timeAdded": rfc3339(min(now, notice.deadline - lead_seconds)),
    }


def queue_rebalance_taint() -> Obj:
    """A queue rebalance recommendation as a PreferNoSchedule taint: no new pods, nothing drained."""
    return {"key": QUEUE_REBALANCE_TAINT, "value": notice_contract.QUEUE_VALUE, "effect": "PreferNoSchedule"}


def needs_taint(node: Mapping[str, Any] | None, already: frozenset[str]) -> bool:
    """A node there that carries none of the `already` taints (any source of the same news)."""
    return node is not None and not (taint_keys(node) & already)


# --- the event queue -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueMessage:
    message_id: str
    receipt: str
    body: str


class EventQueue(Protocol):
    """An SQS-like queue: receive hides messages for a while; delete removes one by its receipt."""

    def receive(self, max_messages: int, visibility_timeout: float) -> list[QueueMessage]: ...

    def delete(self, receipt: str) -> None: ...


class EventKind(StrEnum):
    INTERRUPTION = "spot-interruption"
    REBALANCE = "rebalance-recommendation"
    STATE_CHANGE = "state-change"
    SCHEDULED_CHANGE = "scheduled-change"


# detail-type -> (source, kind): the events a parser exists for.
KINDS: dict[str, tuple[str, EventKind]] = {
    INTERRUPTION: ("aws.ec2", EventKind.INTERRUPTION),
    REBALANCE: ("aws.ec2", EventKind.REBALANCE),
    STATE_CHANGE: ("aws.ec2", EventKind.STATE_CHANGE),
    HEALTH: ("aws.health", EventKind.SCHEDULED_CHANGE),
}


@dataclass(frozen=True, slots=True)
class CloudEvent:
    """One instance's part of an EventBridge event. `deadline` is when the instance goes, as far as
    the event says (None: the reader's lead after `time`; a rebalance recommendation has none)."""

    event_id: str
    detail_type: str
    instance_id: str
    time: float
    kind: EventKind = EventKind.INTERRUPTION
    deadline: float | None = None


def _instance(value: Any) -> str | None:
    """An instance id, bare (`i-0abc`) or as an ARN (`arn:aws:ec2:...:instance/i-0abc`)."""
    if not isinstance(value, str) or not value:
        return None
    last = value.rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None


def _health_time(value: Any) -> float | None:
    """AWS Health times: RFC 1123-style (`Thu, 03 Dec 2026 09:00:00 GMT`, also with an unpadded day)."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def parse_events(body: str) -> list[CloudEvent] | None:
    """The instances an EventBridge event (an SQS message's body) is about; None for a message that is
    no event of a kind handled here (an unknown kind, garbage), [] for one that names no instance.

    - `EC2 Spot Instance Interruption Warning` (aws.ec2; `instance-action` terminate, stop or
      hibernate): the instance goes the lead time after `time`;
    - `EC2 Instance Rebalance Recommendation` (aws.ec2): no deadline;
    - `EC2 Instance State-change Notification` (aws.ec2) with `state` stopping, stopped, shutting-down
      or terminated: the instance is going now (deadline `time`); other states are not notices;
    - `AWS Health Event` (aws.health) of `service` EC2 and `eventTypeCategory` scheduledChange (e.g.
      instance retirement): every affected instance (bare id or ARN), deadline its `startTime`.
    """
    try:
        event = json.loads(body)
    except ValueError:
        return None
    if not isinstance(event, dict) or str(event.get("version", "0")) != "0":
        return None
    detail_type, source, detail = event.get("detail-type"), event.get("source"), event.get("detail")
    if not isinstance(detail, dict) or detail_type not in KINDS or KINDS[detail_type][0] != source:
        return None
    try:
        time = parse_time(str(event.get("time")))
    except (TypeError, ValueError):
        return None
    kind = KINDS[detail_type][1]
    base_id = str(event.get("id") or f"{detail_type}:{time}")
    if kind is EventKind.SCHEDULED_CHANGE:
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            return None
        start = _health_time(detail.get("startTime"))
        entities = detail.get("affectedEntities") or []
        ids = [_instance(e.get("entityValue")) for e in entities if isinstance(e, dict)]
        return [
            CloudEvent(f"{base_id}:{iid}", str(detail_type), iid, time, EventKind.SCHEDULED_CHANGE, start)
            for iid in dict.fromkeys(ids)
            if iid is not None
        ]
    instance = _instance(detail.get("instance-id"))
    if instance is None:
        return []
    deadline: float | None = None
    if kind is EventKind.INTERRUPTION and detail.get("instance-action", "terminate") not in SPOT_ACTIONS:
        return None
    if kind is EventKind.STATE_CHANGE:
        if detail.get("state") not in GOING_STATES:
            return []
        deadline = time
    return [CloudEvent(base_id, str(detail_type), instance, time, kind, deadline)]


def instance_id(node: Mapping[str, Any]) -> str | None:
    """The cloud instance id of a node, from `spec.providerID` (`aws:///us-east-1a/i-0123...`)."""
    provider = str((node.get("spec") or {}).get("providerID") or "")
    if not provider:
        return None
    last = provider.rstrip("/").rsplit("/", 1)[-1]
    return last or None


@dataclass(slots=True)
class QueueNoticeSource:
    """Notices and rebalance recommendations read from a cloud event queue, deduplicated."""

    queue: EventQueue
    lead_seconds: float
    visibility_seconds: float = 30.0
    # Instance id -> its notice (kept while the node lives and the deadline is ahead).
    _notices: dict[str, Notice] = field(default_factory=dict)
    # Instance id -> the latest receipt of its interruption message(s), deleted when done.
    _receipts: dict[str, list[str]] = field(default_factory=dict)
    _recommended: dict[str, Pool | None] = field(default_factory=dict)
    # Event id -> when first received (duplicates are recognised for a day).
    _seen_events: dict[str, float] = field(default_factory=dict)
    duplicates: int = 0
    # Messages that were no event of a handled kind (deleted).
    unknown: int = 0
    # Called with each message's kind (an event kind, "unknown" or "foreign"), e.g. to count it.
    on_message: Callable[[str], None] | None = None

    def poll(self, nodes: Mapping[str, Mapping[str, Any]], now: float) -> list[Notice]:
        """Read what the queue holds; returns the notices new in this poll (for metrics and logs)."""
        by_instance = {iid: name for name, node in nodes.items() if (iid := instance_id(node)) is not None}
        fresh: list[Notice] = []
        for _ in range(MAX_BATCHES):
            try:
                batch = self.queue.receive(10, self.visibility_seconds)
            except OpsError as error:
                LOG.warning("cannot read the event queue: %s", error)
                break
            for message in batch:
                fresh.extend(self._handle(message, by_instance, nodes, now))
            if len(batch) < 10:
                break
        self._finish(by_instance, now)
        return fresh

    def _handle(
        self,
        message: QueueMessage,
        by_instance: Mapping[str, str],
        nodes: Mapping[str, Mapping[str, Any]],
        now: float,
    ) -> list[Notice]:
        events = parse_events(message.body)
        if events is None:
            self.unknown += 1  # no event of a handled kind: deleted, so that it does not come back
            self._count("unknown")
            LOG.info("event queue: message %s is no event handled here; deleted", message.message_id)
            self._delete(message.receipt)
            return []
        ours = [
            (event, by_instance[event.instance_id]) for event in events if event.instance_id in by_instance
        ]
        if not ours:
            self._count("foreign")
            self._delete(message.receipt)  # not ours to handle (another cluster's instance, or no notice)
            return []
        self._count(ours[0][0].kind.value)
        fresh: list[Notice] = []
        keep = False
        for event, node in ours:
            duplicate = event.event_id in self._seen_events
            self._seen_events.setdefault(event.event_id, now)
            if event.kind is EventKind.REBALANCE:
                self.duplicates += duplicate
                self._recommended[node] = node_pool(nodes[node])
                continue
            keep = True
            self._receipts.setdefault(event.instance_id, []).append(message.receipt)
            if event.instance_id in self._notices:
                self.duplicates += duplicate
                continue
            notice = Notice(node, self._deadline(event), SOURCE)
            self._notices[event.instance_id] = notice
            fresh.append(notice)
        if not keep:
            self._delete(message.receipt)
        return fresh

    def _count(self, kind: str) -> None:
        if self.on_message is not None:
            self.on_message(kind)

    def _deadline(self, event: CloudEvent) -> float:
        """A warning: its time plus the lead; a state change: its time; a scheduled change: acted on
        now, as a warning would be (its start may be days ahead), never later than its start."""
        warned = event.time + self.lead_seconds
        if event.kind is EventKind.STATE_CHANGE:
            return event.time
        if event.kind is EventKind.SCHEDULED_CHANGE and event.deadline is not None:
            return min(event.deadline, warned)
        return warned

    def _finish(self, by_instance: Mapping[str, str], now: float) -> None:
        """Delete interruption messages of nodes that are gone or past their deadline."""
        for iid, notice in list(self._notices.items()):
            if iid in by_instance and now <= notice.deadline:
                continue
            for receipt in self._receipts.pop(iid, []):
                self._delete(receipt)
            if iid not in by_instance:
                del self._notices[iid]
        self._recommended = {
            node: pool for node, pool in self._recommended.items() if node in by_instance.values()
        }

    def _delete(self, receipt: str) -> None:
        try:
            self.queue.delete(receipt)
        except OpsError as error:  # an older receipt of a message delivered again: the newer one deletes it
            LOG.debug("event queue delete: %s", error)

    def notices(self, nodes: Mapping[str, Any]) -> list[Notice]:
        return [notice for notice in self._notices.values() if notice.node in nodes]

    def recommended(self) -> Mapping[str, Pool | None]:
        return dict(self._recommended)
