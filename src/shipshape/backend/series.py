"""Per-cluster time series of the key figures: cost per hour (now and all on-demand), share of
replicas on spot, pod start-up p50 and p99 (created → Ready), requested and used CPU and memory over
allocatable.

A point is the dashboard's own summary (`summary.summarize`) of the stored state and of the nodes'
usage in the newest usage slot (`node_usage_now`), so the series and the cluster page never
disagree. The workers write one for each minute in which they applied a push to the cluster, at the
start of that minute, of the state when they take it (in their analyses' thread, soon after the
push); the (cluster, minute) key makes a second write, from this process or another, a no-op.
Minutes without an applied push have no point.

Retention: minute points older than `minute_window` are averaged into one point an hour; hourly
points older than `retention` are deleted. Readers ask for a step (a multiple of a minute) and get
one average per step-aligned bucket that has data.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from shipshape.backend import analysis, summary
from shipshape.backend import usage as usage_store
from shipshape.backend.store import repository as repo
from shipshape.backend.store import series as store
from shipshape.backend.store.models import SeriesPoint
from shipshape.backend.store.objects import ObjectsCache

LOG = logging.getLogger("shipshape.backend.series")

MINUTE = 60
HOUR = 3600
# Every figure of a point, in the order the API lists them.
FIGURES: tuple[str, ...] = (
    "nodes",
    "pods",
    "usd_per_hour",
    "on_demand_usd_per_hour",
    "spot_share_pct",
    "startup_p50_seconds",
    "startup_p99_seconds",
    "cpu_requested_ratio",
    "memory_requested_ratio",
    "cpu_used_ratio",
    "memory_used_ratio",
)
# How often a worker looks for points to downsample or delete.
PRUNE_EVERY = timedelta(minutes=10)
# Points read and downsampled per transaction.
PRUNE_BATCH = 10_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc(moment: datetime) -> datetime:
    """`moment` as an aware UTC time (SQLite hands stored times back without their zone; a caller's
    time without a zone is taken as UTC)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def floor(moment: datetime, step: int) -> datetime:
    """The start of the `step`-second bucket (aligned to the Unix epoch) that holds `moment`."""
    offset = utc(moment) - EPOCH
    seconds = offset.days * 86_400 + offset.seconds
    return EPOCH + timedelta(seconds=seconds - seconds % step)


def figures_of(figures: Mapping[str, Any]) -> dict[str, float | None]:
    """The series' figures out of `summary.summarize(..., startup="end-to-end")`'s answer."""
    cost = figures.get("cost") or {}
    utilisation = figures.get("utilisation") or {}
    end_to_end = (figures.get("pod_startup") or {}).get("endToEnd") or {}
    return {
        "nodes": float(figures.get("nodes", 0)),
        "pods": float(figures.get("pods", 0)),
        "usd_per_hour": cost.get("usd_per_hour"),
        "on_demand_usd_per_hour": cost.get("on_demand_usd_per_hour"),
        "spot_share_pct": figures.get("spot_share_pct"),
        "startup_p50_seconds": end_to_end.get("p50"),
        "startup_p99_seconds": end_to_end.get("p99"),
        "cpu_requested_ratio": utilisation.get("cpu_requested_ratio"),
        "memory_requested_ratio": utilisation.get("memory_requested_ratio"),
        "cpu_used_ratio": utilisation.get("cpu_used_ratio"),
        "memory_used_ratio": utilisation.get("memory_used_ratio"),
    }


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def average(rows: Sequence[SeriesPoint]) -> dict[str, float | None]:
    """Each figure's mean over the points that have it (None where none has)."""
    return {name: _mean(getattr(row, name) for row in rows) for name in FIGURES}


def node_usage_now(
    session: Session, org_id: str, cluster_id: str, now: datetime, fresh: timedelta
) -> dict[str, usage_store.NodeUsed]:
    """Each node's usage in the cluster's newest usage slot (the agent's NodeMetrics), or nothing when
    no usage report was received in the last `fresh` (usage that stopped coming is not current)."""
    chunks = repo.newest_node_usage_chunks(session, org_id, cluster_id, now - fresh)
    return usage_store.newest_node_slot(chunks)[1]


@dataclass(frozen=True, slots=True)
class Bucket:
    at: datetime
    figures: dict[str, float | None]


def buckets(rows: Sequence[SeriesPoint], step: int) -> list[Bucket]:
    """One average per `step`-second bucket that holds points (rows oldest first)."""
    return [Bucket(at, average(list(group))) for at, group in groupby(rows, key=lambda r: floor(r.at, step))]


def default_step(since: datetime, until: datetime, most: int = 1440) -> int:
    """The smallest of a minute, 5 and 15 minutes, an hour, 6 hours and a day giving at most
    `most` buckets."""
    span = (until - since).total_seconds()
    for step in (MINUTE, 5 * MINUTE, 15 * MINUTE, HOUR, 6 * HOUR, 24 * HOUR):
        if span / step <= most:
            return step
    return max(24 * HOUR, math.ceil(span / most / HOUR) * HOUR)


