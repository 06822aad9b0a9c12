"""HTTP faces of the cloud: the per-node instance metadata endpoint and the control API.

`metadata_app(cluster)` answers like EC2's IMDS under a per-node prefix
(`/<node>/latest/meta-data/spot/instance-action`, ...), plain HTTP with no auth, with IMDS's 404
page where there is nothing to say. `control_routes(cluster)` are Starlette routes under
`/emulator/v1/` (interrupt, shortage, cost, pools, and the event queue, which speaks SQS's JSON
protocol) that the API server mounts behind its auth.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from shipshape.emulator.cloud import queue as event_queue
from shipshape.emulator.cloud.errors import CloudError, UnknownTarget
from shipshape.emulator.runtime import Cluster
from shipshape.kube import errors
from shipshape.kube.clock import rfc3339
from shipshape.kube.duration import DurationError, parse_duration

if TYPE_CHECKING:
    from shipshape.emulator.cloud.model import CloudModel

CONTROL_PREFIX = "/emulator/v1"
QUEUE_PATH = CONTROL_PREFIX + "/queue"
SQS_TARGET = "AmazonSQS."
MAX_BODY = 64 * 1024

# What EC2's metadata service answers for a path it has nothing under.
IMDS_NOT_FOUND = """<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
         "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>404 - Not Found</title>
 </head>
 <body>
  <h1>404 - Not Found</h1>
 </body>
</html>
"""


def _cloud(cluster: Cluster) -> CloudModel:
    cloud: CloudModel = cluster.services["cloud"]
    return cloud


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _sqs(body: Any) -> Response:
    return Response(orjson.dumps(body), media_type="application/x-amz-json-1.0")


def _sqs_error(code: str, message: str) -> Response:
    body = {"__type": f"com.amazonaws.sqs#{code}", "message": message}
    return Response(orjson.dumps(body), status_code=400, media_type="application/x-amz-json-1.0")


def _not_found() -> Response:
    return Response(IMDS_NOT_FOUND, status_code=404, media_type="text/html")


# ---- instance metadata -------------------------------------------------------------------------
def metadata_app(cluster: Cluster) -> Starlette:
    """IMDS per node: `/<node>/latest/meta-data/...` and the IMDSv2 token endpoint."""

    async def meta_data(request: Request) -> Response:
        node = request.path_params["node"]
        path = request.path_params["path"].strip("/")
        cloud = _cloud(cluster)
        if path == "spot/instance-action":
            action = cloud.instance_action(node)
            return _json(action) if action is not None else _not_found()
        if path == "events/recommendations/rebalance":
            rebalance = cloud.rebalance_recommendation(node)
            return _json(rebalance) if rebalance is not None else _not_found()
        if path == "" and cloud.instance_metadata(node, "instance-id") is not None:
            return PlainTextResponse("\n".join(cloud.metadata_listing(node)))
        value = cloud.instance_metadata(node, path)
        return PlainTextResponse(value) if value is not None else _not_found()

    async def token(request: Request) -> Response:
        ttl = request.headers.get("x-aws-ec2-metadata-token-ttl-seconds", "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return PlainTextResponse("Bad Request", status_code=400)
        return PlainTextResponse(secrets.token_urlsafe(40))

    return Starlette(
        routes=[
            Route("/{node}/latest/api/token", token, methods=["PUT"]),
            Route("/{node}/latest/meta-data/{path:path}", meta_data, methods=["GET"]),
        ]
    )


# ---- control API ---------------------------------------------------------------------------------
async def _body(request: Request, allowed: set[str]) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise errors.RequestEntityTooLarge(f"request body is larger than {MAX_BODY} bytes")
    try:
        data = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as exc:
        raise errors.BadRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise errors.BadRequest(f"the body must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise errors.BadRequest(
            f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
    return data


def _seconds(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise errors.BadRequest(f"{field} must be a duration such as 120, '120s' or '10m', got {value!r}")
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise errors.BadRequest(f"{field}: {exc}") from None


def _text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise errors.BadRequest(f"{field} must be a non-empty string, got {value!r}")
    return value


Handler = Callable[[Request], Awaitable[Response]]


def _guarded(handler: Handler) -> Handler:
    """Turn domain errors into Status bodies (400/404/...); nothing has changed when they occur."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except UnknownTarget as exc:
            return _json(errors.NotFound(str(exc)).status(), 404)
        except CloudError as exc:
            return _json(errors.BadRequest(str(exc)).status(), 400)
        except errors.ApiError as exc:
            return _json(exc.status(), exc.code)

    return wrapped


