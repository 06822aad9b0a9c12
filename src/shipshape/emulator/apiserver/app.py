"""The HTTP layer: Kubernetes REST paths, discovery, OpenAPI, watch and metrics on Starlette.

Semantics (defaulting, admission, validation, patching, subresources) live in `emulator.api.Api`;
this layer routes, decodes, filters, pages, negotiates the representation and encodes errors as
`Status` objects. Malformed input is refused before anything reaches the store.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from shipshape.emulator import admission
from shipshape.emulator.api import Api, DeleteOptions
from shipshape.emulator.apiserver import codec, discovery, paths, reviews, tables
from shipshape.emulator.apiserver import watch as watching
from shipshape.emulator.apiserver.auth import BearerAuth
from shipshape.emulator.apiserver.fieldcheck import FieldChecker
from shipshape.emulator.apiserver.metrics import MetricsView
from shipshape.emulator.apiserver.openapi import OpenApiDocs, gnostic
from shipshape.emulator.resources import NAMESPACES, NODES, PODS, ResourceType, lookup
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj
from shipshape.kube import errors, fields, labels

log = logging.getLogger(__name__)

PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
_NOT_FOUND = "the server could not find the requested resource"
_NOT_ALLOWED = "the server does not allow this method on the requested resource"
_TRUE = ("true", "1", "True")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    bookmark_interval: float = 60.0  # real seconds between BOOKMARK events on watches that allow them
    max_body_bytes: int = codec.MAX_BODY_BYTES
    # Requests being served at once before 429 (kube-apiserver's max-requests-inflight plus
    # max-mutating-requests-inflight); watch streams do not count once established.
    max_requests_in_flight: int = 600
    kubernetes_version: str = "v1.32.0"


@dataclass(frozen=True, slots=True)
class ListQuery:
    """The parsed query of a list or watch request."""

    label: labels.Selector | None
    field: fields.FieldSelector
    predicate: Callable[[Obj], bool] | None
    limit: int
    continue_key: tuple[str, str] | None
    resource_version: str


def _status_response(exc: errors.ApiError) -> Response:
    return Response(orjson.dumps(exc.status()), status_code=exc.code, media_type=codec.JSON)


def encode_continue(resource_version: int, namespace: str, name: str) -> str:
    token = orjson.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": [namespace, name]})
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        start = data["start"]
        return int(data["rv"]), (str(start[0]), str(start[1]))
    except (binascii.Error, ValueError, KeyError, TypeError, IndexError, orjson.JSONDecodeError):
        raise errors.BadRequest(f"continue key is not valid: {token!r} is not a continue token") from None


def paginate(
    items: list[Obj], limit: int, after: tuple[str, str] | None, namespaced: bool
) -> tuple[list[Obj], tuple[str, str] | None, int]:
    """A page of sorted items after `after`; returns (page, key of the last item if more remain, rest)."""

    def key(obj: Obj) -> tuple[str, str]:
        md = obj["metadata"]
        return (md.get("namespace", "") if namespaced else "", md["name"])

    if after is not None:  # items are sorted by (namespace, name): resume after the last key served
        items = items[bisect.bisect_right(items, after, key=key) :]
    if limit <= 0 or len(items) <= limit:
        return items, None, 0
    page = items[:limit]
    return page, key(page[-1]), len(items) - limit


class ApiServer:
    """Builds the ASGI application for one emulated cluster."""

    def __init__(self, cluster: Cluster, settings: ServerSettings | None = None) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.settings = settings or ServerSettings(
            kubernetes_version=cluster.scenario.kubernetes_version if cluster.scenario else "v1.32.0"
        )
        self.hub = watching.WatchHub(cluster.store, cluster.clock)
        self.openapi = OpenApiDocs(list(discovery.groups()))
        self.fields = FieldChecker(self.openapi)
        self._static: dict[str, bytes] = {}
        self._in_flight = 0

    @property
    def api(self) -> Api:
        api = self.cluster.services.get("api")
        if not isinstance(api, Api):
            raise errors.ServiceUnavailable("the API is not ready yet")
        return api

    # ---- application ---------------------------------------------------------------------
    def routes(self) -> list[BaseRoute]:
        methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        extra: list[BaseRoute] = list(self.cluster.services.get("http_routes") or [])
        return [
            Route("/version", self.version),
            Route("/version/", self.version),
            Route("/healthz", self.health),
            Route("/livez", self.health),
            Route("/readyz", self.health),
            Route("/api", self.core_discovery),
            Route("/api/", self.core_discovery),
            Route("/apis", self.groups_discovery),
            Route("/apis/", self.groups_discovery),
            Route("/api/v1", self.resource_list),
            Route("/api/v1/", self.resource_list),
            Route("/apis/{group}", self.group_discovery),
            Route("/apis/{group}/", self.group_discovery),
            Route("/apis/{group}/{version}", self.resource_list),
            Route("/apis/{group}/{version}/", self.resource_list),
            Route("/openapi/v2", self.openapi_v2),
            Route("/openapi/v3", self.openapi_v3_index),
            Route("/openapi/v3/{path:path}", self.openapi_v3),
            *reviews.routes(self.settings.max_body_bytes),
            *extra,
            Route("/api/{rest:path}", self.rest, methods=methods),
            Route("/apis/{rest:path}", self.rest, methods=methods),
        ]

    def app(self, token: str | None) -> ASGIApp:
        """The application; with a token, every request must carry it (see auth.BearerAuth)."""
        starlette = Starlette(
            routes=self.routes(), exception_handlers={404: self._not_found, 405: self._not_allowed}
        )
        return BearerAuth(starlette, token) if token else starlette

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return _status_response(errors.NotFound(_NOT_FOUND, details={}))

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        return _status_response(errors.MethodNotAllowed(_NOT_ALLOWED))

    # ---- health, version, discovery --------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def version(self, request: Request) -> Response:
        return Response(
            orjson.dumps(discovery.version_info(self.settings.kubernetes_version)), media_type=codec.JSON
        )

    def _cached(self, key: str, build: Callable[[], Any]) -> bytes:
        data = self._static.get(key)
        if data is None:
            data = orjson.dumps(build())
            self._static[key] = data
        return data

    def _aggregated(self, request: Request, core: bool) -> Response | None:
        wanted = discovery.wants_aggregated(request.headers.get("accept", ""))
        if wanted is None:
            return None
        content_type = (
            discovery.AGGREGATED_CONTENT_TYPE if wanted == "v2" else discovery.AGGREGATED_V2BETA1_CONTENT_TYPE
        )
        body = self._cached(
            f"aggregated:{core}:{wanted}",
            lambda: discovery.aggregated(core, f"apidiscovery.k8s.io/{wanted}"),
        )
        return Response(body, media_type=None, headers={"content-type": content_type})

    async def core_discovery(self, request: Request) -> Response:
        aggregated = self._aggregated(request, core=True)
        if aggregated is not None:
            return aggregated
        host = request.headers.get("host", "127.0.0.1")
        return Response(orjson.dumps(discovery.api_versions(host)), media_type=codec.JSON)

    async def groups_discovery(self, request: Request) -> Response:
        aggregated = self._aggregated(request, core=False)
        if aggregated is not None:
            return aggregated
        return Response(self._cached("apis", discovery.api_group_list), media_type=codec.JSON)

    async def group_discovery(self, request: Request) -> Response:
        doc = discovery.api_group(request.path_params["group"])
        if doc is None:
            return _status_response(errors.NotFound(_NOT_FOUND, details={}))
        return Response(orjson.dumps(doc), media_type=codec.JSON)

    async def resource_list(self, request: Request) -> Response:
        group = request.path_params.get("group")
        api_version = f"{group}/{request.path_params['version']}" if group else "v1"
        doc = discovery.api_resource_list(api_version)
        if doc is None:
            return _status_response(errors.NotFound(_NOT_FOUND, details={}))
        return Response(self._cached(f"resources:{api_version}", lambda: doc), media_type=codec.JSON)

    # ---- OpenAPI ------------------------------------------------------------------------------
    async def openapi_v2(self, request: Request) -> Response:
        accept = request.headers.get("accept", "")
        for media_type in (part.split(";")[0].strip() for part in accept.split(",")):
            if media_type in (gnostic.MEDIA_TYPE, gnostic.RESPONSE_MEDIA_TYPE):  # what client-go asks for
                return Response(self.openapi.v2_protobuf(), media_type=gnostic.RESPONSE_MEDIA_TYPE)
            if media_type in (codec.JSON, "*/*", "application/*", ""):
                return Response(self.openapi.v2(), media_type=codec.JSON)
        refusal = codec.NotAcceptable(
            f"only the following media types are accepted: {codec.JSON}, {gnostic.MEDIA_TYPE}"
        )
        return _status_response(refusal)

    async def openapi_v3_index(self, request: Request) -> Response:
        return Response(orjson.dumps(self.openapi.v3_index()), media_type=codec.JSON)

    async def openapi_v3(self, request: Request) -> Response:
        doc = self.openapi.v3(request.path_params["path"])
        if doc is None:
            return _status_response(errors.NotFound(_NOT_FOUND, details={}))
        cache = "public, immutable" if "hash" in request.query_params else "no-cache, private"
        return Response(doc, media_type=codec.JSON, headers={"cache-control": cache})

    # ---- REST ---------------------------------------------------------------------------------
    async def rest(self, request: Request) -> Response:
        if self._in_flight >= self.settings.max_requests_in_flight:
            busy = errors.TooManyRequests(
                "Too many requests, please try again later.", details={"retryAfterSeconds": 1}
            )
            response = _status_response(busy)
            response.headers["retry-after"] = "1"
            return response
        self._in_flight += 1
        try:
            return await self._rest(request)
        except errors.ApiError as exc:
            return _status_response(exc)
        except (fields.FieldSelectorError, labels.SelectorError) as exc:
            return _status_response(errors.BadRequest(str(exc)))
        except Exception as exc:
            log.exception("internal error serving %s %s", request.method, request.url.path)
            return _status_response(errors.InternalError(f"Internal error occurred: {exc}"))
        finally:
            self._in_flight -= 1

    async def _rest(self, request: Request) -> Response:
        target = paths.parse(request.url.path)
        if target is None:
            raise errors.NotFound(_NOT_FOUND, details={})
        rt = lookup(target.group, target.version, target.plural)
        if rt is None:
            raise errors.NotFound(_NOT_FOUND, details={})
        if target.namespace and not rt.namespaced:
            raise errors.NotFound(_NOT_FOUND, details={})
        if rt.namespaced and target.name and not target.namespace:
            raise errors.NotFound(_NOT_FOUND, details={})
        method = request.method
        if rt.group == "metrics.k8s.io":
            if method != "GET" or target.subresource:
                raise errors.MethodNotAllowed(_NOT_ALLOWED)
            return await self._metrics(request, rt, target)
        if target.subresource:
            return await self._subresource(request, rt, target)
        watch = target.watch_prefix or request.query_params.get("watch") in _TRUE
        if watch:
            if method != "GET":
                raise errors.MethodNotAllowed(_NOT_ALLOWED)
            return await self._watch(request, rt, target)
        handler: Callable[[Request, ResourceType, paths.Target], Awaitable[Response]] | None
        if target.is_collection:
            handler = {"GET": self._list, "POST": self._create, "DELETE": self._delete_collection}.get(method)
            if method == "POST" and rt.namespaced and not target.namespace:
                handler = None
        else:
            handler = {
                "GET": self._get,
                "PUT": self._update,
                "PATCH": self._patch,
                "DELETE": self._delete,
            }.get(method)
        if handler is None:
            raise errors.MethodNotAllowed(_NOT_ALLOWED)
        # Admission webhooks' warnings reach the client as `Warning: 299 - "..."` headers (kubectl
        # prints each as "Warning: ..."), as kube-apiserver sends them.
        with admission.collecting_warnings() as webhook_warnings:
            response = await handler(request, rt, target)
        for warning in webhook_warnings:
            escaped = warning.replace("\\", "\\\\").replace('"', '\\"')
            response.headers.append("warning", f'299 - "{escaped}"')
        return response

    # ---- helpers ------------------------------------------------------------------------------
    def _respond(
        self, request: Request, obj: Any, status: int = 200, warnings: list[str] | None = None
    ) -> Response:
        wanted = codec.negotiate(request.headers.get("accept"))
        if wanted.media_type == codec.YAML:
            response = Response(codec.dumps(obj, wanted), status_code=status, media_type=codec.YAML)
        else:
            response = Response(orjson.dumps(obj), status_code=status, media_type=codec.JSON)
        for warning in warnings or ():
            response.headers.append("warning", warning)
        return response

    async def _body(self, request: Request) -> bytes:
        limit = self.settings.max_body_bytes
        too_large = errors.RequestEntityTooLarge(f"Request entity too large: limit is {limit}")
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    async def _object_body(self, request: Request, rt: ResourceType, target: paths.Target) -> Obj:
        body = codec.loads_body(await self._body(request), request.headers.get("content-type"))
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != rt.api_version:
            raise errors.BadRequest(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise errors.BadRequest(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        md = body.get("metadata")
        if md is None:
            md = body["metadata"] = {}
        if not isinstance(md, dict):
            raise errors.BadRequest("metadata must be an object")
        if rt.namespaced and md.get("namespace") and md["namespace"] != target.namespace:
            if target.name:  # an update: the handler's own check, before anything is read
                raise errors.BadRequest(
                    f"the namespace of the object ({md['namespace']}) does not match the namespace on "
                    f"the request ({target.namespace})"
                )
            raise errors.BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if target.name and md.get("name") != target.name:
            # An update names its object twice, and both must agree (a missing name does not).
            raise errors.BadRequest(
                f"the name of the object ({md.get('name') or ''}) does not match the name on the URL "
                f"({target.name})"
            )
        return body

    @staticmethod
    def _dry_run(request: Request, options: Obj | None = None) -> bool:
        values = list(request.query_params.getlist("dryRun"))
        if options is not None:
            values += list(options.get("dryRun") or [])
        for value in values:
            if value != "All":
                raise errors.BadRequest(f'Invalid dryRun value: "{value}": supported values: "All"')
        return bool(values)

    def _field_warnings(
        self, request: Request, rt: ResourceType, body: Obj, prefix: bool = True
    ) -> list[str]:
        """Unknown fields per `fieldValidation`: Strict refuses them, Warn (the default) warns."""
        validation = request.query_params.get("fieldValidation") or "Warn"
        if validation == "Ignore":
            return []
        unknown = self.fields.unknown_fields(rt, body)
        if unknown and validation == "Strict":
            listed = ", ".join(f'unknown field "{u}"' for u in unknown)
            kind = f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: ' if prefix else ""
            raise errors.BadRequest(f"{kind}strict decoding error: {listed}")
        return [f'299 - "unknown field \\"{u}\\""' for u in unknown]

    @staticmethod
    def _check_write_params(request: Request) -> None:
        validation = request.query_params.get("fieldValidation", "")
        if validation not in ("", "Ignore", "Warn", "Strict"):
            raise errors.BadRequest(
                f'fieldValidation: Unsupported value: "{validation}": '
                'supported values: "Ignore", "Strict", "Warn"'
            )

    def _check_namespace(self, rt: ResourceType, namespace: str, name: str) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get(NAMESPACES, "", namespace)
        if ns is None:
            raise errors.NotFound.of("namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.Forbidden(
                f'{rt.key} "{name}" is forbidden: unable to create new content in namespace {namespace} '
                "because it is being terminated",
                details={"name": name, "group": rt.group, "kind": rt.plural},
            )

    def _list_query(self, request: Request, rt: ResourceType) -> ListQuery:
        q = request.query_params
        label = labels.parse(q.get("labelSelector"))
        field = fields.parse(q.get("fieldSelector"))
        predicate = fields.compile_for(field, rt.key, rt.namespaced)
        limit_text = q.get("limit", "0") or "0"
        try:
            limit = int(limit_text)
        except ValueError:
            raise errors.BadRequest(f'invalid limit "{limit_text}": must be an integer') from None
        continue_key = None
        token = q.get("continue")
        if token:
            if q.get("resourceVersion"):
                raise errors.BadRequest("specifying resource version is not allowed when using continue")
            _, continue_key = decode_continue(token)
        return ListQuery(
            label=None if label.empty else label,
            field=field,
            predicate=predicate,
            limit=limit,
            continue_key=continue_key,
            resource_version=q.get("resourceVersion", ""),
        )

    def _select(self, rt: ResourceType, namespace: str, query: ListQuery) -> list[Obj]:
        name = query.field.value_of("metadata.name")
        if name is not None and (namespace or not rt.namespaced):
            one = self.store.get(rt, namespace, name)
            candidates = [one] if one is not None else []
            return [
                o
                for o in candidates
                if (query.label is None or query.label.matches(o["metadata"].get("labels")))
                and (query.predicate is None or query.predicate(o))
            ]
        return self.store.list(rt, namespace or None, selector=query.label, predicate=query.predicate)

    def _list_body(self, request: Request, rt: ResourceType, items: list[Obj], list_meta: Obj) -> Any:
        wanted = codec.negotiate(request.headers.get("accept"))
        if wanted.as_kind == "Table":
            include = request.query_params.get("includeObject", "Metadata")
            if include not in ("None", "Metadata", "Object"):
                raise errors.BadRequest(f'includeObject: Unsupported value: "{include}"')
            return tables.table(
                rt.key, items, self.cluster.clock.now(), include_object=include, list_meta=list_meta
            )
        if wanted.as_kind in ("PartialObjectMetadataList", "PartialObjectMetadata"):
            return {
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": list_meta,
                "items": [tables.partial_metadata(o) for o in items],
            }
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": list_meta, "items": items}

    def _object_body_out(self, request: Request, rt: ResourceType, obj: Obj) -> Any:
        wanted = codec.negotiate(request.headers.get("accept"))
        if wanted.as_kind == "Table":
            include = request.query_params.get("includeObject", "Metadata")
            return tables.table(
                rt.key,
                [obj],
                self.cluster.clock.now(),
                include_object=include,
                list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            )
        if wanted.as_kind == "PartialObjectMetadata":
            return tables.partial_metadata(obj)
        return obj

    # ---- verbs --------------------------------------------------------------------------------
    async def _list(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        query = self._list_query(request, rt)
        resource_version = self.store.resource_version
        if query.continue_key is not None:
            resource_version, _ = decode_continue(request.query_params["continue"])
        self._check_list_version(request, query.resource_version)
        items = self._select(rt, target.namespace, query)
        page, last_key, remaining = paginate(items, query.limit, query.continue_key, rt.namespaced)
        list_meta: Obj = {"resourceVersion": str(resource_version)}
        if last_key is not None:
            list_meta["continue"] = encode_continue(resource_version, *last_key)
            if query.label is None and query.predicate is None:
                list_meta["remainingItemCount"] = remaining
        return self._respond(request, self._list_body(request, rt, page, list_meta))

    def _check_list_version(self, request: Request, wanted: str) -> None:
        """What a list at a given resourceVersion can be served from: the current state only."""
        if not wanted or wanted == "0":
            return
        try:
            version = int(wanted)
        except ValueError:
            raise errors.BadRequest(
                f'resourceVersion: Invalid value: "{wanted}": must be an integer'
            ) from None
        current = self.store.resource_version
        if version > current:
            raise errors.Timeout(
                f"Too large resource version: {version}, current: {current}",
                details={
                    "causes": [
                        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                    ],
                    "retryAfterSeconds": 1,
                },
            )
        if request.query_params.get("resourceVersionMatch") == "Exact" and version != current:
            raise errors.Gone("The resourceVersion for the provided list is too old.")

    async def _get(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        obj = self.store.must_get(rt, target.namespace, target.name)
        return self._respond(request, self._object_body_out(request, rt, obj))

    async def _create(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        self._check_write_params(request)
        dry_run = self._dry_run(request)
        body = await self._object_body(request, rt, target)
        self._check_namespace(rt, target.namespace, str(body["metadata"].get("name", "")))
        warnings = self._field_warnings(request, rt, body)
        created = await self.api.create(rt, target.namespace, body, dry_run=dry_run)
        return self._respond(request, self._object_body_out(request, rt, created), 201, warnings)

    async def _update(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        self._check_write_params(request)
        dry_run = self._dry_run(request)
        body = await self._object_body(request, rt, target)
        if rt.namespaced:
            body["metadata"]["namespace"] = target.namespace
        warnings = self._field_warnings(request, rt, body)
        updated = await self.api.update(rt, target.namespace, target.name, body, dry_run=dry_run)
        return self._respond(request, self._object_body_out(request, rt, updated), 200, warnings)

    async def _decode_patch(self, request: Request) -> tuple[str, Any]:
        content_type = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        if content_type not in PATCH_TYPES:
            raise errors.UnsupportedMediaType(
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(PATCH_TYPES)}"
            )
        raw = await self._body(request)
        try:
            patch = yaml.safe_load(raw) if content_type.endswith("yaml") else orjson.loads(raw)
        except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
            raise errors.BadRequest(f"error decoding patch: {exc}") from None
        if content_type == PATCH_TYPES[0] and not isinstance(patch, list):
            raise errors.BadRequest("json patch must be an array of operations")
        if content_type != PATCH_TYPES[0] and not isinstance(patch, dict):
            raise errors.BadRequest("patch must be a JSON object")
        if content_type == PATCH_TYPES[3] and not request.query_params.get("fieldManager"):
            raise errors.BadRequest("PATCH apply requires fieldManager to be set")
        return content_type, patch

    async def _patch(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        self._check_write_params(request)
        dry_run = self._dry_run(request)
        patch_type, patch = await self._decode_patch(request)
        q = request.query_params
        # A JSON patch names paths, not fields; the other three carry (part of) the object.
        warnings = (
            [] if patch_type == PATCH_TYPES[0] else self._field_warnings(request, rt, patch, prefix=False)
        )
        patched = await self.api.patch(
            rt,
            target.namespace,
            target.name,
            patch_type,
            patch,
            dry_run=dry_run,
            field_manager=q.get("fieldManager"),
            force=q.get("force") in _TRUE,
        )
        return self._respond(request, self._object_body_out(request, rt, patched), 200, warnings)

    async def _delete_options(self, request: Request) -> DeleteOptions:
        raw = await self._body(request)
        body: Obj = {}
        if raw.strip():
            body = codec.loads_body(raw, request.headers.get("content-type"))
        q = request.query_params
        grace: Any = body.get("gracePeriodSeconds", q.get("gracePeriodSeconds"))
        propagation = body.get("propagationPolicy", q.get("propagationPolicy"))
        orphan = body.get("orphanDependents", q.get("orphanDependents"))
        if propagation is None and orphan is not None:
            propagation = "Orphan" if str(orphan).lower() == "true" else "Background"
        if propagation is not None and propagation not in ("Foreground", "Background", "Orphan"):
            raise errors.Invalid(
                "DeleteOptions",
                "",
                [
                    (
                        "propagationPolicy",
                        "FieldValueNotSupported",
                        f'Unsupported value: "{propagation}": supported values: "Foreground", "Background", '
                        '"Orphan"',
                    )
                ],
                "meta.k8s.io",
            )
        if grace is not None:
            try:
                grace = int(grace)
            except (TypeError, ValueError):
                raise errors.BadRequest(f'invalid gracePeriodSeconds "{grace}"') from None
        preconditions = body.get("preconditions") or {}
        return DeleteOptions(
            grace_period_seconds=grace,
            propagation_policy=propagation,
            uid=preconditions.get("uid"),
            resource_version=preconditions.get("resourceVersion"),
            dry_run=self._dry_run(request, body),
        )

    def _deleted(self, rt: ResourceType, obj: Obj, removed_now: bool) -> Any:
        if removed_now and rt is not PODS:
            md = obj["metadata"]
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": md["name"],
                    "group": rt.group,
                    "kind": rt.plural,
                    "uid": md.get("uid", ""),
                },
            }
        return obj

    async def _delete(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        options = await self._delete_options(request)
        obj, removed_now = await self.api.delete(rt, target.namespace, target.name, options)
        return self._respond(request, self._deleted(rt, obj, removed_now))

    async def _delete_collection(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        options = await self._delete_options(request)
        query = self._list_query(request, rt)
        deleted = []
        for obj in self._select(rt, target.namespace, query):
            md = obj["metadata"]
            try:
                gone, _ = await self.api.delete(rt, md.get("namespace", ""), md["name"], options)
            except errors.NotFound:
                continue
            deleted.append(gone)
        list_meta = {"resourceVersion": str(self.store.resource_version)}
        return self._respond(
            request,
            {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": list_meta, "items": deleted},
        )

    async def _subresource(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        sub = target.subresource
        if sub not in rt.subresources or not target.name:
            raise errors.NotFound(_NOT_FOUND, details={})
        api = self.api
        method = request.method
        if method == "GET" and sub == "log":
            return PlainTextResponse(self._pod_log(request, target))
        if method == "GET":
            return self._respond(request, api.get_subresource(rt, target.namespace, target.name, sub))
        self._check_write_params(request)
        dry_run = self._dry_run(request)
        if method == "PUT":
            body = codec.loads_body(await self._body(request), request.headers.get("content-type"))
            md = body.setdefault("metadata", {})
            if isinstance(md, dict) and target.name and not md.get("name"):
                md["name"] = target.name
            if rt.namespaced and isinstance(md, dict):
                md.setdefault("namespace", target.namespace)
            result = await api.update(
                rt, target.namespace, target.name, body, subresource=sub, dry_run=dry_run
            )
            return self._respond(request, result)
        if method == "PATCH":
            patch_type, patch = await self._decode_patch(request)
            result = await api.patch(
                rt, target.namespace, target.name, patch_type, patch, subresource=sub, dry_run=dry_run
            )
            return self._respond(request, result)
        if method == "POST":
            body = codec.loads_body(await self._body(request), request.headers.get("content-type"))
            result = await api.create_subresource(
                rt, target.namespace, target.name, sub, body, dry_run=dry_run
            )
            return self._respond(request, result, 201)
        raise errors.MethodNotAllowed(_NOT_ALLOWED)

    def _pod_log(self, request: Request, target: paths.Target) -> str:
        """pods/log: the kubelet model's log of a container when it keeps one, else empty text."""
        pod = self.store.must_get(PODS, target.namespace, target.name)
        main = [c.get("name", "") for c in pod.get("spec", {}).get("containers") or []]
        names = main + [c.get("name", "") for c in pod.get("spec", {}).get("initContainers") or []]
        container = request.query_params.get("container") or ""
        if not container:
            if len(main) != 1:
                choices = " ".join(main)
                raise errors.BadRequest(
                    f"a container name must be specified for pod {target.name}, choose one of: [{choices}]"
                )
            container = main[0]
        if container not in names:
            raise errors.BadRequest(f"container {container} is not valid for pod {target.name}")
        if not pod.get("spec", {}).get("nodeName"):
            raise errors.BadRequest(f"pod {target.name} does not have a host assigned")
        statuses = (pod.get("status", {}).get("containerStatuses") or []) + (
            pod.get("status", {}).get("initContainerStatuses") or []
        )
        state = next((cs.get("state") or {} for cs in statuses if cs.get("name") == container), {})
        if "running" not in state and "terminated" not in state:
            reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
            raise errors.BadRequest(
                f'container "{container}" in pod "{target.name}" is waiting to start: {reason}'
            )
        kubelet = self.cluster.services.get("kubelet")
        read_log = getattr(kubelet, "container_log", None)
        return str(read_log(pod, container)) if read_log is not None else ""

    # ---- watch --------------------------------------------------------------------------------
    async def _watch(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        q = request.query_params
        query = self._list_query(request, rt)
        if target.name:
            by_name = fields.compile_for(fields.parse(f"metadata.name={target.name}"), rt.key, rt.namespaced)
            inner = query.predicate
            predicate = by_name if inner is None else (lambda o: bool(by_name and by_name(o)) and inner(o))
        else:
            predicate = query.predicate
        wanted = codec.negotiate(request.headers.get("accept"))
        representation = ""
        if wanted.as_kind == "Table":
            representation = watching.table_representation(q.get("includeObject", "Metadata"))
        elif wanted.as_kind in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            representation = watching.PARTIAL
        bookmarks = q.get("allowWatchBookmarks") in _TRUE
        send_initial = q.get("sendInitialEvents") in _TRUE
        timeout_text = q.get("timeoutSeconds")
        try:
            timeout = float(timeout_text) if timeout_text else 0.0
        except ValueError:
            raise errors.BadRequest(f'invalid timeoutSeconds "{timeout_text}"') from None
        if timeout <= 0:  # as kube-apiserver: no timeout asked means a random one of 30 to 60 minutes
            timeout = random.uniform(1800, 3600)
        if send_initial and (q.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks):
            raise errors.Invalid(
                "ListOptions",
                "",
                [
                    (
                        "sendInitialEvents",
                        "FieldValueForbidden",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan and "
                        "allowWatchBookmarks to true",
                    )
                ],
                "meta.k8s.io",
            )
        watcher = watching.Watcher(rt, target.namespace, query.label, predicate, representation)
        now = self.cluster.clock.now()
        initial: list[bytes] = []
        rv_text = query.resource_version
        if send_initial or rv_text in ("", "0"):
            for obj in self._select(rt, target.namespace, query):
                if watcher.matches(obj):
                    initial.append(watching.encode_event("ADDED", rt, obj, now, representation))
            if send_initial:
                initial.append(
                    watching.bookmark_line(rt, self.store.resource_version, initial_events_end=True)
                )
        else:
            try:
                since = int(rv_text)
            except ValueError:
                raise errors.BadRequest(
                    f'resourceVersion: Invalid value: "{rv_text}": must be an integer'
                ) from None
            if since > self.store.resource_version:
                raise errors.Timeout(
                    f"Too large resource version: {since}, current: {self.store.resource_version}",
                    details={"retryAfterSeconds": 1},
                )
            try:
                history = self.store.events_since(since)
            except errors.Gone as gone:
                line = watching.error_line(gone.status())
                return StreamingResponse(iter([line]), media_type=codec.JSON)
            for event in history:
                if event.resource is not rt:
                    continue
                event_type = watching.WatchHub.translate(watcher, event.type, event.object, None)
                if event_type is not None:
                    initial.append(watching.encode_event(event_type, rt, event.object, now, representation))
        watcher.last_rv = self.store.resource_version
        self.hub.add(watcher)
        body = watching.stream(
            self.hub,
            watcher,
            initial,
            duration=timeout,
            bookmark_interval=self.settings.bookmark_interval if bookmarks else None,
        )
        return StreamingResponse(body, media_type=codec.JSON)

    # ---- metrics.k8s.io -------------------------------------------------------------------------
    async def _metrics(self, request: Request, rt: ResourceType, target: paths.Target) -> Response:
        if target.watch_prefix or request.query_params.get("watch") in _TRUE:
            raise errors.MethodNotAllowed(_NOT_ALLOWED)
        view = MetricsView(self.store, self.cluster.services.get("usage"))
        now = self.cluster.clock.now()
        if target.name:
            if rt.plural == "nodes":
                return self._respond(request, self._object_body_out(request, rt, view.node(target.name, now)))
            return self._respond(
                request, self._object_body_out(request, rt, view.pod(target.namespace, target.name, now))
            )
        query = self._list_query(request, rt)
        source_rt = NODES if rt.plural == "nodes" else PODS
        source_query = ListQuery(query.label, fields.EVERYTHING, None, 0, None, "")
        sources = self._select(source_rt, target.namespace, source_query)
        items = view.nodes(sources, now) if rt.plural == "nodes" else view.pods(sources, now)
        if query.predicate is not None:
            items = [i for i in items if query.predicate(i)]
        list_meta = {"resourceVersion": ""}
        return self._respond(request, self._list_body(request, rt, items, list_meta))
