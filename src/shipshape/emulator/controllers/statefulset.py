"""The StatefulSet controller: ordinal pods, OrderedReady/Parallel, rolling updates with partition.

Follows upstream's `updateStatefulSet` (v1.32, MaxUnavailableStatefulSet off): replicas
[start, start+replicas) are created at the current or update revision, failed ones recreated,
and in OrderedReady mode nothing proceeds past a pod that is not Running, Ready and available;
condemned pods go from the highest ordinal, one at a time when ordered; a RollingUpdate then
deletes the highest-ordinal pod not at the update revision (down to the partition), one at a
time, waiting for each replacement to be healthy. volumeClaimTemplates are not materialised:
no PersistentVolumeClaims are created.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.controllers.claims import OrphanIndex, claim
from shipshape.emulator.controllers.history import POD_REVISION_LABEL, History, template_of
from shipshape.emulator.controllers.replicaset import selector_of
from shipshape.emulator.resources import CONTROLLERREVISIONS, PODS, STATEFULSETS
from shipshape.emulator.store import DELETED, Obj, WatchEvent
from shipshape.kube import errors

log = logging.getLogger(__name__)

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
_ORDINAL = re.compile(r"^(.*)-(\d+)$")

Key = tuple[str, str]


def ordinal_of(pod: Obj) -> tuple[str, int]:
    """(parent name, ordinal) from a pod name; ordinal -1 when the name has none."""
    match = _ORDINAL.match(str(pod["metadata"]["name"]))
    return (match.group(1), int(match.group(2))) if match else ("", -1)


def start_ordinal(sts: Obj) -> int:
    return int(((sts.get("spec") or {}).get("ordinals") or {}).get("start") or 0)


def revision_of(pod: Obj) -> str:
    return str((pod["metadata"].get("labels") or {}).get(POD_REVISION_LABEL, ""))


def is_healthy(pod: Obj) -> bool:
    return podutil.is_running_and_ready(pod) and not podutil.is_terminating(pod)


class StatefulSetController(Controller):
    name = "statefulset-controller"
    watches = (STATEFULSETS, PODS, CONTROLLERREVISIONS)

    def __init__(self) -> None:
        super().__init__()
        self._creating: set[tuple[str, str]] = set()  # pods whose creation is in flight
        self._orphans = OrphanIndex(PODS)

    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        ns, name = podutil.key_of(obj)
        self._orphans.observe(event)
        if event.resource is STATEFULSETS:
            return [(ns, name)]
        ref = podutil.controller_ref(obj)
        if ref is not None:
            return [(ns, str(ref["name"]))] if ref.get("kind") == "StatefulSet" else []
        if event.type == DELETED or event.resource is not PODS:
            return []
        labels = podutil.meta(obj).get("labels")
        return [
            podutil.key_of(s)
            for s in self.store.list(STATEFULSETS, ns)
            if (sel := selector_of(s)) is not None and not sel.empty and sel.matches(labels)
        ]

    def reconcile(self, key: Key) -> None:
        ns, name = key
        sts = self.store.get(STATEFULSETS, ns, name)
        if sts is None:
            return
        selector = selector_of(sts)
        if selector is None or selector.empty:
            return
        members = [p for p in self._orphans.candidates(self.store, sts) if ordinal_of(p)[0] == name]
        pods = claim(self.store, PODS, sts, members, selector)
        history = History(self.store)
        current_name = (sts.get("status") or {}).get("currentRevision")
        current, update, collision, revisions = history.sync(sts, current_name)
        status = self._update(sts, pods, current, update, collision)
        self._write(sts, status)
        self._truncate_history(sts, history, revisions, current, update)
        min_ready = int(sts["spec"].get("minReadySeconds") or 0)
        if min_ready > 0 and status.get("availableReplicas", 0) != int(sts["spec"].get("replicas", 1)):
            wait = podutil.available_in(self.store.list(PODS, ns, selector=selector), min_ready, self.now())
            if wait is not None:
                self.enqueue(key, after=wait)

    # ---- the update algorithm -------------------------------------------------------------------
    def _new_pod(self, sts: Obj, revision: Obj, ordinal: int) -> Obj:
        """An uncreated pod for an ordinal at a revision (upstream `newStatefulSetPod` + `setPodRevision`)."""
        name = f"{sts['metadata']['name']}-{ordinal}"
        pod = podutil.pod_from_template(template_of(revision), sts, "")
        md = pod["metadata"]
        del md["generateName"]
        md["name"] = name
        md["labels"][POD_NAME_LABEL] = name
        md["labels"][POD_INDEX_LABEL] = str(ordinal)
        md["labels"][POD_REVISION_LABEL] = revision["metadata"]["name"]
        pod["spec"]["hostname"] = name
        if sts["spec"].get("serviceName"):
            pod["spec"]["subdomain"] = sts["spec"]["serviceName"]
        pod["_uncreated"] = True
        return pod

    def _versioned_pod(self, sts: Obj, current: Obj, update: Obj, ordinal: int) -> Obj:
        strategy = sts["spec"].get("updateStrategy") or {}
        rolling = strategy.get("rollingUpdate")
        start = start_ordinal(sts)
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            current_replicas = int((sts.get("status") or {}).get("currentReplicas") or 0)
            limit = (
                start + int(rolling.get("partition") or 0)
                if rolling is not None
                else start + current_replicas
            )
            if ordinal < limit:
                return self._new_pod(sts, current, ordinal)
        return self._new_pod(sts, update, ordinal)

    def _update(self, sts: Obj, pods: list[Obj], current: Obj, update: Obj, collision: int) -> Obj:
        spec = sts["spec"]
        count = int(spec.get("replicas", 1))
        start = start_ordinal(sts)
        min_ready = int(spec.get("minReadySeconds") or 0)
        status: Obj = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "currentRevision": current["metadata"]["name"],
            "updateRevision": update["metadata"]["name"],
            "collisionCount": collision,
        }
        replicas: list[Obj | None] = [None] * count
        condemned: list[Obj] = []
        for pod in pods:
            ordinal = ordinal_of(pod)[1]
            if start <= ordinal < start + count:
                replicas[ordinal - start] = pod
            elif ordinal >= 0:
                condemned.append(pod)
        slots: list[Obj] = [
            pod if pod is not None else self._versioned_pod(sts, current, update, start + i)
            for i, pod in enumerate(replicas)
        ]
        condemned.sort(key=lambda p: ordinal_of(p)[1], reverse=True)
        first_unhealthy: Obj | None = next((p for p in slots if not is_healthy(p)), None)
        if first_unhealthy is None:
            first_unhealthy = next((p for p in reversed(condemned) if not is_healthy(p)), None)

        def finish() -> Obj:
            return self._status(status, [*slots, *condemned], current, update, min_ready)

        if podutil.is_terminating(sts):
            return finish()
        monotonic = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"

        for i in range(len(slots)):
            if (
                self._process_replica(sts, current, update, slots, i, start, monotonic, min_ready)
                and monotonic
            ):
                return finish()
        for pod in condemned:
            if self._process_condemned(sts, pod, first_unhealthy, monotonic, min_ready) and monotonic:
                return finish()
        result = finish()
        strategy = spec.get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") == "OnDelete":
            return result
        partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
        for target in range(len(slots) - 1, partition - 1, -1):
            pod = slots[target]
            if revision_of(pod) != update["metadata"]["name"] and not podutil.is_terminating(pod):
                self._delete_pod(sts, pod)
                result["currentReplicas"] = int(result.get("currentReplicas") or 0) - 1
                return result
            if not is_healthy(pod):
                return result
        return result

    def _process_replica(
        self,
        sts: Obj,
        current: Obj,
        update: Obj,
        slots: list[Obj],
        i: int,
        start: int,
        monotonic: bool,
        min_ready: int,
    ) -> bool:
        """Upstream `processReplica`: True when the pass must stop here (in ordered mode)."""
        pod = slots[i]
        if (
            not pod.get("_uncreated")
            and podutil.phase(pod) in podutil.TERMINAL_PHASES
            and not podutil.is_terminating(pod)
        ):
            set_name = sts["metadata"]["name"]
            ns = sts["metadata"].get("namespace", "")
            if podutil.phase(pod) == "Failed":
                message = f"StatefulSet {ns}/{set_name} is recreating failed Pod {pod['metadata']['name']}"
                self.event(sts, "RecreatingFailedPod", message, type="Warning")
            else:
                message = (
                    f"StatefulSet {ns}/{set_name} is recreating terminated Pod {pod['metadata']['name']}"
                )
                self.event(sts, "RecreatingTerminatedPod", message)
            if not self._delete_pod(sts, pod):
                return True
            slots[i] = pod = self._versioned_pod(sts, current, update, start + i)
        if pod.get("_uncreated"):
            # A pod of the same name may still be terminating: wait for it to be gone.
            ns = sts["metadata"].get("namespace", "")
            if self.store.get(PODS, ns, pod["metadata"]["name"]) is not None:
                return True
            self._create_pod(sts, pod)
            return True
        if podutil.is_terminating(pod) and monotonic:
            return True
        if not podutil.is_running_and_ready(pod) and monotonic:
            return True
        if not podutil.is_available(pod, min_ready, self.now()) and monotonic:
            return True
        self._fix_identity(sts, pod, start + i)
        return False

    def _process_condemned(
        self, sts: Obj, pod: Obj, first_unhealthy: Obj | None, monotonic: bool, min_ready: int
    ) -> bool:
        if podutil.is_terminating(pod):
            return monotonic
        is_first = (
            first_unhealthy is not None and first_unhealthy["metadata"]["name"] == pod["metadata"]["name"]
        )
        if not podutil.is_running_and_ready(pod) and monotonic and not is_first:
            return True
        if not podutil.is_available(pod, min_ready, self.now()) and monotonic and not is_first:
            return True
        self._delete_pod(sts, pod)
        return monotonic

    # ---- pod writes -------------------------------------------------------------------------------
    def _create_pod(self, sts: Obj, pod: Obj) -> None:
        ns = sts["metadata"].get("namespace", "")
        name = pod["metadata"]["name"]
        if (ns, name) in self._creating:
            return
        body = {k: v for k, v in pod.items() if k != "_uncreated"}
        set_name = sts["metadata"]["name"]
        self._creating.add((ns, name))

        def done(created: Obj | None, error: errors.ApiError | None) -> None:
            self._creating.discard((ns, name))
            if error is not None:
                message = f"create Pod {name} in StatefulSet {set_name} failed error: {error.message}"
                self.event(sts, "FailedCreate", message, type="Warning")
                self.retry_later((ns, set_name))
            else:
                self.forget((ns, set_name))
                self.event(sts, "SuccessfulCreate", f"create Pod {name} in StatefulSet {set_name} successful")

        self.submit_pod_create(ns, body, done)

    def _delete_pod(self, sts: Obj, pod: Obj) -> bool:
        ns, name = podutil.key_of(pod)
        set_name = sts["metadata"]["name"]
        try:
            self.store.delete(PODS, ns, name)
        except errors.NotFound:
            return True
        except errors.ApiError as exc:
            message = f"delete Pod {name} in StatefulSet {set_name} failed error: {exc.message}"
            self.event(sts, "FailedDelete", message, type="Warning")
            return False
        self.event(sts, "SuccessfulDelete", f"delete Pod {name} in StatefulSet {set_name} successful")
        return True

    def _fix_identity(self, sts: Obj, pod: Obj, ordinal: int) -> None:
        labels = pod["metadata"].get("labels") or {}
        name = pod["metadata"]["name"]
        if labels.get(POD_NAME_LABEL) == name and labels.get(POD_INDEX_LABEL) == str(ordinal):
            return

        def change(new: Obj) -> None:
            new_labels = new["metadata"].setdefault("labels", {})
            new_labels[POD_NAME_LABEL] = name
            new_labels[POD_INDEX_LABEL] = str(ordinal)

        ns = sts["metadata"].get("namespace", "")
        self.store.mutate(PODS, ns, name, change)

    # ---- status and history -------------------------------------------------------------------------
    def _status(self, base: Obj, pods: list[Obj], current: Obj, update: Obj, min_ready: int) -> Obj:
        status = dict(base)
        counts = {
            "replicas": 0,
            "readyReplicas": 0,
            "availableReplicas": 0,
            "currentReplicas": 0,
            "updatedReplicas": 0,
        }
        now = self.now()
        for pod in pods:
            if pod.get("_uncreated"):
                continue
            counts["replicas"] += 1
            if podutil.is_running_and_ready(pod):
                counts["readyReplicas"] += 1
                if podutil.is_available(pod, min_ready, now):
                    counts["availableReplicas"] += 1
            if not podutil.is_terminating(pod):
                if revision_of(pod) == current["metadata"]["name"]:
                    counts["currentReplicas"] += 1
                if revision_of(pod) == update["metadata"]["name"]:
                    counts["updatedReplicas"] += 1
        status.update(counts)
        return status

    def _write(self, sts: Obj, status: Obj) -> None:
        strategy = (sts["spec"].get("updateStrategy") or {}).get("type", "RollingUpdate")
        if (
            strategy == "RollingUpdate"
            and status["updatedReplicas"] == status["replicas"]
            and status["readyReplicas"] == status["replicas"]
        ):
            status["currentReplicas"] = status["updatedReplicas"]
            status["currentRevision"] = status["updateRevision"]
        rendered = podutil.omit_zero(
            dict(status),
            "observedGeneration",
            "readyReplicas",
            "currentReplicas",
            "updatedReplicas",
        )
        self.write_status(STATEFULSETS, sts, rendered)

    def _truncate_history(
        self, sts: Obj, history: History, revisions: list[Obj], current: Obj, update: Obj
    ) -> None:
        live = {current["metadata"]["name"], update["metadata"]["name"]}
        live |= {
            revision_of(p)
            for rt, p in self.store.dependents(sts["metadata"]["uid"])
            if rt is PODS and podutil.is_controlled_by(p, sts)
        }
        old = [rev for rev in revisions if rev["metadata"]["name"] not in live]
        limit = int(sts["spec"].get("revisionHistoryLimit", 10))
        for rev in old[: max(0, len(old) - limit)]:
            history.delete(rev)
