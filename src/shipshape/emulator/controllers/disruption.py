"""The disruption controller: PodDisruptionBudget status (healthy, desired, expected, allowed)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.resources import DEPLOYMENTS, PDBS, PODS, REPLICASETS, STATEFULSETS
from shipshape.emulator.store import DELETED, Obj, WatchEvent
from shipshape.kube.clock import parse_time, rfc3339
from shipshape.kube.intstr import IntOrStringError, scaled_value
from shipshape.kube.labels import Selector, SelectorError, from_label_selector

log = logging.getLogger(__name__)

_UNMANAGED = (
    "Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be unmanaged. "
    "As a result, the status of the PDB cannot be calculated correctly, which may result in undefined "
    'behavior. To account for these pods please set ".spec.minAvailable" field of the PDB to an integer '
    "value."
)
# How long an eviction's entry in status.disruptedPods keeps the pod out of currentHealthy.
DELETION_TIMEOUT = 120.0


class ExpectedCountError(Exception):
    """The pods' controllers, and so the expected pod count, cannot be determined."""


# What a sync asks of one pod version: (pod, terminating, ready, controller reference).
PodFacts = tuple[Obj, bool, bool, Mapping[str, Any] | None]
# A controller reference as a tally counts it: (uid, kind, name).
RefKey = tuple[Any, Any, Any]


def pod_facts(pod: Obj) -> PodFacts:
    return (pod, podutil.is_terminating(pod), podutil.is_ready(pod), podutil.controller_ref(pod))


class PodFactsCache:
    """Each budget's `PodFacts` of its pods, kept from one sync to the next.

    A budget's syncs read every pod it selects while usually one or two changed since the sync
    before; stored objects are replaced, never changed, so a pod version's facts stay true.
    Entries are keyed by the pod object's id and keep the object, so an id cannot be reused while
    its entry lives.
    """

    def __init__(self) -> None:
        # budget (namespace, name) -> id(pod) -> facts of the pods of its last sync
        self._by_budget: dict[tuple[str, str], dict[int, PodFacts]] = {}

    def forget(self, key: tuple[str, str]) -> None:
        self._by_budget.pop(key, None)

    def facts(self, key: tuple[str, str], pods: list[Obj]) -> list[PodFacts]:
        """The facts of `pods`, in their order."""
        before = self._by_budget.get(key) or {}
        out: list[PodFacts] = []
        for pod in pods:
            known = before.get(id(pod))
            out.append(known if known is not None and known[0] is pod else pod_facts(pod))
        self._by_budget[key] = {id(f[0]): f for f in out}
        return out


class BudgetTally:
    """A budget's selected pods, with the counts a sync needs, kept up to date from pod events.

    Built from one `list` of the store when a sync finds none (or finds the budget's selector
    changed), then changed by every pod event as it is delivered (store events are synchronous),
    so it always holds what `list(PODS, namespace, selector)` would return. A sync then costs the
    number of the pods' controllers, not of the pods.
    """

    def __init__(self, selector_spec: Any, pods: list[Obj]) -> None:
        self.selector_spec = selector_spec  # the budget's spec.selector it was built for
        # pod name -> (ready and not terminating, controller reference key or None)
        self._pods: dict[str, tuple[bool, RefKey | None]] = {}
        self.healthy = 0  # ready and not terminating
        self.unmanaged = 0  # without a controller reference
        # (uid, kind, name) of a controller reference -> (the reference, how many pods carry it)
        self.refs: dict[RefKey, tuple[Mapping[str, Any], int]] = {}
        for pod in pods:
            self.put(pod)

    def __len__(self) -> int:
        return len(self._pods)

    def state(self) -> tuple[dict[str, tuple[bool, RefKey | None]], int, int, dict[RefKey, int]]:
        """What the tally holds, to compare with one built anew."""
        return dict(self._pods), self.healthy, self.unmanaged, {k: n for k, (_, n) in self.refs.items()}

    def put(self, pod: Obj) -> None:
        """The pod (new or a new version of one held) is selected by the budget."""
        name = pod["metadata"]["name"]
        self.discard(name)
        healthy = podutil.is_ready(pod) and not podutil.is_terminating(pod)
        ref = podutil.controller_ref(pod)
        ref_key: RefKey | None = None
        if ref is None:
            self.unmanaged += 1
        else:
            ref_key = (ref.get("uid"), ref.get("kind"), ref.get("name"))
            _, count = self.refs.get(ref_key, (ref, 0))
            self.refs[ref_key] = (ref, count + 1)
        if healthy:
            self.healthy += 1
        self._pods[name] = (healthy, ref_key)

    def discard(self, name: str) -> None:
        """The pod is gone, or no longer selected by the budget."""
        held = self._pods.pop(name, None)
        if held is None:
            return
        healthy, ref_key = held
        if healthy:
            self.healthy -= 1
        if ref_key is None:
            self.unmanaged -= 1
            return
        ref, count = self.refs[ref_key]
        if count == 1:
            del self.refs[ref_key]
        else:
            self.refs[ref_key] = (ref, count - 1)


