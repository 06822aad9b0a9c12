"""The work queue between the API and the workers, behind one interface.

`memory://` (the embedded default) is an asyncio queue inside the backend process, whose workers
then run in the same process. `nats://host:port` is NATS JetStream: a file-backed stream split into
partitions (a cluster's jobs all go to one: `partition_of`), a durable pull consumer per partition
(each message goes to one worker; `partitions.py` gives each partition to one worker process),
explicit acks, and redelivery of whatever a worker took but did not ack (a worker killed
mid-message). JetStream also drops a second publish of the same message id within its duplicate
window.

A message names a stored push; the push itself is in the database (the queue carries no data that
only it holds, so a message lost with a crashed process is found again by the workers' sweep).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit, urlunsplit

import orjson

LOG = logging.getLogger("shipshape.backend.queue")
# The stream (and its subjects) can be named in the URL (`nats://host:4222?stream=NAME`), so that
# several backends (or test runs) share one NATS server without sharing work.
DEFAULT_STREAM = "SHIPSHAPE_PUSHES"
DURABLE = "workers"
# The stream's partitions (`?partitions=N` in the URL): at least as many as worker processes, or some
# have none to take (deploy/backend's autoscaler goes up to 20). Fixed for a stream's life: the
# workers' consumers are made for this many.
PARTITIONS = 32
MAX_PARTITIONS = 256
_STREAM_NAME = re.compile(r"^[A-Z0-9_]{1,64}$")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


class QueueError(Exception):
    """The queue URL is unusable or the queue cannot be reached."""


def partition_of(cluster_id: str, partitions: int) -> int:
    """The partition that carries a cluster's jobs (the same in every process: not Python's `hash`)."""
    return zlib.crc32(cluster_id.encode()) % partitions


@dataclass(frozen=True, slots=True)
class Job:
    push_id: int
    cluster_id: str
    # Unique per push: JetStream's duplicate detection key.
    message_id: str
    # Set by the consumer, not sent: how many times the queue has delivered this message (more than
    # once after a worker died or asked for it again), and when the queue took it (epoch seconds).
    deliveries: int = 1
    queued_at: float | None = None

    def encode(self) -> bytes:
        return orjson.dumps({"push_id": self.push_id, "cluster_id": self.cluster_id, "id": self.message_id})

    @classmethod
    def decode(cls, data: bytes) -> Job:
        body = orjson.loads(data)
        return cls(int(body["push_id"]), str(body["cluster_id"]), str(body["id"]))


class Verdict(Enum):
    DONE = "done"
    RETRY = "retry"  # not now: deliver again after a delay


# Takes the jobs waiting together and returns a verdict for each, in their order.
BatchHandler = Callable[[list[Job]], Awaitable[list[Verdict]]]


class WorkQueue(Protocol):
    # How many partitions the jobs are split into (`partition_of`).
    partitions: int

    async def publish(self, job: Job) -> None: ...

    async def consume_batches(
        self, handler: BatchHandler, partition: int | None = None, stop: asyncio.Event | None = None
    ) -> None:
        """Hand the jobs waiting together (up to the queue's batch size) to `handler` at once, until
        cancelled or `stop` is set (then after settling the batch in hand): the workers apply the pushes
        of one cluster that wait together in one transaction. Of `partition` only (None: of all)."""
        ...

    async def pending(self) -> int:
        """Messages waiting or delivered and not acknowledged (the queue's lag)."""
        ...

    async def close(self) -> None: ...


# How long a consumer that took fewer jobs than a batch waits for more before handing them over. A
# cluster's pushes waiting together cost one transaction (`Workers.apply_cluster`): at hundreds of
# pushes a second, taking each as it came made batches of two or three pushes, and the transaction's
# fixed cost (its locks, reads and marks) most of a worker's CPU. With NATS the consumers of several
# worker processes split the stream, and each transaction is round trips to PostgreSQL: 0.2 s cut
# the CPU per delta of the whole stack by a fifth against 0.05 s (`bench/ingest.py`, side by side).
# With the stream in partitions a fetch holds the pushes of one or two clusters, and each round is
# two fetch requests: 0.4 s cut it by another tenth against 0.2 s (3.11-3.38 against 3.60-3.65 ms of
# the stack's CPU per delta, alternating runs), and a lone push waits 0.2 s longer (the bench's
# push -> recommendation p50 0.37 -> 0.58 s), against a budget of seconds. Taking a lone message at
# once and lingering only after a fetch of several lost that gain (3.42-3.53 ms).
LINGER_SECONDS = 0.05
NATS_LINGER_SECONDS = 0.4


class MemoryQueue:
    """In-process queue: jobs die with the process (the workers' sweep finds their pushes again)."""

    # One process takes every job: nothing to split.
    partitions = 1

    def __init__(self, retry_delay: float = 0.5, batch: int = 32, linger: float = LINGER_SECONDS) -> None:
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self.retry_delay = retry_delay
        self.batch = batch
        self.linger = linger
        self._later: set[asyncio.Task[None]] = set()
        self._handling = 0

    async def publish(self, job: Job) -> None:
        await self._queue.put(dataclasses.replace(job, queued_at=time.time()))

    async def consume_batches(
        self, handler: BatchHandler, partition: int | None = None, stop: asyncio.Event | None = None
    ) -> None:
        while stop is None or not stop.is_set():
            jobs = [await self._queue.get()]
            self._take_waiting(jobs)
            if len(jobs) < self.batch and self.linger > 0:
                await asyncio.sleep(self.linger)
                self._take_waiting(jobs)
            self._handling += len(jobs)
            try:
                try:
                    verdicts = await handler(jobs)
                except Exception:
                    LOG.exception("%d jobs failed; retrying", len(jobs))
                    verdicts = [Verdict.RETRY] * len(jobs)
                for job, verdict in zip(jobs, verdicts, strict=True):
                    self._settle(job, verdict)
            finally:
                self._handling -= len(jobs)

    def _take_waiting(self, jobs: list[Job]) -> None:
        while len(jobs) < self.batch and not self._queue.empty():
            jobs.append(self._queue.get_nowait())

    def _settle(self, job: Job, verdict: Verdict) -> None:
        if verdict is Verdict.RETRY:
            task = asyncio.create_task(self._again(job))
            self._later.add(task)
            task.add_done_callback(self._later.discard)

    async def _again(self, job: Job) -> None:
        await asyncio.sleep(self.retry_delay)
        await self._queue.put(dataclasses.replace(job, deliveries=job.deliveries + 1))

    async def pending(self) -> int:
        return self._queue.qsize() + len(self._later) + self._handling

    async def close(self) -> None:
        for task in list(self._later):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class NatsQueue:
    """NATS JetStream: a durable pull consumer per partition, shared by the workers that take the
    partition (one at a time, normally); ack after the work is committed."""

    def __init__(
        self,
        url: str,
        *,
        stream: str = DEFAULT_STREAM,
        ack_wait: float = 30.0,
        retry_delay: float = 0.5,
        batch: int = 64,
        linger: float = NATS_LINGER_SECONDS,
        replicas: int = 1,
        partitions: int = PARTITIONS,
    ) -> None:
        self.url = url
        self.partitions = partitions
        self.stream = stream
        # Copies of the stream in a NATS cluster (R3 survives the loss of a server).
        self.replicas = replicas
        self.subject = stream.lower().replace("_", "-")
        self.ack_wait = ack_wait
        self.retry_delay = retry_delay
        self.batch = batch
        self.linger = linger
        self._nc: Any = None
        self._js: Any = None

    async def connect(self) -> NatsQueue:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
        from nats.js.errors import BadRequestError

        try:
            self._nc = await nats.connect(
                self.url, connect_timeout=5, max_reconnect_attempts=-1, allow_reconnect=True
            )
        except Exception as error:  # nats-py raises OSError, TimeoutError or its own NoServersError
            raise QueueError(f"cannot reach NATS at {shown(self.url)}: {error}") from error
        self._js = self._nc.jetstream()
        stream = StreamConfig(
            name=self.stream,
            subjects=[f"{self.subject}.>"],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            duplicate_window=120.0,
            num_replicas=self.replicas,
        )
        try:
            await self._js.add_stream(stream)
        except BadRequestError:
            await self._js.update_stream(stream)
        await self._drop_unpartitioned()
        for partition in range(self.partitions):
            consumer = ConsumerConfig(
                durable_name=self._durable(partition),
                filter_subject=f"{self._subject(partition)}.>",
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=self.ack_wait,
                max_deliver=-1,
            )
            with contextlib.suppress(BadRequestError):
                await self._js.add_consumer(self.stream, consumer)
        return self

    async def _drop_unpartitioned(self) -> None:
        """The one consumer of every subject that versions before partitions made, and their jobs: a
        work-queue stream takes no consumers whose subjects overlap. Those jobs' pushes are in the
        database, and the workers' sweep queues them again."""
        from nats.js.errors import NotFoundError

        try:
            await self._js.consumer_info(self.stream, DURABLE)
        except NotFoundError:
            return
        LOG.warning("removing the stream's unpartitioned consumer; the sweep queues its jobs again")
        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(self.stream, DURABLE)
        await self._js.purge_stream(self.stream, subject=f"{self.subject}.*")

    def _subject(self, partition: int) -> str:
        return f"{self.subject}.p{partition}"

    @staticmethod
    def _durable(partition: int) -> str:
        return f"{DURABLE}-p{partition}"

    async def publish(self, job: Job) -> None:
        """QueueError when JetStream does not confirm it (NATS down, or the stream unavailable); at once
        while the connection is down (nats-py reconnects in the background)."""
        if not self._nc.is_connected:
            raise QueueError(f"NATS is not connected; job {job.message_id} not queued")
        try:
            subject = f"{self._subject(partition_of(job.cluster_id, self.partitions))}.{job.cluster_id}"
            await self._js.publish(subject, job.encode(), headers={"Nats-Msg-Id": job.message_id})
        except Exception as error:  # nats-py's timeouts, connection and JetStream errors
            raise QueueError(f"NATS did not take job {job.message_id}: {type(error).__name__}") from error

    async def consume_batches(
        self, handler: BatchHandler, partition: int | None = None, stop: asyncio.Event | None = None
    ) -> None:
        """The messages of a fetch at once; each is acknowledged after `handler` (its commit) returned,
        so a worker killed in between leaves all of them to be delivered again (and found processed).
        Every partition side by side when `partition` is None."""
        if partition is None:
            await asyncio.gather(*(self.consume_batches(handler, k, stop) for k in range(self.partitions)))
            return
        subscription = await self._js.pull_subscribe(
            f"{self._subject(partition)}.>", durable=self._durable(partition), stream=self.stream
        )
        try:
            while stop is None or not stop.is_set():
                await self._consume_fetch(subscription, handler)
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    async def _consume_fetch(self, subscription: Any, handler: BatchHandler) -> None:
        """One fetch (and what comes within the linger), handed over and settled."""
        try:
            messages = await subscription.fetch(self.batch, timeout=1.0)
        except TimeoutError:  # nothing to do for now (nats-py raises asyncio's or its own subclass)
            return
        if len(messages) < self.batch and self.linger > 0:
            await asyncio.sleep(self.linger)
            with contextlib.suppress(TimeoutError):
                messages += await subscription.fetch(self.batch - len(messages), timeout=0.01)
        jobs, taken = [], []
        for message in messages:
            try:
                jobs.append(self._job(message))
                taken.append(message)
            except Exception:
                LOG.exception("undecodable job; NATS will deliver it again")
                await self._settle(message, Verdict.RETRY)
        try:
            verdicts = await handler(jobs) if jobs else []
        except Exception:
            LOG.exception("%d jobs failed; NATS will deliver them again", len(jobs))
            verdicts = [Verdict.RETRY] * len(jobs)
        await asyncio.gather(*(self._settle(m, v) for m, v in zip(taken, verdicts, strict=True)))

    @staticmethod
    def _job(message: Any) -> Job:
        metadata = message.metadata
        return dataclasses.replace(
            Job.decode(message.data),
            deliveries=int(metadata.num_delivered or 1),
            queued_at=metadata.timestamp.timestamp() if metadata.timestamp is not None else None,
        )

    async def _settle(self, message: Any, verdict: Verdict) -> None:
        if verdict is Verdict.DONE:
            await message.ack()
        else:
            await message.nak(delay=self.retry_delay)

    async def pending(self) -> int:
        """QueueError when NATS does not answer. A work-queue stream keeps a message until it is
        acknowledged: its count is what waits plus what is delivered and not acknowledged."""
        try:
            info = await self._js.stream_info(self.stream)
        except Exception as error:  # nats-py's timeouts, connection and JetStream errors
            raise QueueError(f"NATS did not report the stream: {type(error).__name__}") from error
        return int(info.state.messages or 0)

    @property
    def connected(self) -> bool:
        return self._nc is not None and bool(self._nc.is_connected)

    async def close(self) -> None:
        if self._nc is not None:
            # Unacked messages are redelivered to the other workers after the ack wait: nothing to drain.
            with contextlib.suppress(Exception):
                await self._nc.close()


async def open_queue(url: str, *, ack_wait: float = 30.0) -> MemoryQueue | NatsQueue:
    """`memory://` or `nats://host:port[?stream=NAME][&replicas=N][&partitions=N]` (`tls://` for TLS;
    a user and password in the URL authenticate)."""
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return MemoryQueue()
    if parts.scheme in ("nats", "tls"):
        query = parse_qs(parts.query)
        stream = query.get("stream", [DEFAULT_STREAM])[0]
        if not _STREAM_NAME.match(stream):
            raise QueueError(f"invalid stream name {stream!r}: 1-64 of A-Z, 0-9 and _")
        replicas = query.get("replicas", ["1"])[0]
        if replicas not in ("1", "2", "3", "4", "5"):
            raise QueueError(f"invalid replicas {replicas!r}: 1 to 5 copies of the stream")
        partitions = query.get("partitions", [str(PARTITIONS)])[0]
        if not partitions.isdigit() or not 1 <= int(partitions) <= MAX_PARTITIONS:
            raise QueueError(f"invalid partitions {partitions!r}: 1 to {MAX_PARTITIONS}")
        server = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        queue = NatsQueue(
            server, stream=stream, ack_wait=ack_wait, replicas=int(replicas), partitions=int(partitions)
        )
        return await queue.connect()
    raise QueueError(f"unsupported queue URL {shown(url)!r}: use memory:// or nats://host:port")


def shown(url: str) -> str:
    """`url` without the password of its user (for messages and logs)."""
    return _PASSWORD.sub(r"\1***@", url)
