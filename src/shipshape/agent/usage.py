"""Usage: metrics.k8s.io every `interval` (30 s), folded into fixed buckets, pushed once per bucket.

    metrics.k8s.io ──read──► UsageAggregator ──closed bucket──► usage spool ──► POST /api/v1/pushes
    (streamed)               per container and node:            (disk,          Idempotency-Key
                             samples, CPU mean and max,          bounded)       usage-<bucket start>
                             memory max

The agent keeps only the buckets still open (the current one, and the previous one for a grace
period that lets late samples in) and the owner of each pod it has samples of, so its memory does
not grow with time or churn: what it holds is proportional to the containers running now. The list
answers are parsed as a stream (ijson), one PodMetrics at a time, never the whole list at once.

Samples are placed in buckets by their own timestamp (the metrics server's clock). A sample seen
twice (the same pod and timestamp: metrics-server had nothing newer) counts once; a sample for a
bucket already sent is dropped. A missing metrics API (404, or 403: not allowed) means no usage:
the agent says so once, keeps following the cluster, and asks again every `unavailable_retry`.

GPUs (with `gpu`, the cluster's Prometheus, `--prometheus`): when a bucket closes, the agent asks
Prometheus for dcgm-exporter's series over that bucket (`PrometheusSource.gpu_activity`: the mean,
highest and count of each device's engine activity, GPU_UTIL where a device has none) and adds one
line per pod holding GPUs (`gpu_lines`). Prometheus away or refusing: the report goes without GPU
lines, said once (and once more when it answers again); a query is bounded by its timeout and asked
once per bucket, so usage never waits on it for longer.

The spool is a separate one from the snapshots' and deltas' (`<spool>/usage`): a report does not
depend on any other, so reports are sent in bucket order as they come, and when the spool is full
the oldest buckets are dropped (the state pushes fold into a snapshot; usage cannot be rebuilt).
"""

from __future__ import annotations

import logging
import math
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import ijson
import orjson
import urllib3
from kubernetes import client as k8s

from shipshape import __version__
from shipshape.agent.pusher import Outcome, Pusher
from shipshape.agent.spool import Spool
from shipshape.contracts import usage as contract
from shipshape.kube.clock import Clock, parse_time
from shipshape.kube.quantity import QuantityError, parse_quantity

if TYPE_CHECKING:  # numpy and the analyzers load only in an agent given --prometheus
    from shipshape.sources.prometheus import GpuSample

LOG = logging.getLogger("shipshape.agent.usage")
GROUP, VERSION = "metrics.k8s.io", "v1beta1"
REQUEST_TIMEOUT = (5.0, 60.0)
# Buckets kept open at most (the current one and those waiting for late samples).
MAX_OPEN_BUCKETS = 3
# Pods written to a report in one go.
REPORT_BATCH = 1000


@dataclass(frozen=True, slots=True)
class UsageSettings:
    interval: float = 30.0  # emulated seconds between two reads of metrics.k8s.io
    bucket_seconds: int = 300
    # A bucket is closed (and sent) this long after its end, for samples stamped just before it.
    grace: float = 30.0
    # With no metrics API (404/403) or an error, read again after this long (emulated seconds).
    unavailable_retry: float = 60.0
    spool_max_bytes: int = 64 * 1024 * 1024
    backoff_start: float = 1.0  # real seconds
    backoff_max: float = 60.0

    def __post_init__(self) -> None:
        if not contract.MIN_BUCKET_SECONDS <= self.bucket_seconds <= contract.MAX_BUCKET_SECONDS:
            raise ValueError(
                f"the usage bucket must be {contract.MIN_BUCKET_SECONDS}..{contract.MAX_BUCKET_SECONDS} s, "
                f"not {self.bucket_seconds}"
            )
        if not 0 < self.interval <= self.bucket_seconds:
            raise ValueError(f"the usage interval must be within (0, {self.bucket_seconds}] s")


# ---- reading metrics.k8s.io ----------------------------------------------------------------------


class MetricsUnavailable(Exception):
    """metrics.k8s.io could not be read; `served` is False when the cluster does not serve it (404)
    or the agent may not read it (403)."""

    def __init__(self, message: str, served: bool = True) -> None:
        super().__init__(message)
        self.served = served


