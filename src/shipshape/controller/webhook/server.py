"""The webhook's HTTPS server (Starlette on uvicorn): POST /mutate, GET /healthz, GET /metrics."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

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


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def create_app(
    placer: PodPlacer, metrics: ControllerMetrics, exposition: Callable[[], bytes] | None = None
) -> Starlette:
    """The webhook's routes. `exposition`: what GET /metrics answers (run on a worker thread; default:
    `metrics`' registry), for a webhook in a process of its own that shows the whole controller's."""

    async def mutate(request: Request) -> Response:
        started = time.perf_counter()
        try:
            length = int(request.headers.get("content-length") or 0)
            if length > MAX_BODY_BYTES:
                return JSONResponse({"error": "request body too large"}, status_code=413)
            raw = await request.body()
            if len(raw) > MAX_BODY_BYTES:
                return JSONResponse({"error": "request body too large"}, status_code=413)
            try:
                body = orjson.loads(raw)
                waited = 0.0
                while waited < OWNER_WAIT_SECONDS and placer.awaiting_owner(body):
                    await asyncio.sleep(OWNER_WAIT_STEP_SECONDS)
                    waited += OWNER_WAIT_STEP_SECONDS
                answer = placer.review(body)
            except (orjson.JSONDecodeError, BadReview) as exc:
                metrics.webhook_errors.labels(stage="request").inc()
                return JSONResponse({"error": str(exc)}, status_code=400)
            return _json(answer)
        finally:
            metrics.webhook_latency.observe(time.perf_counter() - started)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def prometheus(request: Request) -> Response:
        if exposition is None:
            text = generate_latest(metrics.registry)
        else:
            text = await run_in_threadpool(exposition)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route(MUTATE_PATH, mutate, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
        ]
    )


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
    app: Starlette, cert_file: Path, key_file: Path, *, log_level: str = "warning"
) -> uvicorn.Server:
    """A uvicorn server for `app` over TLS; run it with `await server.serve(sockets=[bind(...)])`."""
    config = uvicorn.Config(
        app,
        ssl_certfile=str(cert_file),
        ssl_keyfile=str(key_file),
        lifespan="off",
        ws="none",
        access_log=False,
        log_level=log_level,
        timeout_keep_alive=60,
    )
    return uvicorn.Server(config)


@asynccontextmanager
async def running(server: uvicorn.Server, sock: socket.socket) -> AsyncIterator[None]:
    """Serve on `sock` in the background for the duration of the block, then stop gracefully."""
    task = asyncio.create_task(server.serve(sockets=[sock]))
    # uvicorn exposes no start-up event, only the `started` flag.
    while not server.started:
        if task.done():
            await task
            raise RuntimeError("the webhook server stopped during start-up")
        await asyncio.sleep(0.005)
    try:
        yield
    finally:
        server.should_exit = True
        await task
