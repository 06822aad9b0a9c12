"""The webhook in a process of its own, so that no planning pass ever holds its interpreter.

In one interpreter a review waits for the interpreter lock whenever the loops compute (a planning
pass holds it for milliseconds at a time), whatever the locks around the state. So the controller
process starts the webhook server in a child process (`multiprocessing`, spawn) and feeds it:

- the state: the informers' fan-out holds a `state.views.Relay` for the child; a sender thread pipes
  the whole state when a child starts, then every change in order (`messages.StateChanges`); the
  child keeps its own `Replica`, as the in-process webhook does;
- what the loops learn that the placer reads (pool risk from notices, spot shortages, rebalance
  recommendations): read every `PUBLISH_SECONDS` and sent when changed (`messages.RiskNotices`, ...);
- the serving certificate after a rotation, and the stop.

The child answers with its metrics on request; the controller's /metrics (and the webhook's own
GET /metrics) show both processes' counters summed (`messages.merged`).

`WebhookChild` is the controller's side: it starts the child on the listening socket the controller
bound (the port never changes), restarts it when it dies (with a back-off), and stops it gracefully.
A child whose controller is gone sees its pipes close and exits.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Generic, TypeVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from shipshape import heap
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.placement import Pool
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.risk import RiskModel, SpotAdvisor
from shipshape.controller.state import ClusterState
from shipshape.controller.state.views import Relay, Replica
from shipshape.controller.webhook import messages
from shipshape.controller.webhook.admission import ReplicaPlacer
from shipshape.controller.webhook.server import HttpsServer, create_app, https_server, running
from shipshape.kube.clock import Clock

LOG = logging.getLogger("shipshape.controller.webhook")
R = TypeVar("R")
# How often (real seconds) the controller compares what the placer reads from the loops with what
# it last sent: a shortage's end reaches the webhook at most this late.
PUBLISH_SECONDS = 0.05
# Longest wait (real seconds) for a reply over the control pipe (metrics).
REPLY_SECONDS = 2.0
# Restarts of a child that died: the first after RESTART_START, doubling up to RESTART_MAX; a child
# that served for RESTART_RESET seconds counts as healthy again.
RESTART_START, RESTART_MAX, RESTART_RESET = 0.5, 30.0, 60.0


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """What a webhook process is started with (pickled to it)."""

    config: ControllerConfig
    clock: Clock
    cert_file: str
    key_file: str
    advisor: SpotAdvisor | None = None
    switch_interval_seconds: float | None = None
    # Called first in the child (a spawned process has no logging set up): the entry point's set-up.
    log_setup: Callable[[], None] | None = None


@dataclass(frozen=True, slots=True)
class SharedReads:
    """Where the controller reads what the loops learn for the webhook."""

    notices: Callable[[], Iterable[tuple[str, Pool, float]]]
    shortages: Callable[[float], Iterable[Pool]]
    recommendations: Callable[[], Mapping[str, Pool | None]]


def risk_model(spec: ChildSpec, notices: Iterable[messages.NoticeRecord]) -> RiskModel:
    model = RiskModel(
        advisor=spec.advisor,
        cooldown_seconds=spec.config.risk_cooldown_seconds,
        window_seconds=spec.config.risk_window_seconds,
    )
    for notice in notices:
        model.record_notice(notice.node, notice.pool, notice.at)
    return model


class _Replies(Generic[R]):
    """Replies to numbered requests, handed from the pipe's reader to the thread that asked; a reply
    that comes after its asker gave up is dropped."""

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self._awaited: set[int] = set()
        self._replies: dict[int, R] = {}
        self._cond = threading.Condition()

    def expect(self) -> int:
        with self._cond:
            number = next(self._numbers)
            self._awaited.add(number)
            return number

    def put(self, number: int, reply: R) -> None:
        with self._cond:
            if number in self._awaited:
                self._replies[number] = reply
                self._cond.notify_all()

    def wait(self, number: int, timeout: float) -> R | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            try:
                while number not in self._replies:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self._cond.wait(left)
                return self._replies.pop(number)
            finally:
                self._awaited.discard(number)


# --- the webhook process ----------------------------------------------------------------------------


class _Webhook:
    """The child's side: the replica, the placer, the server, and the two pipe readers."""

    def __init__(self, spec: ChildSpec, state: Connection, control: Connection) -> None:
        self.spec = spec
        self.state_conn = state
        self.control = control
        self.replica = Replica(ClusterState(spec.config))
        self.registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry)
        self.shortages: frozenset[Pool] = frozenset()
        self.recommended: Mapping[str, Pool | None] = {}
        self.placer = ReplicaPlacer(
            self.replica,
            spec.config,
            risk_model(spec, ()),
            spec.clock,
            self.metrics,
            shortages=lambda now: self.shortages,
            recommendations=lambda: self.recommended,
        )
        self._send_lock = threading.Lock()
        self._expositions: _Replies[bytes] = _Replies()
        self.server: HttpsServer | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop = asyncio.Event()

    def send(self, message: object) -> None:
        with self._send_lock:
            self.control.send(message)

    def sync(self) -> None:
        """Take the whole state and what the loops know before serving."""
        while not isinstance(message := self.state_conn.recv(), messages.Synced):
            self._apply(message)
        while not isinstance(message := self.control.recv(), messages.Synced):
            self._handle(message)

    def _apply(self, message: object) -> None:
        if isinstance(message, messages.StateChanges):
            for change in message.changes:
                self.replica.offer(change)

    def _read_state(self) -> None:
        try:
            while True:
                self._apply(self.state_conn.recv())
        except (EOFError, OSError):
            self._stop_serving()

    def _read_control(self) -> None:
        while True:
            try:
                message = self.control.recv()
            except (EOFError, OSError):
                self._stop_serving()
                return
            try:
                self._handle(message)
            except Exception:  # one message that cannot be acted on stops nothing else
                LOG.exception("webhook process: cannot handle %s", type(message).__name__)

    def _handle(self, message: object) -> None:
        if isinstance(message, messages.RiskNotices):
            self.placer.risk = risk_model(self.spec, message.notices)
        elif isinstance(message, messages.Shortages):
            self.shortages = message.pools
        elif isinstance(message, messages.Recommendations):
            self.recommended = message.mapping()
        elif isinstance(message, messages.SamplesRequest):
            self.send(messages.Samples(message.request, messages.families(self.registry.collect())))
        elif isinstance(message, messages.Exposition):
            self._expositions.put(message.request, message.text)
        elif isinstance(message, messages.ServingCertificate):
            if self.server is not None:
                self.server.ssl.load_cert_chain(message.cert_file, message.key_file)
        elif isinstance(message, messages.Stop):
            self._stop_serving()

    def _stop_serving(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)

    def exposition(self) -> bytes:
        """The whole process's metrics: the controller's, with this process's merged in."""
        request = self._expositions.expect()
        try:
            self.send(messages.ExpositionRequest(request, messages.families(self.registry.collect())))
        except OSError:
            return generate_latest(self.registry)
        text = self._expositions.wait(request, REPLY_SECONDS)
        return text if text is not None else generate_latest(self.registry)

    async def serve(self, sock: socket.socket) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        self.server = https_server(
            create_app(self.placer, self.metrics, exposition=self.exposition),
            Path(self.spec.cert_file),
            Path(self.spec.key_file),
        )
        for target, name in ((self._read_state, "webhook-state"), (self._read_control, "webhook-control")):
            threading.Thread(target=target, name=name, daemon=True).start()
        async with running(self.server, sock):
            self.send(messages.Serving(os.getpid()))
            # The whole state lives long and holds no cycles: automatic collections walk only what is younger.
            collector = asyncio.create_task(heap.age())
            await self.stop.wait()
            collector.cancel()


