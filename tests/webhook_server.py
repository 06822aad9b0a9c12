"""A tiny HTTPS admission webhook server for tests, with a throwaway CA made by `cryptography`."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import json
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from shipshape.kube import certs

Obj = dict[str, Any]
Handler = Callable[[Obj], "Obj | Awaitable[Obj]"]


@dataclass(frozen=True)
class Certificates:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()


def make_certificates(dns_names: list[str]) -> Certificates:
    """A CA and a server certificate for 127.0.0.1 and `dns_names`, signed by it."""
    bundle = certs.generate_certificates(dns_names, ["127.0.0.1"], now=time.time(), validity_days=1)
    return Certificates(bundle.ca_pem, bundle.cert_pem, bundle.key_pem)


@dataclass
class WebhookServer:
    """Answers AdmissionReviews on 127.0.0.1 with `handlers[path](request) -> response fields`."""

    certificates: Certificates
    workdir: Path
    handlers: dict[str, Handler] = field(default_factory=dict)
    received: list[tuple[str, Obj]] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def calls(self, path: str) -> list[Obj]:
        return [review["request"] for p, review in self.received if p == path]

    async def __aenter__(self) -> WebhookServer:
        cert_file, key_file = self.workdir / "tls.crt", self.workdir / "tls.key"
        cert_file.write_bytes(self.certificates.cert_pem)
        key_file.write_bytes(self.certificates.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_file, key_file)
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            request_line = (await reader.readline()).decode()
            if not request_line:
                return  # a client that only looked at the certificate
            headers: dict[str, str] = {}
            while True:
                line = (await reader.readline()).decode()
                if line in ("\r\n", "\n", ""):
                    break
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            path = request_line.split(" ")[1].split("?")[0]
            review = json.loads(body)
            self.received.append((path, review))
            result = self.handlers[path](review["request"])
            if inspect.isawaitable(result):
                result = await result
            payload = json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {"uid": review["request"]["uid"], **result},
                }
            ).encode()
            head = (
                f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + payload)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def json_patch(operations: list[Obj]) -> Obj:
    """The response fields of a mutating webhook that applies `operations`."""
    return {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(operations).encode()).decode(),
    }
