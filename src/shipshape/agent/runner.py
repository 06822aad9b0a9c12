"""The agent's loop: informers feed the mirror; a full snapshot at start and every
`snapshot_interval`; the pending changes as a delta every `delta_interval`; every push spooled on disk
first, then sent in order with exponential back-off and jitter while the backend is away.

Sequences come from the wall clock in milliseconds (and always grow), so a restarted agent, even one
whose spool was lost, never sends a sequence the backend has already passed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from shipshape import __version__
from shipshape.agent.mirror import Mirror
from shipshape.agent.pusher import Outcome, Pusher
from shipshape.agent.spool import Spool
from shipshape.kube import informers as kit
from shipshape.kube import sources as kube_sources
from shipshape.kube.clock import Clock

LOG = logging.getLogger("shipshape.agent")
# A delta of more changes than this is sent as a full snapshot instead (cheaper for both sides).
MAX_DELTA_CHANGES = 10_000


@dataclass(frozen=True, slots=True)
class AgentSettings:
    snapshot_interval: float = 600.0  # emulated seconds
    delta_interval: float = 15.0
    backoff_start: float = 1.0  # real seconds
    backoff_max: float = 60.0
    sync_timeout: float = 120.0
    spool_max_bytes: int = 256 * 1024 * 1024


# What the agent reports, cluster-wide (read-only: list and watch).
KINDS = (
    "Node",
    "Pod",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "PriorityClass",
    "Event",
)


def sources(api_client: kube_sources.ApiClient) -> list[kit.Source]:
    """What the agent reports (`KINDS`), cluster-wide."""
    return kube_sources.cluster_wide(api_client, KINDS)


class Agent:
    def __init__(
        self,
        informers: kit.Informers,
        mirror: Mirror,
        pusher: Pusher,
        spool: Spool,
        clock: Clock,
        settings: AgentSettings = AgentSettings(),
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.informers = informers
        self.mirror = mirror
        self.pusher = pusher
        self.spool = spool
        self.clock = clock
        self.settings = settings
        self.wall = wall
        self.stop_event = threading.Event()
        self.sent = 0
        self.last_error: str | None = None
        self._last_sequence = spool.last_sequence()
        self._base: int | None = None  # the sequence the next delta follows (None: snapshot next)
        self._backoff = settings.backoff_start
        self._retry_at = 0.0
        self.thread = threading.Thread(target=self._run, name="agent", daemon=True)

    def start(self) -> None:
        self.informers.start()
        if not self.informers.wait_synced(self.settings.sync_timeout):
            self.informers.stop()
            raise RuntimeError("the agent's informers did not list every kind in time")
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(10)
        self.informers.stop()
        self.pusher.close()

    # ---- the loop ----------------------------------------------------------------------------

    def _next_sequence(self) -> int:
        sequence = max(self._last_sequence + 1, int(self.wall().timestamp() * 1000))
        self._last_sequence = sequence
        return sequence

    def _spool(self, kind: str, body_for: Callable[[int], bytes]) -> None:
        sequence = self._next_sequence()
        body = body_for(sequence)
        try:
            self.spool.add(sequence, kind, body)
        except ValueError:
            LOG.warning(
                "spool full: folding %d spooled pushes into a fresh snapshot", len(self.spool.items())
            )
            sequence = self._next_sequence()
            self.spool.fold(sequence, self.mirror.snapshot(sequence, self.wall(), __version__))
        self._base = sequence

    def snapshot_now(self) -> None:
        self._spool("snapshot", lambda seq: self.mirror.snapshot(seq, self.wall(), __version__))

    def delta_now(self) -> None:
        if self._base is None or self.mirror.pending() > MAX_DELTA_CHANGES:
            self.snapshot_now()
            return
        base = self._base
        sequence = self._next_sequence()
        body = self.mirror.take_delta(sequence, base, self.wall(), __version__)
        if body is None:
            return  # nothing changed: the sequence is skipped
        try:
            self.spool.add(sequence, "delta", body)
        except ValueError:
            LOG.warning("spool full: folding the spooled pushes into a fresh snapshot")
            sequence = self._next_sequence()
            self.spool.fold(sequence, self.mirror.snapshot(sequence, self.wall(), __version__))
        self._base = sequence

    def drain(self) -> bool:
        """Send what is spooled, oldest first; False when the backend is away (retry later)."""
        for item in self.spool.items():
            answer = self.pusher.send(item.sequence, item.gzipped())
            if answer.outcome is Outcome.RETRY:
                self.last_error = answer.detail
                return False
            if answer.outcome is Outcome.REJECTED:
                LOG.error(
                    "push %d (%s) rejected: %s; sending a full snapshot",
                    item.sequence,
                    item.kind,
                    answer.detail,
                )
                self.spool.remove(item)
                self._base = None
                continue
            self.spool.remove(item)
            self.sent += 1
        self.last_error = None
        return True

    def _run(self) -> None:
        settings = self.settings
        self.snapshot_now()
        next_snapshot = self.clock.now() + settings.snapshot_interval
        next_delta = self.clock.now() + settings.delta_interval
        while not self.stop_event.is_set():
            now = self.clock.now()
            try:
                if now >= next_snapshot or self._base is None:
                    self.snapshot_now()
                    next_snapshot = now + settings.snapshot_interval
                    next_delta = now + settings.delta_interval
                elif now >= next_delta:
                    self.delta_now()
                    next_delta = now + settings.delta_interval
                if self.spool and self._retry_at <= time.monotonic():
                    if self.drain():
                        self._backoff = settings.backoff_start
                    else:
                        # Exponential back-off with full jitter (real seconds).
                        wait = random.uniform(0, self._backoff)
                        self._retry_at = time.monotonic() + wait
                        LOG.warning("backend unavailable (%s); retrying in %.1fs", self.last_error, wait)
                        self._backoff = min(settings.backoff_max, self._backoff * 2)
            except OSError as error:  # the spool's disk
                LOG.error("spool: %s", error)
            wake = min(next_delta, next_snapshot) - self.clock.now()
            self.stop_event.wait(max(0.01, min(1.0, self.clock.real_seconds(max(0.0, wake)))))
