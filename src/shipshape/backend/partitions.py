"""Which worker process takes which partition of the queue, so that one process applies a cluster's pushes.

A worker keeps a copy of each cluster's objects for its analyses (`store/objects.py`) and takes what
its own applies wrote from notes; rows another process wrote are read and parsed again. With two
worker processes taking every cluster's pushes in turn, that parsing was a quarter of a worker's CPU
under a stream of deltas, and the two processes' applies of one cluster waited for each other's row
lock. The NATS stream is therefore split into partitions (`queue.partition_of`: a cluster's jobs go to
one), and each partition is taken by one process.

Ownership is a PostgreSQL advisory lock per partition, held on a connection of its own: it goes when
the process or its connection dies, and the others take its partitions on their next round. Each
process also holds a shared lock that counts it as a member. Every round a process keeps its fair
share (`fair_share`), lets go of the rest (once the partition's consumer has settled its batch), and
tries the partitions nobody holds until it has its share. A process that joins takes its share
within two rounds: the others let go on theirs.

Ownership is an optimisation, not a guard: applying a push is idempotent, and the applies of a
cluster take its row lock, so two processes taking one partition for a while (a handover, a lost
lock connection) stay correct. Without PostgreSQL (SQLite beside NATS) a process takes every
partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import zlib
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import Any

import psycopg

LOG = logging.getLogger("shipshape.backend.partitions")

# The second key of the members' shared lock (partitions are numbered from 0, far below it).
_MEMBERS = 2**31 - 1
# How many processes hold the members' lock of this namespace in this database.
_COUNT_MEMBERS = """
    SELECT count(*) FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 2
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND classid::bigint = %(namespace)s AND objid::bigint = %(key)s
"""


def fair_share(partitions: int, members: int) -> int:
    """The partitions a process keeps: an equal share, rounded up (so that together they hold all)."""
    return -(-partitions // max(1, members))


@dataclass(frozen=True, slots=True)
class Plan:
    """A round's decision: the partitions to let go of, and how many more to try to take."""

    release: tuple[int, ...]
    wanted: int


def plan(owned: Collection[int], members: int, partitions: int) -> Plan:
    """Keep the fair share of the partitions owned (the lowest-numbered), let go of the others."""
    share = fair_share(partitions, members)
    return Plan(tuple(sorted(owned)[share:]), max(0, share - len(owned)))


def candidates(owned: Collection[int], partitions: int, start: int) -> list[int]:
    """The partitions not owned, from `start` on and round: processes starting at different places
    do not all try the same partition first."""
    return [k % partitions for k in range(start, start + partitions) if k % partitions not in owned]


def namespace_of(stream: str) -> int:
    """The advisory locks' first key for a stream's partitions (several streams may share a database)."""
    return zlib.crc32(stream.encode()) & 0x7FFFFFFF


