"""HTTP faces of the cloud: the per-node instance metadata, the SQS endpoint and the control API.

`metadata_app(cluster)` answers under a per-node prefix (`/<node>/...`) in the scenario's cloud's
format (EC2's IMDSv2, Compute Engine's metadata server, Azure's Scheduled Events), plain HTTP with no
auth, and serves the cloud's SQS queue at `POST /` (SQS's JSON protocol, SigV4-signed requests only).
`control_routes(cluster)` are Starlette routes under `/emulator/v1/` (interrupt, shortage, cost,
pools) that the API server mounts behind its auth.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from shipshape.emulator.cloud import queue as event_queue
from shipshape.emulator.cloud import sigv4
from shipshape.emulator.cloud.errors import CloudError, UnknownTarget
from shipshape.emulator.runtime import Cluster
from shipshape.kube import errors
from shipshape.kube.clock import rfc3339
from shipshape.kube.duration import DurationError, parse_duration

if TYPE_CHECKING:
    from shipshape.emulator.cloud.model import CloudModel

CONTROL_PREFIX = "/emulator/v1"
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


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def _sqs(body: Any) -> Response:
    return Response(orjson.dumps(body), media_type="application/x-amz-json-1.0")


def _sqs_error(
    code: str, message: str, *, status: int = 400, namespace: str = "com.amazonaws.sqs"
) -> Response:
    body = {"__type": f"{namespace}#{code}", "message": message}
    return Response(
        orjson.dumps(body),
        status_code=status,
        media_type="application/x-amz-json-1.0",
        headers={"x-amzn-query-error": f"{code};Sender"},
    )


def _not_found() -> Response:
    return Response(IMDS_NOT_FOUND, status_code=404, media_type="text/html")


# ---- instance metadata -------------------------------------------------------------------------
IMDS_TTL_HEADER = "x-aws-ec2-metadata-token-ttl-seconds"
IMDS_TOKEN_HEADER = "x-aws-ec2-metadata-token"
GCE_FORBIDDEN = (
    "Your client does not have permission to get URL <code>{path}</code> from this server. "
    "Missing Metadata-Flavor:Google header."
)
# Longest a `wait_for_change` request is held without `timeout_sec`.
GCE_MAX_WAIT_SECONDS = 300.0
GCE_WAIT_STEP_SECONDS = 0.05


def metadata_app(cluster: Cluster) -> Starlette:
    """Each node's instance metadata under `/<node>`, in the scenario's cloud's format: EC2's IMDSv2
    (`/latest/api/token`, `/latest/meta-data/...`), Compute Engine's metadata server
    (`/computeMetadata/v1/...`) or Azure's IMDS (`/metadata/scheduledevents`, `/metadata/instance/...`).
    The other clouds' paths answer 404, as they would on that cloud. The same server answers the
    cloud's SQS endpoint (`POST /`, see `sqs_route`)."""
    # IMDSv2 session token -> the node (instance) it was issued by, and when it expires (emulated time).
    tokens: dict[str, tuple[str, float]] = {}

    def flavour(request: Request, cloud: str) -> CloudModel | None:
        model = _cloud(cluster)
        return model if model.cloud == cloud else None

    # -- AWS: IMDSv2 --------------------------------------------------------------------------------
    async def token(request: Request) -> Response:
        cloud = flavour(request, "aws")
        if cloud is None or cloud.instance_for(request.path_params["node"]) is None:
            return _not_found()
        if "x-forwarded-for" in request.headers:
            return PlainTextResponse("Forbidden", status_code=403)
        ttl = request.headers.get(IMDS_TTL_HEADER, "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return PlainTextResponse("Bad Request", status_code=400)
        value = secrets.token_urlsafe(40)
        now = cloud.c.now()
        for known, (_, expiry) in list(tokens.items()):
            if expiry <= now:
                del tokens[known]
        tokens[value] = (request.path_params["node"], now + int(ttl))
        return PlainTextResponse(value, headers={IMDS_TTL_HEADER: ttl})

    async def versioned_token(request: Request) -> Response:
        return PlainTextResponse("Forbidden", status_code=403)

    async def meta_data(request: Request) -> Response:
        cloud = flavour(request, "aws")
        node = request.path_params["node"]
        if cloud is None or cloud.instance_for(node) is None:
            return _not_found()
        issuer, expiry = tokens.get(request.headers.get(IMDS_TOKEN_HEADER) or "", ("", 0.0))
        now = cloud.c.now()
        if issuer != node or expiry <= now:  # another instance's token is no token here
            return PlainTextResponse("Unauthorized", status_code=401)
        remaining = {IMDS_TTL_HEADER: str(max(0, int(expiry - now)))}
        path = request.path_params["path"].strip("/")
        if path == "spot/instance-action":
            action = cloud.instance_action(node)
            return _json(action, headers=remaining) if action is not None else _not_found()
        if path == "events/recommendations/rebalance":
            rebalance = cloud.rebalance_recommendation(node)
            return _json(rebalance, headers=remaining) if rebalance is not None else _not_found()
        if path == "" and cloud.instance_metadata(node, "instance-id") is not None:
            return PlainTextResponse("\n".join(cloud.metadata_listing(node)), headers=remaining)
        value = cloud.instance_metadata(node, path)
        return PlainTextResponse(value, headers=remaining) if value is not None else _not_found()

    # -- GCP: Compute Engine metadata server ----------------------------------------------------------
    async def compute_metadata(request: Request) -> Response:
        cloud = flavour(request, "gcp")
        if cloud is None:
            return _not_found()
        if request.headers.get("metadata-flavor") != "Google":
            path = "/computeMetadata/v1/" + request.path_params["path"]
            return Response(GCE_FORBIDDEN.format(path=path), status_code=403, media_type="text/html")
        node = request.path_params["node"]
        key = request.path_params["path"].strip("/")
        value = cloud.gce_metadata(node, key)
        if value is None:
            return _not_found()
        query = request.query_params
        if query.get("wait_for_change", "").lower() == "true":
            last = query.get("last_etag")
            timeout = _wait_seconds(query.get("timeout_sec"))
            waited = 0.0
            while last is not None and _etag(value) == last and waited < timeout:
                await asyncio.sleep(GCE_WAIT_STEP_SECONDS)
                waited += GCE_WAIT_STEP_SECONDS
                value = cloud.gce_metadata(node, key)
                if value is None:  # the instance is gone
                    return _not_found()
        headers = {"Metadata-Flavor": "Google", "ETag": _etag(value)}
        return Response(value, headers=headers, media_type="application/text")

    # -- Azure: Instance Metadata Service ---------------------------------------------------------------
    def azure_checked(request: Request) -> tuple[CloudModel | None, Response | None]:
        cloud = flavour(request, "azure")
        if cloud is None or cloud.azure_vm_name(request.path_params["node"]) is None:
            return None, _not_found()
        if request.headers.get("metadata", "").lower() != "true":
            return None, _json({"error": "Bad request. Required metadata header not specified"}, 400)
        if not request.query_params.get("api-version"):
            return None, _json(
                {
                    "error": "Bad request. api-version was not specified in the request. For more "
                    "information refer to aka.ms/azureimds",
                    "newest-versions": ["2021-02-01", "2020-12-01", "2020-10-01"],
                },
                400,
            )
        return cloud, None

    async def scheduled_events(request: Request) -> Response:
        cloud, refused = azure_checked(request)
        if cloud is None:
            assert refused is not None
            return refused
        node = request.path_params["node"]
        if request.method == "GET":
            return _json(cloud.scheduled_events(node))
        try:
            data = orjson.loads(await request.body() or b"{}")
            starts = data["StartRequests"]
            if not isinstance(starts, list) or not starts:
                raise TypeError
            ids = [str(item["EventId"]) for item in starts]
            cloud.approve_events(ids)
        except (orjson.JSONDecodeError, KeyError, TypeError, UnknownTarget):
            return _json({"error": "Bad request. StartRequests is not valid"}, 400)
        return Response(b"", status_code=200)

    async def compute_name(request: Request) -> Response:
        cloud, refused = azure_checked(request)
        if cloud is None:
            assert refused is not None
            return refused
        name = cloud.azure_vm_name(request.path_params["node"])
        if request.query_params.get("format") == "text":
            return PlainTextResponse(str(name))
        return _json(name)

    return Starlette(
        routes=[
            sqs_route(cluster),
            Route("/{node}/latest/api/token", token, methods=["PUT"]),
            Route("/{node}/{version}/api/token", versioned_token, methods=["PUT"]),
            Route("/{node}/latest/meta-data/{path:path}", meta_data, methods=["GET"]),
            Route("/{node}/computeMetadata/v1/{path:path}", compute_metadata, methods=["GET"]),
            Route("/{node}/metadata/scheduledevents", scheduled_events, methods=["GET", "POST"]),
            Route("/{node}/metadata/instance/compute/name", compute_name, methods=["GET"]),
        ]
    )


def _etag(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def _wait_seconds(raw: str | None) -> float:
    try:
        seconds = float(raw) if raw is not None else GCE_MAX_WAIT_SECONDS
    except ValueError:
        seconds = GCE_MAX_WAIT_SECONDS
    return max(0.0, min(seconds, GCE_MAX_WAIT_SECONDS))


# ---- the cloud's SQS endpoint --------------------------------------------------------------------
QUEUE_NAME = "shipshape-notices"
# The emulated AWS account's only access key (any SDK's default credential chain can be given it).
ACCESS_KEY_ID = "AKIAEMULATEDSHIPSHAPE"
SECRET_ACCESS_KEY = "emulated-secret-access-key-for-the-shipshape-emulator"
MAX_WAIT_SECONDS = 20
WAIT_STEP_SECONDS = 0.05


def queue_of(cluster: Cluster) -> event_queue.EventQueue:
    """The cloud's event queue (created with the first endpoint that serves it)."""
    queue: event_queue.EventQueue | None = cluster.services.get("event_queue")
    if queue is None:
        queue = event_queue.attach(_cloud(cluster))
        cluster.services["event_queue"] = queue
    return queue


def queue_url(cluster: Cluster) -> str | None:
    """The queue's URL on the cloud endpoint (`http://127.0.0.1:<port>/<account>/shipshape-notices`)."""
    base = cluster.services.get("metadata_url")
    if not base:
        return None
    return f"{str(base).rstrip('/')}/{queue_of(cluster).account}/{QUEUE_NAME}"


def _message(m: event_queue.Message) -> dict[str, Any]:
    return {
        "MessageId": m.message_id,
        "ReceiptHandle": m.receipt,
        "MD5OfBody": hashlib.md5(m.body.encode()).hexdigest(),
        "Body": m.body,
        "Attributes": {
            "ApproximateReceiveCount": str(m.receives),
            "SentTimestamp": str(int(m.sent * 1000)),
        },
    }


def _int(data: dict[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    return int(value)


async def sqs_answer(queue: event_queue.EventQueue, request: Request, name: str) -> Response:
    """One SQS JSON-protocol call on `queue`, named `name` (the QueueUrl must end with
    `/<account>/<name>`). ReceiveMessage long-polls up to WaitTimeSeconds (at most 20) for a visible
    message."""
    target = request.headers.get("x-amz-target", "")
    action = target[len(SQS_TARGET) :] if target.startswith(SQS_TARGET) else ""
    raw = await request.body()
    if len(raw) > MAX_BODY + 4096:
        return _sqs_error("InvalidParameterValue", f"the request is larger than {MAX_BODY} bytes")
    try:
        data = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return _sqs_error("InvalidParameterValue", "the body must be a JSON object")
    if action != "GetQueueUrl":
        url = str(data.get("QueueUrl") or "")
        if not url.rstrip("/").endswith(f"/{queue.account}/{name}"):
            return _sqs_error("QueueDoesNotExist", "The specified queue does not exist.")
    try:
        if action == "GetQueueUrl":
            if data.get("QueueName") != name:
                return _sqs_error("QueueDoesNotExist", "The specified queue does not exist.")
            base = str(request.base_url).rstrip("/")
            return _sqs({"QueueUrl": f"{base}/{queue.account}/{name}"})
        if action == "ReceiveMessage":
            wait = _int(data, "WaitTimeSeconds", 0)
            if not 0 <= wait <= MAX_WAIT_SECONDS:
                raise ValueError(f"WaitTimeSeconds must be between 0 and {MAX_WAIT_SECONDS}, got {wait}")
            count = _int(data, "MaxNumberOfMessages", 1)
            visibility = float(data.get("VisibilityTimeout", 30))
            messages = queue.receive(count, visibility)
            waited = 0.0
            while not messages and waited < wait:
                await asyncio.sleep(WAIT_STEP_SECONDS)
                waited += WAIT_STEP_SECONDS
                messages = queue.receive(count, visibility)
            return _sqs({"Messages": [_message(m) for m in messages]} if messages else {})
        if action == "DeleteMessage":
            queue.delete(str(data.get("ReceiptHandle", "")))
            return _sqs({})
        if action == "SendMessage":
            body = data.get("MessageBody")
            if not isinstance(body, str) or not body:
                raise ValueError("MessageBody must be a non-empty string")
            message_id = queue.send_raw(body)
            return _sqs({"MessageId": message_id, "MD5OfMessageBody": hashlib.md5(body.encode()).hexdigest()})
    except event_queue.InvalidReceipt as exc:
        return _sqs_error("ReceiptHandleIsInvalid", str(exc))
    except (CloudError, TypeError, ValueError) as exc:
        return _sqs_error("InvalidParameterValue", str(exc))
    return _sqs_error("UnsupportedOperation", f"unsupported X-Amz-Target {target!r}")


def sqs_route(cluster: Cluster) -> Route:
    """`POST /` on the cloud endpoint: SQS's JSON protocol, every request signed with SigV4 by the
    emulated account's access key (what boto3 and every AWS SDK send)."""

    async def endpoint(request: Request) -> Response:
        body = await request.body()
        try:
            sigv4.verify(
                method=request.method,
                path=request.url.path,
                query=request.url.query,
                headers=request.headers,
                body=body,
                secrets={ACCESS_KEY_ID: SECRET_ACCESS_KEY},
                service="sqs",
                now=time.time(),  # the signer's clock is the real one, whatever the cluster's
            )
        except sigv4.SignatureError as exc:
            status = 400 if exc.code == "IncompleteSignature" else 403
            return _sqs_error(exc.code, str(exc), status=status, namespace="com.amazon.coral.service")
        return await sqs_answer(queue_of(cluster), request, QUEUE_NAME)

    return Route("/", endpoint, methods=["POST"])


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

    queue_of(cluster)  # the queue exists from the start: it receives every notice

    return [
        Route(f"{CONTROL_PREFIX}/interrupt", _guarded(interrupt), methods=["POST"]),
        Route(f"{CONTROL_PREFIX}/shortage", _guarded(shortage), methods=["POST"]),
        Route(f"{CONTROL_PREFIX}/cost", _guarded(cost), methods=["GET"]),
        Route(f"{CONTROL_PREFIX}/pools", _guarded(pools), methods=["GET"]),
    ]