@dataclass(frozen=True, slots=True)
class Pruned:
    downsampled: int  # minute points averaged into hourly ones (and removed)
    deleted: int  # points past the retention


@dataclass
class Recorder:
    """Writes the series points of the clusters the workers apply pushes to, and keeps their retention."""

    sessions: sessionmaker[Session]
    now: Callable[[], datetime]
    minute_window: timedelta = timedelta(days=7)
    retention: timedelta = timedelta(days=400)
    # Usage counts as current while a usage report came in this recently (three of the backend's
    # usage steps by default: an agent reports once a bucket, at most a step).
    usage_fresh: timedelta = timedelta(minutes=15)
    # The worker's copy of the clusters' objects (None: read the whole state each time).
    kept: ObjectsCache | None = None
    written: int = 0
    # The minute each cluster's point was written for, by this process.
    _minute: dict[str, datetime] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pruned_at: datetime | None = None

    def record_if_due(self, cluster_id: str, at: datetime | None = None) -> bool:
        """Write the cluster's point for the minute of `at` (default: now) unless there is one
        (blocking: called from a worker's thread). Failures are logged, and the next push of the
        minute tries again."""
        minute = floor(self.now() if at is None else at, MINUTE)
        with self._lock:
            if self._minute.get(cluster_id) == minute:
                return False
            previous = self._minute.get(cluster_id)
            self._minute[cluster_id] = minute
        try:
            with self.sessions.begin() as session:
                added = self.record(session, cluster_id, minute)
        except Exception:
            LOG.exception("series point of cluster %s failed", cluster_id, extra={"cluster_id": cluster_id})
            with self._lock:
                if self._minute.get(cluster_id) == minute:
                    self._restore(cluster_id, previous)
            return False
        self.written += added
        return added

    def _restore(self, cluster_id: str, previous: datetime | None) -> None:
        if previous is None:
            self._minute.pop(cluster_id, None)
        else:
            self._minute[cluster_id] = previous

    def record(self, session: Session, cluster_id: str, at: datetime) -> bool:
        """Store the cluster's point at `at` from its stored state and current node usage; False if one
        is there already or another worker process is computing it (then nothing is read or
        computed, as the summary of a 3,000-pod cluster takes a good part of a second)."""
        if not store.claim_point(session, cluster_id, at) or store.has_point(session, cluster_id, at, MINUTE):
            return False  # another process computes it now, or wrote it
        org_id = repo.cluster_org(session, cluster_id)
        objects = analysis.read_objects(session, org_id, cluster_id, summary.COST_KINDS, self.kept)
        used = node_usage_now(session, org_id, cluster_id, self.now(), self.usage_fresh)
        figures = figures_of(summary.summarize(objects, slowest=0, startup="end-to-end", used=used))
        row = {"cluster_id": cluster_id, "at": at, "resolution_seconds": MINUTE, **figures}
        return store.add_points(session, [row]) == 1

    def prune_if_due(self) -> Pruned | None:
        """`prune` at most every `PRUNE_EVERY` (the workers' sweep calls this every round)."""
        now = self.now()
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return None
        self._pruned_at = now
        return self.prune(now)

    def prune(self, now: datetime) -> Pruned:
        """Average whole hours of minute points older than the minute window into hourly points,
        and delete points older than the retention. Idempotent; safe from several processes."""
        cutoff = floor(now - self.minute_window, HOUR)
        downsampled = 0
        while True:
            with self.sessions.begin() as session:
                count, more = self._downsample_batch(session, cutoff)
            downsampled += count
            if not more:
                break
        with self.sessions.begin() as session:
            oldest = now - self.retention
            deleted = sum(store.delete_points(session, step, oldest) for step in (HOUR, MINUTE))
        if downsampled or deleted:
            LOG.info(
                "series retention: %d minute points averaged into hours, %d old points deleted",
                downsampled,
                deleted,
            )
        return Pruned(downsampled, deleted)

    @staticmethod
    def _downsample_batch(session: Session, cutoff: datetime) -> tuple[int, bool]:
        rows = store.older_points(session, MINUTE, cutoff, PRUNE_BATCH)
        full = len(rows) == PRUNE_BATCH
        groups = [(key, list(group)) for key, group in groupby(rows, key=_cluster_hour)]
        if full and len(groups) > 1:
            groups.pop()  # the last hour may go on in the next batch
        hourly = [
            {"cluster_id": cluster_id, "at": hour, "resolution_seconds": HOUR, **average(group)}
            for (cluster_id, hour), group in groups
        ]
        store.add_points(session, hourly)
        removed = 0
        for cluster_id, spans in groupby(groups, key=lambda g: g[0][0]):
            hours = [hour for (_, hour), _ in spans]
            removed += store.delete_points(
                session, MINUTE, hours[-1] + timedelta(hours=1), cluster_id=cluster_id, since=hours[0]
            )
        return removed, full


def _cluster_hour(row: SeriesPoint) -> tuple[str, datetime]:
    return row.cluster_id, floor(row.at, HOUR)
