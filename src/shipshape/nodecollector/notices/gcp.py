"""GCP: the Compute Engine metadata server — `instance/preempted` and `instance/maintenance-event`.

Values are plain text (`TRUE`/`FALSE`; `NONE`, `MIGRATE_ON_HOST_MAINTENANCE`,
`TERMINATE_ON_HOST_MAINTENANCE`), every request carries `Metadata-Flavor: Google` (403 without), and
answers carry an `ETag`. `Gce.poll` reads `maintenance-event` (a read is also what makes Compute Engine
give the 60 s warning to live-migrating VMs) and long-polls `preempted` with
`?wait_for_change=true&last_etag=<etag>&timeout_sec=<n>`: the request returns as soon as the value
changes, or after n seconds unchanged, so the poll is its own wait. A 503 (host maintenance) is
retried on the next poll.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import httpx

from shipshape.contracts.notices import LEAD_SECONDS
from shipshape.kube.clock import rfc3339
from shipshape.nodecollector.notices.model import Kind, MetadataError, NodeNotice

CLOUD = "gcp"
BASE_URL = "http://metadata.google.internal"
PREFIX = "/computeMetadata/v1/"
FLAVOR_HEADER = "Metadata-Flavor"
FLAVOR = "Google"
PREEMPTED = "instance/preempted"
MAINTENANCE = "instance/maintenance-event"
MAINTENANCE_LEAD_SECONDS = 60.0
TERMINATING_MAINTENANCE = ("TERMINATE_ON_HOST_MAINTENANCE", "SHUTDOWN_ON_HOST_MAINTENANCE")


def _id(*parts: str) -> str:
    return hashlib.sha256(":".join(parts).encode()).hexdigest()[:16]


def parse_preempted(body: str, now: float, etag: str = "") -> NodeNotice | None:
    """`TRUE` (the VM is being preempted: about 30 s left) as a notice; None for `FALSE`."""
    if body.strip() != "TRUE":
        return None
    deadline = now + LEAD_SECONDS[CLOUD]
    return NodeNotice(
        cloud=CLOUD,
        kind=Kind.INTERRUPTION,
        event_id=f"gcp-preempted-{_id(etag or rfc3339(now))}",
        reason="Preempted",
        detail="Compute Engine instance/preempted is TRUE",
        deadline=deadline,
        issued=now,
    )


def parse_maintenance_event(body: str, now: float, etag: str = "") -> NodeNotice | None:
    """`TERMINATE_ON_HOST_MAINTENANCE` (the VM stops for host maintenance in 60 s) as a notice; None
    for `NONE` and for live migration (`MIGRATE_ON_HOST_MAINTENANCE`: the VM keeps running)."""
    value = body.strip()
    if value not in TERMINATING_MAINTENANCE:
        return None
    return NodeNotice(
        cloud=CLOUD,
        kind=Kind.INTERRUPTION,
        event_id=f"gcp-maintenance-{_id(etag or rfc3339(now))}",
        reason="HostMaintenance",
        detail=f"Compute Engine instance/maintenance-event is {value}",
        deadline=now + MAINTENANCE_LEAD_SECONDS,
        issued=now,
    )


class Gce:
    """The metadata server at `base` (http://metadata.google.internal on GCE and GKE)."""

    cloud = CLOUD
    long_polls = True

    def __init__(self, http: httpx.Client, base: str = BASE_URL) -> None:
        self.http = http
        self.base = base.rstrip("/")
        self._etags: dict[str, str] = {}

    def get(self, key: str, *, wait_seconds: float = 0.0) -> tuple[str, str]:
        """The value of `key` and its ETag; with `wait_seconds`, held until it changes from the last
        value read (or that long)."""
        params: dict[str, str] = {}
        timeout: float | None = None
        last = self._etags.get(key)
        if wait_seconds > 0 and last:
            seconds = max(1, int(wait_seconds))
            params = {"wait_for_change": "true", "last_etag": last, "timeout_sec": str(seconds)}
            timeout = seconds + 10.0
        try:
            response = self.http.get(
                f"{self.base}{PREFIX}{key}",
                params=params,
                headers={FLAVOR_HEADER: FLAVOR},
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as error:
            raise MetadataError(f"metadata server {key} unreachable: {error}") from error
        if response.status_code != 200:
            raise MetadataError(f"metadata server {key}: HTTP {response.status_code}")
        if response.headers.get(FLAVOR_HEADER) != FLAVOR:
            raise MetadataError(f"{self.base} is not a Compute Engine metadata server (no {FLAVOR_HEADER})")
        etag = response.headers.get("ETag", "")
        if etag:
            self._etags[key] = etag
        return response.text, etag

    def poll(self, clock: Callable[[], float], wait_seconds: float = 0.0) -> list[NodeNotice]:
        found: list[NodeNotice] = []
        body, etag = self.get(MAINTENANCE)
        maintenance = parse_maintenance_event(body, clock(), etag)
        if maintenance is not None:
            found.append(maintenance)
        # Long-poll only while nothing is known yet: a preemption already read is read again at once.
        body, etag = self.get(PREEMPTED, wait_seconds=0.0 if found else wait_seconds)
        preempted = parse_preempted(body, clock(), etag)  # read after the wait
        if preempted is not None:
            found.append(preempted)
        return found

    def published(self, notice: NodeNotice) -> None:
        """Nothing to acknowledge on Compute Engine."""

    def probe(self) -> bool:
        try:
            self.get("instance/id")
        except MetadataError:
            return False
        return True