@dataclass(frozen=True, slots=True)
class PodSample:
    namespace: str
    name: str
    at: float  # unix seconds
    containers: tuple[tuple[str, float, float], ...]  # (name, cores, bytes)


@dataclass(frozen=True, slots=True)
class NodeSample:
    name: str
    at: float
    cpu: float
    memory: float


class MetricsReader(Protocol):
    """Where samples come from: metrics.k8s.io in a cluster, a recording fake in tests."""

    def pods(self) -> Iterator[PodSample]: ...

    def nodes(self) -> Iterator[NodeSample]: ...


def cores(text: str) -> float:
    """A CPU quantity in cores (metrics-server writes nanocores: `123456789n`)."""
    if text.endswith("n") and text[:-1].isdigit():
        return int(text[:-1]) / 1e9
    return float(parse_quantity(text))


def num_bytes(text: str) -> float:
    """A memory quantity in bytes (metrics-server writes kibibytes: `262144Ki`)."""
    if text.endswith("Ki") and text[:-2].isdigit():
        return int(text[:-2]) * 1024.0
    return float(parse_quantity(text))


def pod_sample(item: dict[str, Any]) -> PodSample | None:
    """One PodMetrics as a sample; None for one without the fields metrics-server always sets."""
    md = item.get("metadata") or {}
    try:
        at = parse_time(str(item["timestamp"]))
        containers = tuple(
            (
                str(c["name"]),
                cores(str((c.get("usage") or {}).get("cpu", "0"))),
                num_bytes(str((c.get("usage") or {}).get("memory", "0"))),
            )
            for c in item.get("containers") or []
        )
    except (KeyError, TypeError, ValueError, QuantityError):
        return None
    return PodSample(str(md.get("namespace", "")), str(md.get("name", "")), at, containers)


def node_sample(item: dict[str, Any]) -> NodeSample | None:
    md = item.get("metadata") or {}
    usage = item.get("usage") or {}
    try:
        return NodeSample(
            str(md.get("name", "")),
            parse_time(str(item["timestamp"])),
            cores(str(usage.get("cpu", "0"))),
            num_bytes(str(usage.get("memory", "0"))),
        )
    except (KeyError, TypeError, ValueError, QuantityError):
        return None


class MetricsApi:
    """metrics.k8s.io through the official client, each list answer parsed as a stream."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.custom = k8s.CustomObjectsApi(api_client)

    def pods(self) -> Iterator[PodSample]:
        for item in self._items("pods"):
            sample = pod_sample(item)
            if sample is not None:
                yield sample

    def nodes(self) -> Iterator[NodeSample]:
        for item in self._items("nodes"):
            sample = node_sample(item)
            if sample is not None:
                yield sample

    def _items(self, plural: str) -> Iterator[dict[str, Any]]:
        try:
            response: Any = self.custom.list_cluster_custom_object(
                GROUP, VERSION, plural, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        except k8s.ApiException as error:
            if error.status in (403, 404):
                raise MetricsUnavailable(
                    f"{GROUP} {plural}: {error.status} {error.reason}", served=False
                ) from error
            raise MetricsUnavailable(f"{GROUP} {plural}: {error.status} {error.reason}") from error
        except (OSError, urllib3.exceptions.HTTPError) as error:
            raise MetricsUnavailable(f"{GROUP} {plural}: {error}") from error
        try:
            yield from ijson.items(response, "items.item", use_float=True)
        except (ijson.JSONError, OSError, urllib3.exceptions.HTTPError) as error:
            raise MetricsUnavailable(f"{GROUP} {plural}: a broken answer: {error}") from error
        finally:
            response.release_conn()


class GpuReader(Protocol):
    """Where GPU activity comes from: the cluster's Prometheus (`PrometheusSource`), a fake in tests."""

    def gpu_activity(self, end: float, range_seconds: float) -> list[GpuSample]: ...


