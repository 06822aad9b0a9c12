"""The work queue between the API and the workers, behind one interface.

`memory://` (the embedded default) is an asyncio queue inside the backend process, whose workers
then run in the same process. `nats://host:port` is NATS JetStream: a file-backed stream, one
durable pull consumer shared by every worker (each message goes to one of them), explicit acks, and
redelivery of whatever a worker took but did not ack (a worker killed mid-message). JetStream also
drops a second publish of the same message id within its duplicate window.

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
_STREAM_NAME = re.compile(r"^[A-Z0-9_]{1,64}$")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


class QueueError(Exception):
    """The queue URL is unusable or the queue cannot be reached."""


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
    async def publish(self, job: Job) -> None: ...

    async def consume_batches(self, handler: BatchHandler) -> None:
        """Hand the jobs waiting together (up to the queue's batch size) to `handler` at once, until
        cancelled: the workers apply the pushes of one cluster that wait together in one transaction."""
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
# A quiet queue's push waits this much longer, against a push -> recommendation budget of seconds.
LINGER_SECONDS = 0.05
NATS_LINGER_SECONDS = 0.2


class MemoryQueue:
    """In-process queue: jobs die with the process (the workers' sweep finds their pushes again)."""

    def __init__(self, retry_delay: float = 0.5, batch: int = 32, linger: float = LINGER_SECONDS) -> None:
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self.retry_delay = retry_delay
        self.batch = batch
        self.linger = linger
        self._later: set[asyncio.Task[None]] = set()
        self._handling = 0

    async def publish(self, job: Job) -> None:
        await self._queue.put(dataclasses.replace(job, queued_at=time.time()))

    async def consume_batches(self, handler: BatchHandler) -> None:
        while True:
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
    """NATS JetStream: a durable pull consumer shared by all workers; ack after the work is committed."""

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
    ) -> None:
        self.url = url
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
        consumer = ConsumerConfig(
            durable_name=DURABLE,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=-1,
        )
        with contextlib.suppress(BadRequestError):
            await self._js.add_consumer(self.stream, consumer)
        return self

    async def publish(self, job: Job) -> None:
        """QueueError when JetStream does not confirm it (NATS down, or the stream unavailable); at once
        while the connection is down (nats-py reconnects in the background)."""
        if not self._nc.is_connected:
            raise QueueError(f"NATS is not connected; job {job.message_id} not queued")
        try:
            await self._js.publish(
                f"{self.subject}.{job.cluster_id}", job.encode(), headers={"Nats-Msg-Id": job.message_id}
            )
        except Exception as error:  # nats-py's timeouts, connection and JetStream errors
            raise QueueError(f"NATS did not take job {job.message_id}: {type(error).__name__}") from error

    async def consume_batches(self, handler: BatchHandler) -> None:
        """The messages of a fetch at once; each is acknowledged after `handler` (its commit) returned,
        so a worker killed in between leaves all of them to be delivered again (and found processed)."""
        subscription = await self._js.pull_subscribe(f"{self.subject}.>", durable=DURABLE, stream=self.stream)
        while True:
            try:
                messages = await subscription.fetch(self.batch, timeout=1.0)
            except TimeoutError:  # nothing to do for now (nats-py raises asyncio's or its own subclass)
                continue
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
        """QueueError when NATS does not answer."""
        try:
            info = await self._js.consumer_info(self.stream, DURABLE)
        except Exception as error:  # nats-py's timeouts, connection and JetStream errors
            raise QueueError(f"NATS did not report the consumer: {type(error).__name__}") from error
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    @property
    def connected(self) -> bool:
        return self._nc is not None and bool(self._nc.is_connected)

    async def close(self) -> None:
        if self._nc is not None:
            # Unacked messages are redelivered to the other workers after the ack wait: nothing to drain.
            with contextlib.suppress(Exception):
                await self._nc.close()


async def open_queue(url: str, *, ack_wait: float = 30.0) -> MemoryQueue | NatsQueue:
    """`memory://` or `nats://host:port[?stream=NAME][&replicas=N]` (`tls://` for TLS; a user and
    password in the URL authenticate)."""
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
        server = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        return await NatsQueue(server, stream=stream, ack_wait=ack_wait, replicas=int(replicas)).connect()
    raise QueueError(f"unsupported queue URL {shown(url)!r}: use memory:// or nats://host:port")


def shown(url: str) -> str:
    """`url` without the password of its user (for messages and logs)."""
    return _PASSWORD.sub(r"\1***@", url)
