"""API errors as Kubernetes reports them: a `Status` body with a reason and an HTTP code.

Every layer raises these; the HTTP layer turns them into responses in one place.
"""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """An error the Kubernetes API would answer with a `Status` object."""

    code = 500
    reason = "InternalError"
    retryable = False

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(kind: str | None, name: str | None, group: str = "") -> dict[str, Any] | None:
    if kind is None:
        return None
    details: dict[str, Any] = {"kind": kind}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class Unauthorized(ApiError):
    code = 401
    reason = "Unauthorized"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"


class NotFound(ApiError):
    code = 404
    reason = "NotFound"

    @classmethod
    def of(cls, plural: str, name: str, group: str = "") -> NotFound:
        qualified = f"{plural}.{group}" if group else plural
        return cls(f'{qualified} "{name}" not found', details=_details(plural, name, group))


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"

    @classmethod
    def of(cls, plural: str, name: str, group: str = "") -> AlreadyExists:
        qualified = f"{plural}.{group}" if group else plural
        return cls(f'{qualified} "{name}" already exists', details=_details(plural, name, group))


class Conflict(ApiError):
    code = 409
    reason = "Conflict"
    retryable = True

    @classmethod
    def of(cls, plural: str, name: str, group: str = "") -> Conflict:
        qualified = f"{plural}.{group}" if group else plural
        return cls(
            f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
            details=_details(plural, name, group),
        )


class Gone(ApiError):
    code = 410
    reason = "Expired"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"

    def __init__(self, kind: str, name: str, causes: list[tuple[str, str, str]], group: str = "") -> None:
        """`causes` are (field, reason type, message), e.g. ("spec.replicas", "FieldValueInvalid", ...)."""
        parts = [f"{field}: {message}" for field, _, message in causes]
        text = parts[0] if len(parts) == 1 else f"[{', '.join(parts)}]"  # as upstream's ToAggregate()
        qualified = f"{kind}.{group}" if group else kind
        super().__init__(f'{qualified} "{name}" is invalid: {text}')
        details = _details(kind, name, group) or {}
        details["causes"] = [
            {"reason": reason, "message": message, "field": field} for field, reason, message in causes
        ]
        self.details = details
        self.causes = causes


class RequestEntityTooLarge(ApiError):
    code = 413
    reason = "RequestEntityTooLarge"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class TooManyRequests(ApiError):
    code = 429
    reason = "TooManyRequests"
    retryable = True


class InternalError(ApiError):
    code = 500
    reason = "InternalError"


class Unclassified(ApiError):
    """An error the API server did not classify (upstream's `StatusReasonUnknown`): 500, no reason.

    kube-apiserver answers so when storage refuses a request with a plain error, e.g. a create that
    carries a resourceVersion."""

    code = 500
    reason = ""

    def status(self) -> dict[str, Any]:
        body = super().status()
        del body["reason"]  # omitted when empty, as in the Status upstream serialises
        return body


class ServiceUnavailable(ApiError):
    code = 503
    reason = "ServiceUnavailable"
    retryable = True


class Timeout(ApiError):
    code = 504
    reason = "Timeout"
    retryable = True


class Unreachable(ServiceUnavailable):
    """No answer at all: the API server could not be reached (refused, DNS, TLS, a timeout).

    Raised by clients, never answered by a server; retryable like a 503."""

    reason = "Unreachable"


# Classes by the `reason` of a Status body, then by HTTP code (the reason tells 409s apart).
_BY_REASON: dict[str, type[ApiError]] = {
    cls.reason: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        AlreadyExists,
        Conflict,
        Gone,
        RequestEntityTooLarge,
        UnsupportedMediaType,
        TooManyRequests,
        InternalError,
        ServiceUnavailable,
        Timeout,
    )
}
_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    413: RequestEntityTooLarge,
    415: UnsupportedMediaType,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
    504: Timeout,
}


def from_status(code: int | None, body: Any = None) -> ApiError:
    """The error an API server's answer stands for: `code` is the HTTP status, `body` the response
    (a `Status` object as JSON text, bytes or a dict; anything else is ignored).

    The Status's `reason` picks the class where it names one (a 409 is `AlreadyExists` on a create
    and `Conflict` on a stale update), then the HTTP code; an unknown code keeps its number (`code`
    on the instance) and is retryable when it is 5xx."""
    status: Any = body
    if isinstance(status, bytes | str):
        try:
            status = json.loads(status) if status else None
        except ValueError:
            status = None
    if not isinstance(status, dict):
        status = {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "") or (f"HTTP {code}" if code else "no status")
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    if reason == "Invalid" or code == 422:
        error: ApiError = ApiError(message, details=details)
        error.code, error.reason = 422, "Invalid"
        return error
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code or 0)
    if cls is not None and (code is None or cls.code == code):
        return cls(message, details=details)
    error = ApiError(message, details=details)
    error.code = code or 500
    error.reason = reason
    error.retryable = error.code >= 500
    return error
