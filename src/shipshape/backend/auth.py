"""Credentials: user API keys (`ssk_…`) and agent tokens (`sst_…`, one cluster each).

A credential is `<kind>_<id>_<secret>`: the id finds the row, the secret is checked against its
SHA-256 in constant time. The secret is 32 random bytes, so a fast hash is enough (nothing to
brute-force), and nothing stored can be used to authenticate. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum


class CredentialKind(StrEnum):
    USER_KEY = "ssk"
    AGENT_TOKEN = "sst"


_CREDENTIAL = re.compile(r"^(ssk|sst)_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")


@dataclass(frozen=True, slots=True)
class NewCredential:
    kind: CredentialKind
    id: str
    secret_sha256: str
    # Shown once, to the one who asked for it; never stored or logged.
    plaintext: str


@dataclass(frozen=True, slots=True)
class PresentedCredential:
    kind: CredentialKind
    id: str
    secret: str


def issue(kind: CredentialKind) -> NewCredential:
    ident = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return NewCredential(kind, ident, digest(secret), f"{kind.value}_{ident}_{secret}")


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse(text: str) -> PresentedCredential | None:
    """The credential in `text` (a bearer token), or None when it is not one of ours."""
    match = _CREDENTIAL.match(text.strip())
    if match is None:
        return None
    return PresentedCredential(CredentialKind(match.group(1)), match.group(2), match.group(3))


def matches(presented: PresentedCredential, secret_sha256: str) -> bool:
    return hmac.compare_digest(digest(presented.secret), secret_sha256)


def bearer(header: str | None) -> PresentedCredential | None:
    """The credential of an `Authorization: Bearer …` header."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value:
        return None
    return parse(value)