class DisruptionController(Controller):
    name = "disruption-controller"
    component = "controllermanager"
    watches = (PDBS, PODS, REPLICASETS, DEPLOYMENTS, STATEFULSETS)

    def __init__(self) -> None:
        super().__init__()
        # Each budget's compiled selector (None: invalid), with the budget object it was read from:
        # every pod change asks every budget of its namespace whether it selects the pod.
        self._selectors: dict[tuple[str, str], tuple[Obj, Selector | None]] = {}
        self._facts = PodFactsCache()
        self._tallies: dict[tuple[str, str], BudgetTally] = {}

    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        ns, name = podutil.key_of(obj)
        if event.resource is PDBS:
            self._selectors.pop((ns, name), None)
            if event.type == DELETED:
                self._tallies.pop((ns, name), None)
            return [(ns, name)]
        if event.resource is PODS:
            labels = podutil.meta(obj).get("labels")
            # The tallies follow the pod as the store holds it now (the same as the event's but
            # where a listener before this one changed it again in between).
            current = self.store.get(PODS, ns, name)
            current_labels = podutil.meta(current).get("labels") if current is not None else None
            keys = []
            for pdb in self.store.list(PDBS, ns):
                selector = self._selector_of(pdb)
                matched = selector is not None and selector.matches(labels)
                pdb_key = podutil.key_of(pdb)
                if matched:
                    keys.append(pdb_key)
                tally = self._tallies.get(pdb_key)
                if tally is None:
                    continue
                if not _same_selector(tally.selector_spec, _selector_spec(pdb)):
                    del self._tallies[pdb_key]  # the next sync builds it for the new selector
                elif current is not None and selector is not None and selector.matches(current_labels):
                    tally.put(current)
                else:
                    tally.discard(name)
            return keys
        # A controller's scale changed: the expected count of the budgets in its namespace may change.
        return [podutil.key_of(pdb) for pdb in self.store.list(PDBS, ns)]

    def _selector_of(self, pdb: Obj) -> Selector | None:
        key = podutil.key_of(pdb)
        kept = self._selectors.get(key)
        if kept is not None and kept[0] is pdb:
            return kept[1]
        try:
            selector: Selector | None = from_label_selector((pdb.get("spec") or {}).get("selector"))
        except SelectorError:
            selector = None
        self._selectors[key] = (pdb, selector)
        return selector

    def reconcile(self, key: tuple[str, str]) -> None:
        ns, name = key
        pdb = self.store.get(PDBS, ns, name)
        if pdb is None:
            self._facts.forget(key)
            self._tallies.pop(key, None)
            return
        spec_selector = _selector_spec(pdb)
        try:
            selector = from_label_selector(spec_selector)
        except SelectorError as exc:
            self._fail_safe(pdb, str(exc))
            return
        tally = self._tallies.get(key)
        if tally is not None and _same_selector(tally.selector_spec, spec_selector):
            if not (pdb.get("status") or {}).get("disruptedPods") and self._sync_from_tally(
                pdb, selector, tally
            ):
                return
            pods = self.store.list(PODS, ns, selector=selector)
        else:
            pods = self.store.list(PODS, ns, selector=selector)
            self._tallies[key] = BudgetTally(spec_selector, pods)
        self._sync(key, pdb, selector, pods)

    def _sync_from_tally(self, pdb: Obj, selector: Selector, tally: BudgetTally) -> bool:
        """`_sync` from the budget's tally, for a budget without pending disruptions.

        Returns False, having done nothing, where the pods' order matters to the outcome (a pod
        whose controller is not found names the first such pod) or the count fails: `_sync` then
        reads the pods.
        """
        try:
            counted = self._expected_pod_count(pdb, len(tally), lambda: self._tally_scale(pdb, tally))
        except IntOrStringError:
            return False
        if counted is None:
            return False
        expected, desired, unmanaged = counted
        if not len(tally):
            self.event(pdb, "NoPods", "No matching pods found")
        if unmanaged:
            self._unmanaged_event(pdb, selector)
        self._update_status(pdb, tally.healthy, desired, expected, {})
        return True

    def _tally_scale(self, pdb: Obj, tally: BudgetTally) -> tuple[int, bool] | None:
        """`_expected_scale` from the tally's controller references; None where one is not found."""
        ns = pdb["metadata"].get("namespace", "")
        scales: dict[str, int] = {}
        for ref, _ in tally.refs.values():
            found = self._controller_scale(ref, ns)
            if found is None:
                return None
            uid, scale = found
            scales[uid] = scale
        return sum(scales.values()), tally.unmanaged > 0

    def _sync(self, key: tuple[str, str], pdb: Obj, selector: Selector, pods: list[Obj]) -> None:
        if not pods:
            self.event(pdb, "NoPods", "No matching pods found")
        facts = self._facts.facts(key, pods)
        try:
            counted = self._expected_pod_count(pdb, len(facts), lambda: self._expected_scale(facts))
        except (ExpectedCountError, IntOrStringError) as exc:
            self.event(
                pdb,
                "CalculateExpectedPodCountFailed",
                f"Failed to calculate the number of expected pods: {exc}",
                type="Warning",
            )
            self._fail_safe(pdb, str(exc))
            return
        assert counted is not None  # `_expected_scale` raises instead
        expected, desired, unmanaged = counted
        if unmanaged:
            self._unmanaged_event(pdb, selector)
        now = self.now()
        disrupted, recheck = _disrupted_pods(pdb, pods, now)
        healthy = _count_healthy(facts, disrupted, now)
        self._update_status(pdb, healthy, desired, expected, disrupted)
        if recheck is not None:
            self.enqueue(key, after=max(0.0, recheck - now) + 1.0)

    # ---- expected count -------------------------------------------------------------------------
    def _unmanaged_event(self, pdb: Obj, selector: Selector) -> None:
        self.event(pdb, "UnmanagedPods", _UNMANAGED.format(selector=_selector_text(selector)), type="Warning")

    def _expected_pod_count(
        self, pdb: Obj, count: int, scale: Callable[[], tuple[int, bool] | None]
    ) -> tuple[int, int, bool] | None:
        """(expectedPods, desiredHealthy, whether some pod is unmanaged) as upstream
        `getExpectedPodCount`, for `count` pods whose controllers' scale `scale` sums (None: not
        known, and so neither is the answer)."""
        spec = pdb.get("spec") or {}
        if spec.get("maxUnavailable") is not None:
            scaled = scale()
            if scaled is None:
                return None
            expected, unmanaged = scaled
            unavailable = scaled_value(spec["maxUnavailable"], expected, round_up=True)
            return expected, max(0, expected - unavailable), unmanaged
        min_available = spec.get("minAvailable")
        if isinstance(min_available, int) and not isinstance(min_available, bool):
            return count, min_available, False
        if isinstance(min_available, str):
            scaled = scale()
            if scaled is None:
                return None
            expected, unmanaged = scaled
            return expected, scaled_value(min_available, expected, round_up=True), unmanaged
        return 0, 0, False

    def _expected_scale(self, pods: list[PodFacts]) -> tuple[int, bool]:
        scales: dict[str, int] = {}
        unmanaged: list[str] = []
        # The controller refs already resolved: a Deployment's pods point at its ReplicaSets, whose
        # uids are not the keys of `scales` (the Deployment's is), so each would be looked up again.
        resolved: set[Any] = set()
        for pod, _, _, ref in pods:
            if ref is None:
                unmanaged.append(pod["metadata"]["name"])
                continue
            ref_uid = ref.get("uid")
            if ref_uid in resolved or ref_uid in scales:
                continue
            resolved.add(ref_uid)
            found = self._controller_scale(ref, pod["metadata"].get("namespace", ""))
            if found is None:
                raise ExpectedCountError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
            uid, scale = found
            scales[uid] = scale
        return sum(scales.values()), bool(unmanaged)

    def _controller_scale(self, ref: Mapping[str, Any], ns: str) -> tuple[str, int] | None:
        """The scale of a pod's controller: a Deployment (through its ReplicaSet), ReplicaSet, StatefulSet."""
        kind, name, uid = ref.get("kind"), str(ref.get("name")), ref.get("uid")
        if kind == "ReplicaSet":
            rs = self.store.get(REPLICASETS, ns, name)
            if rs is None or rs["metadata"]["uid"] != uid:
                return None
            owner = podutil.controller_ref(rs)
            if owner is not None and owner.get("kind") == "Deployment":
                d = self.store.get(DEPLOYMENTS, ns, str(owner.get("name")))
                if d is None or d["metadata"]["uid"] != owner.get("uid"):
                    return None
                return d["metadata"]["uid"], int(d["spec"].get("replicas", 1))
            return rs["metadata"]["uid"], int(rs["spec"].get("replicas", 1))
        if kind == "StatefulSet":
            sts = self.store.get(STATEFULSETS, ns, name)
            if sts is None or sts["metadata"]["uid"] != uid:
                return None
            return sts["metadata"]["uid"], int(sts["spec"].get("replicas", 1))
        return None

    # ---- status ---------------------------------------------------------------------------------
    def _update_status(
        self, pdb: Obj, healthy: int, desired: int, expected: int, disrupted: dict[str, str]
    ) -> None:
        allowed = healthy - desired
        if expected <= 0 or allowed <= 0:
            allowed = 0
        generation = pdb["metadata"].get("generation", 1)
        old = pdb.get("status") or {}
        status: Obj = {
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": allowed,
            "observedGeneration": generation,
            "conditions": [dict(c) for c in old.get("conditions") or []],
        }
        if disrupted:
            status["disruptedPods"] = disrupted
        if allowed > 0:
            cond = _condition("True", "SufficientPods", "", generation)
        else:
            cond = _condition("False", "InsufficientPods", "", generation)
        _set_condition(status, cond, rfc3339(self.now()))
        self.write_status(PDBS, pdb, status)

    def _fail_safe(self, pdb: Obj, message: str) -> None:
        status = dict(pdb.get("status") or {})
        status["disruptionsAllowed"] = 0
        status["conditions"] = [dict(c) for c in status.get("conditions") or []]
        cond = _condition("False", "SyncFailed", message, int(status.get("observedGeneration") or 0))
        _set_condition(status, cond, rfc3339(self.now()))
        self.write_status(PDBS, pdb, status)


