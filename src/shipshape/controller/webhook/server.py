"""The webhook's HTTPS server: POST /mutate, GET /healthz, GET /metrics.

uvicorn serves it over TLS (its httptools protocol; uvloop in the webhook process). The API server
calls a webhook over a few keep-alive connections with small JSON bodies, and every admission waits
for the answer, so the application is a plain ASGI callable (`WebhookApp`) rather than a framework's:
three routes told apart by comparing the path, the body read in one `receive` when it came in one
piece, and each answer sent as one `http.response.start` and one `http.response.body` with headers
made once. Starlette's routing, request and response objects on the same uvicorn cost 10-30 µs more
server CPU a request (bench/README.md).

What uvicorn provides: keep-alive (an idle connection closes after `KEEP_ALIVE_SECONDS`), pipelined
requests answered in order, "100 Continue" for a client that waits for it, 400 for what is not HTTP
(counted with the refused reviews, `_counting_protocol`), HEAD, and a graceful stop (no new
connections, the requests in flight answered for up to `STOP_GRACE_SECONDS`, then every connection
closed). What the application adds: 400 for what is not
a review, 413 for a body over `MAX_BODY_BYTES`, 404/405, and 500 for an error outside the placer
(which admits the pod unmodified on its own errors: fail-open).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

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
# An idle keep-alive connection is closed after this.
KEEP_ALIVE_SECONDS = 60
# A graceful stop waits this long for the requests in flight.
STOP_GRACE_SECONDS = 5

# ASGI's messages and callables (https://asgi.readthedocs.io/en/latest/specs/www.html).
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

Headers = list[tuple[bytes, bytes]]
_JSON = (b"content-type", b"application/json")
_TEXT = (b"content-type", b"text/plain; charset=utf-8")


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    headers: Headers


def _length(body: bytes) -> tuple[bytes, bytes]:
    return (b"content-length", b"%d" % len(body))


def _json(status: int, body: bytes, *extra: tuple[bytes, bytes]) -> Answer:
    return Answer(status, body, [_JSON, _length(body), *extra])


def _text(status: int, body: bytes, *extra: tuple[bytes, bytes]) -> Answer:
    return Answer(status, body, [_TEXT, _length(body), *extra])


def _error(status: int, message: str, *extra: tuple[bytes, bytes]) -> Answer:
    return _json(status, orjson.dumps({"error": message}), *extra)


OK = _text(200, b"ok")
NOT_FOUND = _text(404, b"Not Found")
POST_ONLY = _text(405, b"Method Not Allowed", (b"allow", b"POST"))
GET_ONLY = _text(405, b"Method Not Allowed", (b"allow", b"GET, HEAD"))
INTERNAL_ERROR = _text(500, b"Internal Server Error")
# The connection closes after it: a client that sends so much is not one to keep talking to.
TOO_LARGE = _error(413, "request body too large", (b"connection", b"close"))


class _Gone(Exception):
    """The client closed the connection before its request's body was in."""


async def _body(receive: Receive) -> bytes | None:
    """The request's body, or None when it is larger than `MAX_BODY_BYTES` (read to its end all the
    same: a client still sending when the connection closes would see it reset, not the answer)."""
    message = await receive()
    if message["type"] != "http.request":
        raise _Gone
    if not message.get("more_body", False):
        return bytes(message.get("body", b""))  # the usual review: all of it in one message
    chunks = [message.get("body", b"")]
    size = len(chunks[0])
    while message.get("more_body", False):
        message = await receive()
        if message["type"] != "http.request":
            raise _Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= MAX_BODY_BYTES:
            chunks.append(chunk)
    return b"".join(chunks) if size <= MAX_BODY_BYTES else None