def gpu_lines(samples: list[GpuSample], owner_of: OwnerOf, bucket_seconds: int) -> list[dict[str, Any]]:
    """One `GpuUsage` line per pod from its devices' samples: devices counted, activity averaged over
    them (mean) or the highest (max), the busiest device's sample count (at most one a second).
    Only pods of this cluster (the mirror knows their owner: a central Prometheus without a cluster
    label holds other clusters' pods too), and only lines the contract accepts (one bad label must
    not cost the bucket)."""
    by_pod: dict[PodKey, list[GpuSample]] = {}
    for sample in samples:
        if sample.namespace and sample.pod:
            by_pod.setdefault((sample.namespace, sample.pod), []).append(sample)
    lines = []
    for (namespace, name), devices in sorted(by_pod.items()):
        devices = devices[: contract.MAX_GPUS_PER_POD]
        owner = owner_of(namespace, name)
        if owner is None:
            continue
        kind, workload = owner
        mean = sum(d.mean for d in devices) / len(devices)
        high = max(d.high for d in devices)
        line = {
            "namespace": namespace,
            "name": name,
            "workload": {"kind": kind, "name": workload},
            "devices": len(devices),
            "model": next((d.model for d in devices if d.model), "")[:128],
            "samples": min(max(d.samples for d in devices), bucket_seconds),
            "activity_mean": min(mean, high),
            "activity_max": high,
        }
        try:
            contract.GpuUsage.model_validate(line)
        except ValueError as error:
            LOG.debug("GPU line of %s/%s left out: %s", namespace, name, error)
            continue
        lines.append(line)
    return lines


# ---- folding samples into buckets ----------------------------------------------------------------


class _Cell:
    """One container's or node's samples in one bucket."""

    __slots__ = ("cpu_max", "cpu_sum", "memory_max", "samples")

    def __init__(self) -> None:
        self.samples = 0
        self.cpu_sum = 0.0
        self.cpu_max = 0.0
        self.memory_max = 0.0

    def add(self, cpu: float, memory: float) -> None:
        self.samples += 1
        self.cpu_sum += cpu
        if cpu > self.cpu_max:
            self.cpu_max = cpu
        if memory > self.memory_max:
            self.memory_max = memory

    def json(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "samples": self.samples,
            "cpu_mean": min(self.cpu_sum / self.samples, self.cpu_max),
            "cpu_max": self.cpu_max,
            "memory_max": self.memory_max,
        }


class _Seen:
    """What is remembered of a pod or node between reads: its last sample time and (pods) owner."""

    __slots__ = ("key", "last", "owner")

    def __init__(self, key: tuple[str, str], last: float) -> None:
        self.key = key  # the registry's own tuple, which open buckets share
        self.last = last
        self.owner: tuple[str, str] | None = None


PodKey = tuple[str, str]  # (namespace, name); nodes are ("", name)


@dataclass(slots=True)
class _Bucket:
    start: int
    # ((namespace, pod), container) -> cell; the pod key is the registry's own tuple (shared)
    containers: dict[tuple[PodKey, str], _Cell] = field(default_factory=dict)
    nodes: dict[str, _Cell] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClosedBucket:
    start: int
    body: bytes  # a `shipshape.dev/usage/v1` report, as JSON
    containers: int
    nodes: int


OwnerOf = Callable[[str, str], tuple[str, str] | None]


