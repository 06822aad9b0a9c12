"""The node notice contract: what the node-side poller writes on its Node and the controller reads.

A termination notice read from the instance metadata of a node is published on that Node as

- the taint `spot.shipshape.dev/interruption-notice=<cloud>-metadata:NoSchedule`, whose `timeAdded`
  is when the cloud says the instance goes minus that cloud's lead (`LEAD_SECONDS`), never later
  than the moment it is written; the controller reads the deadline back as `timeAdded` plus the lead
  of the cloud the value names (`lead_of`);
- the Node condition `SpotInterruptionNotice` (status True, reason per cloud, the deadline in its
  message);
- an Event on the Node.

A rebalance recommendation is the taint `spot.shipshape.dev/rebalance-recommendation=<cloud>-metadata`
with effect PreferNoSchedule (no drain). The controller's leader uses the same two keys, with the value
`event-queue`, for what an event queue alone told it, so one node carries one notice taint whatever
the number of sources.
"""

from __future__ import annotations

from typing import Final, Literal

NOTICE_TAINT: Final = "spot.shipshape.dev/interruption-notice"
REBALANCE_TAINT: Final = "spot.shipshape.dev/rebalance-recommendation"
CONDITION: Final = "SpotInterruptionNotice"
# The value the controller's leader writes for a notice that only the event queue carried.
QUEUE_VALUE: Final = "event-queue"

Cloud = Literal["aws", "gcp", "azure"]
CLOUDS: Final[tuple[Cloud, ...]] = ("aws", "gcp", "azure")
# Time between a cloud's spot notice and the instance going away: AWS two minutes, GCP (Spot and
# preemptible VMs) about 30 s, Azure Scheduled Events `Preempt` at least 30 s.
LEAD_SECONDS: Final[dict[str, float]] = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}


def metadata_value(cloud: str) -> str:
    """The taint value the node-side poller writes for `cloud` (`aws-metadata`, ...)."""
    return f"{cloud}-metadata"


def lead_of(value: str | None) -> float | None:
    """The lead time a notice taint's value stands for (`gcp-metadata` -> 30 s); None when the value
    names no cloud (the reader's default applies)."""
    if not value or not value.endswith("-metadata"):
        return None
    return LEAD_SECONDS.get(value.removesuffix("-metadata"))
