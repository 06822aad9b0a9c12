"""The ReplicaSet controller: keep `spec.replicas` pods of the template, report their status."""

from __future__ import annotations

import logging
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import PodOwnerController
from shipshape.emulator.controllers.claims import claim
from shipshape.emulator.resources import PODS, REPLICASETS
from shipshape.emulator.store import DELETED, Obj, WatchEvent
from shipshape.kube import errors
from shipshape.kube.clock import rfc3339
from shipshape.kube.labels import Selector, SelectorError, from_label_selector

log = logging.getLogger(__name__)

# Upstream BurstReplicas: the most pods one sync creates or deletes.
BURST_REPLICAS = 500

Key = tuple[str, str]


def selector_of(obj: Obj) -> Selector | None:
    try:
        return from_label_selector((obj.get("spec") or {}).get("selector"))
    except SelectorError:
        return None


class ReplicaSetController(PodOwnerController):
    name = "replicaset-controller"
    watches = (REPLICASETS, PODS)

    def __init__(self) -> None:
        super().__init__()
        # The last creation/deletion failure, shown as ReplicaFailure until a later one succeeds.
        self._failing: dict[Key, tuple[str, str]] = {}

    def forget(self, key: Any) -> None:
        super().forget(key)
        self._failing.pop(key, None)

    # ---- events -> keys ---------------------------------------------------------------------
    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        ns, name = podutil.key_of(obj)
        self._orphans.observe(event)
        if event.resource is REPLICASETS:
            if event.type == DELETED:
                self.expectations.forget((ns, name))
            return [(ns, name)]
        ref = podutil.controller_ref(obj)
        if ref is not None:
            if ref.get("kind") != "ReplicaSet":
                return []
            key = (ns, str(ref.get("name")))
            if event.type == DELETED or podutil.is_terminating(obj):
                self.expectations.deletion_observed(key, f"{ns}/{name}")
            elif event.type == "ADDED":
                self.expectations.creation_observed(key)
            return [key]
        if event.type == DELETED:
            return []
        # An orphan: every ReplicaSet whose selector matches may adopt it.
        labels = podutil.meta(obj).get("labels")
        keys: list[Any] = []
        for rs in self.store.list(REPLICASETS, ns):
            selector = selector_of(rs)
            if selector is not None and not selector.empty and selector.matches(labels):
                keys.append(podutil.key_of(rs))
        return keys

    # ---- sync -------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> None:
        ns, name = key
        rs = self.store.get(REPLICASETS, ns, name)
        if rs is None:
            self.expectations.forget(key)
            self._failing.pop(key, None)
            return
        needs_sync = self.expectations.satisfied(key)
        selector = selector_of(rs)
        if selector is None or selector.empty:
            return  # validation rejects these; never select every pod in the namespace
        active = [p for p in self._orphans.candidates(self.store, rs) if podutil.is_active(p)]
        pods = claim(self.store, PODS, rs, active, selector)
        if needs_sync and not podutil.is_terminating(rs):
            diff = len(pods) - int(rs["spec"].get("replicas", 1))
            failure = self._manage_replicas(rs, pods, key)
            if failure is not None:
                self._failing[key] = failure
                self.retry_later(key)
            elif diff >= 0:
                self._failing.pop(key, None)  # nothing to create, or deletions went through
        late = self.take_late_failure(key)
        if late is not None:
            self._failing[key] = ("FailedCreate", late.message)
        failure = self._failing.get(key)
        current = self.store.get(REPLICASETS, ns, name)
        if current is None:
            return
        status = self._status(current, pods, failure)
        self.write_status(REPLICASETS, current, status)
        min_ready = int(current["spec"].get("minReadySeconds") or 0)
        replicas = int(current["spec"].get("replicas", 1))
        ready = status.get("readyReplicas", 0)
        if (
            failure is None
            and min_ready > 0
            and ready == replicas
            and status.get("availableReplicas", 0) != replicas
        ):
            wait = podutil.available_in(pods, min_ready, self.now())
            if wait is not None:
                self.enqueue(key, after=wait)

    def _manage_replicas(self, rs: Obj, pods: list[Obj], key: Key) -> tuple[str, str] | None:
        """Create or delete pods toward spec.replicas. Returns (reason, message) of a failure, if any."""
        diff = len(pods) - int(rs["spec"].get("replicas", 1))
        if diff < 0:
            return self._create_pods(rs, min(-diff, BURST_REPLICAS), key)
        if diff > 0:
            return self._delete_pods(rs, pods, min(diff, BURST_REPLICAS), key)
        return None

    def _create_pods(self, rs: Obj, count: int, key: Key) -> tuple[str, str] | None:
        name = key[1]
        template = rs["spec"].get("template") or {}
        bodies = [podutil.pod_from_template(template, rs, f"{name}-") for _ in range(count)]
        failure = self.create_pods(rs, key, bodies, self.expectations)
        return ("FailedCreate", failure.message) if failure is not None else None

    def _delete_pods(self, rs: Obj, pods: list[Obj], count: int, key: Key) -> tuple[str, str] | None:
        ns, _ = key
        if count < len(pods):
            victims = podutil.rank_for_deletion(pods, self._related_pods(rs, pods), self.now())[:count]
        else:
            victims = pods[:count]
        pod_keys = {f"{ns}/{p['metadata']['name']}" for p in victims}
        self.expectations.expect_deletions(key, pod_keys)
        failure: tuple[str, str] | None = None
        for pod in victims:
            pod_name = pod["metadata"]["name"]
            try:
                self.store.delete(PODS, ns, pod_name)
            except errors.NotFound:
                self.expectations.deletion_observed(key, f"{ns}/{pod_name}")
                continue
            except errors.ApiError as exc:
                self.expectations.deletion_observed(key, f"{ns}/{pod_name}")
                self.event(rs, "FailedDelete", f"Error deleting: {exc.message}", type="Warning")
                failure = failure or ("FailedDelete", exc.message)
                continue
            self.event(rs, "SuccessfulDelete", f"Deleted pod: {pod_name}")
        return failure

    def _related_pods(self, rs: Obj, own: list[Obj]) -> list[Obj]:
        """Pods of every ReplicaSet under the same owner (upstream `getIndirectlyRelatedPods`)."""
        owner = podutil.controller_ref(rs)
        if owner is None:
            return own
        ns = rs["metadata"].get("namespace", "")
        # A list in the store's order, not a set: the order reaches the deletion ranking's ties, and a
        # set of strings would iterate differently in each process (hash randomisation).
        siblings = [
            s["metadata"]["uid"]
            for s in self.store.list(REPLICASETS, ns)
            if (ref := podutil.controller_ref(s)) is not None and ref.get("uid") == owner.get("uid")
        ]
        return [pod for uid in siblings for rt, pod in self.store.dependents(uid) if rt is PODS]

    def _status(self, rs: Obj, pods: list[Obj], failure: tuple[str, str] | None) -> Obj:
        now = self.now()
        template_labels = ((rs["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        min_ready = int(rs["spec"].get("minReadySeconds") or 0)
        fully_labeled = ready = available = 0
        template_items = template_labels.items()
        # `template_items <= labels.items()` is the per-key comparison below done in C; a None
        # value (absent and None compare equal there) needs the comparison itself.
        as_items = None not in template_labels.values()
        for pod in pods:
            labels = (pod.get("metadata") or {}).get("labels") or {}
            if (
                template_items <= labels.items()
                if as_items
                else all(labels.get(k) == v for k, v in template_items)
            ):
                fully_labeled += 1
            if podutil.is_ready(pod):
                ready += 1
                if min_ready <= 0 or podutil.is_available(pod, min_ready, now):
                    available += 1
        old = rs.get("status") or {}
        conditions = [dict(c) for c in old.get("conditions") or []]
        has_failure = any(c.get("type") == "ReplicaFailure" for c in conditions)
        if failure is not None and not has_failure:
            reason, message = failure
            conditions.append(
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "lastTransitionTime": rfc3339(now),
                    "reason": reason,
                    "message": message,
                }
            )
        elif failure is None and has_failure:
            conditions = [c for c in conditions if c.get("type") != "ReplicaFailure"]
        status: Obj = {
            "replicas": len(pods),
            "fullyLabeledReplicas": fully_labeled,
            "readyReplicas": ready,
            "availableReplicas": available,
            "observedGeneration": rs["metadata"].get("generation", 1),
            "conditions": conditions,
        }
        return podutil.omit_zero(
            status,
            "fullyLabeledReplicas",
            "readyReplicas",
            "availableReplicas",
            "observedGeneration",
            "conditions",
        )
