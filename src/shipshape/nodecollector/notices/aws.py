"""AWS: EC2 instance metadata (IMDSv2) — `spot/instance-action`, `events/recommendations/rebalance` and
`events/maintenance/scheduled` (instance stop and retirement).

The parsers are pure. `Imds` is the HTTP client: a session token from `PUT /latest/api/token` (header
`X-aws-ec2-metadata-token-ttl-seconds`), sent as `X-aws-ec2-metadata-token` on every GET; a 401 (token
expired or unknown) gets a fresh token and one retry; 404 on an item means "no notice".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from shipshape.kube.clock import parse_time, rfc3339
from shipshape.nodecollector.notices.model import Kind, MetadataError, NodeNotice

CLOUD = "aws"
BASE_URL = "http://169.254.169.254"
TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
INSTANCE_ACTION = "spot/instance-action"
REBALANCE = "events/recommendations/rebalance"
SCHEDULED = "events/maintenance/scheduled"
# Scheduled events after which the instance is gone (reboots come back: no notice for them).
ENDING_CODES = {"instance-stop": "ScheduledStop", "instance-retirement": "ScheduledRetirement"}
FINISHED_STATES = ("completed", "canceled")
TOKEN_TTL_SECONDS = 21600
# A token is renewed this long before it expires (as aws-node-termination-handler does).
TOKEN_REFRESH_MARGIN = 60.0
ACTIONS = ("terminate", "stop", "hibernate")


def _id(*parts: str) -> str:
    return hashlib.sha256(":".join(parts).encode()).hexdigest()[:16]


def parse_instance_action(body: str) -> NodeNotice | None:
    """`{"action": "terminate", "time": "2026-11-25T10:17:00Z"}` as a notice; None for anything else."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("action") not in ACTIONS:
        return None
    try:
        deadline = parse_time(str(data.get("time")))
    except (TypeError, ValueError):
        return None
    action = str(data["action"])
    return NodeNotice(
        cloud=CLOUD,
        kind=Kind.INTERRUPTION,
        event_id=f"aws-spot-{_id(action, rfc3339(deadline))}",
        reason="SpotInterruption",
        detail=f"EC2 spot instance-action {action} at {rfc3339(deadline)}",
        deadline=deadline,
    )


def parse_rebalance(body: str) -> NodeNotice | None:
    """`{"noticeTime": "2026-11-25T10:09:00Z"}` as a rebalance recommendation; None otherwise."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    try:
        issued = parse_time(str(data.get("noticeTime")))
    except (TypeError, ValueError):
        return None
    return NodeNotice(
        cloud=CLOUD,
        kind=Kind.REBALANCE,
        event_id=f"aws-rebalance-{_id(rfc3339(issued))}",
        reason="RebalanceRecommendation",
        detail=f"EC2 rebalance recommendation at {rfc3339(issued)}",
        issued=issued,
    )


def parse_scheduled_events(body: str) -> list[NodeNotice]:
    """`events/maintenance/scheduled`: the `instance-stop` and `instance-retirement` events not
    completed or canceled, deadline `NotBefore` (`3 Dec 2026 09:00:00 GMT`)."""
    try:
        events = json.loads(body)
    except ValueError:
        return []
    found: list[NodeNotice] = []
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict) or event.get("Code") not in ENDING_CODES:
            continue
        if str(event.get("State", "")).lower() in FINISHED_STATES:
            continue
        try:
            when = datetime.strptime(str(event.get("NotBefore")), "%d %b %Y %H:%M:%S GMT")
        except ValueError:
            continue
        deadline = when.replace(tzinfo=UTC).timestamp()
        code = str(event["Code"])
        found.append(
            NodeNotice(
                cloud=CLOUD,
                kind=Kind.INTERRUPTION,
                event_id=f"aws-scheduled-{_id(str(event.get('EventId')), code)}",
                reason=ENDING_CODES[code],
                detail=f"EC2 scheduled event {event.get('EventId')} ({code}) not before {rfc3339(deadline)}",
                deadline=deadline,
            )
        )
    return found


class Imds:
    """IMDSv2 at `base` (http://169.254.169.254 on EC2); `monotonic` times the token's life."""

    cloud = CLOUD
    long_polls = False

    def __init__(
        self,
        http: httpx.Client,
        base: str = BASE_URL,
        *,
        ttl: int = TOKEN_TTL_SECONDS,
        monotonic: Callable[[], float],
    ) -> None:
        self.http = http
        self.base = base.rstrip("/")
        self.ttl = ttl
        self.monotonic = monotonic
        self._token: str | None = None
        self._expires = 0.0

    def token(self) -> str:
        if self._token is not None and self.monotonic() < self._expires - TOKEN_REFRESH_MARGIN:
            return self._token
        try:
            response = self.http.put(self.base + TOKEN_PATH, headers={TTL_HEADER: str(self.ttl)})
        except httpx.HTTPError as error:
            raise MetadataError(f"IMDS token request to {self.base} failed: {error}") from error
        if response.status_code != 200 or not response.text:
            raise MetadataError(f"IMDS refused a session token: HTTP {response.status_code}")
        granted = response.headers.get(TTL_HEADER, "")
        ttl = int(granted) if granted.isdigit() else self.ttl
        self._token = response.text
        self._expires = self.monotonic() + ttl
        return self._token

    def get(self, item: str) -> str | None:
        """The text of `/latest/meta-data/<item>`, None on 404."""
        url = f"{self.base}/latest/meta-data/{item}"
        for attempt in (1, 2):
            try:
                response = self.http.get(url, headers={TOKEN_HEADER: self.token()})
            except httpx.HTTPError as error:
                raise MetadataError(f"IMDS {item} unreachable: {error}") from error
            if response.status_code == 401 and attempt == 1:
                self._token = None  # expired or unknown: a new token, one retry
                continue
            if response.status_code == 404:
                return None
            if response.status_code != 200:
                raise MetadataError(f"IMDS {item}: HTTP {response.status_code}")
            return response.text
        raise MetadataError(f"IMDS {item}: refused the session token twice (HTTP 401)")

    def poll(self, clock: Callable[[], float], wait_seconds: float = 0.0) -> list[NodeNotice]:
        found: list[NodeNotice] = []
        action = self.get(INSTANCE_ACTION)
        notice = parse_instance_action(action) if action is not None else None
        if notice is not None:
            found.append(notice)
        rebalance = self.get(REBALANCE)
        recommendation = parse_rebalance(rebalance) if rebalance is not None else None
        if recommendation is not None:
            found.append(recommendation)
        scheduled = self.get(SCHEDULED)
        if scheduled is not None:
            found.extend(parse_scheduled_events(scheduled))
        return found

    def published(self, notice: NodeNotice) -> None:
        """Nothing to acknowledge on EC2."""

    def probe(self) -> bool:
        """Whether an IMDSv2 answers at `base` (a session token is granted)."""
        try:
            self.token()
        except MetadataError:
            return False
        return True