def serve(spec: ChildSpec, sock: socket.socket, state: Connection, control: Connection) -> None:
    """The webhook process's entry point (`WebhookChild` starts it).

    The controller decides when it stops (`messages.Stop`, or its pipes closing): a Ctrl-C, which
    reaches the whole process group, is ignored here, and the server runs off the main thread so that
    uvicorn installs no signal handlers of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if spec.log_setup is not None:
        spec.log_setup()
    if spec.switch_interval_seconds is not None:
        sys.setswitchinterval(spec.switch_interval_seconds)
    webhook = _Webhook(spec, state, control)
    try:
        webhook.sync()
    except (EOFError, OSError):
        return  # the controller went away before this process served
    # The sync's garbage collected, then the whole state frozen before the first review (`heap.age`).
    gc.collect()
    gc.freeze()
    server = threading.Thread(target=_run, args=(webhook, sock), name="webhook-server")
    server.start()
    server.join()


def _run(webhook: _Webhook, sock: socket.socket) -> None:
    try:
        import uvloop

        uvloop.run(webhook.serve(sock))
    except ImportError:  # uvloop comes with uvicorn[standard]; plain asyncio serves too
        asyncio.run(webhook.serve(sock))


# --- the controller's side --------------------------------------------------------------------------


class _Families(Collector):
    """A collector over fixed families."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        return self.metrics


