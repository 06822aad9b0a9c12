"""AWS Signature Version 4, checked the way an AWS endpoint checks it (pure).

`verify` rebuilds the canonical request from what arrived (method, path, query, the signed headers,
the body's SHA-256), derives the signing key from the secret of the access key named in the
`Credential` scope, and compares signatures. Errors name what is wrong, as AWS's do.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qsl, quote

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW_SECONDS = 15 * 60
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+),\s*SignedHeaders=(?P<signed>[^,\s]+),"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


class SignatureError(ValueError):
    """A request whose signature is missing or wrong; `code` is AWS's error code for it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Scope:
    access_key: str
    date: str
    region: str
    service: str


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signing_key(secret: str, scope: Scope) -> bytes:
    key = _hmac(("AWS4" + secret).encode(), scope.date)
    key = _hmac(key, scope.region)
    key = _hmac(key, scope.service)
    return _hmac(key, "aws4_request")


def canonical_query(query: str) -> str:
    pairs = sorted(
        (quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in parse_qsl(query, keep_blank_values=True)
    )
    return "&".join(f"{k}={v}" for k, v in pairs)


def verify(
    *,
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    secrets: Mapping[str, str],
    service: str,
    now: float,
) -> Scope:
    """The request's credential scope when its SigV4 signature is right; `SignatureError` otherwise.
    `headers` are matched case-insensitively (a Starlette `Headers` or a dict with lowercase keys)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    authorization = lowered.get("authorization", "")
    if not authorization:
        raise SignatureError("MissingAuthenticationToken", "Request is missing Authentication Token")
    match = _AUTH.match(authorization.strip())
    if match is None:
        raise SignatureError(
            "IncompleteSignature",
            f"Authorization header requires '{ALGORITHM} Credential=..., SignedHeaders=..., Signature=...'",
        )
    parts = match["credential"].split("/")
    if len(parts) != 5 or parts[4] != "aws4_request":
        raise SignatureError("IncompleteSignature", f"malformed credential scope {match['credential']!r}")
    scope = Scope(parts[0], parts[1], parts[2], parts[3])
    if scope.service != service:
        raise SignatureError("SignatureDoesNotMatch", f"credential should be scoped to service '{service}'")
    secret = secrets.get(scope.access_key)
    if secret is None:
        raise SignatureError("InvalidClientTokenId", "The security token included in the request is invalid.")
    amz_date = lowered.get("x-amz-date", "")
    try:
        stamp = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise SignatureError("IncompleteSignature", "X-Amz-Date is missing or malformed") from None
    if not amz_date.startswith(scope.date):
        raise SignatureError("SignatureDoesNotMatch", "X-Amz-Date does not match the credential scope date")
    if abs(stamp - now) > MAX_SKEW_SECONDS:
        raise SignatureError("SignatureDoesNotMatch", "Signature expired: the request time is too skewed")
    signed = match["signature"]
    names = match["signed"].split(";")
    if "host" not in names:
        raise SignatureError("SignatureDoesNotMatch", "the host header must be signed")
    canonical_headers = "".join(f"{name}:{' '.join(lowered.get(name, '').split())}\n" for name in names)
    payload = lowered.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
    canonical = "\n".join(
        [
            method.upper(),
            quote(path or "/", safe="/-_.~"),
            canonical_query(query),
            canonical_headers,
            match["signed"],
            payload,
        ]
    )
    string_to_sign = "\n".join(
        [
            ALGORITHM,
            amz_date,
            f"{scope.date}/{scope.region}/{scope.service}/aws4_request",
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    expected = hmac.new(signing_key(secret, scope), string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signed):
        raise SignatureError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        )
    return scope
