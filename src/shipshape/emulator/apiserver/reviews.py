"""Self-subject reviews: `kubectl auth can-i` and `kubectl auth whoami` (and tools like k9s) ask them.

The emulator has one user, the token holder, in `system:masters`: every access review answers
allowed. The reviews are computed per request and never stored, as upstream's.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shipshape.emulator.api import SYSTEM
from shipshape.emulator.apiserver import codec
from shipshape.kube import errors

# (group, version, plural, kind) of the review types, for discovery and routing.
REVIEWS = (
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
    ("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview"),
)


def _status(kind: str) -> dict[str, Any]:
    if kind == "SelfSubjectAccessReview":
        return {"allowed": True}
    if kind == "SelfSubjectRulesReview":
        return {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
    return {"userInfo": {"username": SYSTEM.username, "groups": list(SYSTEM.groups)}}


def review(group: str, version: str, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """The answered review for a request body."""
    api_version = f"{group}/{version}"
    if body.get("kind") not in (None, kind) or body.get("apiVersion") not in (None, api_version):
        raise errors.BadRequest(f"expected a {kind} of {api_version}")
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    out: dict[str, Any] = {"kind": kind, "apiVersion": api_version, "metadata": metadata}
    if "spec" in body:
        out["spec"] = body["spec"]
    out["status"] = _status(kind)
    return out


def routes(max_body_bytes: int) -> list[Route]:
    def endpoint(group: str, version: str, kind: str) -> Any:
        async def create(request: Request) -> Response:
            try:
                length = request.headers.get("content-length", "0")
                if not length.isdigit() or int(length) > max_body_bytes:
                    raise errors.RequestEntityTooLarge(f"Request entity too large: limit is {max_body_bytes}")
                raw = await request.body()
                body = codec.loads_body(raw, request.headers.get("content-type"))
                answer = review(group, version, kind, body)
            except errors.ApiError as exc:
                return Response(codec.dumps(exc.status()), status_code=exc.code, media_type=codec.JSON)
            return Response(codec.dumps(answer), status_code=201, media_type=codec.JSON)

        return create

    return [
        Route(f"/apis/{group}/{version}/{plural}", endpoint(group, version, kind), methods=["POST"])
        for group, version, plural, kind in REVIEWS
    ]
