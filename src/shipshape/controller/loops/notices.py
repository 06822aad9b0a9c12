"""Notice watcher: every source of termination notices and rebalance recommendations, read into the
shared `NoticeBoard` and the pool risk model (decisions in `controller/notices.py`).

- Every replica: the notice taints on nodes (interruption handlers, provisioners, the node-side
  poller) and, in a simulation, each spot node's instance metadata (`loops.poll_instance_metadata`,
  every 5 s); the noticed pools (and the other pools of a zone reclaimed as a whole) become at risk in
  the `RiskModel`, so every replica's webhook keeps new pods off them for the cool-down; rebalance
  recommendations go on the board, where the webhook reads them.
- The leader: a cloud event queue too (its messages go to one consumer), and what only the queue said
  is written on the node as a taint (`spot.shipshape.dev/interruption-notice=event-queue`, or the
  rebalance one), so that every replica's cache, kube-scheduler and a restarted controller know.

The interruption responder and the guards run in the same lane, right after it: a notice read here is
acted on in the same round.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from shipshape.controller.loops.base import Reconciler
from shipshape.controller.loops.kit import Every, Expectations
from shipshape.controller.notices import (
    Notice,
    QueueNoticeSource,
    first_deadlines,
    needs_taint,
    notice_from_instance_action,
    notices_from_taints,
    queue_notice_taint,
    queue_rebalance_taint,
    rebalance_from_metadata,
    risk_notes,
)
from shipshape.controller.ops import OpsError
from shipshape.controller.placement import Pool
from shipshape.controller.policy import CapacityType
from shipshape.controller.state import NOTICE_TAINTS, REBALANCE_TAINTS, taint_keys

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.loops.notices")

# The instance-metadata endpoints (notices, rebalance recommendations) are asked this often.
METADATA_POLL_SECONDS = 5.0
# A node tainted for a queue notice is not tainted again for this long while the cache catches up.
MARKING_SECONDS = 10.0


class NoticeWatcher(Reconciler):
    name = "notices"
    lane = "interruptions"

    def __init__(self, *args: Any, queue: QueueNoticeSource | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A cloud event queue (leader only: its messages go to one consumer).
        self._queue = queue
        self._metadata_poll = Every(METADATA_POLL_SECONDS)
        self._metadata_notices: dict[str, Notice] = {}
        # Metadata and queue rebalance recommendations: node -> its pool.
        self._recommended: Mapping[str, Pool | None] = {}
        self._queue_recommended: Mapping[str, Pool | None] = {}
        # Deadline of each noticed node as first seen (`notices.first_deadlines`).
        self._deadlines: dict[str, float] = {}
        # Taints sent for what the queue said, not yet seen in the cache: "node/taint key".
        self._marking: Expectations[str, None] = Expectations()
        # Nodes carrying a notice taint, as the changes of the cache said (`changed`).
        self._noticed: set[str] = set()

    @property
    def interval(self) -> float:
        return self.settings.interruption_interval_seconds

    def changed(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> bool:
        """A node newly carrying a notice taint wants a round within one interval (as the one-second
        poll would); the nodes carrying one are kept for `busy`."""
        if kind != "Node":
            return False
        name = str((obj.get("metadata") or {}).get("name"))
        noticed = event_type != "DELETED" and bool(taint_keys(obj) & NOTICE_TAINTS)
        if noticed and name not in self._noticed:
            self._noticed.add(name)
            return True
        if not noticed:
            self._noticed.discard(name)
        return False

    def busy(self) -> bool:
        """A node carries a notice."""
        return bool(self._noticed)

    # --- every replica ----------------------------------------------------------------------------

    def observe(self, now: float) -> None:
        self._poll_metadata(now)
        with self.view(now):
            nodes, notices = self._read_notices(now)
        self._record(notices, nodes, now)
        self._publish(notices)

    # --- leader -----------------------------------------------------------------------------------

    def reconcile(self, now: float) -> None:
        self._poll_metadata(now)  # already done by `observe` in this round, unless called alone
        self._poll_queue(now)
        with self.view(now):
            nodes, notices = self._read_notices(now)
            queued = self._queue.notices(nodes) if self._queue is not None else []
            notices += queued
        self._record(notices, nodes, now)
        self._mark(queued, nodes, now)
        self._publish(notices)

    # ----------------------------------------------------------------------------------------------

    def _read_notices(self, now: float) -> tuple[dict[str, Obj], list[Notice]]:
        """Every node by name, and the notices from taints (deadlines kept stable) and from the metadata
        endpoints for the nodes still there (call inside `view()`)."""
        nodes = self.cache.nodes_by_name()
        taints = notices_from_taints(self.cache.noticed_nodes(), now, self.config.notice_lead_seconds)
        notices, self._deadlines = first_deadlines(taints, self._deadlines, nodes)
        notices += [n for name, n in self._metadata_notices.items() if name in nodes]
        return nodes, notices

    def _record(self, notices: Sequence[Notice], nodes: Mapping[str, Mapping[str, Any]], now: float) -> None:
        """Pools with a notice (and the other pools of a reclaimed zone) become at risk."""
        with self.view(now):  # the risk model takes its own lock: the webhook reads it
            notes = risk_notes(notices, nodes, now, self.config.notice_lead_seconds, self.cache.conventions)
            for note in notes:
                if self.shared.risk.record_notice(note.key, note.pool, note.at) and note.source is not None:
                    self.metrics.notices.labels(source=note.source).inc()
                    LOG.info(
                        "termination notice for node %s (pool %s) from %s", note.key, note.pool, note.source
                    )

    def _publish(self, notices: Sequence[Notice]) -> None:
        with self.view():
            self.shared.notices.at_hand = tuple(notices)

    def _publish_recommended(self) -> None:
        """Metadata and queue recommendations on the board (call inside `view()`: the webhook reads it)."""
        queued = self._queue_recommended
        self.shared.notices.recommended = {**self._recommended, **queued} if queued else self._recommended

    def _poll_metadata(self, now: float) -> None:
        """Ask each spot node's metadata endpoint for a notice and a rebalance recommendation (every
        replica: the recommendations steer every replica's webhook)."""
        if not self.settings.poll_instance_metadata or not self._metadata_poll.due(now):
            return
        self._metadata_poll.ran(now)
        with self.view(now):
            spot = self.cache.nodes_of_capacity(CapacityType.SPOT)
        try:
            answers = self.ops.spot_metadata(spot)
        except OpsError as error:
            LOG.debug("instance metadata not polled: %s", error)
            return  # what was known stands
        found: dict[str, Notice] = {}
        recommended: dict[str, Pool | None] = {}
        for name, answer in answers.items():
            if answer.unreachable:
                notice = self._metadata_notices.get(name)
                recommendation = name in self._recommended
            else:
                notice = notice_from_instance_action(name, answer.instance_action)
                recommendation = rebalance_from_metadata(answer.rebalance)
            if notice is not None:
                found[name] = notice
            if recommendation:
                with self.view(now):
                    node = self.cache.get("Node", "", name)
                pool = self.cache.pool_of(node) if node is not None else self._recommended.get(name)
                recommended[name] = pool
                if name not in self._recommended:
                    LOG.info("rebalance recommendation for node %s (pool %s)", name, pool)
        self._metadata_notices = found
        with self.view(now):  # the board is replaced whole: the webhook reads it
            self._recommended = recommended
            self._publish_recommended()

    def _poll_queue(self, now: float) -> None:
        if self._queue is None:
            return
        with self.view(now):
            nodes = self.cache.nodes_by_name()
        for notice in self._queue.poll(nodes, now):
            LOG.info("event queue: interruption warning for node %s", notice.node)
        with self.view(now):
            self._queue_recommended = self._queue.recommended()
            self._publish_recommended()

    def _mark(self, notices: Sequence[Notice], nodes: Mapping[str, Mapping[str, Any]], now: float) -> None:
        """Taint the nodes that only the event queue told about, so that every replica's cache and
        kube-scheduler know too, and a restarted controller reads it again (the queue's messages reach
        the leader alone): a warning as `QUEUE_NOTICE_TAINT` (NoSchedule, timeAdded at the warning's
        time), a rebalance recommendation as `QUEUE_REBALANCE_TAINT` (PreferNoSchedule: no new pods
        from the webhook, kube-scheduler prefers other nodes, nothing is drained)."""
        self._marking.expire(now)
        lead = self.config.notice_lead_seconds
        for notice in notices:
            taint = queue_notice_taint(notice, now, lead)
            self._taint_once(nodes.get(notice.node), taint, NOTICE_TAINTS, now)
        for name in self._queue_recommended:
            self._taint_once(nodes.get(name), queue_rebalance_taint(), NOTICE_TAINTS | REBALANCE_TAINTS, now)

    def _taint_once(
        self, node: Mapping[str, Any] | None, taint: Obj, already: frozenset[str], now: float
    ) -> None:
        """Add `taint` to a node that carries none of the `already` taints, unless sent moments ago."""
        if node is None or not needs_taint(node, already):
            return
        name = str((node.get("metadata") or {}).get("name"))
        key = f"{name}/{taint['key']}"
        if self._marking.pending(key, now):
            return
        taints = list((node.get("spec") or {}).get("taints") or [])
        version = str((node.get("metadata") or {}).get("resourceVersion") or "")
        try:
            self.ops.taint_node(name, [*taints, taint], version)
        except OpsError as error:
            LOG.warning("tainting node %s %s failed, retrying: %s", name, taint["key"], error)
            return
        self._marking.expect(key, None, now, MARKING_SECONDS)
        LOG.info("node %s tainted %s for what the event queue said", name, taint["key"])
