"""The scheduler's reasons and messages, worded exactly as kube-scheduler v1.32 words them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

# Filter reasons, by plugin.
NODE_UNSCHEDULABLE = "node(s) were unschedulable"
NODE_NAME = "node(s) didn't match the requested node name"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
SPREAD_CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

# Preemption (PostFilter) reasons.
PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."

# Event message limit (upstream truncates FailedScheduling messages to this many characters).
EVENT_MESSAGE_LIMIT = 1024


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


def untolerated_taint(key: str, value: str) -> str:
    return f"node(s) had untolerated taint {{{key}: {value}}}"


class Code(IntEnum):
    """Why a node was rejected; Unresolvable ones are not worth preempting for."""

    UNSCHEDULABLE = 1
    UNRESOLVABLE = 2


@dataclass(frozen=True, slots=True)
class Status:
    """A filter plugin's verdict on one node."""

    code: Code
    reasons: tuple[str, ...]
    plugin: str = ""

    @classmethod
    def unschedulable(cls, plugin: str, *reasons: str) -> Status:
        return cls(Code.UNSCHEDULABLE, reasons, plugin)

    @classmethod
    def unresolvable(cls, plugin: str, *reasons: str) -> Status:
        return cls(Code.UNRESOLVABLE, reasons, plugin)


def no_nodes_available(num_all_nodes: int, statuses: Iterable[Status], post_filter: str = "") -> str:
    """Upstream `FitError.Error()`: "0/N nodes are available: <counted reasons>. <post filter>."

    Reasons are counted per node and sorted as strings (so "12 ..." sorts before "3 ..."), as
    upstream does.
    """
    counts: Counter[str] = Counter()
    for status in statuses:
        counts.update(status.reasons)
    message = f"0/{num_all_nodes} nodes are available:"
    histogram = sorted(f"{n} {reason}" for reason, n in counts.items())
    if histogram:
        message += f" {', '.join(histogram)}."
    if post_filter:
        message += f" {post_filter}."
    return message


def preemption_message(num_all_nodes: int, statuses: Mapping[str, Status], all_nodes: Iterable[str]) -> str:
    """The PostFilter's message when no node is a preemption candidate.

    Nodes without a status of their own count as "Preemption is not helpful for scheduling".
    """
    not_helpful = Status.unresolvable("DefaultPreemption", PREEMPTION_NOT_HELPFUL)
    merged = [statuses.get(name, not_helpful) for name in all_nodes]
    return "preemption: " + no_nodes_available(num_all_nodes, merged)


def truncate(message: str, limit: int = EVENT_MESSAGE_LIMIT) -> str:
    if len(message) <= limit:
        return message
    return message[: limit - 3] + "..."
