"""Leader election on a `coordination.k8s.io/v1` Lease, for every process that runs as several replicas
(the controller's loops, the agent's pushes).

`lease_step` is the pure decision (create, take, renew, or follow, from the Lease as read and the
time); `lease_body` the Lease to write for it. `LeaseElector` runs them through the official client
on the injected clock, with optimistic concurrency on the Lease's resourceVersion so that two
replicas racing for it cannot both win, calls back when this replica starts and stops leading, and
releases the Lease on a graceful stop so that another replica takes over at once.

A leader that cannot renew (the API server is away) stops leading when the lease duration since its
last renewal has passed: the moment another replica may take the Lease. Times are the clock's
(emulated seconds in the emulator); API errors come out as `kube.errors.ApiError`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s

from shipshape.kube import client, errors
from shipshape.kube.clock import Clock, parse_time, rfc3339_micro

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.kube.leader")
# Where a pod finds the namespace it runs in (the service account's projected files).
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "shipshape-system"
# Seconds a single Lease call may take (connect, read).
REQUEST_TIMEOUT = (5.0, 15.0)


class Step(StrEnum):
    CREATE = "create"  # no Lease yet
    ACQUIRE = "acquire"  # the Lease is free or expired
    RENEW = "renew"  # we hold it
    FOLLOW = "follow"  # someone else holds it and it has not expired


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Which Lease, and its timing in the clock's seconds (client-go's defaults: a 15 s lease, a
    step every 2 s)."""

    name: str
    namespace: str = DEFAULT_NAMESPACE
    duration_seconds: int = 15
    retry_seconds: float = 2.0


def lease_step(lease: Mapping[str, Any] | None, identity: str, now: float) -> Step:
    if lease is None:
        return Step.CREATE
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if holder == identity:
        return Step.RENEW
    if not holder:
        return Step.ACQUIRE
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    try:
        last = parse_time(renewed) if renewed else float("-inf")
    except ValueError:
        last = float("-inf")
    if now >= last + float(spec.get("leaseDurationSeconds") or 0):
        return Step.ACQUIRE
    return Step.FOLLOW


def lease_holder(lease: Mapping[str, Any] | None, now: float) -> str | None:
    """Who holds `lease` at `now` (None: nobody, or a holder whose lease expired)."""
    if lease is None:
        return None
    holder = (lease.get("spec") or {}).get("holderIdentity")
    return str(holder) if holder and lease_step(lease, "", now) is Step.FOLLOW else None


def lease_body(
    lease: Mapping[str, Any] | None, step: Step, identity: str, now: float, settings: LeaseSettings
) -> Obj:
    """The Lease to write for `step` (CREATE, ACQUIRE or RENEW)."""
    stamp = rfc3339_micro(now)
    spec: Obj = dict((lease or {}).get("spec") or {})
    if step is not Step.RENEW:
        spec["acquireTime"] = stamp
        if step is Step.ACQUIRE:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        else:
            spec["leaseTransitions"] = 0
    spec.update(holderIdentity=identity, leaseDurationSeconds=settings.duration_seconds, renewTime=stamp)
    metadata: Obj = {"name": settings.name, "namespace": settings.namespace}
    if lease is not None:
        metadata["resourceVersion"] = (lease.get("metadata") or {}).get("resourceVersion")
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}


def released_body(lease: Mapping[str, Any]) -> Obj:
    """`lease` given up: no holder, and a 1 s duration (client-go's release), resourceVersion kept."""
    body: Obj = json.loads(json.dumps(lease))
    spec = body.setdefault("spec", {})
    spec["holderIdentity"] = None
    spec["leaseDurationSeconds"] = 1
    return body


def default_identity() -> str:
    """This replica's name in a Lease: the host name (a pod's name in a cluster) and the process id."""
    return f"{socket.gethostname()}-{os.getpid()}"


def default_namespace(path: Path = NAMESPACE_FILE) -> str:
    """The namespace a pod runs in (its service account's namespace file), else `shipshape-system`."""
    try:
        found = path.read_text(encoding="utf-8").strip()
    except OSError:
        return DEFAULT_NAMESPACE
    return found or DEFAULT_NAMESPACE


Callback = Callable[[], None]


