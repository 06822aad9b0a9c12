"""What a cloud's instance metadata says about this node, whatever the cloud: pure data."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    # The instance goes away at `deadline` (spot reclaim, preemption, host maintenance that terminates).
    INTERRUPTION = "interruption"
    # The cloud recommends moving off the instance (AWS rebalance recommendation); nothing is drained.
    REBALANCE = "rebalance"


@dataclass(frozen=True, slots=True)
class NodeNotice:
    """One notice read from the instance metadata.

    `event_id` identifies the notice across polls and restarts (the same notice read again has the
    same id); `deadline` is when the cloud says the instance goes (None for a rebalance
    recommendation); `issued` is when the cloud says it sent the notice, when it says so.
    """

    cloud: str
    kind: Kind
    event_id: str
    reason: str
    detail: str
    deadline: float | None = None
    issued: float | None = None
    # Azure: the Scheduled Events id to approve once the notice is published.
    ack_id: str | None = None


class MetadataError(RuntimeError):
    """The instance metadata could not be read (unreachable, refused, malformed)."""
