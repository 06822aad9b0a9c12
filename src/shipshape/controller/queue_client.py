"""The cloud event queue through the AWS SDK (boto3): an EventBridge → SQS queue as `notices.EventQueue`.

The controller's only module that imports boto3. Requests are signed with SigV4 from the SDK's default
credential chain: environment variables, the shared config files, a web identity token (IRSA on EKS:
`AWS_ROLE_ARN` + `AWS_WEB_IDENTITY_TOKEN_FILE`, set by the pod identity webhook), EKS Pod Identity /
container credentials, then the instance profile. The region comes from the queue URL
(`https://sqs.<region>.amazonaws.com/<account>/<name>`); a URL on another host (an SQS-compatible
endpoint: the emulator's, a test server) is used as the endpoint, with the configured region (or the
SDK's, or us-east-1).

Long polling: a receiver thread waits on `ReceiveMessage` (`WaitTimeSeconds`) and keeps what arrives
for the responder, whose `receive` never blocks its loop. A message is deleted through `delete` with
its receipt handle, once the responder is done with it. SDK errors become `OpsError`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from shipshape.controller.notices import QueueMessage
from shipshape.controller.ops import OpsError

LOG = logging.getLogger("shipshape.controller.queue_client")
DEFAULT_REGION = "us-east-1"
MAX_MESSAGES = 10
RETRYABLE_CODES = ("Throttling", "ThrottlingException", "RequestThrottled", "ServiceUnavailable")


def region_of(url: str) -> str | None:
    """The region an AWS queue URL names: `sqs.<region>.amazonaws.com` (or `.com.cn`), or the legacy
    `<region>.queue.amazonaws.com`; None for another host."""
    host = (urlsplit(url).hostname or "").lower()
    labels = host.split(".")
    if not (host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn")):
        return None
    if len(labels) >= 4 and labels[0] == "sqs":
        return labels[1]
    if len(labels) >= 4 and labels[1] == "queue":
        return labels[0]
    return None


def endpoint_of(url: str) -> str | None:
    """Where to send requests for a queue URL: None (the SDK resolves it) for AWS, else its origin."""
    if region_of(url) is not None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OpsError(f"the notice queue URL {url!r} is not an http(s) URL", retryable=False)
    return f"{parts.scheme}://{parts.netloc}"


def _ops_error(action: str, error: Exception) -> OpsError:
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0) or None
        retryable = status is None or status >= 500 or status == 429 or code in RETRYABLE_CODES
        return OpsError(f"SQS {action}: {code}: {error}", status=status, retryable=retryable)
    return OpsError(f"SQS {action}: {error}")


class SqsQueue:
    """`notices.EventQueue` over an SQS client; `start()` begins the long-polling receiver."""

    def __init__(
        self, sqs: Any, url: str, *, visibility_seconds: float = 30.0, wait_seconds: int = 20
    ) -> None:
        self.sqs = sqs
        self.url = url
        self.visibility_seconds = visibility_seconds
        self.wait_seconds = wait_seconds
        self._received: deque[QueueMessage] = deque()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: OpsError | None = None

    def fetch(self, max_messages: int, visibility_timeout: float, wait_seconds: int) -> list[QueueMessage]:
        """One ReceiveMessage call (blocks up to `wait_seconds` while the queue is empty)."""
        try:
            answer = self.sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=max(1, min(MAX_MESSAGES, max_messages)),
                VisibilityTimeout=round(visibility_timeout),
                WaitTimeSeconds=wait_seconds,
                MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
            )
        except (BotoCoreError, ClientError) as error:
            raise _ops_error("ReceiveMessage", error) from error
        return [
            QueueMessage(str(m.get("MessageId")), str(m.get("ReceiptHandle")), str(m.get("Body") or ""))
            for m in answer.get("Messages") or []
            if isinstance(m, dict) and m.get("ReceiptHandle")
        ]

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._pump, name="notice-queue", daemon=True)
            self._thread.start()

    def _pump(self) -> None:
        while not self._stopped.is_set():
            try:
                batch = self.fetch(MAX_MESSAGES, self.visibility_seconds, self.wait_seconds)
            except OpsError as error:
                with self._lock:
                    self._error = error
                self._stopped.wait(min(5.0, max(1.0, float(self.wait_seconds))))
                continue
            with self._lock:
                self._error = None
                self._received.extend(batch)

    def receive(self, max_messages: int, visibility_timeout: float) -> list[QueueMessage]:
        """Without the receiver thread: one short poll. With it: what it has received (never blocks);
        the error of its last call, once, when it has nothing."""
        if self._thread is None:
            return self.fetch(max_messages, visibility_timeout, 0)
        with self._lock:
            out = [self._received.popleft() for _ in range(min(max_messages, len(self._received)))]
            error, self._error = (self._error, None) if not out else (None, self._error)
        if error is not None:
            raise error
        return out

    def delete(self, receipt: str) -> None:
        try:
            self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=receipt)
        except (BotoCoreError, ClientError) as error:
            raise _ops_error("DeleteMessage", error) from error

    def close(self) -> None:
        """Stop receiving (a call in flight ends by itself within `wait_seconds`; what it then
        receives becomes visible again after the visibility timeout)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=0.2)


def sqs_client(url: str, region: str | None = None, wait_seconds: int = 20) -> Any:
    """An SQS client for the queue at `url` from the SDK's default credential chain."""
    session = boto3.session.Session()
    chosen = region_of(url) or region or session.region_name or DEFAULT_REGION
    config = Config(
        connect_timeout=5,
        read_timeout=wait_seconds + 10,  # a long poll holds the response up to wait_seconds
        retries={"mode": "standard", "max_attempts": 3},
    )
    try:
        return session.client("sqs", region_name=chosen, endpoint_url=endpoint_of(url), config=config)
    except BotoCoreError as error:
        raise OpsError(f"cannot make an SQS client: {error}", retryable=False) from error


def queue_for(
    url: str,
    *,
    region: str | None = None,
    visibility_seconds: float = 30.0,
    wait_seconds: int = 20,
    start: bool = True,
) -> SqsQueue:
    """The queue at `url`, its long-polling receiver started unless `start` is False."""
    queue = SqsQueue(
        sqs_client(url, region, wait_seconds),
        url,
        visibility_seconds=visibility_seconds,
        wait_seconds=wait_seconds,
    )
    if start:
        queue.start()
    return queue
