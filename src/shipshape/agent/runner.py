"""The agent's loop: informers feed the mirror; a full snapshot at start and every
`snapshot_interval`; the pending changes as a delta every `delta_interval`; every push spooled on disk
first, then sent in order with exponential back-off and jitter while the backend is away.

Sequences come from the wall clock in milliseconds (and always grow), so a restarted agent, even one
whose spool was lost, never sends a sequence the backend has already passed.

With a `LeaseElector` (two replicas), only the Lease holder snapshots, spools and sends; the other
keeps its informers and mirror in step, so that when it takes over it starts at once with a full
snapshot (its sequences, from its own wall clock, follow the old leader's). A leader that loses the
Lease stops sending before its next push, and gives the Lease up on a graceful stop after its last one.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from shipshape import __version__
from shipshape.agent.mirror import Mirror
from shipshape.agent.pusher import Outcome, Pusher
from shipshape.agent.spool import Spool
from shipshape.agent.usage import UsageLoop
from shipshape.kube import errors
from shipshape.kube import informers as kit
from shipshape.kube import sources as kube_sources
from shipshape.kube.clock import Clock
from shipshape.kube.leader import LeaseElector

LOG = logging.getLogger("shipshape.agent")
# A delta of more changes than this is sent as a full snapshot instead (cheaper for both sides).
MAX_DELTA_CHANGES = 10_000


class LeaseUnavailable(RuntimeError):
    """The agent may not take part in leader election: its Lease's namespace does not exist, or RBAC
    does not let it read or write the Lease."""


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
        elector: LeaseElector | None = None,
        usage: UsageLoop | None = None,
    ) -> None:
        self.informers = informers
        # metrics.k8s.io usage, started and stopped with the agent (it reads pod owners from the mirror)
        self.usage = usage
        self.mirror = mirror
        self.pusher = pusher
        self.spool = spool
        self.clock = clock
        self.settings = settings
        self.wall = wall
        self.elector = elector
        self.stop_event = threading.Event()
        # Set to end a wait early: a stop, or a change of leadership.
        self._wake = threading.Event()
        self.sent = 0
        self.last_error: str | None = None
        self._last_sequence = spool.last_sequence()
        self._base: int | None = None  # the sequence the next delta follows (None: snapshot next)
        self._backoff = settings.backoff_start
        self._retry_at = 0.0
        self.thread = threading.Thread(target=self._run, name="agent", daemon=True)
        if elector is not None:
            elector.listen(on_start_leading=self._wake.set, on_stop_leading=self._wake.set)

    @property
    def last_sequence(self) -> int:
        """The sequence of the latest push this agent made (spooled), 0 before the first."""
        return self._last_sequence

    @property
    def leading(self) -> bool:
        """Whether this replica pushes now (always, without leader election)."""
        return self.elector is None or self.elector.is_leader

    def start(self) -> None:
        """List every kind, then (with leader election) take one election step, so that a lone
        replica pushes its first snapshot at once, and run. Raises LeaseUnavailable when the Lease
        cannot be held at all (no namespace, no RBAC), RuntimeError when the informers did not sync."""
        self.informers.start()
        if not self.informers.wait_synced(self.settings.sync_timeout):
            self.informers.stop()
            raise RuntimeError("the agent's informers did not list every kind in time")
        if self.elector is not None:
            try:
                self.elector.try_once()
            except (errors.NotFound, errors.Forbidden, errors.Unauthorized) as error:
                self.informers.stop()
                lease = self.elector.settings
                raise LeaseUnavailable(
                    f"cannot hold the Lease {lease.namespace}/{lease.name}: {error}"
                ) from error
            except errors.ApiError as error:
                LOG.warning("first leader election step failed, retrying: %s", error)
            self.elector.start()
        self.thread.start()
        if self.usage is not None:
            self.usage.start()

    def stop(self, release_lease: bool = True) -> None:
        """Stop pushing, then give the Lease up (`release_lease=False` leaves it to expire, as a killed
        process would), then stop watching."""
        if self.usage is not None:
            self.usage.stop()
        self.stop_event.set()
        self._wake.set()
        if self.thread.is_alive():
            self.thread.join(10)
        if self.elector is not None:
            self.elector.stop(release=release_lease)
        self.informers.stop()
        self.pusher.close()

    # ---- the loop ----------------------------------------------------------------------------

    def _next_sequence(self) -> int:
        sequence = max(self._last_sequence + 1, int(self.wall().timestamp() * 1000))
        self._last_sequence = sequence
        return sequence

    def _spool(self, kind: str, body_for: Callable[[int], Iterable[bytes]]) -> None:
        sequence = self._next_sequence()
        try:
            self.spool.add_chunks(sequence, kind, body_for(sequence))
        except ValueError:
            LOG.warning(
                "spool full: folding %d spooled pushes into a fresh snapshot", len(self.spool.items())
            )
            sequence = self._next_sequence()
            self.spool.fold(sequence, self.mirror.snapshot(sequence, self.wall(), __version__))
        self._base = sequence

    def snapshot_now(self) -> None:
        self._spool("snapshot", lambda seq: self.mirror.snapshot_chunks(seq, self.wall(), __version__))

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
        """Send what is spooled, oldest first; False when the backend is away (retry later). Stops
        before the next push once this replica no longer leads (what is left waits in the spool)."""
        for item in self.spool.items():
            if not self.leading:
                return True
            answer = self.pusher.send(item.sequence, item.pieces(), encoding=item.encoding)
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
        leading = False
        next_snapshot = next_delta = 0.0
        while not self.stop_event.is_set():
            if not self.leading:
                if leading:
                    LOG.info("no longer the leader: pushes stop (the informers keep following)")
                leading = False
                # Asked again each second (real) as well: a lease that lapsed calls back only at the
                # elector's next step.
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            now = self.clock.now()
            if not leading:
                leading = True
                self._base = None  # a leader starts with a full snapshot
                if self.elector is not None:
                    LOG.info("leading: pushing a full snapshot, then deltas")
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
            self._wake.wait(max(0.01, min(1.0, self.clock.real_seconds(max(0.0, wake)))))
            self._wake.clear()
