"""A cloud event queue as a notice source: EventBridge EC2 events delivered at least once.

Pure: the queue itself is behind `EventQueue` (`queue_client.SqsQueue` speaks SQS's JSON protocol).
`QueueNoticeSource.poll` receives what is visible, maps each event's instance id to a node through
the nodes' `spec.providerID` (`aws:///<zone>/<instance-id>`), deduplicates (SQS delivers again what
was not deleted in time, and EventBridge may send an event twice), and keeps:

- "EC2 Spot Instance Interruption Warning" as a `Notice` (deadline: the event's time plus the lead
  time), fed to the same plan as taint notices. Its message is deleted only once the node is gone or
  its deadline has passed: until then it comes back after each visibility timeout, so a controller
  that restarts (or another replica that takes over) receives it again;
- "EC2 Instance Rebalance Recommendation" as a recommended node (no new pods there, no drain); its
  message is deleted once handled.

Events for instances that are not nodes of this cluster are deleted and dropped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from shipshape.controller.cache import node_pool
from shipshape.controller.decisions import Notice
from shipshape.controller.ops import OpsError
from shipshape.controller.placement import Pool
from shipshape.kube.clock import parse_time

LOG = logging.getLogger("shipshape.controller.notices")
INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
SOURCE = "event-queue"
# Receives per poll at most (ten messages each): a zone reclaimed at once is read in one poll.
MAX_BATCHES = 20
SEEN_EVENTS_SECONDS = 86400.0


@dataclass(frozen=True, slots=True)
class QueueMessage:
    message_id: str
    receipt: str
    body: str


class EventQueue(Protocol):
    """An SQS-like queue: receive hides messages for a while; delete removes one by its receipt."""

    def receive(self, max_messages: int, visibility_timeout: float) -> list[QueueMessage]: ...

    def delete(self, receipt: str) -> None: ...


@dataclass(frozen=True, slots=True)
class CloudEvent:
    event_id: str
    detail_type: str
    instance_id: str
    time: float


def parse_event(body: str) -> CloudEvent | None:
    """An EventBridge aws.ec2 event from a message body; None for anything else."""
    try:
        event = json.loads(body)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("detail-type") not in (INTERRUPTION, REBALANCE):
        return None
    detail = event.get("detail")
    if not isinstance(detail, dict):
        return None
    instance = detail.get("instance-id")
    if not isinstance(instance, str) or not instance:
        return None
    if event.get("detail-type") == INTERRUPTION and detail.get("instance-action", "terminate") not in (
        "terminate",
        "stop",
        "hibernate",
    ):
        return None
    try:
        time = parse_time(str(event.get("time")))
    except (TypeError, ValueError):
        return None
    event_id = str(event.get("id") or f"{event['detail-type']}:{instance}:{time}")
    return CloudEvent(event_id, str(event["detail-type"]), instance, time)


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
                notice = self._handle(message, by_instance, nodes, now)
                if notice is not None:
                    fresh.append(notice)
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
    ) -> Notice | None:
        event = parse_event(message.body)
        node = by_instance.get(event.instance_id) if event is not None else None
        if event is None or node is None:
            self._delete(message.receipt)  # not ours to handle (another cluster's instance, or garbage)
            return None
        duplicate = event.event_id in self._seen_events
        self._seen_events.setdefault(event.event_id, now)
        if event.detail_type == REBALANCE:
            if duplicate:
                self.duplicates += 1
            self._recommended[node] = node_pool(nodes[node])
            self._delete(message.receipt)
            return None
        self._receipts.setdefault(event.instance_id, []).append(message.receipt)
        if event.instance_id in self._notices:
            self.duplicates += duplicate
            return None
        notice = Notice(node, event.time + self.lead_seconds, SOURCE)
        self._notices[event.instance_id] = notice
        return notice

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
