"""Azure: the Instance Metadata Service's Scheduled Events — `Preempt` (Spot eviction) and `Terminate`.

`GET /metadata/scheduledevents?api-version=2020-07-01` with `Metadata: true` (400 without) answers
`{"DocumentIncarnation": n, "Events": [...]}`. Events are delivered to every VM of a scale set's
placement group, so only those whose `Resources` name this VM (its name from
`/metadata/instance/compute/name`) count. `NotBefore` is an RFC 1123 time (blank once the event has
started). A `Preempt` event is approved (`POST` the same URL with
`{"StartRequests": [{"EventId": ...}]}`) once the notice is published on the Node: the node is ready
for it; Azure evicts Spot VMs at the latest at `NotBefore` whatever the answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from shipshape.nodecollector.notices.model import Kind, MetadataError, NodeNotice

CLOUD = "azure"
BASE_URL = "http://169.254.169.254"
EVENTS_PATH = "/metadata/scheduledevents"
NAME_PATH = "/metadata/instance/compute/name"
API_VERSION = "2020-07-01"
INSTANCE_API_VERSION = "2021-02-01"
HEADERS = {"Metadata": "true"}
# Event types that end the VM: Spot eviction, and a scale set's scheduled deletion.
TERMINATING = {"Preempt": "Preempted", "Terminate": "ScheduledTermination"}
ACKNOWLEDGED = ("Preempt",)
FIRST_REQUEST_SECONDS = 130.0


def parse_not_before(value: str) -> float | None:
    """`Wed, 25 Nov 2026 10:15:33 GMT` as POSIX seconds; None when blank or unreadable."""
    if not value.strip():
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def parse_scheduled_events(document: Mapping[str, Any], vm_name: str, now: float) -> list[NodeNotice]:
    """The terminating events of this VM in a Scheduled Events document (deadline `NotBefore`, or now
    for an event that has started)."""
    found: list[NodeNotice] = []
    events = document.get("Events")
    if not isinstance(events, list):
        return found
    for event in events:
        if not isinstance(event, dict) or event.get("EventType") not in TERMINATING:
            continue
        resources = event.get("Resources")
        if not isinstance(resources, list) or (resources and vm_name not in resources):
            continue
        event_id = str(event.get("EventId") or "")
        if not event_id:
            continue
        kind = str(event["EventType"])
        not_before = parse_not_before(str(event.get("NotBefore") or ""))
        deadline = not_before if not_before is not None else now
        found.append(
            NodeNotice(
                cloud=CLOUD,
                kind=Kind.INTERRUPTION,
                event_id=f"azure-{hashlib.sha256(event_id.encode()).hexdigest()[:16]}",
                reason=TERMINATING[kind],
                detail=f"Azure scheduled event {kind} {event_id} ({event.get('EventStatus')}), "
                f"not before {event.get('NotBefore') or 'now'}",
                deadline=deadline,
                ack_id=event_id if kind in ACKNOWLEDGED else None,
            )
        )
    return found


class ScheduledEvents:
    """Scheduled Events at `base` (http://169.254.169.254 on Azure VMs)."""

    cloud = CLOUD
    long_polls = False

    def __init__(self, http: httpx.Client, base: str = BASE_URL) -> None:
        self.http = http
        self.base = base.rstrip("/")
        self._vm_name: str | None = None
        self._acknowledged: set[str] = set()
        self._enabled = False

    def _request(
        self, method: str, path: str, params: dict[str, str], body: Any = None, timeout: float | None = None
    ) -> httpx.Response:
        try:
            return self.http.request(
                method,
                self.base + path,
                params=params,
                headers=HEADERS,
                json=body if body else None,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as error:
            raise MetadataError(f"Azure IMDS {path} unreachable: {error}") from error

    def vm_name(self) -> str:
        if self._vm_name is None:
            response = self._request(
                "GET", NAME_PATH, {"api-version": INSTANCE_API_VERSION, "format": "text"}
            )
            if response.status_code != 200 or not response.text.strip():
                raise MetadataError(f"Azure IMDS compute/name: HTTP {response.status_code}")
            self._vm_name = response.text.strip()
        return self._vm_name

    def document(self) -> dict[str, Any]:
        # The first request turns the service on for the VM and may take up to two minutes.
        timeout = None if self._enabled else FIRST_REQUEST_SECONDS
        response = self._request("GET", EVENTS_PATH, {"api-version": API_VERSION}, timeout=timeout)
        self._enabled = True
        if response.status_code != 200:
            raise MetadataError(f"Azure scheduled events: HTTP {response.status_code}")
        try:
            data = response.json()
        except ValueError as error:
            raise MetadataError(f"Azure scheduled events: not JSON: {error}") from error
        if not isinstance(data, dict):
            raise MetadataError("Azure scheduled events: not a JSON object")
        return data

    def poll(self, clock: Callable[[], float], wait_seconds: float = 0.0) -> list[NodeNotice]:
        name = self.vm_name()
        return parse_scheduled_events(self.document(), name, clock())

    def published(self, notice: NodeNotice) -> None:
        """Approve a published `Preempt` event (once; 200 even when another VM approved it first)."""
        if notice.ack_id is None or notice.ack_id in self._acknowledged:
            return
        body = {"StartRequests": [{"EventId": notice.ack_id}]}
        response = self._request("POST", EVENTS_PATH, {"api-version": API_VERSION}, body)
        if response.status_code != 200:
            raise MetadataError(f"Azure scheduled events approval: HTTP {response.status_code}")
        self._acknowledged.add(notice.ack_id)

    def probe(self) -> bool:
        try:
            self.vm_name()
        except MetadataError:
            return False
        return True