class AdvisoryLocks:
    """The partitions' locks and the members' lock of one namespace, on one PostgreSQL connection of
    their own in autocommit (session locks: they last as long as the connection)."""

    def __init__(self, url: str, namespace: int) -> None:
        self._url = url
        self.namespace = namespace
        self._connection: psycopg.AsyncConnection[Any] | None = None

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.closed

    async def join(self) -> None:
        """Connect and take the members' shared lock (a new connection holds none of the old one's)."""
        await self.close()
        self._connection = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
        await self._connection.execute(
            "SELECT pg_advisory_lock_shared(%(namespace)s, %(key)s)", self._keys(_MEMBERS)
        )

    async def members(self) -> int:
        cursor = await self._live().execute(_COUNT_MEMBERS, self._keys(_MEMBERS))
        row = await cursor.fetchone()
        return int(row[0]) if row is not None else 0

    async def take(self, partition: int) -> bool:
        """The partition's lock if nobody holds it (at once: never waits)."""
        cursor = await self._live().execute(
            "SELECT pg_try_advisory_lock(%(namespace)s, %(key)s)", self._keys(partition)
        )
        row = await cursor.fetchone()
        return bool(row is not None and row[0])

    async def release(self, partition: int) -> None:
        await self._live().execute("SELECT pg_advisory_unlock(%(namespace)s, %(key)s)", self._keys(partition))

    async def close(self) -> None:
        """Close the connection, which lets go of every lock it held."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    def _live(self) -> psycopg.AsyncConnection[Any]:
        if self._connection is None or self._connection.closed:
            raise psycopg.OperationalError("the partition locks' connection is closed")
        return self._connection

    def _keys(self, key: int) -> dict[str, int]:
        return {"namespace": self.namespace, "key": key}


# Consumes a partition until its event is set, then returns once its batch is settled.
Consume = Callable[[int, asyncio.Event], Coroutine[Any, Any, None]]


class Partitions:
    """Runs a consumer (`consume`) for each partition this process owns, and rebalances every
    `every` seconds (`locks` None: owns every partition, for good)."""

    def __init__(
        self,
        locks: AdvisoryLocks | None,
        partitions: int,
        consume: Consume,
        *,
        every: float = 2.0,
        handover_seconds: float = 30.0,
        on_change: Callable[[int], None] | None = None,
    ) -> None:
        self.locks = locks
        self.partitions = partitions
        self._consume = consume
        self.every = every
        self.handover_seconds = handover_seconds
        self._consumers: dict[int, tuple[asyncio.Task[None], asyncio.Event]] = {}
        self._start = random.randrange(partitions)
        self.rounds = 0
        # Told how many partitions this process consumes after each change (a metric's gauge).
        self._on_change = on_change

    @property
    def owned(self) -> set[int]:
        return set(self._consumers)

    def stalled(self) -> str | None:
        """A partition's consumer that ended without being asked to (it takes no more messages)."""
        for partition, (task, stop) in self._consumers.items():
            if task.done() and not stop.is_set():
                return f"consumer of partition {partition} ended"
        return None

    async def run(self) -> None:
        """Rebalance until cancelled; then stop every consumer and let go of every lock."""
        try:
            while True:
                await self.rebalance()
                self.rounds += 1
                await asyncio.sleep(self.every)
        finally:
            for task, stop in self._consumers.values():
                stop.set()
                task.cancel()
            for task, _ in self._consumers.values():
                with contextlib.suppress(BaseException):
                    await task
            self._consumers.clear()
            self._changed()
            if self.locks is not None:
                await self.locks.close()

    async def rebalance(self) -> None:
        """One round: keep the fair share, let go of the rest, take what nobody holds up to the share.
        A round that cannot reach PostgreSQL changes nothing (the consumers go on: see the module's
        note) and connects again the next round."""
        if self.locks is None:
            for partition in range(self.partitions):
                if partition not in self._consumers:
                    self._begin(partition)
            return
        try:
            if not self.locks.connected:
                await self._rejoin()
            decided = plan(self.owned, await self.locks.members(), self.partitions)
            for partition in decided.release:
                await self._end(partition)
                await self.locks.release(partition)
            wanted = decided.wanted
            for partition in candidates(self.owned, self.partitions, self._start):
                if wanted <= 0:
                    break
                if await self.locks.take(partition):
                    self._begin(partition)
                    wanted -= 1
        except psycopg.Error as error:
            LOG.warning("partition ownership not checked this round: %s", error)
            await self.locks.close()

    async def _rejoin(self) -> None:
        """A new lock connection: take again the partitions consumed, and stop those another holds now."""
        assert self.locks is not None
        await self.locks.join()
        for partition in sorted(self._consumers):
            if not await self.locks.take(partition):
                LOG.info("partition %d is another process's now", partition)
                await self._end(partition)

    def _begin(self, partition: int) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(self._consume(partition, stop), name=f"partition-{partition}")
        self._consumers[partition] = (task, stop)
        self._changed()
        LOG.info("consuming partition %d", partition)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(len(self._consumers))

    async def _end(self, partition: int) -> None:
        """Stop the partition's consumer once its batch is settled (cancelled if it takes longer than
        `handover_seconds`: its unacknowledged messages then come again to the next owner)."""
        task, stop = self._consumers.pop(partition)
        self._changed()
        stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), self.handover_seconds)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except Exception:
            LOG.warning("consumer of partition %d failed", partition, exc_info=True)
        LOG.info("let go of partition %d", partition)
