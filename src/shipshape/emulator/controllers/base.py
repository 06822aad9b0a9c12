"""What every workload controller shares: store access, Events under its component name, status writes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from shipshape.emulator import ratelimit
from shipshape.emulator.admission import UserInfo
from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.claims import OrphanIndex
from shipshape.emulator.controllers.expectations import Expectations
from shipshape.emulator.resources import PODS, ResourceType
from shipshape.emulator.runtime import Cluster, Reconciler
from shipshape.emulator.store import Obj, Store, WatchEvent
from shipshape.kube import errors

log = logging.getLogger(__name__)

# Upstream workqueue's default per-item backoff: 5 ms doubling up to 1000 s.
BACKOFF_BASE = 0.005
BACKOFF_MAX = 1000.0


class Controller(Reconciler):
    """A watch-driven controller; `component` (default: `name`) reports its Events."""

    component = ""
    # The kube-system service account upstream's controller-manager uses for this controller's requests.
    service_account = ""

    def __init__(self) -> None:
        super().__init__()
        self._failures: dict[Any, int] = {}
        self._late_failures: dict[Any, errors.ApiError] = {}
        self._watched = frozenset(rt.key for rt in self.watches)
        # This controller's client-side rate limit (each controller has its own client upstream);
        # None: no limit (no scenario, or qps 0).
        self.client_limit: ratelimit.TokenBucket | None = None
        self._released_at: dict[float, list[Callable[[], None]]] = {}  # requests waiting, by release time

    def start(self, cluster: Cluster) -> None:
        settings = cluster.scenario.controller_manager if cluster.scenario is not None else None
        if settings is not None:
            self.client_limit = ratelimit.bucket_for(
                settings.kube_api_qps, settings.kube_api_burst, cluster.clock.now()
            )
        super().start(cluster)

    def submit_pod_create(
        self, namespace: str, body: Obj, on_done: Callable[[Obj | None, errors.ApiError | None], None]
    ) -> None:
        """Create a pod through the Api once this controller's client has a token for the request
        (at once when it has one, as without a limit)."""
        api = self.c.services["api"]
        now = self.c.clock.now()
        when = self.client_limit.reserve(now) if self.client_limit is not None else now
        if when <= now:
            api.submit_create(PODS, namespace, body, on_done=on_done, user=self.user())
            return
        release = ratelimit.release_time(when, now)
        waiting = self._released_at.get(release)
        if waiting is None:
            waiting = self._released_at[release] = []
            self.c.engine.call_at(release, lambda: self._release(release))
        waiting.append(lambda: api.submit_create(PODS, namespace, body, on_done=on_done, user=self.user()))

    def _release(self, at: float) -> None:
        for request in self._released_at.pop(at, []):
            request()

    def _on_event(self, event: WatchEvent) -> None:
        # Every store change reaches every controller: a set lookup instead of comparing types.
        if event.resource.key in self._watched:
            for key in self.keys_for(event):
                self.enqueue(key)

    def _drain(self) -> None:
        # As the base class, but a sync that raises is retried with backoff (upstream requeues
        # a key whose sync returned an error), instead of waiting for the next change.
        self._scheduled = False
        batch = list(self._dirty)
        self._dirty.clear()
        for key in batch:
            try:
                self.reconcile(key)
            except Exception:
                log.exception("%s failed to sync %r; retrying", self.name, key)
                self.retry_later(key)

    def retry_later(self, key: Any) -> None:
        """Requeue a key that failed, with exponential backoff as a rate-limited workqueue would."""
        count = self._failures.get(key, 0)
        self._failures[key] = count + 1
        self.enqueue(key, after=min(BACKOFF_BASE * 2**count, BACKOFF_MAX))

    def forget(self, key: Any) -> None:
        """The key synced cleanly: its backoff starts over."""
        self._failures.pop(key, None)

    def create_pods(
        self, owner: Mapping[str, Any], key: Any, bodies: list[Obj], expectations: Expectations
    ) -> errors.ApiError | None:
        """Create pods through admission in slow-start batches of 1, 2, 4, ... (upstream `slowStartBatch`).

        The next batch starts once the previous one is done without failures; creations skipped
        after a failure are no longer expected. Events SuccessfulCreate/FailedCreate go on the owner.
        A failure known before returning (no webhook on the way) is returned for the caller to
        requeue; one that comes later is kept for the next sync (`take_late_failure`) and requeues
        the key with backoff itself.
        """
        pending = list(bodies)
        expectations.expect_creations(key, len(pending))
        state: dict[str, Any] = {"batch": 1, "in_flight": 0, "failure": None, "returned": False}

        def done(pod: Obj | None, error: errors.ApiError | None) -> None:
            state["in_flight"] -= 1
            if error is not None:
                expectations.creation_observed(key)  # the watch will never show this pod
                state["failure"] = state["failure"] or error
                if not namespace_terminating(error):  # upstream records no Event for these
                    self.event(owner, "FailedCreate", f"Error creating: {error.message}", type="Warning")
            elif pod is not None:
                self.forget(key)
                self.event(owner, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
            if state["in_flight"] == 0:
                if state["failure"] is None and pending:
                    submit_batch()
                    return
                for _ in pending:
                    expectations.creation_observed(key)
                pending.clear()
                if state["failure"] is not None and state["returned"]:
                    self._late_failures[key] = state["failure"]
                    self.retry_later(key)

        def submit_batch() -> None:
            batch = pending[: state["batch"]]
            del pending[: state["batch"]]
            state["batch"] *= 2
            state["in_flight"] = len(batch)
            for body in batch:
                namespace = str(podutil.meta(body).get("namespace", ""))
                self.submit_pod_create(namespace, body, done)

        if pending:
            submit_batch()
        state["returned"] = True
        failure: errors.ApiError | None = state["failure"]
        return failure

    def user(self) -> UserInfo:
        """Who the controller's API requests come from (what admission webhooks see)."""
        account = self.service_account or self.name
        return UserInfo(
            username=f"system:serviceaccount:kube-system:{account}",
            groups=("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"),
        )

    def take_late_failure(self, key: Any) -> errors.ApiError | None:
        """A creation failure reported after the sync that asked for it (admission webhooks)."""
        return self._late_failures.pop(key, None)

    @property
    def store(self) -> Store:
        return self.c.store

    def now(self) -> float:
        return self.c.clock.now()

    def event(self, obj: Mapping[str, Any], reason: str, message: str, *, type: str = "Normal") -> None:
        self.c.recorder.record(dict(obj), reason, message, type=type, component=self.component or self.name)

    def write_status(self, rt: ResourceType, obj: Mapping[str, Any], status: Obj) -> Obj | None:
        """Replace `.status` when it differs (no write, no new resourceVersion otherwise)."""
        if obj.get("status") == status:
            return None
        md = obj["metadata"]
        return self.store.write_status(rt, md.get("namespace", ""), md["name"], status)


def namespace_terminating(error: errors.ApiError) -> bool:
    """Whether a create was refused because its namespace is being deleted (cause NamespaceTerminating)."""
    causes = (error.details or {}).get("causes") or []
    if any(c.get("reason") == "NamespaceTerminating" for c in causes):
        return True
    return error.message.endswith("because it is being terminated")


class PodOwnerController(Controller):
    """A controller whose objects own pods it creates and deletes (ReplicaSet, DaemonSet, Job).

    It keeps upstream's expectations of in-flight creations and deletions, and an index of
    orphaned pods it may adopt by selector.
    """

    def __init__(self) -> None:
        super().__init__()
        self._expectations: Expectations | None = None
        self._orphans = OrphanIndex(PODS)

    def start(self, cluster: Cluster) -> None:
        self._expectations = Expectations(cluster.clock)
        super().start(cluster)

    @property
    def expectations(self) -> Expectations:
        assert self._expectations is not None, f"{self.name} used before start()"
        return self._expectations