class LeaseElector:
    """Holds the Lease while it can, on a thread of its own (`start`), or one step at a time
    (`try_once`). `is_leader` is what callers check before acting; `on_start_leading` and
    `on_stop_leading` are called (from the elector's thread) when that changes."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        identity: str,
        clock: Clock,
        settings: LeaseSettings,
        on_start_leading: Callback | None = None,
        on_stop_leading: Callback | None = None,
    ) -> None:
        self.api = k8s.CoordinationV1Api(api_client)
        self.identity = identity
        self.clock = clock
        self.settings = settings
        self._on_start: list[Callback] = [on_start_leading] if on_start_leading else []
        self._on_stop: list[Callback] = [on_stop_leading] if on_stop_leading else []
        self._leader = False
        self._renewed = float("-inf")
        self._lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"leader-election-{settings.name}", daemon=True)

    def listen(
        self, on_start_leading: Callback | None = None, on_stop_leading: Callback | None = None
    ) -> None:
        """Add callbacks (before `start`)."""
        if on_start_leading is not None:
            self._on_start.append(on_start_leading)
        if on_stop_leading is not None:
            self._on_stop.append(on_stop_leading)

    @property
    def is_leader(self) -> bool:
        # A leader that could not renew for a whole lease duration stops acting (another may hold it).
        return self._leader and self.clock.now() < self._renewed + self.settings.duration_seconds

    def start(self) -> None:
        self.thread.start()

    def try_once(self) -> bool:
        """One election step; returns whether this replica leads afterwards. Raises `ApiError` when
        the API server could not be read or written (the caller retries)."""
        now = self.clock.now()
        settings = self.settings
        try:
            lease: Obj | None = _call(self.api.read_namespaced_lease, settings.name, settings.namespace)
        except errors.NotFound:
            lease = None
        step = lease_step(lease, self.identity, now)
        if step is Step.FOLLOW:
            self._set(False)
            return False
        body = lease_body(lease, step, self.identity, now, settings)
        try:
            if step is Step.CREATE:
                _call(self.api.create_namespaced_lease, settings.namespace, body)
            else:
                _call(self.api.replace_namespaced_lease, settings.name, settings.namespace, body)
        except (errors.Conflict, errors.AlreadyExists):  # another replica wrote it first
            self._set(False)
            return False
        self._renewed = now
        self._set(True)
        return True

    def _set(self, leader: bool) -> None:
        with self._lock:
            if leader == self._leader:
                return
            self._leader = leader
        LOG.info(
            "%s %s the %s lease",
            self.identity,
            "acquired" if leader else "does not hold",
            self.settings.name,
            extra={"lease": f"{self.settings.namespace}/{self.settings.name}", "leader": leader},
        )
        for callback in self._on_start if leader else self._on_stop:
            try:
                callback()
            except Exception:  # a callback's failure must not stop the election
                LOG.exception("leader election callback failed")

    def step(self) -> bool:
        """`try_once`, with a failure logged rather than raised: a leader that could not renew for a
        lease duration stops leading (someone else may hold the Lease by now)."""
        try:
            return self.try_once()
        except errors.ApiError as error:
            LOG.warning("leader election (%s): %s", self.settings.name, error)
            if self._leader and not self.is_leader:
                self._set(False)
            return self.is_leader

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.step()
            except Exception:  # a bug must not end the election: the Lease would just lapse
                LOG.exception("leader election (%s) step failed", self.settings.name)
            self.stop_event.wait(max(0.01, self.clock.real_seconds(self.settings.retry_seconds)))

    def stop(self, release: bool = True) -> None:
        """Stop electing; give the Lease up if we hold it (another replica takes over at once).
        `release=False` leaves it to expire, as a killed process would."""
        self.stop_event.set()
        if self.thread.ident is not None:  # never started: nothing to join
            self.thread.join(10)
        if not self._leader:
            return
        self._set(False)
        if not release:
            return
        try:
            lease = _call(self.api.read_namespaced_lease, self.settings.name, self.settings.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                _call(
                    self.api.replace_namespaced_lease,
                    self.settings.name,
                    self.settings.namespace,
                    released_body(lease),
                )
        except errors.ApiError as error:
            LOG.warning("could not release the %s lease: %s", self.settings.name, error)


def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """One call of the official client returning its JSON body; failures become `ApiError`s."""
    try:
        response = function(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    except k8s.ApiException as error:
        raise errors.from_status(int(error.status) if error.status else None, error.body) from error
    except (OSError, urllib3.exceptions.HTTPError) as error:  # connection refused, TLS, timeouts
        raise errors.Unreachable(client.unreachable(error)) from error
    raw = response.data
    body = json.loads(raw) if raw else {}
    return body if isinstance(body, dict) else {}
