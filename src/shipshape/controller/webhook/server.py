"""The webhook's HTTPS server: POST /mutate, GET /healthz, GET /metrics.

HTTP/1.1 over TLS on asyncio (uvloop where the process runs one), requests parsed by httptools. The
API server calls a webhook over a few keep-alive connections with small JSON bodies, and every
admission waits for the answer, so the server does no more per request than that needs: a review is
answered on the event loop as soon as its body is complete, and the response goes out in one write
(one TLS record). A general ASGI stack (uvicorn and Starlette) cost about 0.1-0.25 ms of CPU a request
more here, as much as the placement itself.

What it keeps of a general server: keep-alive (an idle connection closes after
`KEEP_ALIVE_SECONDS`), pipelined requests answered in order, 400 for what is not HTTP or not a review,
413 for a body over `MAX_BODY_BYTES`, 404/405, 500 for an error outside the placer (which admits the
pod unmodified on its own errors: fail-open), and a graceful stop (no new connections, the requests in
flight answered, then every connection closed).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import httptools
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.webhook.admission import BadReview, PodPlacer

LOG = logging.getLogger("shipshape.controller.webhook")
MUTATE_PATH = "/mutate"
# The API server sends whole pods; anything far larger than the largest object etcd stores is not a review.
MAX_BODY_BYTES = 8 * 1024 * 1024
# How long a pod whose ReplicaSet or StatefulSet the state has not seen yet waits for it (in steps, on
# the event loop, so other reviews go on), before it is admitted without placement: half the 2 s
# timeout the webhook is registered with, as a busy controller's feed can lag by more than a moment.
OWNER_WAIT_SECONDS = 1.0
OWNER_WAIT_STEP_SECONDS = 0.005
# An idle keep-alive connection (or one that sends part of a request and stops) is closed after this.
KEEP_ALIVE_SECONDS = 60.0
# How often idle connections are looked for.
SWEEP_SECONDS = 5.0
# A graceful stop waits this long for the requests in flight.
STOP_GRACE_SECONDS = 5.0

_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    413: b"Payload Too Large",
    500: b"Internal Server Error",
}
JSON = b"application/json"
TEXT = b"text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    content_type: bytes = JSON
    allow: bytes = b""


def _error(status: int, message: str) -> Answer:
    return Answer(status, orjson.dumps({"error": message}))


class WebhookApp:
    """The routes: what each request is answered (`answer` on the event loop; `answer_later` for the
    requests that must wait, in a task)."""

    def __init__(
        self, placer: PodPlacer, metrics: ControllerMetrics, exposition: Callable[[], bytes] | None = None
    ) -> None:
        self.placer = placer
        self.metrics = metrics
        self.exposition = exposition

    def answer(self, method: bytes, path: bytes, body: bytes) -> Answer | None:
        """The answer to one request, or None when it must wait (then `answer_later`)."""
        if path == b"/mutate":
            if method != b"POST":
                return Answer(405, b"Method Not Allowed", TEXT, b"POST")
            started = time.perf_counter()
            try:
                review = orjson.loads(body)
                if self.placer.awaiting_owner(review):
                    return None  # its time is counted where it is answered
                answer = Answer(200, orjson.dumps(self.placer.review(review)))
            except (orjson.JSONDecodeError, BadReview) as exc:
                self.metrics.webhook_errors.labels(stage="request").inc()
                answer = _error(400, str(exc))
            self.metrics.webhook_latency.observe(time.perf_counter() - started)
            return answer
        if path == b"/healthz":
            if method not in (b"GET", b"HEAD"):
                return Answer(405, b"Method Not Allowed", TEXT, b"GET, HEAD")
            return Answer(200, b"ok", TEXT)
        if path == b"/metrics":
            if method not in (b"GET", b"HEAD"):
                return Answer(405, b"Method Not Allowed", TEXT, b"GET, HEAD")
            if self.exposition is None:
                return Answer(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST.encode())
            return None  # asks the controller process: on a worker thread
        return Answer(404, b"Not Found", TEXT)

    async def answer_later(self, method: bytes, path: bytes, body: bytes) -> Answer:
        if path == b"/metrics":
            assert self.exposition is not None
            text = await asyncio.get_running_loop().run_in_executor(None, self.exposition)
            return Answer(200, text, CONTENT_TYPE_LATEST.encode())
        # A review whose pod's owner the state does not hold yet: wait for it a little, in steps.
        started = time.perf_counter()
        try:
            review = orjson.loads(body)
            waited = OWNER_WAIT_STEP_SECONDS
            await asyncio.sleep(OWNER_WAIT_STEP_SECONDS)
            while waited < OWNER_WAIT_SECONDS and self.placer.awaiting_owner(review):
                await asyncio.sleep(OWNER_WAIT_STEP_SECONDS)
                waited += OWNER_WAIT_STEP_SECONDS
            try:
                return Answer(200, orjson.dumps(self.placer.review(review)))
            except BadReview as exc:
                self.metrics.webhook_errors.labels(stage="request").inc()
                return _error(400, str(exc))
        finally:
            self.metrics.webhook_latency.observe(time.perf_counter() - started)


def create_app(
    placer: PodPlacer, metrics: ControllerMetrics, exposition: Callable[[], bytes] | None = None
) -> WebhookApp:
    """The webhook's routes. `exposition`: what GET /metrics answers (run on a worker thread; default:
    `metrics`' registry), for a webhook in a process of its own that shows the whole controller's."""
    return WebhookApp(placer, metrics, exposition)


class _Connection(asyncio.Protocol):
    """One client connection: requests parsed as they arrive, answered in order."""

    def __init__(self, server: HttpsServer) -> None:
        self.server = server
        self.app = server.app
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.size = 0
        self.too_large = False
        # A request begun and not complete yet; whether its client waits for "100 Continue".
        self.reading = False
        self.expects_continue = False
        # Complete requests not answered yet, while an earlier one waits (pipelining): method, path,
        # body, keep-alive.
        self.queued: deque[tuple[bytes, bytes, bytes, bool]] = deque()
        self.waiting: asyncio.Task[None] | None = None
        self.closing = False
        self.last_active = 0.0

    # --- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TLS transport has the methods of `asyncio.Transport` without deriving from it.
        self.transport = cast(asyncio.Transport, transport)
        self.last_active = self.server.now()
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        if self.waiting is not None:
            self.waiting.cancel()
        self.transport = None
        self.queued.clear()

    def data_received(self, data: bytes) -> None:
        self.last_active = self.server.now()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, "upgrades are not served")
        except httptools.HttpParserError:
            self._fail(400, "malformed HTTP request")

    # --- httptools callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.reading = True
        self.expects_continue = False
        self.url = b""
        self.body = []
        self.size = 0
        self.too_large = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" and value.strip().isdigit() and int(value) > MAX_BODY_BYTES:
            self.too_large = True
        elif name == b"expect" and value.strip().lower() == b"100-continue":
            self.expects_continue = True

    def on_headers_complete(self) -> None:
        # A client that waits for it before sending the body (curl does for larger bodies).
        if self.expects_continue and not self.too_large and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        # Read to its end, kept only up to the limit: answered once sent (a client still sending when the
        # connection closes would see it reset, not the answer).
        self.size += len(body)
        if self.size > MAX_BODY_BYTES:
            self.too_large = True
        if not self.too_large:
            self.body.append(body)

    def on_message_complete(self) -> None:
        self.reading = False
        method = self.parser.get_method()
        keep_alive = self.parser.should_keep_alive()
        if self.too_large:
            self._fail(413, "request body too large")
            return
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self.body = []
        request = (method, self.url.split(b"?", 1)[0], body, keep_alive)
        if self.waiting is not None or self.queued:
            self.queued.append(request)
            return
        self._handle(request)

    # --- answering ---------------------------------------------------------------------------------

    def _handle(self, request: tuple[bytes, bytes, bytes, bool]) -> None:
        method, path, body, keep_alive = request
        try:
            answer = self.app.answer(method, path, body)
        except Exception:
            LOG.exception("the webhook server failed to answer %s %s", method.decode(), path.decode())
            answer = Answer(500, b"Internal Server Error", TEXT)
        if answer is None:
            self.waiting = asyncio.get_running_loop().create_task(self._later(request))
            if self.transport is not None:
                self.transport.pause_reading()  # what is pipelined behind it waits in the socket
            return
        self._respond(answer, keep_alive and not self.server.stopping, method == b"HEAD")

    async def _later(self, request: tuple[bytes, bytes, bytes, bool]) -> None:
        method, path, body, keep_alive = request
        try:
            answer = await self.app.answer_later(method, path, body)
        except asyncio.CancelledError:
            raise
        except Exception:
            LOG.exception("the webhook server failed to answer %s %s", method.decode(), path.decode())
            answer = Answer(500, b"Internal Server Error", TEXT)
        self.waiting = None
        self._respond(answer, keep_alive and not self.server.stopping, method == b"HEAD")
        while self.queued and self.waiting is None and not self.closing:
            self._handle(self.queued.popleft())
        if self.waiting is None and self.transport is not None and not self.closing:
            self.transport.resume_reading()

    def _respond(self, answer: Answer, keep_alive: bool, head: bool = False) -> None:
        transport = self.transport
        if transport is None or self.closing:
            return
        headers = [
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
            % (answer.status, _REASONS.get(answer.status, b""), answer.content_type, len(answer.body))
        ]
        if answer.allow:
            headers.append(b"allow: %s\r\n" % answer.allow)
        if not keep_alive:
            headers.append(b"connection: close\r\n")
        headers.append(b"\r\n")
        if not head:
            headers.append(answer.body)
        transport.write(b"".join(headers))  # one write: one TLS record
        self.last_active = self.server.now()
        if not keep_alive:
            self.close()

    def _fail(self, status: int, message: str) -> None:
        """Answer an unusable request and close the connection (what follows it cannot be read)."""
        if status == 400:
            self.app.metrics.webhook_errors.labels(stage="request").inc()
        self._respond(_error(status, message), keep_alive=False)
        self.close()

    @property
    def idle(self) -> bool:
        return self.waiting is None and not self.queued and not self.reading

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()


class HttpsServer:
    """Serves a `WebhookApp` over TLS on listening sockets, until `exit()` (from any thread)."""

    def __init__(
        self, app: WebhookApp, ssl_context: ssl.SSLContext, keep_alive_seconds: float = KEEP_ALIVE_SECONDS
    ) -> None:
        self.app = app
        # New connections get what it holds: `load_cert_chain` on it after a certificate rotation.
        self.ssl = ssl_context
        self.keep_alive_seconds = keep_alive_seconds
        self.connections: set[_Connection] = set()
        self.started = False
        self.stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit: asyncio.Event | None = None
        self._exit_requested = False

    def now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    def exit(self) -> None:
        """Stop gracefully (thread-safe): no new connections, the requests in flight answered."""
        self._exit_requested = True
        loop, event = self._loop, self._exit
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)

    async def serve(self, sockets: list[socket.socket]) -> None:
        """Serve on `sockets` until `exit()`."""
        self._loop = asyncio.get_running_loop()
        self._exit = asyncio.Event()
        if self._exit_requested:
            return
        servers = [
            await self._loop.create_server(lambda: _Connection(self), sock=sock, ssl=self.ssl, backlog=2048)
            for sock in sockets
        ]
        sweeper = self._loop.create_task(self._sweep())
        self.started = True
        try:
            await self._exit.wait()
        finally:
            self.stopping = True
            sweeper.cancel()
            for server in servers:
                server.close()
            await self._drain()
            self.started = False

    async def _sweep(self) -> None:
        """Close connections idle for longer than the keep-alive timeout."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            oldest = self.now() - self.keep_alive_seconds
            for connection in [c for c in self.connections if c.last_active < oldest and c.waiting is None]:
                connection.close()

    async def _drain(self) -> None:
        """Close idle connections now, the others once answered (or when the grace is over)."""
        deadline = self.now() + STOP_GRACE_SECONDS
        while self.connections and self.now() < deadline:
            for connection in [c for c in self.connections if c.idle]:
                connection.close()
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.close()


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket (port 0: any free port; read it back with `sock.getsockname()[1]`)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: small TLS records go out at once instead of waiting for an ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def https_server(
    app: WebhookApp, cert_file: Path, key_file: Path, *, keep_alive_seconds: float = KEEP_ALIVE_SECONDS
) -> HttpsServer:
    """A server for `app` over TLS; run it with `await server.serve([bind(...)])`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert_file), str(key_file))
    return HttpsServer(app, context, keep_alive_seconds)


@asynccontextmanager
async def running(server: HttpsServer, sock: socket.socket) -> AsyncIterator[None]:
    """Serve on `sock` in the background for the duration of the block, then stop gracefully."""
    task = asyncio.create_task(server.serve([sock]))
    while not server.started:
        if task.done():
            await task
            raise RuntimeError("the webhook server stopped during start-up")
        await asyncio.sleep(0.005)
    try:
        yield
    finally:
        server.exit()
        await task
