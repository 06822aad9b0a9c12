"""The cloud event queue over HTTP: SQS's JSON protocol (`X-Amz-Target: AmazonSQS.<Action>`).

An edge module (httpx). The emulator serves its queue behind the API server
(`/emulator/v1/queue`), so a queue URL given as a path is reached through the API server with the
kubeconfig's server address, CA and credentials. Failures become `OpsError`.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx
from kubernetes import client as k8s

from shipshape.controller.notices import QueueMessage
from shipshape.controller.ops import OpsError

SQS_TARGET = "AmazonSQS."
CONTENT_TYPE = "application/x-amz-json-1.0"


class SqsQueue:
    """`notices.EventQueue` over an httpx client."""

    def __init__(self, http: httpx.Client, url: str) -> None:
        self.http = http
        self.url = url

    def close(self) -> None:
        self.http.close()

    def _call(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self.http.post(
                self.url,
                content=json.dumps({"QueueUrl": self.url, **body}),
                headers={"X-Amz-Target": SQS_TARGET + action, "Content-Type": CONTENT_TYPE},
            )
        except httpx.HTTPError as error:
            raise OpsError(f"event queue unreachable: {error}") from error
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400 or not isinstance(data, dict):
            message = data.get("message") if isinstance(data, dict) else None
            raise OpsError(
                f"{action}: {message or response.status_code}",
                status=response.status_code,
                retryable=response.status_code >= 500 or response.status_code == 429,
            )
        return data

    def receive(self, max_messages: int, visibility_timeout: float) -> list[QueueMessage]:
        data = self._call(
            "ReceiveMessage",
            {
                "MaxNumberOfMessages": max_messages,
                "VisibilityTimeout": visibility_timeout,
                "WaitTimeSeconds": 0,
            },
        )
        return [
            QueueMessage(str(m.get("MessageId")), str(m.get("ReceiptHandle")), str(m.get("Body") or ""))
            for m in data.get("Messages") or []
            if isinstance(m, dict) and m.get("ReceiptHandle")
        ]

    def delete(self, receipt: str) -> None:
        self._call("DeleteMessage", {"ReceiptHandle": receipt})


def queue_for(api_client: k8s.ApiClient, url: str, timeout: float = 5.0) -> SqsQueue:
    """The queue at `url`; a path goes through the API server with the client's own credentials."""
    if not url.startswith("/"):
        return SqsQueue(httpx.Client(timeout=timeout), url)
    conf: Any = api_client.configuration
    verify: ssl.SSLContext | bool = bool(conf.verify_ssl)
    if conf.verify_ssl:
        context = ssl.create_default_context(cafile=conf.ssl_ca_cert or None)
        if conf.cert_file:
            context.load_cert_chain(conf.cert_file, conf.key_file)
        verify = context
    headers: dict[str, str] = {}
    for setting in (conf.auth_settings() or {}).values():  # the bearer token, as the client sends it
        if setting.get("in") == "header" and setting.get("value"):
            headers[str(setting["key"]).title()] = str(setting["value"])
    http = httpx.Client(base_url=str(conf.host), verify=verify, headers=headers, timeout=timeout)
    return SqsQueue(http, url)
