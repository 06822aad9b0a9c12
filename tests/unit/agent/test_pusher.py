"""The agent's pusher against a backend older than it: one that takes gzip only (415 for zstd)."""

from __future__ import annotations

import gzip

import httpx
import orjson
import pytest

from shipshape.agent.pusher import Outcome, Pusher
from shipshape.contracts import compression

pytestmark = pytest.mark.unit

BODY = orjson.dumps({"schema": "shipshape.dev/delta/v1", "sequence": 2, "changes": []})


def gzip_only_backend(received: list[tuple[str, bytes]]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        encoding = request.headers.get("content-encoding", "identity")
        received.append((encoding, request.read()))
        if encoding != "gzip":
            return httpx.Response(415, json={"detail": f"unsupported Content-Encoding {encoding!r}"})
        return httpx.Response(202, json={"push_id": len(received), "duplicate": False})

    return httpx.MockTransport(answer)


def test_a_zstd_push_refused_with_415_is_kept_and_sent_again_in_gzip() -> None:
    received: list[tuple[str, bytes]] = []
    pusher = Pusher("http://backend.test", "token")
    pusher.client = httpx.Client(base_url="http://backend.test", transport=gzip_only_backend(received))
    zstd = compression.compress(BODY)

    first = pusher.send(2, zstd)
    assert first.outcome is Outcome.RETRY  # kept in the spool, not dropped as rejected
    second = pusher.send(2, iter([zstd[:7], zstd[7:]]))  # the spool's pieces
    assert second.outcome is Outcome.ACCEPTED
    assert [encoding for encoding, _ in received] == ["zstd", "gzip"]
    assert gzip.decompress(received[1][1]) == BODY
    # Later pushes go in gzip at once.
    assert pusher.send(3, zstd).outcome is Outcome.ACCEPTED
    assert [encoding for encoding, _ in received][-1] == "gzip"


def test_a_415_for_gzip_is_a_rejection() -> None:
    received: list[tuple[str, bytes]] = []
    pusher = Pusher("http://backend.test", "token")
    pusher.client = httpx.Client(base_url="http://backend.test", transport=gzip_only_backend(received))
    assert pusher.send(2, BODY, encoding=compression.IDENTITY).outcome is Outcome.REJECTED
