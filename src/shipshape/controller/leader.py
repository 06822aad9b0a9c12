"""Leader election for the loops on a `coordination.k8s.io/v1` Lease (every replica serves the webhook).

`lease_step` is the pure decision (take, renew, or follow, from the Lease as read and the time);
`LeaseElector` runs it through the official client, with optimistic concurrency on the Lease's
resourceVersion so that two replicas racing for it cannot both win, and releases the Lease on a
graceful shutdown so that the other replica takes over at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kubernetes import client as k8s

from shipshape.controller.kube_ops import call
from shipshape.controller.ops import OpsError
from shipshape.kube.clock import Clock, parse_time, rfc3339_micro

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.leader")
LEASE_NAME = "shipshape-controller"


class Step(StrEnum):
    CREATE = "create"  # no Lease yet
    ACQUIRE = "acquire"  # the Lease is free or expired
    RENEW = "renew"  # we hold it
    FOLLOW = "follow"  # someone else holds it and it has not expired


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Emulated seconds, as client-go's defaults: 15 s lease, renew every 2 s."""

    name: str = LEASE_NAME
    namespace: str = "shipshape-system"
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


class LeaseElector:
    """Holds the Lease while it can; `is_leader` is read by the loops' scheduler before each round."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        identity: str,
        clock: Clock,
        settings: LeaseSettings,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.api = k8s.CoordinationV1Api(api_client)
        self.identity = identity
        self.clock = clock
        self.settings = settings
        self.on_change = on_change
        self._leader = False
        self._renewed = float("-inf")
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    @property
    def is_leader(self) -> bool:
        # A leader that could not renew for a whole lease duration stops acting (another may hold it).
        return self._leader and self.clock.now() < self._renewed + self.settings.duration_seconds

    def start(self) -> None:
        self.thread.start()

    def try_once(self) -> bool:
        """One election step; returns whether this replica leads afterwards."""
        now = self.clock.now()
        try:
            lease: Obj | None = call(
                self.api.read_namespaced_lease, self.settings.name, self.settings.namespace
            )
        except OpsError as error:
            if error.status != 404:
                raise
            lease = None
        step = lease_step(lease, self.identity, now)
        if step is Step.FOLLOW:
            self._set(False)
            return False
        body = lease_body(lease, step, self.identity, now, self.settings)
        try:
            if step is Step.CREATE:
                call(self.api.create_namespaced_lease, self.settings.namespace, body)
            else:
                call(self.api.replace_namespaced_lease, self.settings.name, self.settings.namespace, body)
        except OpsError as error:
            if error.status == 409:  # another replica wrote it first
                self._set(False)
                return False
            raise
        self._renewed = now
        self._set(True)
        return True

    def _set(self, leader: bool) -> None:
        if leader != self._leader:
            LOG.info("%s %s the leader lease", self.identity, "acquired" if leader else "does not hold")
            self._leader = leader
            if self.on_change is not None:
                self.on_change(leader)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.try_once()
            except OpsError as error:
                LOG.warning("leader election: %s", error)
            self.stop_event.wait(max(0.05, self.clock.real_seconds(self.settings.retry_seconds)))

    def stop(self, release: bool = True) -> None:
        """Stop electing; give the Lease up if we hold it (the other replica takes over at once)."""
        self.stop_event.set()
        if self.thread.ident is not None:  # never started: nothing to join
            self.thread.join(10)
        if release and self._leader:
            self._set(False)
            try:
                lease = call(self.api.read_namespaced_lease, self.settings.name, self.settings.namespace)
                if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                    lease["spec"]["holderIdentity"] = None
                    lease["spec"]["leaseDurationSeconds"] = 1
                    call(
                        self.api.replace_namespaced_lease, self.settings.name, self.settings.namespace, lease
                    )
            except OpsError as error:
                LOG.warning("could not release the leader lease: %s", error)