class WebhookApp:
    """The routes, as an ASGI application: what each request is answered."""

    def __init__(
        self, placer: PodPlacer, metrics: ControllerMetrics, exposition: Callable[[], bytes] | None = None
    ) -> None:
        self.placer = placer
        self.metrics = metrics
        self.exposition = exposition

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        try:
            answer = await self.answer(method, path, receive)
        except _Gone:
            return
        except Exception:
            LOG.exception("the webhook server failed to answer %s %s", method, path)
            answer = INTERNAL_ERROR
        await send({"type": "http.response.start", "status": answer.status, "headers": answer.headers})
        await send({"type": "http.response.body", "body": answer.body})

    async def answer(self, method: str, path: str, receive: Receive) -> Answer:
        if path == MUTATE_PATH:
            if method != "POST":
                return POST_ONLY
            body = await _body(receive)
            if body is None:
                return TOO_LARGE
            return await self.mutate(body)
        if path == "/healthz":
            return OK if method in ("GET", "HEAD") else GET_ONLY
        if path == "/metrics":
            if method not in ("GET", "HEAD"):
                return GET_ONLY
            if self.exposition is None:
                text = generate_latest(self.metrics.registry)
            else:  # asks the controller process: on a worker thread
                text = await asyncio.get_running_loop().run_in_executor(None, self.exposition)
            return Answer(200, text, [(b"content-type", CONTENT_TYPE_LATEST.encode()), _length(text)])
        return NOT_FOUND

    async def mutate(self, body: bytes) -> Answer:
        """One AdmissionReview's answer. A pod whose owner the state does not hold yet waits for it a
        little, in steps, other reviews going on meanwhile."""
        started = time.perf_counter()
        try:
            review = orjson.loads(body)
            waited = 0.0
            while waited < OWNER_WAIT_SECONDS and self.placer.awaiting_owner(review):
                await asyncio.sleep(OWNER_WAIT_STEP_SECONDS)
                waited += OWNER_WAIT_STEP_SECONDS
            return _json(200, orjson.dumps(self.placer.review(review)))
        except (orjson.JSONDecodeError, BadReview) as exc:
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


class HttpsServer(uvicorn.Server):
    """uvicorn's server, with the TLS context it serves (`load_cert_chain` on it after a certificate
    rotation: new connections get the new certificate) and a stop that any thread may ask for."""

    def __init__(self, config: uvicorn.Config, context: ssl.SSLContext) -> None:
        super().__init__(config)
        self.ssl = context

    def exit(self) -> None:
        """Stop gracefully: no new connections, the requests in flight answered."""
        self.should_exit = True


def _counting_protocol(metrics: ControllerMetrics) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, counting what it refuses as not HTTP (its own 400, which never
    reaches the application) in `shipshape_webhook_errors_total{stage="request"}` with the reviews the
    application refuses. A class per server: each counts into its own metrics."""

    class CountingHttpToolsProtocol(HttpToolsProtocol):
        def send_400_response(self, msg: str) -> None:
            metrics.webhook_errors.labels(stage="request").inc()
            super().send_400_response(msg)

    return CountingHttpToolsProtocol


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


def https_server(app: WebhookApp, cert_file: Path, key_file: Path) -> HttpsServer:
    """A server for `app` over TLS; run it with `await server.serve([bind(...)])`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert_file), str(key_file))
    config = uvicorn.Config(
        app,
        http=_counting_protocol(app.metrics),
        ws="none",
        lifespan="off",
        interface="asgi3",
        ssl_context_factory=lambda config, default: context,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=STOP_GRACE_SECONDS,
        # The process's own logging shows uvicorn's warnings; no access log, no `server` header.
        log_config=None,
        log_level="warning",
        access_log=False,
        server_header=False,
        # No proxy stands between the API server and the webhook: the client's address is its own.
        proxy_headers=False,
    )
    return HttpsServer(config, context)


@asynccontextmanager
async def running(server: HttpsServer, sock: socket.socket) -> AsyncIterator[None]:
    """Serve on `sock` in the background for the duration of the block, then stop gracefully."""
    task = asyncio.create_task(server.serve([sock]))
    # uvicorn exposes no start-up event, only the `started` flag.
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