def _selector_spec(pdb: Obj) -> Any:
    return (pdb.get("spec") or {}).get("selector")


def _same_selector(a: Any, b: Any) -> bool:
    """Whether two spec.selector values are the same (the same object, as usual, or equal)."""
    return a is b or a == b


def _selector_text(selector: Selector) -> str:
    parts = []
    for req in selector.requirements:
        if req.operator == "In" and len(req.values) == 1:
            parts.append(f"{req.key}={req.values[0]}")
        elif req.operator == "Exists":
            parts.append(req.key)
        elif req.operator == "DoesNotExist":
            parts.append(f"!{req.key}")
        else:
            parts.append(f"{req.key} {req.operator.lower()} ({','.join(req.values)})")
    return ",".join(parts)


def _disrupted_pods(pdb: Obj, pods: list[Obj], now: float) -> tuple[dict[str, str], float | None]:
    """Entries of status.disruptedPods still pending (pod present, not deleted, under 2 minutes old)."""
    recorded: Mapping[str, str] = (pdb.get("status") or {}).get("disruptedPods") or {}
    result: dict[str, str] = {}
    recheck: float | None = None
    if not recorded:
        return result, recheck
    for pod in pods:
        name = pod["metadata"]["name"]
        if podutil.is_terminating(pod) or name not in recorded:
            continue
        expected_deletion = parse_time(recorded[name]) + DELETION_TIMEOUT
        if expected_deletion < now:
            continue  # it was not deleted after all: it counts again
        result[name] = recorded[name]
        recheck = expected_deletion if recheck is None else min(recheck, expected_deletion)
    return result, recheck


def _count_healthy(pods: list[PodFacts], disrupted: Mapping[str, str], now: float) -> int:
    if not disrupted:  # the common case, without the per-pod lookups below
        return sum(1 for _, terminating, ready, _ in pods if ready and not terminating)
    healthy = 0
    for pod, terminating, ready, _ in pods:
        if terminating:
            continue
        name = pod["metadata"]["name"]
        if name in disrupted and parse_time(disrupted[name]) + DELETION_TIMEOUT > now:
            continue
        if ready:
            healthy += 1
    return healthy


def _condition(status: str, reason: str, message: str, generation: int) -> Obj:
    return {
        "type": "DisruptionAllowed",
        "status": status,
        "observedGeneration": generation,
        "reason": reason,
        "message": message,
    }


def _set_condition(status: Obj, cond: Obj, now: str) -> None:
    """metav1 `SetStatusCondition`: the transition time changes only when the status does."""
    conditions: list[Obj] = status["conditions"]
    for existing in conditions:
        if existing.get("type") == cond["type"]:
            if existing.get("status") != cond["status"]:
                existing["lastTransitionTime"] = now
            existing.update({k: v for k, v in cond.items() if k != "type"})
            return
    conditions.append({**cond, "lastTransitionTime": now})
