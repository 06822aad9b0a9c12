"""An SQS-like queue of EventBridge-shaped EC2 events, as interruption handlers in queue mode consume.

The cloud's notices go in as "EC2 Spot Instance Interruption Warning" events (at the notice) and its
rebalance recommendations as "EC2 Instance Rebalance Recommendation" events (found when the queue is
read: the cloud model marks them on the instance). Delivery is SQS's: `receive` hands out up to ten
visible messages and hides them for the visibility timeout, each with a fresh receipt handle;
`delete` with the latest handle removes a message; a message not deleted in time is delivered again
(at-least-once: consumers see duplicates). `redeliver` puts a message back at once, as SQS sometimes
does, for tests of duplicate handling.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shipshape.emulator.cloud.errors import CloudError
from shipshape.kube.clock import rfc3339

if TYPE_CHECKING:
    from shipshape.emulator.cloud.model import CloudModel, Instance

INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
MAX_MESSAGES = 10
MAX_VISIBILITY_SECONDS = 12 * 3600.0


class InvalidReceipt(CloudError):
    """A receipt handle that is not the latest of a message still in the queue."""


@dataclass(slots=True)
class Message:
    message_id: str
    body: str
    sent: float
    visible_at: float = 0.0
    receipt: str | None = None
    receives: int = 0


@dataclass(slots=True)
class EventQueue:
    """The queue: messages in send order, hidden while in flight."""

    now: Callable[[], float]
    region: str = "us-east-1"
    account: str = "123456789012"
    messages: dict[str, Message] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _rebalances_sent: set[str] = field(default_factory=set)
    # Called before each receive (the cloud adds the rebalance events it holds).
    before_receive: Callable[[], None] | None = None

    def send(self, event: dict[str, Any]) -> str:
        message_id = str(uuid.UUID(int=next(self._ids)))
        self.messages[message_id] = Message(message_id, json.dumps(event, sort_keys=True), self.now())
        return message_id

    def send_raw(self, body: str) -> str:
        """A message as SendMessage gives it (an EventBridge rule's target delivers the event JSON)."""
        message_id = str(uuid.UUID(int=next(self._ids)))
        self.messages[message_id] = Message(message_id, body, self.now())
        return message_id

    def event(
        self, detail_type: str, instance_id: str, time: float, detail: dict[str, Any]
    ) -> dict[str, Any]:
        """An EventBridge event of source aws.ec2 (the id is a function of what it reports)."""
        digest = hashlib.sha256(f"{detail_type}:{instance_id}:{time}".encode()).hexdigest()
        return {
            "version": "0",
            "id": str(uuid.UUID(digest[:32])),
            "detail-type": detail_type,
            "source": "aws.ec2",
            "account": self.account,
            "time": rfc3339(time),
            "region": self.region,
            "resources": [f"arn:aws:ec2:{self.region}:{self.account}:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, **detail},
        }

    def receive(self, max_messages: int = 1, visibility_timeout: float = 30.0) -> list[Message]:
        if not 1 <= max_messages <= MAX_MESSAGES:
            raise CloudError(f"MaxNumberOfMessages must be between 1 and {MAX_MESSAGES}, got {max_messages}")
        if not 0 <= visibility_timeout <= MAX_VISIBILITY_SECONDS:
            raise CloudError(
                f"VisibilityTimeout must be between 0 and 43200 seconds, got {visibility_timeout}"
            )
        if self.before_receive is not None:
            self.before_receive()
        now = self.now()
        out: list[Message] = []
        for message in self.messages.values():
            if len(out) >= max_messages:
                break
            if message.visible_at > now:
                continue
            message.visible_at = now + visibility_timeout
            message.receives += 1
            message.receipt = f"{message.message_id}#{message.receives}"
            out.append(message)
        return out

    def delete(self, receipt: str) -> None:
        message_id = receipt.partition("#")[0]
        message = self.messages.get(message_id)
        if message is None or message.receipt != receipt:
            raise InvalidReceipt(f"the receipt handle {receipt!r} is not valid")
        del self.messages[message_id]

    def redeliver(self, message_id: str) -> None:
        """Make an in-flight message visible again at once (a duplicate delivery)."""
        message = self.messages.get(message_id)
        if message is not None:
            message.visible_at = 0.0


def attach(cloud: CloudModel) -> EventQueue:
    """The cloud's event queue: interruption warnings at each notice, rebalance recommendations as found."""
    queue = EventQueue(now=cloud.c.now, region=cloud.region)

    def on_notice(inst: Instance) -> None:
        if inst.notice is None or cloud.cloud != "aws":  # EventBridge EC2 events: an AWS cloud's
            return
        queue.send(queue.event(INTERRUPTION, inst.id, inst.notice.issued, {"instance-action": "terminate"}))

    def rebalances() -> None:
        if cloud.cloud != "aws":
            return
        for inst in cloud.active_instances():
            if inst.rebalance_at is None or inst.id in queue._rebalances_sent:
                continue
            queue._rebalances_sent.add(inst.id)
            queue.send(queue.event(REBALANCE, inst.id, inst.rebalance_at, {}))

    cloud.on_notice.append(on_notice)
    queue.before_receive = rebalances
    return queue
