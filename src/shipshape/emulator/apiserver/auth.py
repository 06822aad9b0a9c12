"""Bearer-token authentication as an ASGI middleware (cheap: no per-request objects).

As in kube-apiserver: a request with a wrong token is refused (401) everywhere; one without a
token is anonymous, which may only read the health and version endpoints.
"""

from __future__ import annotations

import hmac

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from shipshape.kube import errors

PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version", "/version/"})


def _unauthorized_body() -> bytes:
    return orjson.dumps(errors.Unauthorized("Unauthorized").status())


class BearerAuth:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()
        self._body = _unauthorized_body()

    def authenticated(self, authorization: bytes | None, path: str) -> bool:
        if authorization is None:
            return path in PUBLIC_PATHS
        scheme, _, token = authorization.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        authorization = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                authorization = value
                break
        if self.authenticated(authorization, scope["path"]):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(self._body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": self._body})