def exposition(metrics: list[Metric]) -> bytes:
    """The text format of `metrics`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(metrics))
    return generate_latest(registry)


class WebhookChild:
    """Runs, watches and stops the webhook process; `start()` returns once it serves.

    `own_metrics` are the controller's metrics (its registry's `collect`): the webhook's GET /metrics
    shows them with the child's merged in."""

    def __init__(
        self,
        spec: ChildSpec,
        sock: socket.socket,
        relay: Relay,
        shared: SharedReads,
        own_metrics: Callable[[], Iterable[Metric]],
        on_restart: Callable[[], None] | None = None,
    ) -> None:
        self.spec = spec
        self.sock = sock
        self.relay = relay
        self.shared = shared
        self.own_metrics = own_metrics
        self.on_restart = on_restart
        self.restarts = 0
        self.serving = threading.Event()
        self._stopping = threading.Event()
        # Held while a webhook process is launched, and while `stop` marks the stop.
        self._lifecycle = threading.Lock()
        self._context = multiprocessing.get_context("spawn")
        self._process: Any = None
        self._control: Connection | None = None
        self._send_lock = threading.Lock()
        self._samples: _Replies[tuple[messages.MetricFamily, ...]] = _Replies()
        self._last_samples: tuple[messages.MetricFamily, ...] = ()
        self._supervisor: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        process = self._process
        return None if process is None else process.pid

    @property
    def exitcode(self) -> int | None:
        """The last webhook process's exit status (None while it runs)."""
        process = self._process
        return None if process is None else process.exitcode

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self, timeout: float) -> None:
        """Start the webhook process; raises if it does not serve within `timeout` seconds."""
        with self._lifecycle:
            incarnation = self._launch()
        self._supervisor = threading.Thread(
            target=self._supervise, args=(incarnation,), name="webhook-supervisor", daemon=True
        )
        self._supervisor.start()
        if not self.serving.wait(timeout):
            self.stop()
            raise RuntimeError("the webhook process did not start serving")

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful: the webhook answers what is in flight and exits; killed if it does not."""
        with self._lifecycle:  # no new webhook process starts from here on
            self._stopping.set()
            process = self._process
        self._send(messages.Stop())
        if process is not None:
            process.join(timeout)
            if process.is_alive():
                process.terminate()
                process.join(2)
            if process.is_alive():
                process.kill()
                process.join(2)
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(5)
        self.relay.detach()
        self.serving.clear()

    def _launch(self) -> _Incarnation:
        state_reader, state_writer = self._context.Pipe(duplex=False)
        control_parent, control_child = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=serve,
            args=(self.spec, self.sock, state_reader, control_child),
            name="shipshape-webhook",
            daemon=True,
        )
        process.start()
        # The child's ends belong to the child now: closing ours makes a dead child read as EOF.
        state_reader.close()
        control_child.close()
        self._process, self._control = process, control_parent
        incarnation = _Incarnation(process, state_writer, control_parent)
        incarnation.feeder = threading.Thread(
            target=self._feed, args=(incarnation,), name="webhook-feed", daemon=True
        )
        incarnation.feeder.start()
        return incarnation

    def _supervise(self, incarnation: _Incarnation) -> None:
        backoff = RESTART_START
        while True:
            served_at = self._read(incarnation)
            incarnation.done.set()
            self.serving.clear()
            self.relay.detach()
            # The relay has one reader: this feed ends before the next process's begins.
            if incarnation.feeder is not None:
                incarnation.feeder.join(5)
            incarnation.close()
            if self._stopping.is_set():
                return
            if served_at is not None and time.monotonic() - served_at > RESTART_RESET:
                backoff = RESTART_START
            LOG.warning(
                "the webhook process exited (code %s); starting another in %.1fs",
                incarnation.process.exitcode,
                backoff,
            )
            if self._stopping.wait(backoff):
                return
            backoff = min(RESTART_MAX, backoff * 2)
            with self._lifecycle:
                if self._stopping.is_set():
                    return
                incarnation = self._launch()
            self.restarts += 1
            if self.on_restart is not None:
                self.on_restart()

    def _read(self, incarnation: _Incarnation) -> float | None:
        """Handle the child's messages until it exits; returns when it started serving."""
        served_at: float | None = None
        control = incarnation.control
        while True:
            ready = wait([control, incarnation.process.sentinel])
            if control not in ready:
                return served_at
            try:
                message = control.recv()
            except (EOFError, OSError):
                incarnation.process.join(5)
                return served_at
            if isinstance(message, messages.Serving):
                served_at = time.monotonic()
                self.serving.set()
                LOG.info("webhook process %d serving", message.pid)
            elif isinstance(message, messages.Samples):
                self._samples.put(message.request, message.families)
            elif isinstance(message, messages.ExpositionRequest):
                text = exposition(messages.merged(self.own_metrics(), message.families))
                self._send(messages.Exposition(message.request, text), control)

    def _send(self, message: object, control: Connection | None = None) -> bool:
        control = control or self._control
        if control is None:
            return False
        try:
            with self._send_lock:
                control.send(message)
            return True
        except (OSError, ValueError):  # the child is gone (its pipe closed): the supervisor restarts it
            return False

    # --- what the child is fed --------------------------------------------------------------------

    def _feed(self, incarnation: _Incarnation) -> None:
        """Sync a new child (what the loops know, then the whole state), then relay changes in order
        and publish what the loops learn when it changes, until the child is gone."""
        published: dict[type, object] = {}
        try:
            self._publish(incarnation.control, published)
            self._send(messages.Synced(), incarnation.control)
            for change in self.relay.attach():
                incarnation.state.send(messages.StateChanges((change,)))
            incarnation.state.send(messages.Synced())
            while not incarnation.done.is_set():
                changes = self.relay.take(PUBLISH_SECONDS)
                if changes:
                    # At once: a pod's admission often follows its ReplicaSet's creation by
                    # milliseconds, and a webhook that does not know the ReplicaSet yet cannot place
                    # the pod (a burst that queued while the last message went out goes in one).
                    incarnation.state.send(messages.StateChanges(changes))
                self._publish(incarnation.control, published)
        except (OSError, ValueError):
            pass  # the child is gone: the supervisor restarts it and a new feed begins
        except Exception:
            # A webhook process no longer fed would answer from an ever older state: start another.
            LOG.exception("the webhook process's feed failed; starting another webhook process")
            incarnation.process.kill()

    def _publish(self, control: Connection, published: dict[type, object]) -> None:
        now = self.spec.clock.now()
        current: list[object] = [
            messages.RiskNotices(
                tuple(messages.NoticeRecord(node, pool, at) for node, pool, at in self.shared.notices())
            ),
            messages.Shortages(frozenset(self.shared.shortages(now))),
            messages.Recommendations.of(self.shared.recommendations()),
        ]
        for message in current:
            if published.get(type(message)) != message:
                if not self._send(message, control):
                    raise OSError("the webhook process is gone")
                published[type(message)] = message

    def serve_certificate(self, cert_file: Path, key_file: Path) -> None:
        """New connections get this certificate (the files are read again by a restarted child)."""
        self._send(messages.ServingCertificate(str(cert_file), str(key_file)))

    # --- metrics ----------------------------------------------------------------------------------

    def samples(self, timeout: float = REPLY_SECONDS) -> tuple[messages.MetricFamily, ...]:
        """The child's metrics now (the last received when it does not answer within `timeout`)."""
        request = self._samples.expect()
        if not self.serving.is_set() or not self._send(messages.SamplesRequest(request)):
            self._samples.wait(request, 0)
            return self._last_samples
        families = self._samples.wait(request, timeout)
        if families is not None:
            self._last_samples = families
        return self._last_samples


@dataclass
class _Incarnation:
    """One webhook process and the controller's ends of its pipes."""

    process: Any
    state: Connection
    control: Connection
    # Set once the process is gone: its feed stops.
    done: threading.Event = field(default_factory=threading.Event)
    feeder: threading.Thread | None = None

    def close(self) -> None:
        for conn in (self.state, self.control):
            conn.close()


class ProcessMetrics(Collector):
    """The controller's registry with the webhook process's metrics merged in (a collector for the
    registry the process serves)."""

    def __init__(
        self, own: CollectorRegistry, child_samples: Callable[[], Iterable[messages.MetricFamily]]
    ) -> None:
        self.own = own
        self.child_samples = child_samples

    def describe(self) -> list[Metric]:
        return []  # no names claimed: the families are the own registry's

    def collect(self) -> list[Metric]:
        return messages.merged(self.own.collect(), self.child_samples())
