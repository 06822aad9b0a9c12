"""The ReplicaSet controller: keep `spec.replicas` pods of the template, report their status."""

from __future__ import annotations

import logging
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import PodOwnerController
from shipshape.emulator.controllers.claims import claim
from shipshape.emulator.resources import PODS, REPLICASETS
from shipshape.emulator.store import DELETED, Obj, Store, WatchEvent
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


def fully_labeled(template_labels: dict[str, Any], labels: dict[str, Any]) -> bool:
    """Whether a pod carries every label of the template (values equal; a None value as absent)."""
    if None not in template_labels.values():
        # The per-key comparison below done in C (absent and None compare equal there).
        return template_labels.items() <= labels.items()
    return all(labels.get(k) == v for k, v in template_labels.items())


# What a sync asks of one pod version: (pod, active, controlled by the set and matched by its
# selector, fully labeled, ready).
PodFacts = tuple[Obj, bool, bool, bool, bool]


def template_labels_of(rs: Obj) -> dict[str, Any]:
    labels: dict[str, Any] = ((rs["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
    return labels


class PodFactsCache:
    """Each ReplicaSet's `PodFacts` of its candidate pods, kept from one sync to the next.

    A set's syncs walk its every pod (150 to 300 here) while usually one or two changed since the
    sync before. Stored objects are replaced, never changed, so the facts of a pod version stay
    true while the set's spec (selector, template labels) is the same object; entries are keyed by
    the pod object's id and keep the object, so an id cannot be reused while its entry lives.
    """

    def __init__(self) -> None:
        # ReplicaSet uid -> (its spec object, id(pod) -> facts of the candidates of its last sync)
        self._by_set: dict[str, tuple[Obj, dict[int, PodFacts]]] = {}

    def forget(self, uid: str) -> None:
        self._by_set.pop(uid, None)

    def facts(self, rs: Obj, selector: Selector, candidates: list[Obj]) -> dict[int, PodFacts]:
        """The facts of `candidates` (by pod id), from the last sync's where the pod is unchanged."""
        uid, spec = rs["metadata"]["uid"], rs["spec"]
        kept = self._by_set.get(uid)
        before = kept[1] if kept is not None and kept[0] is spec else {}
        template_labels = template_labels_of(rs)
        out: dict[int, PodFacts] = {}
        for pod in candidates:
            known = before.get(id(pod))
            out[id(pod)] = (
                known
                if known is not None and known[0] is pod
                else pod_facts(pod, uid, selector, template_labels)
            )
        self._by_set[uid] = (spec, out)
        return out

    def claim(
        self, store: Store, rs: Obj, selector: Selector, candidates: list[Obj]
    ) -> tuple[list[Obj], dict[int, PodFacts]]:
        """`claim` of the active candidates, with their facts: the same pods, adoptions and releases.

        A pod the set controls and selects is claimed without a write whatever else holds, so only
        the others go through `claim` (one at a time, in the same order).
        """
        facts = self.facts(rs, selector, candidates)
        pods: list[Obj] = []
        for pod in candidates:
            _, active, claimed, _, _ = facts[id(pod)]
            if not active:
                continue
            if claimed:
                pods.append(pod)
            else:
                pods += claim(store, PODS, rs, [pod], selector)
        return pods, facts


def pod_facts(pod: Obj, owner_uid: str, selector: Selector, template_labels: dict[str, Any]) -> PodFacts:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    ref = podutil.controller_ref(pod)
    return (
        pod,
        podutil.is_active(pod),
        ref is not None and ref.get("uid") == owner_uid and selector.matches(labels),
        fully_labeled(template_labels, labels),
        podutil.is_ready(pod),
    )


class SetTally:
    """A ReplicaSet's dependent pods (any owner reference to it), with the counts its status needs,
    kept up to date from pod events.

    Built from the store's owner index for one spec object of the set (its selector and template
    labels decide the facts), then changed by every pod event as the store delivers it, so a sync
    where every active dependent is the set's own and no orphan may be adopted reads the counts
    instead of walking the pods.
    """

    def __init__(self, rs: Obj, selector: Selector, pods: list[Obj]) -> None:
        self.spec = rs["spec"]
        self.uid = str(rs["metadata"]["uid"])
        self.selector = selector
        self.template_labels = template_labels_of(rs)
        # pod key -> (active and claimed, active and not claimed, fully labeled, ready)
        self._pods: dict[Key, tuple[bool, bool, bool, bool]] = {}
        self.claimed = 0  # active pods the set controls and selects: its replicas
        self.unclaimed = 0  # other active dependents: a sync would try to claim them
        self.labeled = 0  # of the claimed
        self.ready = 0  # of the claimed
        for pod in pods:
            self.put(pod)

    def put(self, pod: Obj) -> None:
        key = podutil.key_of(pod)
        self.discard(key)
        _, active, claimed, labeled, ready = pod_facts(pod, self.uid, self.selector, self.template_labels)
        row = (
            active and claimed,
            active and not claimed,
            active and claimed and labeled,
            active and claimed and ready,
        )
        self._pods[key] = row
        self._count(row, 1)

    def discard(self, key: Key) -> None:
        row = self._pods.pop(key, None)
        if row is not None:
            self._count(row, -1)

    def _count(self, row: tuple[bool, bool, bool, bool], sign: int) -> None:
        claimed, unclaimed, labeled, ready = row
        self.claimed += sign * claimed
        self.unclaimed += sign * unclaimed
        self.labeled += sign * labeled
        self.ready += sign * ready

    def state(self) -> tuple[dict[Key, tuple[bool, bool, bool, bool]], int, int, int, int]:
        """What the tally holds, to compare with one built anew."""
        return dict(self._pods), self.claimed, self.unclaimed, self.labeled, self.ready


class ReplicaSetController(PodOwnerController):
    name = "replicaset-controller"
    watches = (REPLICASETS, PODS)

    def __init__(self) -> None:
        super().__init__()
        # The last creation/deletion failure, shown as ReplicaFailure until a later one succeeds.
        self._failing: dict[Key, tuple[str, str]] = {}
        self._facts = PodFactsCache()
        self._tallies: dict[str, SetTally] = {}  # by ReplicaSet uid
        # pod key -> uids of the tallies that may hold it (some perhaps since dropped or rebuilt)
        self._held_by: dict[Key, set[str]] = {}

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
                uid = str(podutil.meta(obj).get("uid", ""))
                self._facts.forget(uid)
                self._tallies.pop(uid, None)
            return [(ns, name)]
        self._follow(obj)
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

    def _follow(self, pod: Obj) -> None:
        """Bring the tallies holding the pod, or that should, in step with the store's version of it."""
        if not self._tallies:
            return
        key = podutil.key_of(pod)
        current = self.store.get(PODS, *key)
        owners = (
            {str(o.get("uid")) for o in podutil.meta(current).get("ownerReferences") or []}
            if current is not None
            else set()
        )
        holders = self._held_by.pop(key, set())
        now_held: set[str] = set()
        for uid in holders | owners:
            tally = self._tallies.get(uid)
            if tally is None:
                continue
            if uid in owners and current is not None:
                tally.put(current)
                now_held.add(uid)
            else:
                tally.discard(key)
        if now_held:
            self._held_by[key] = now_held

    def _tally(self, rs: Obj, selector: Selector) -> tuple[SetTally, bool]:
        """The set's tally for its current spec, and whether it was built just now."""
        uid = str(rs["metadata"]["uid"])
        tally = self._tallies.get(uid)
        if tally is not None and tally.spec is rs["spec"]:
            return tally, False
        pods = self.store.dependents_of(uid, PODS)
        tally = self._tallies[uid] = SetTally(rs, selector, pods)
        for pod in pods:
            self._held_by.setdefault(podutil.key_of(pod), set()).add(uid)
        return tally, True

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
        if self._sync_from_tally(key, rs, selector, needs_sync):
            return
        pods, facts = self._facts.claim(self.store, rs, selector, self._orphans.candidates(self.store, rs))
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
        status = self._status(current, pods, failure, facts if current["spec"] is rs["spec"] else None)
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

    def _sync_from_tally(self, key: Key, rs: Obj, selector: Selector, needs_sync: bool) -> bool:
        """`reconcile` from the set's tally where it would neither claim, create nor delete a pod,
        and availability is readiness (no minReadySeconds). False, having done nothing, elsewhere."""
        tally, built = self._tally(rs, selector)
        if built or tally.unclaimed or self._orphans.any_in(key[0]):
            return False
        if int(rs["spec"].get("minReadySeconds") or 0) > 0:
            return False
        manage = needs_sync and not podutil.is_terminating(rs)
        if manage and tally.claimed != int(rs["spec"].get("replicas", 1)):
            return False
        if manage:
            self._failing.pop(key, None)  # nothing to create or delete
        late = self.take_late_failure(key)
        if late is not None:
            self._failing[key] = ("FailedCreate", late.message)
        status = self._status_of_counts(
            rs, tally.claimed, tally.labeled, tally.ready, tally.ready, self._failing.get(key)
        )
        self.write_status(REPLICASETS, rs, status)
        return True

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

    def _status(
        self,
        rs: Obj,
        pods: list[Obj],
        failure: tuple[str, str] | None,
        facts: dict[int, PodFacts] | None = None,
    ) -> Obj:
        """The set's status over `pods`; `facts` (for this spec of the set) saves reading most pods."""
        now = self.now()
        template_labels = template_labels_of(rs)
        min_ready = int(rs["spec"].get("minReadySeconds") or 0)
        labeled = ready = available = 0
        for pod in pods:
            known = facts.get(id(pod)) if facts is not None else None
            if known is not None and known[0] is pod:
                is_labeled, is_ready = known[3], known[4]
            else:  # e.g. a pod adopted during this sync: a new version
                is_labeled = fully_labeled(template_labels, (pod.get("metadata") or {}).get("labels") or {})
                is_ready = podutil.is_ready(pod)
            if is_labeled:
                labeled += 1
            if is_ready:
                ready += 1
                if min_ready <= 0 or podutil.is_available(pod, min_ready, now):
                    available += 1
        return self._status_of_counts(rs, len(pods), labeled, ready, available, failure)

    def _status_of_counts(
        self,
        rs: Obj,
        replicas: int,
        labeled: int,
        ready: int,
        available: int,
        failure: tuple[str, str] | None,
    ) -> Obj:
        now = self.now()
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
            "replicas": replicas,
            "fullyLabeledReplicas": labeled,
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