class UsageAggregator:
    """Samples in, one report per closed bucket out. Pure (no I/O); not thread-safe (one loop
    feeds it).

    Memory: one entry per pod and node sampled since the last closed bucket (its last sample time
    and owner), and per open bucket one cell per container and node. Names are interned, and a
    bucket's keys share the registry's tuples, so a 30,000-pod cluster costs a few MB per bucket."""

    def __init__(self, bucket_seconds: int, grace: float, owner_of: OwnerOf) -> None:
        self.bucket_seconds = bucket_seconds
        self.grace = grace
        self.owner_of = owner_of
        self._open: dict[int, _Bucket] = {}
        self._closed_until = -math.inf  # samples before this were sent already
        self._seen: dict[PodKey, _Seen] = {}
        self.late = 0  # samples dropped: their bucket was closed already
        self.repeated = 0  # samples seen before (same pod and timestamp)

    def _bucket(self, at: float) -> _Bucket | None:
        start = int(at // self.bucket_seconds) * self.bucket_seconds
        if start < self._closed_until:
            self.late += 1
            return None
        bucket = self._open.get(start)
        if bucket is None:
            bucket = self._open[start] = _Bucket(start)
        return bucket

    def _fresh(self, namespace: str, name: str, at: float) -> tuple[PodKey, _Seen] | None:
        """The registry's key and entry for a sample not seen before, else None."""
        seen = self._seen.get((namespace, name))
        if seen is None:
            key = (sys.intern(namespace), name)
            seen = self._seen[key] = _Seen(key, at)
            return key, seen
        if seen.last >= at:
            self.repeated += 1
            return None
        seen.last = at
        return seen.key, seen

    def add_pod(self, sample: PodSample) -> None:
        if not sample.containers:
            return
        fresh = self._fresh(sample.namespace, sample.name, sample.at)
        if fresh is None:
            return
        bucket = self._bucket(sample.at)
        if bucket is None:
            return
        key, seen = fresh
        if seen.owner is None:
            owner = self.owner_of(*key)
            if owner is not None:
                seen.owner = (sys.intern(owner[0]), sys.intern(owner[1]))
        for name, cpu, memory in sample.containers:
            cell_key = (key, name)
            cell = bucket.containers.get(cell_key)
            if cell is None:
                cell = bucket.containers[(key, sys.intern(name))] = _Cell()
            cell.add(cpu, memory)

    def add_node(self, sample: NodeSample) -> None:
        fresh = self._fresh("", sample.name, sample.at)
        if fresh is None:
            return
        bucket = self._bucket(sample.at)
        if bucket is None:
            return
        cell = bucket.nodes.get(sample.name)
        if cell is None:
            cell = bucket.nodes[fresh[0][1]] = _Cell()
        cell.add(sample.cpu, sample.memory)

    def open_buckets(self) -> int:
        return len(self._open)

    def tracked(self) -> int:
        """Pods and nodes remembered between buckets (bounded by what runs now)."""
        return len(self._seen)

    def close(
        self, now: float, taken_at: datetime, gpus: Callable[[int], list[dict[str, Any]]] | None = None
    ) -> list[ClosedBucket]:
        """Reports of the buckets that ended at least `grace` seconds before `now` (and of the
        oldest ones beyond MAX_OPEN_BUCKETS), oldest first; `gpus(bucket start)` gives each
        report's GPU lines."""
        due = sorted(s for s in self._open if s + self.bucket_seconds + self.grace <= now)
        extra = sorted(self._open)[: max(0, len(self._open) - MAX_OPEN_BUCKETS)]
        out = []
        for start in sorted(set(due) | set(extra)):
            bucket = self._open.pop(start)
            self._closed_until = max(self._closed_until, start + self.bucket_seconds)
            if bucket.containers or bucket.nodes:
                out.append(self._report(bucket, taken_at, gpus(start) if gpus is not None else []))
        if out:
            self._forget()
        return out

    def _forget(self) -> None:
        """Drop pods and nodes not sampled since the last sent bucket began (gone, or quiet)."""
        horizon = self._closed_until - self.bucket_seconds
        live: set[PodKey] = set()
        for bucket in self._open.values():
            live.update(key for key, _ in bucket.containers)
        self._seen = {k: v for k, v in self._seen.items() if v.last >= horizon or k in live}

    def _owner(self, key: PodKey) -> tuple[str, str]:
        seen = self._seen.get(key)
        if seen is not None and seen.owner is not None:
            return seen.owner
        owner = self.owner_of(*key) or ("Pod", key[1])
        if seen is not None:
            seen.owner = owner
        return owner

    def _report(self, bucket: _Bucket, taken_at: datetime, gpus: list[dict[str, Any]]) -> ClosedBucket:
        # Written a batch of pods at a time, never the whole report as Python objects. (Each
        # orjson.dumps answer holds a buffer of some kilobytes whatever its length: many small ones
        # would cost far more than the report itself.)
        parts: list[bytes] = []
        batch: list[dict[str, Any]] = []
        current: PodKey | None = None
        cells: list[dict[str, Any]] = []

        def flush() -> None:
            if current is not None:
                kind, name = self._owner(current)
                batch.append(
                    {
                        "namespace": current[0],
                        "name": current[1],
                        "workload": {"kind": kind, "name": name},
                        "containers": cells,
                    }
                )
            if len(batch) >= REPORT_BATCH or current is None:
                if batch:
                    parts.append(orjson.dumps(batch)[1:-1])
                batch.clear()

        for (key, container), cell in sorted(bucket.containers.items(), key=lambda item: item[0]):
            if key != current:
                flush()
                current, cells = key, []
            cells.append(cell.json(container))
        flush()
        current = None
        flush()
        nodes = orjson.dumps([cell.json(name) for name, cell in sorted(bucket.nodes.items())])
        head = orjson.dumps(
            {
                "schema": contract.USAGE_SCHEMA,
                "bucket_start": datetime.fromtimestamp(bucket.start, UTC),
                "bucket_seconds": self.bucket_seconds,
                "taken_at": taken_at,
                "agent_version": __version__,
            }
        )
        body = head[:-1] + b',"pods":[' + b",".join(parts) + b'],"nodes":' + nodes
        if gpus:
            body += b',"gpus":' + orjson.dumps(gpus)
        body += b"}"
        return ClosedBucket(bucket.start, body, len(bucket.containers), len(bucket.nodes))


# ---- the loop ------------------------------------------------------------------------------------


class UsageLoop:
    """Reads, folds, spools and sends; a thread until `stop`."""

    def __init__(
        self,
        reader: MetricsReader,
        owner_of: OwnerOf,
        pusher: Pusher,
        spool: Spool,
        clock: Clock,
        settings: UsageSettings = UsageSettings(),
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        is_leader: Callable[[], bool] = lambda: True,
        gpu: GpuReader | None = None,
    ) -> None:
        self.reader = reader
        self.gpu = gpu
        self._gpu_errors: tuple[type[Exception], ...] = ()
        if gpu is not None:
            from shipshape.sources.prometheus import PrometheusError

            self._gpu_errors = (PrometheusError,)
        self.owner_of = owner_of
        self.gpu_available: bool | None = None  # None until asked
        # Only the replica holding the agent's Lease reads and sends (a follower's reports would be
        # replays of the leader's buckets: the backend keeps the first of each).
        self.is_leader = is_leader
        self.pusher = pusher
        self.spool = spool
        self.clock = clock
        self.settings = settings
        self.wall = wall
        self.aggregator = UsageAggregator(settings.bucket_seconds, settings.grace, owner_of)
        self.stop_event = threading.Event()
        self.reads = 0
        self.sent = 0
        self.dropped = 0  # buckets dropped: spool full, or rejected by the backend
        self.available: bool | None = None  # None until the first read
        self.last_error: str | None = None
        self._backoff = settings.backoff_start
        self._retry_at = 0.0
        self.thread = threading.Thread(target=self._run, name="agent-usage", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(10)

    def read_once(self) -> bool:
        """One read of pods and nodes into the open buckets; False when metrics.k8s.io is unavailable."""
        try:
            for pod in self.reader.pods():
                self.aggregator.add_pod(pod)
            for node in self.reader.nodes():
                self.aggregator.add_node(node)
        except MetricsUnavailable as error:
            if self.available is not False:
                what = "not served or not allowed" if not error.served else "unavailable"
                LOG.warning(
                    "metrics.k8s.io %s (%s): no usage for now; asking again every %.0f s",
                    what,
                    error,
                    self.settings.unavailable_retry,
                )
            self.available = False
            return False
        if self.available is False:
            LOG.info("metrics.k8s.io answers again: collecting usage")
        self.available = True
        self.reads += 1
        return True

    def close_due(self) -> int:
        """Spool the reports of the buckets that are due; returns how many."""
        closed = self.aggregator.close(
            self.clock.now(), self.wall(), self.gpu_lines if self.gpu is not None else None
        )
        for bucket in closed:
            self._spool(bucket)
        return len(closed)

    def gpu_lines(self, start: int) -> list[dict[str, Any]]:
        """The GPU lines of the bucket starting at `start`; none when Prometheus fails (said once)."""
        assert self.gpu is not None
        seconds = self.settings.bucket_seconds
        try:
            samples = self.gpu.gpu_activity(float(start + seconds), float(seconds))
        except self._gpu_errors as error:
            if self.gpu_available is not False:
                LOG.warning("GPU activity unavailable (%s): usage goes without GPU lines for now", error)
            self.gpu_available = False
            return []
        if self.gpu_available is False:
            LOG.info("Prometheus answers again: GPU activity back in the usage")
        self.gpu_available = True
        return gpu_lines(samples, self.owner_of, seconds)

    def _spool(self, bucket: ClosedBucket) -> None:
        while True:
            try:
                self.spool.add(bucket.start, "usage", bucket.body)
                return
            except ValueError:
                items = self.spool.items()
                if not items:
                    LOG.error("usage of bucket %d is larger than the usage spool: dropped", bucket.start)
                    self.dropped += 1
                    return
                LOG.warning("usage spool full: dropping the oldest bucket (%d)", items[0].sequence)
                self.spool.remove(items[0])
                self.dropped += 1

    def drain(self) -> bool:
        """Send what is spooled, oldest first; False when the backend is away (retry later)."""
        for item in self.spool.items():
            answer = self.pusher.send(
                item.sequence,
                item.compressed(),
                key=contract.bucket_key(item.sequence),
                encoding=item.encoding,
            )
            if answer.outcome is Outcome.RETRY:
                self.last_error = answer.detail
                return False
            if answer.outcome is Outcome.REJECTED:
                LOG.error("usage of bucket %d rejected: %s; dropped", item.sequence, answer.detail)
                self.dropped += 1
            else:
                self.sent += 1
            self.spool.remove(item)
        self.last_error = None
        return True

    def _run(self) -> None:
        settings = self.settings
        next_read = self.clock.now()
        while not self.stop_event.is_set():
            if not self.is_leader():
                self.stop_event.wait(0.2)
                continue
            now = self.clock.now()
            try:
                if now >= next_read:
                    ok = self.read_once()
                    next_read = now + (settings.interval if ok else settings.unavailable_retry)
                self.close_due()
                if self.spool and self._retry_at <= time.monotonic():
                    if self.drain():
                        self._backoff = settings.backoff_start
                    else:
                        wait = random.uniform(0, self._backoff)
                        self._retry_at = time.monotonic() + wait
                        LOG.warning(
                            "backend unavailable for usage (%s); retrying in %.1fs", self.last_error, wait
                        )
                        self._backoff = min(settings.backoff_max, self._backoff * 2)
            except OSError as error:  # the spool's disk
                LOG.error("usage spool: %s", error)
            wake = next_read - self.clock.now()
            self.stop_event.wait(max(0.01, min(1.0, self.clock.real_seconds(max(0.0, wake)))))


def owners_from(lookup: Callable[[str, str, str], dict[str, Any] | None]) -> OwnerOf:
    """An OwnerOf over a store of pod objects (`lookup(kind, namespace, name)`, the agent's mirror)."""

    def owner_of(namespace: str, name: str) -> tuple[str, str] | None:
        pod = lookup("pods", namespace, name)
        if pod is None:
            return None
        return contract.pod_workload(pod.get("metadata") or {})

    return owner_of


class RecordedMetrics:
    """A MetricsReader over given PodMetrics and NodeMetrics objects (tests, replays); `unavailable`
    makes every read fail as a cluster without metrics.k8s.io does. Records how often it was read."""

    def __init__(self) -> None:
        self.pod_items: list[dict[str, Any]] = []
        self.node_items: list[dict[str, Any]] = []
        self.unavailable: MetricsUnavailable | None = None
        self.reads = 0

    def pods(self) -> Iterator[PodSample]:
        self.reads += 1
        if self.unavailable is not None:
            raise self.unavailable
        for item in self.pod_items:
            sample = pod_sample(item)
            if sample is not None:
                yield sample

    def nodes(self) -> Iterator[NodeSample]:
        if self.unavailable is not None:
            raise self.unavailable
        for item in self.node_items:
            sample = node_sample(item)
            if sample is not None:
                yield sample
