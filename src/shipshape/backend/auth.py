"""Credentials: user API keys (`ssk_…`) and agent tokens (`sst_…`, one cluster each).

A credential is `<kind>_<id>_<secret>`: the id finds the row, the secret is checked against its
SHA-256 in constant time. The secret is 32 random bytes, so a fast hash is enough (nothing to
brute-force), and nothing stored can be used to authenticate. Pure: no I/O (`Verified` is a cache in
memory).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

P = TypeVar("P")


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


class Verified(Generic[P]):
    """Credentials this process verified lately: id → (the secret's SHA-256, what it authenticated as).

    A credential presented again with the same secret is known without a database look-up, for up to
    `ttl` seconds. Only for callers that check what can change after it was verified (revocation) in
    the statement that acts on it anyway, as the accept of a push does: an entry says the secret was
    right, never that the credential is still live. At most `size` entries (the oldest go first).
    """

    def __init__(
        self, ttl: float = 300.0, size: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.size = size
        self.clock = clock
        self._entries: dict[str, tuple[str, P, float]] = {}
        self._lock = threading.Lock()

    def get(self, presented: PresentedCredential) -> P | None:
        entry = self._entries.get(presented.id)
        if entry is None:
            return None
        secret_sha256, principal, until = entry
        if until < self.clock() or not matches(presented, secret_sha256):
            return None
        return principal

    def put(self, presented: PresentedCredential, principal: P) -> None:
        with self._lock:
            self._entries.pop(presented.id, None)
            while len(self._entries) >= self.size:
                del self._entries[next(iter(self._entries))]
            self._entries[presented.id] = (digest(presented.secret), principal, self.clock() + self.ttl)

    def forget(self, credential_id: str) -> None:
        with self._lock:
            self._entries.pop(credential_id, None)
