"""Sending pushes to the backend: compressed as spooled (zstd), an idempotency key per push, and a
verdict per answer."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import httpx

from shipshape.contracts import compression

LOG = logging.getLogger("shipshape.agent.pusher")
PUSH_PATH = "/api/v1/pushes"


class Outcome(Enum):
    ACCEPTED = "accepted"  # 202 (a replay of an accepted push too)
    RETRY = "retry"  # backend unreachable, 5xx, 408, 429: keep it and try later
    REJECTED = "rejected"  # 4xx: this push will never be accepted; drop it and send a full snapshot


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: Outcome
    detail: str


class Pusher:
    def __init__(
        self, backend_url: str, token: str, timeout: float = 30.0, verify: bool | str = True
    ) -> None:
        self.client = httpx.Client(
            base_url=backend_url.rstrip("/"),
            timeout=timeout,
            verify=verify,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "shipshape-agent"},
        )
        # False once the backend (or a proxy before it) refused a zstd body with 415: a backend older
        # than this agent takes gzip only. Pushes are then re-encoded as gzip before they are sent.
        self.takes_zstd = True

    def send(
        self,
        sequence: int,
        compressed: bytes | Iterable[bytes],
        key: str | None = None,
        encoding: str = compression.ZSTD,
    ) -> Answer:
        """POST one push (bytes compressed with `encoding`, or their pieces: then streamed, chunked);
        its idempotency key is `seq-<sequence>` unless `key` names another (a usage report's is its
        bucket's)."""
        if encoding == compression.ZSTD and not self.takes_zstd:
            body = b"".join([compressed] if isinstance(compressed, bytes) else compressed)
            compressed, encoding = gzip.compress(compression.inflate(body), compresslevel=5), compression.GZIP
        try:
            response = self.client.post(
                PUSH_PATH,
                content=compressed,
                headers={
                    "Content-Encoding": encoding,
                    "Content-Type": "application/json",
                    "Idempotency-Key": key or f"seq-{sequence}",
                },
            )
        except httpx.HTTPError as error:
            return Answer(Outcome.RETRY, f"backend unreachable: {error}")
        status = response.status_code
        if status == 202:
            return Answer(Outcome.ACCEPTED, "duplicate" if response.json().get("duplicate") else "accepted")
        detail = _detail(response)
        if status == 415 and encoding == compression.ZSTD:
            # Not this push's fault: kept, and sent again in gzip.
            self.takes_zstd = False
            LOG.warning("the backend takes no zstd (%s): pushes go in gzip from now on", detail)
            return Answer(Outcome.RETRY, f"{status} {detail}; sending gzip from now on")
        if status in (408, 429) or status >= 500 or status in (401, 403):
            # 401/403: a token being rotated or a backend misconfigured; keep the data and retry.
            return Answer(Outcome.RETRY, f"{status} {detail}")
        return Answer(Outcome.REJECTED, f"{status} {detail}")

    def close(self) -> None:
        self.client.close()


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    return str(body.get("detail", body))[:300] if isinstance(body, dict) else str(body)[:300]
