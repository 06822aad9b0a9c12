"""Draining a node the autoscaler removes, as cluster-autoscaler's actuator does.

The node is already tainted `ToBeDeletedByClusterAutoscaler`. Every pod on it but DaemonSet and
mirror pods gets a `ScaleDown` Event ("deleting pod for node scale down") and is evicted through
the eviction subresource, so PodDisruptionBudgets hold; a refused eviction (429) is retried every
`EVICTION_RETRY_TIME` until `MAX_POD_EVICTION_TIME` has passed. Then the drain waits for the pods
to be gone (their grace period, at most `MAX_GRACEFUL_TERMINATION`, plus `POD_EVICTION_HEADROOM`).
The outcome is reported to the caller, which terminates the instance or aborts the scale-down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from shipshape.emulator.cloud.handler import drainable, request_eviction
from shipshape.emulator.resources import PODS
from shipshape.emulator.store import Obj
from shipshape.kube import errors

if TYPE_CHECKING:
    from shipshape.emulator.cloud.model import CloudModel, Instance

log = logging.getLogger(__name__)

COMPONENT = "cluster-autoscaler"
EVICTION_RETRY_TIME = 10.0  # cluster-autoscaler's EvictionRetryTime
MAX_POD_EVICTION_TIME = 120.0  # MaxPodEvictionTime: how long refused evictions are retried
MAX_GRACEFUL_TERMINATION = 600.0  # --max-graceful-termination-sec
POD_EVICTION_HEADROOM = 30.0  # PodEvictionHeadroom: extra wait for evicted pods to be gone
CHECK_INTERVAL = 5.0


def must_leave(pod: Obj) -> bool:
    """A pod that has to be gone before the node may go: not DaemonSet, not mirror, not finished."""
    md = pod["metadata"]
    if "kubernetes.io/config.mirror" in (md.get("annotations") or {}):
        return False
    if any(ref.get("kind") == "DaemonSet" for ref in md.get("ownerReferences") or []):
        return False
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


class NodeDrain:
    """One node's drain; `on_done(drain, ok, why)` is called once, when it ends either way."""

    def __init__(
        self, cloud: CloudModel, inst: Instance, on_done: Callable[[NodeDrain, bool, str], None]
    ) -> None:
        self.cloud = cloud
        self.inst = inst
        self.node = inst.node_name
        self.on_done = on_done
        self.started = 0.0
        self.evict_until = 0.0
        self.wait_until = 0.0
        self.outstanding: set[tuple[str, str]] = set()
        self.finished = False
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> list[tuple[str, str]]:
        c = self.cloud.c
        self.started = c.now()
        self.evict_until = self.started + MAX_POD_EVICTION_TIME
        self.wait_until = self.evict_until
        pods = [p for p in c.store.pods_on_node(self.node) if drainable(p)]
        keys = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods]
        self.outstanding = set(keys)
        for pod in pods:
            c.recorder.record(pod, "ScaleDown", "deleting pod for node scale down", component=COMPONENT)
        for namespace, name in keys:
            self._evict(namespace, name)
        c.engine.call_later(CHECK_INTERVAL, self._check)
        return keys

    def _evict(self, namespace: str, name: str) -> None:
        if self.finished:
            return
        c = self.cloud.c
        pod = c.store.get(PODS, namespace, name)
        if pod is None or pod.get("spec", {}).get("nodeName") != self.node or not drainable(pod):
            self._evicted((namespace, name), pod)
            return

        def done(error: errors.ApiError | None) -> None:
            if self.finished:
                return
            if error is None or isinstance(error, errors.NotFound):
                self._evicted((namespace, name), pod)
            elif error.retryable and c.now() + EVICTION_RETRY_TIME <= self.evict_until:
                c.engine.call_later(EVICTION_RETRY_TIME, lambda: self._evict(namespace, name))
            else:
                self._end(
                    False, f"failed to evict pod {namespace}/{name} within allowed timeout: {error.message}"
                )

        request_eviction(c, namespace, name, done, self._tasks)

    def _evicted(self, key: tuple[str, str], pod: Obj | None) -> None:
        self.outstanding.discard(key)
        grace = 30.0
        if pod is not None:
            given = pod.get("spec", {}).get("terminationGracePeriodSeconds")
            if isinstance(given, int | float):
                grace = float(given)
        now = self.cloud.c.now()
        self.wait_until = max(
            self.wait_until, now + min(grace, MAX_GRACEFUL_TERMINATION) + POD_EVICTION_HEADROOM
        )

    def _check(self) -> None:
        if self.finished:
            return
        c = self.cloud.c
        if not self.inst.active:
            self._end(False, "node went away during the drain")
            return
        remaining = [p for p in c.store.pods_on_node(self.node) if must_leave(p)]
        if not self.outstanding and not remaining:
            self._end(True, "")
        elif c.now() >= self.wait_until:
            names = ", ".join(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in remaining)
            self._end(False, f"pods remaining after timeout: {names}")
        else:
            c.engine.call_later(CHECK_INTERVAL, self._check)

    def _end(self, ok: bool, why: str) -> None:
        if self.finished:
            return
        self.finished = True
        self.on_done(self, ok, why)