def control_routes(cluster: Cluster) -> list[Route]:
    async def interrupt(request: Request) -> Response:
        data = await _body(request, {"node", "pool", "zone", "notice"})
        node, pool, zone = (_text(data.get(k), k) for k in ("node", "pool", "zone"))
        notice = _seconds(data["notice"], "notice") if "notice" in data else None
        cloud = _cloud(cluster)
        affected = cloud.interrupt(node=node, pool=pool, zone=zone, notice=notice)
        seconds = cloud.interruption_settings.notice if notice is None else notice
        # The notices' own time (the clock has moved on since they were sent, at any --speed).
        action = cloud.instance_action(affected[0]) if affected else None
        termination = action["time"] if action else None
        return _json({"nodes": affected, "notice": seconds, "terminationTime": termination})

    async def shortage(request: Request) -> Response:
        data = await _body(request, {"pool", "for"})
        pool = _text(data.get("pool"), "pool")
        if pool is None:
            raise errors.BadRequest("pool is required")
        if "for" not in data:
            raise errors.BadRequest("for (the shortage's duration, e.g. '10m') is required")
        seconds = _seconds(data["for"], "for")
        until = _cloud(cluster).shortage(pool, seconds)
        return _json({"pool": pool, "seconds": seconds, "until": rfc3339(until)})

    async def cost(request: Request) -> Response:
        return _json(_cloud(cluster).cost())

    async def pools(request: Request) -> Response:
        return _json({"pools": _cloud(cluster).pools_view()})

    queue = event_queue.attach(_cloud(cluster))
    cluster.services["event_queue"] = queue

    async def sqs(request: Request) -> Response:
        """SQS's JSON protocol (`X-Amz-Target: AmazonSQS.ReceiveMessage | DeleteMessage`)."""
        target = request.headers.get("x-amz-target", "")
        action = target[len(SQS_TARGET) :] if target.startswith(SQS_TARGET) else ""
        raw = await request.body()
        try:
            data = orjson.loads(raw or b"{}")
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            return _sqs_error("InvalidParameterValue", "the body must be a JSON object")
        try:
            if action == "ReceiveMessage":
                messages = queue.receive(
                    int(data.get("MaxNumberOfMessages", 1)), float(data.get("VisibilityTimeout", 30))
                )
                return _sqs(
                    {
                        "Messages": [
                            {
                                "MessageId": m.message_id,
                                "ReceiptHandle": m.receipt,
                                "MD5OfBody": hashlib.md5(m.body.encode()).hexdigest(),
                                "Body": m.body,
                                "Attributes": {
                                    "ApproximateReceiveCount": str(m.receives),
                                    "SentTimestamp": str(int(m.sent * 1000)),
                                },
                            }
                            for m in messages
                        ]
                    }
                )
            if action == "DeleteMessage":
                queue.delete(str(data.get("ReceiptHandle", "")))
                return _sqs({})
        except event_queue.InvalidReceipt as exc:
            return _sqs_error("ReceiptHandleIsInvalid", str(exc))
        except (CloudError, TypeError, ValueError) as exc:
            return _sqs_error("InvalidParameterValue", str(exc))
        return _sqs_error("UnsupportedOperation", f"unsupported X-Amz-Target {target!r}")

    return [
        Route(f"{CONTROL_PREFIX}/interrupt", _guarded(interrupt), methods=["POST"]),
        Route(f"{CONTROL_PREFIX}/shortage", _guarded(shortage), methods=["POST"]),
        Route(f"{CONTROL_PREFIX}/cost", _guarded(cost), methods=["GET"]),
        Route(f"{CONTROL_PREFIX}/pools", _guarded(pools), methods=["GET"]),
        Route(QUEUE_PATH, sqs, methods=["POST"]),
    ]
