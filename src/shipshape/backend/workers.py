"""Workers: take the queued pushes waiting together, apply each cluster's in one transaction, ack.

A push is applied exactly once whatever the queue does (the push row records that it was processed,
in the same transaction as its effect, and its message is acknowledged after the commit), so
redelivery after a crash is harmless. A delta that arrives
before the push it follows is handed back for later. The sweep re-queues pushes that were stored but
never queued (the API process died between its commit and its publish), and retention removes raw
pushes once processed and old. After applying a push, the workers also write the cluster's time
series point of the minute (`series.py`, in the analyses' thread, not in the consumer's), and the
sweep keeps the series' retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from shipshape import heap
from shipshape.backend import analysis
from shipshape.backend import series as series_points
from shipshape.backend.partitions import AdvisoryLocks, Partitions
from shipshape.backend.queue import Job, MemoryQueue, NatsQueue, QueueError, Verdict
from shipshape.backend.series import Recorder
from shipshape.backend.store import repository as repo
from shipshape.backend.store.objects import ObjectsCache
from shipshape.backend.worker_health import WorkerMetrics
from shipshape.threads import lower_priority

LOG = logging.getLogger("shipshape.backend.workers")


# How soon an analysis that another process was running is looked at again (that one's window then
# holds, from the time it stored).
CLAIMED_RETRY_SECONDS = 1.0


def analysis_wait(state: repo.AnalysisState, now: datetime, window: float) -> float | None:
    """Seconds until the cluster's spot analysis is due (0: now), counting the analyses of every
    process (`window` seconds apart at least); None when the state stored was analysed already."""
    if state.analyzed_sequence is not None and state.analyzed_sequence == state.applied_sequence:
        return None
    if state.analyzed_at is None:
        return 0.0
    return max(0.0, window - (now - state.analyzed_at).total_seconds())


@dataclass
class Workers:
    sessions: sessionmaker[Session]
    queue: MemoryQueue | NatsQueue
    now: Callable[[], datetime]
    sweep_seconds: float = 10.0
    retention: timedelta = timedelta(hours=72)
    # A cluster's analyzers run at most this often (seconds), after a push changed its state.
    analysis_seconds: float = 10.0
    # Writes each cluster's time series (None: no series, as in tests of the queue alone).
    series: Recorder | None = None
    # Usage: slots, retention, and the efficiency analysis (at most every `usage_analysis_seconds`).
    efficiency: analysis.EfficiencySettings = field(default_factory=analysis.EfficiencySettings)
    usage_retention: timedelta = timedelta(hours=192)
    usage_analysis_seconds: float = 900.0
    efficiency_analyses: int = 0
    _efficiency_at: dict[str, float] = field(default_factory=dict)
    processed: int = 0
    analyses: int = 0
    _analyzed_at: dict[str, float] = field(default_factory=dict)
    # Clusters whose state changed while their analysis was not due: when it falls due (monotonic).
    _deferred: dict[str, float] = field(default_factory=dict)
    # Clusters whose state changed since `deferred` last offered them an efficiency analysis.
    _usage_wanted: set[str] = field(default_factory=set)
    # Clusters with a push applied, and the minutes they were applied in, whose series point
    # `deferred` has not written yet.
    _series_wanted: dict[str, set[datetime]] = field(default_factory=dict)
    # Jobs being applied in worker threads (a cancelled task does not stop its thread).
    _inflight: int = 0
    _inflight_lock: threading.Lock = field(default_factory=threading.Lock)
    # One analysis of a cluster at a time in this process (the row lock does it across processes).
    _analysis_locks: dict[str, threading.Lock] = field(default_factory=dict)
    # One transaction applying a cluster's pushes at a time in this process: a second would wait for
    # the row lock on PostgreSQL, and on SQLite (no row locks) apply the same pushes and be rolled back.
    _apply_locks: dict[str, threading.Lock] = field(default_factory=dict)
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    # The clusters' objects the analyses and series points read, kept between their reads (shared
    # with `series` by `service.workers_for`; None: every read reads the whole state).
    kept: ObjectsCache | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # The analyses' own thread while `running` (None: the default executor), at this nice value
    # (None: the process's): an analysis of a cluster reads and summarises its whole state, and when
    # the CPUs are busy it gives way to the applies and to the API processes beside the worker. The
    # analyses then fall due faster than they run, and each cluster's are further apart.
    analysis_nice: int | None = 10
    _analysis_thread: ThreadPoolExecutor | None = None
    # The applies' threads while `running`: a consumer hands a fetched batch over at once, and a job
    # waiting for its cluster's apply lock holds a thread, so other clusters need threads of their own
    # (the default executor has 6 on two cores). Within the database pool (16 kept + 4 connections).
    apply_threads: int = 12
    _apply_threads: ThreadPoolExecutor | None = None
    # Who owns which of the queue's partitions (PostgreSQL beside NATS; None: this process takes
    # every partition), and the partitions' consumers while `running` (`partitions.py`).
    partition_locks: AdvisoryLocks | None = None
    partitions: Partitions | None = None
    rebalance_seconds: float = 2.0

    def apply_cluster(self, jobs: list[Job]) -> list[Verdict]:
        """Apply the pushes of `jobs`, all of one cluster, in one transaction (with whatever else of the
        cluster is ready: `repository.apply_cluster`); a verdict per job (blocking: runs in a thread).
        The jobs are acknowledged only after the commit: a worker killed before it leaves them to be
        delivered again, and the pushes' marks, committed with their effect, make that a no-op."""
        with self._inflight_lock:
            self._inflight += 1
        try:
            return self._apply_cluster(jobs)
        finally:
            with self._inflight_lock:
                self._inflight -= 1

    def _apply_cluster(self, jobs: list[Job]) -> list[Verdict]:
        cluster_id = jobs[0].cluster_id
        with self._inflight_lock:
            lock = self._apply_locks.setdefault(cluster_id, threading.Lock())
        started = time.perf_counter()
        # The bodies it writes, for the copy of the cluster's objects if it keeps one (or has room for one).
        written = repo.Written() if self.kept is not None and self.kept.takes_notes(cluster_id) else None
        try:
            with lock, self.sessions.begin() as session:
                outcomes = repo.apply_cluster(
                    session,
                    cluster_id,
                    [job.push_id for job in jobs],
                    self.now(),
                    self.efficiency.step_seconds,
                    written,
                )
        except Exception:
            self.metrics.messages.labels("failed").inc(len(jobs))
            raise
        if self.kept is not None and written is not None and written.bodies:
            # Committed: the copy takes these from here instead of reading them again.
            self.kept.note(cluster_id, written.revision, written.bodies)
        self.metrics.apply_seconds.observe(time.perf_counter() - started)
        verdicts = []
        seen: set[int] = set()
        for job in jobs:
            # A push named twice (its job and the sweep's) is applied once: the second is a duplicate.
            outcome = "duplicate" if job.push_id in seen else outcomes[job.push_id]
            seen.add(job.push_id)
            if outcome == repo.NOT_YET:
                # A delta that arrived before the push it follows: the queue delivers it again later.
                LOG.debug("push %s follows a push not applied yet", job.push_id)
                self.metrics.messages.labels("retry").inc()
                verdicts.append(Verdict.RETRY)
                continue
            self.metrics.messages.labels(outcome).inc()
            self.processed += outcome == "applied"
            LOG.debug("push %s of cluster %s: %s", job.push_id, cluster_id, outcome)
            verdicts.append(Verdict.DONE)
        # Superseded: a newer snapshot was applied in its place.
        if any(outcome in ("applied", "superseded") for outcome in outcomes.values()):
            self.analysis_wanted(cluster_id)
            # The minute's series point and the efficiency analysis run in `deferred`: the point reads
            # and summarises the whole state (a good part of a second for 3,000 pods), and in the
            # consumer it held up the acks of the whole batch, and the memory of one parsed state per
            # apply thread at once (each cluster's first push of a minute).
            minute = series_points.floor(self.now(), series_points.MINUTE)
            with self._inflight_lock:
                self._usage_wanted.add(cluster_id)
                if self.series is not None:
                    self._series_wanted.setdefault(cluster_id, set()).add(minute)
        return verdicts

    def analysis_wanted(self, cluster_id: str) -> None:
        """The cluster's state changed: its analysis runs once `analysis_seconds` have passed since the
        last one (at once if they have), in `deferred`, not in the consumer that applied the push: an
        analysis of a 3,000-pod cluster takes a good part of a second, and the consumer goes on with
        the next job meanwhile."""
        with self._inflight_lock:
            due = self._analyzed_at.get(cluster_id, -1e9) + self.analysis_seconds
            self._deferred.setdefault(cluster_id, due)

    def analyze_if_due(self, cluster_id: str, force: bool = False) -> bool:
        """Run the analyzers for the cluster unless they ran in the last `analysis_seconds`, in this
        process or another; then they run once that time is up (`deferred`), so no change waits for
        the next push to be analyzed. One process at a time analyses a cluster (its row's lock), and
        a state another process analysed already is not analysed again (`repository.lock_for_analysis`):
        with several worker processes, each cluster costs one analysis per window, not one per process.
        In its own transaction: a failing analyzer never undoes an applied push (it is logged, and runs
        again after the next push)."""
        moment = time.monotonic()
        with self._inflight_lock:
            due = self._analyzed_at.get(cluster_id, -1e9) + self.analysis_seconds
            if not force and moment < due:
                self._deferred.setdefault(cluster_id, due)
                return False
            self._deferred.pop(cluster_id, None)
            lock = self._analysis_locks.setdefault(cluster_id, threading.Lock())
        started = time.perf_counter()
        try:
            with lock, self.sessions.begin() as session:
                if not force and not repo.claim_analysis(session, cluster_id):
                    # Another process analyses it now: look again once it is likely done.
                    self._analysis_skipped(cluster_id, moment, CLAIMED_RETRY_SECONDS)
                    return False
                state = repo.lock_for_analysis(session, cluster_id)
                now = self.now()
                wait = 0.0 if force else analysis_wait(state, now, self.analysis_seconds)
                if wait is None or wait > 0:
                    # Analysed already, or by another process lately: that one's window holds.
                    self._analysis_skipped(cluster_id, moment, wait)
                    return False
                found = analysis.analyze_cluster(session, state.org_id, cluster_id, now, self.kept)
                repo.mark_analyzed(session, cluster_id, now, state.applied_sequence)
        except IntegrityError:
            # Another process stored the same finding first; the next push analyzes again.
            LOG.info("analysis of cluster %s raced another worker; skipped", cluster_id)
            self.metrics.analyses.labels("spot", "skipped").inc()
            return False
        except Exception:
            LOG.exception("analysis of cluster %s failed", cluster_id)
            self.metrics.analyses.labels("spot", "failed").inc()
            return False
        with self._inflight_lock:
            self._analyzed_at[cluster_id] = moment
        self.metrics.analysis_seconds.labels("spot").observe(time.perf_counter() - started)
        self.metrics.analyses.labels("spot", "done").inc()
        self.analyses += 1
        LOG.debug("cluster %s: %d recommendation(s)", cluster_id, found)
        return True

    def _analysis_skipped(self, cluster_id: str, moment: float, wait: float | None) -> None:
        """The analysis did not run: look again after `wait` seconds (None: the stored state was
        analysed already; the next applied push asks again)."""
        self.metrics.analyses.labels("spot", "skipped").inc()
        if wait is None:
            return
        with self._inflight_lock:
            self._deferred[cluster_id] = min(self._deferred.get(cluster_id, 1e18), moment + wait)

    def analyze_usage_if_due(self, cluster_id: str, force: bool = False) -> bool:
        """The efficiency analysis of the cluster's stored usage, unless it ran in the last
        `usage_analysis_seconds`. Reading and computing hold no lock (the window can be large);
        storing the findings takes the cluster's row lock, as the spot analysis does."""
        moment = time.monotonic()
        if not force and moment - self._efficiency_at.get(cluster_id, -1e9) < self.usage_analysis_seconds:
            return False
        self._efficiency_at[cluster_id] = moment
        with self._inflight_lock:
            lock = self._analysis_locks.setdefault(f"usage:{cluster_id}", threading.Lock())
        started = time.perf_counter()
        try:
            with lock:
                with self.sessions.begin() as session:
                    org_id = repo.cluster_org(session, cluster_id)
                    inputs = analysis.read_efficiency(session, org_id, cluster_id, self.efficiency, self.kept)
                if inputs is None:
                    return False
                findings = analysis.efficiency_findings(inputs, self.efficiency)
                with self.sessions.begin() as session:
                    repo.lock_cluster(session, cluster_id)
                    analysis.store_efficiency(session, cluster_id, findings, self.now())
        except IntegrityError:
            LOG.info("efficiency analysis of cluster %s raced another worker; skipped", cluster_id)
            self.metrics.analyses.labels("efficiency", "skipped").inc()
            return False
        except Exception:
            LOG.exception("efficiency analysis of cluster %s failed", cluster_id)
            self.metrics.analyses.labels("efficiency", "failed").inc()
            return False
        self.metrics.analysis_seconds.labels("efficiency").observe(time.perf_counter() - started)
        self.metrics.analyses.labels("efficiency", "done").inc()
        self.efficiency_analyses += 1
        LOG.debug("cluster %s: %d efficiency recommendation(s)", cluster_id, len(findings))
        return True

    def deferred_due(self) -> list[str]:
        """Clusters whose analysis was put off by `analysis_seconds` and is due now, longest due first."""
        moment = time.monotonic()
        with self._inflight_lock:
            due = sorted((at, cluster_id) for cluster_id, at in self._deferred.items() if at <= moment)
        return [cluster_id for _, cluster_id in due]

    async def deferred(self) -> None:
        """Run the analyses asked for (`analysis_wanted`) once they fall due, the series points of the
        clusters that had a push applied (a cluster's right after its analysis when one is waiting:
        both read the whole state; the spot analyses that fall due meanwhile go first: they decide
        how soon a finding is listed), and the efficiency analyses of changed clusters (each
        rate-limited itself), one at a time: none of it holds up a consumer."""
        while True:
            with self._inflight_lock:
                self.metrics.analyses_waiting.set(len(self._deferred))
            await self._due_analyses()
            while (wanted := self._next_series_point()) is not None:
                await self._in_analysis_thread(self._record_series, *wanted)
                await self._due_analyses()
            with self._inflight_lock:
                changed, self._usage_wanted = self._usage_wanted, set()
            for cluster_id in sorted(changed):
                # Logs its own failures.
                await self._in_analysis_thread(self.analyze_usage_if_due, cluster_id)
            await asyncio.sleep(0.1)

    async def _due_analyses(self) -> None:
        for cluster_id in self.deferred_due():
            try:
                await self._in_analysis_thread(self.analyze_if_due, cluster_id)
            except Exception:  # the database is away: the next push analyzes again
                LOG.warning("deferred analysis of cluster %s failed", cluster_id, exc_info=True)
            # Right after the analysis, which brought this process's copy of the cluster up to date:
            # the points read it again for the cost of the rows written since.
            while (wanted := self._next_series_point(cluster_id)) is not None:
                await self._in_analysis_thread(self._record_series, *wanted)

    def _next_series_point(self, cluster_id: str | None = None) -> tuple[str, datetime] | None:
        """A cluster (`cluster_id`, or any whose analysis is not waiting: that one takes its points
        along) and a minute whose series point is wanted (the oldest minute first)."""
        with self._inflight_lock:
            if cluster_id is None:
                cluster_id = next((c for c in self._series_wanted if c not in self._deferred), None)
            minutes = None if cluster_id is None else self._series_wanted.get(cluster_id)
            if cluster_id is None or not minutes:
                return None
            minute = min(minutes)
            minutes.discard(minute)
            if not minutes:
                del self._series_wanted[cluster_id]
        return cluster_id, minute

    def _record_series(self, cluster_id: str, minute: datetime) -> bool:
        """The cluster's point of `minute` unless written (logs its own failures)."""
        assert self.series is not None
        return self.series.record_if_due(cluster_id, minute)

    async def _in_analysis_thread(self, analyze: Callable[..., bool], *args: Any) -> bool:
        """`analyze(*args)` in the analyses' own thread: in the default executor, shared with the
        consumers' applies, each analysis waited behind every job of the batches they had fetched."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._analysis_thread, self._counted, analyze, *args)

    def _analysis_thread_started(self) -> None:
        if self.analysis_nice is not None:
            lower_priority(threading.current_thread(), self.analysis_nice)

    def _counted(self, analyze: Callable[..., bool], *args: Any) -> bool:
        """`analyze(*args)` counted in flight: a stop waits for its transaction (a cancelled task
        does not stop its thread) before the database is closed."""
        with self._inflight_lock:
            self._inflight += 1
        try:
            return analyze(*args)
        finally:
            with self._inflight_lock:
                self._inflight -= 1

    async def handle_batch(self, jobs: list[Job]) -> list[Verdict]:
        """The jobs the queue handed over together: each cluster's in one transaction (`apply_cluster`),
        the clusters side by side in the applies' threads. A cluster whose apply failed has its jobs
        delivered again; the others' stand."""
        now = time.time()
        by_cluster: dict[str, list[Job]] = {}
        for job in jobs:
            if job.deliveries > 1:
                self.metrics.redelivered.inc()
            if job.queued_at is not None:
                self.metrics.queue_wait.observe(max(0.0, now - job.queued_at))
            by_cluster.setdefault(job.cluster_id, []).append(job)
        loop = asyncio.get_running_loop()
        groups = list(by_cluster.values())
        results = await asyncio.gather(
            *(loop.run_in_executor(self._apply_threads, self.apply_cluster, group) for group in groups),
            return_exceptions=True,
        )
        verdicts: dict[int, Verdict] = {}
        for group, result in zip(groups, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancelled
                LOG.error("applying %d push(es) of cluster %s failed; retrying", len(group),
                          group[0].cluster_id, exc_info=result)  # fmt: skip
                result = [Verdict.RETRY] * len(group)
            for job, verdict in zip(group, result, strict=True):
                verdicts[id(job)] = verdict
        return [verdicts[id(job)] for job in jobs]

    def sweep_once(self, grace: float | None = None) -> list[Job]:
        """Jobs for pushes stored more than `grace` seconds ago (default `sweep_seconds`: younger ones
        are on their way through the queue) but not processed; removes expired raw pushes."""
        with self._inflight_lock:
            self._inflight += 1
        try:
            return self._sweep(self.sweep_seconds if grace is None else grace)
        finally:
            with self._inflight_lock:
                self._inflight -= 1

    def _sweep(self, grace: float) -> list[Job]:
        with self.sessions.begin() as session:
            now = self.now()
            repo.expire_pushes(session, now - self.retention)
            repo.expire_usage(session, self.usage_retention)
            pending = repo.unprocessed_pushes(session, now - timedelta(seconds=grace))
            clusters = repo.push_clusters(session, pending)
        if self.series is not None:
            try:
                self.series.prune_if_due()
            except Exception:  # retention waits for the next round; the pushes must not
                LOG.warning("series retention failed; retrying later", exc_info=True)
        return [Job(push_id, clusters[push_id], f"sweep:{push_id}") for push_id in pending]

    async def sweep(self) -> None:
        # At start, everything left unprocessed (by a process that stopped) is taken at once: applying
        # a push is idempotent, so a job also still in a shared queue costs nothing twice.
        grace: float | None = 0.0
        while True:
            try:
                jobs = await asyncio.to_thread(self.sweep_once, grace)
                for job in jobs:
                    await self.queue.publish(job)
                grace = None
            except Exception:  # the database or queue is away: try again next round
                LOG.warning("sweep failed; retrying in %.0f s", self.sweep_seconds, exc_info=True)
            await asyncio.sleep(self.sweep_seconds)

    async def watch_lag(self, every: float = 5.0) -> None:
        """Keep `metrics.queue_pending` current (the queue is asked every `every` seconds)."""
        while True:
            try:
                self.metrics.queue_pending.set(await self.queue.pending())
            except QueueError as error:  # NATS is away: the gauge keeps its last value
                LOG.debug("queue lag unknown: %s", error)
            await asyncio.sleep(every)

    async def _consume_partition(self, partition: int, stop: asyncio.Event) -> None:
        await self.queue.consume_batches(self.handle_batch, partition, stop)

    @property
    def consuming(self) -> bool:
        """Whether `running` has started the consumers."""
        return bool(self._tasks)

    def stalled(self) -> str | None:
        """Why this process no longer does its work (a task of `running` ended), or None."""
        for task in self._tasks:
            if task.done():
                return f"task {task.get_name()} ended"
        return None if self.partitions is None else self.partitions.stalled()

    @contextlib.asynccontextmanager
    async def running(self, consumers: int) -> AsyncIterator[Workers]:
        """`consumers` tasks taking jobs (with a partitioned queue, one per partition this process
        owns: `partitions.py`), plus the sweep, the deferred analyses, the queue lag gauge and the
        garbage collector's aging (`heap.age`), until the context ends."""
        if self.queue.partitions > 1:
            self.partitions = Partitions(
                self.partition_locks,
                self.queue.partitions,
                self._consume_partition,
                every=self.rebalance_seconds,
                on_change=self.metrics.partitions_owned.set,
            )
            tasks = [asyncio.create_task(self.partitions.run(), name="partitions")]
        else:
            tasks = [
                asyncio.create_task(self.queue.consume_batches(self.handle_batch), name=f"consumer-{n}")
                for n in range(consumers)
            ]
        tasks.append(asyncio.create_task(self.sweep(), name="sweep"))
        tasks.append(asyncio.create_task(self.deferred(), name="analyses"))
        tasks.append(asyncio.create_task(self.watch_lag(), name="queue-lag"))
        # The copy of the clusters' objects (`kept`) is frozen as it is read (`heap.long_lived`).
        tasks.append(asyncio.create_task(heap.age(), name="heap"))
        self._tasks = tasks
        self._analysis_thread = ThreadPoolExecutor(
            1, thread_name_prefix="analysis", initializer=self._analysis_thread_started
        )
        self._apply_threads = ThreadPoolExecutor(self.apply_threads, thread_name_prefix="apply")
        try:
            yield self
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._tasks = []
            self.partitions = None
            # Let jobs already in a thread finish their transaction before the caller closes the database.
            for _ in range(1000):
                if not self._inflight:
                    break
                await asyncio.sleep(0.01)
            self._analysis_thread.shutdown(wait=False)
            self._apply_threads.shutdown(wait=False)
            self._analysis_thread = self._apply_threads = None
