"""The Job controller (NonIndexed jobs): parallelism and completions, retries with backoff, limits.

Pods carry the `batch.kubernetes.io/job-tracking` finalizer; the controller counts each finished
pod once (Succeeded, or Failed — a pod being deleted before it succeeds counts as failed, as
with podReplacementPolicy TerminatingOrFailed) and removes the finalizer. Failed pods are
replaced after an exponential backoff (10 s doubling, up to 6 min) until backoffLimit is passed.
A finished Job gets SuccessCriteriaMet/Complete or FailureTarget/Failed, and is deleted
`ttlSecondsAfterFinished` later. In Indexed mode each pod runs one completion index (annotation and
label `batch.kubernetes.io/job-completion-index`, hostname `<job>-<index>`, env JOB_COMPLETION_INDEX)
and status.completedIndexes lists the finished ones. Pod failure policies, success policies and
backoffLimitPerIndex are not modelled.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import PodOwnerController
from shipshape.emulator.controllers.claims import claim
from shipshape.emulator.controllers.replicaset import selector_of
from shipshape.emulator.resources import JOBS, PODS
from shipshape.emulator.store import DELETED, Obj, WatchEvent, clone
from shipshape.kube import errors
from shipshape.kube.clock import parse_time, rfc3339

log = logging.getLogger(__name__)

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
BACKOFF_BASE = 10.0
BACKOFF_MAX = 360.0
BURST = 500
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

Key = tuple[str, str]


@dataclass(slots=True)
class _Backoff:
    failures: int = 0
    last_failure: float = 0.0


def is_finished(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


class JobController(PodOwnerController):
    name = "job-controller"
    watches = (JOBS, PODS)

    def __init__(self) -> None:
        super().__init__()
        self._backoff: dict[Key, _Backoff] = {}
        # Tracked pods removed before being counted: uid -> (outcome, completion index).
        self._vanished: dict[Key, dict[str, tuple[str, int | None]]] = {}

    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        ns, name = podutil.key_of(obj)
        self._orphans.observe(event)
        if event.resource is JOBS:
            if event.type == DELETED:
                self.expectations.forget((ns, name))
                self._backoff.pop((ns, name), None)
                self._vanished.pop((ns, name), None)
            return [(ns, name)]
        ref = podutil.controller_ref(obj)
        if ref is None or ref.get("kind") != "Job":
            return []
        key = (ns, str(ref["name"]))
        if event.type == DELETED or podutil.is_terminating(obj):
            self.expectations.deletion_observed(key, f"{ns}/{name}")
        elif event.type == "ADDED":
            self.expectations.creation_observed(key)
        if event.type == DELETED and TRACKING_FINALIZER in (obj["metadata"].get("finalizers") or []):
            outcome = "Succeeded" if podutil.phase(obj) == "Succeeded" else "Failed"
            self._vanished.setdefault(key, {})[obj["metadata"]["uid"]] = (outcome, completion_index(obj))
        return [key]

    # ---- sync -------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> None:
        ns, name = key
        job = self.store.get(JOBS, ns, name)
        if job is None:
            return
        if is_finished(job):
            self._release_finished_pods(job)
            self._schedule_ttl(job)
            return
        selector = selector_of(job)
        if selector is None or selector.empty:
            return
        pods = claim(self.store, PODS, job, self._orphans.candidates(self.store, job), selector)
        status = clone(job.get("status") or {})
        now = self.now()
        succeeded, failed, indexes = self._count_finished(key, pods)
        status["failed"] = int(status.get("failed") or 0) + failed
        indexed = job["spec"].get("completionMode") == "Indexed"
        if indexed:
            completions_total = int(job["spec"].get("completions") or 0)
            done = parse_indexes(str(status.get("completedIndexes") or ""))
            done |= {i for i in indexes if 0 <= i < completions_total}
            status["completedIndexes"] = format_indexes(done)
            status["succeeded"] = len(done)
        else:
            status["succeeded"] = int(status.get("succeeded") or 0) + succeeded
        backoff = self._backoff.setdefault(key, _Backoff())
        if failed:
            backoff.failures += failed
            backoff.last_failure = now
        if succeeded:
            backoff.failures = 0
        active = [p for p in pods if podutil.is_active(p)]
        spec = job["spec"]
        suspended = bool(spec.get("suspend"))
        if not suspended and not status.get("startTime"):
            status["startTime"] = rfc3339(now)
        completions = spec.get("completions")
        finished: tuple[str, str, str] | None = None
        if status["failed"] > int(spec.get("backoffLimit", 6)):
            finished = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif self._past_deadline(job, status, now):
            finished = ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
        elif (completions is not None and status["succeeded"] >= int(completions)) or (
            completions is None and status["succeeded"] > 0 and not active
        ):
            finished = ("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
        if finished is not None:
            for pod in active:
                self._delete(job, pod)
            self._finish(job, status, finished, len(active))
            return
        if self.expectations.satisfied(key):
            self._manage(job, key, active, status, suspended, backoff, now)
        status["active"] = len([p for p in self._owned(job) if podutil.is_active(p)])
        status["ready"] = sum(1 for p in active if podutil.is_ready(p))
        status["terminating"] = sum(1 for p in pods if podutil.is_terminating(p))
        self._set_suspended_condition(job, status, suspended)
        self._write(job, status)
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and status.get("startTime") and not suspended:
            self.enqueue(key, after=max(0.0, parse_time(status["startTime"]) + int(deadline) - now) + 0.001)

    def _owned(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        return [p for rt, p in self.store.dependents(uid) if rt is PODS and podutil.is_controlled_by(p, job)]

    def _count_finished(self, key: Key, pods: list[Obj]) -> tuple[int, int, set[int]]:
        """Newly finished tracked pods, counted once (their finalizer is removed).

        Returns (succeeded, failed, completion indexes of the succeeded ones).
        """
        succeeded = failed = 0
        indexes: set[int] = set()
        for outcome, index in self._vanished.pop(key, {}).values():
            if outcome == "Succeeded":
                succeeded += 1
                if index is not None:
                    indexes.add(index)
            else:
                failed += 1
        for pod in pods:
            if TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or []):
                continue
            phase = podutil.phase(pod)
            if phase == "Succeeded":
                succeeded += 1
                index = completion_index(pod)
                if index is not None:
                    indexes.add(index)
            elif phase == "Failed" or podutil.is_terminating(pod):
                failed += 1
            else:
                continue
            self._drop_finalizer(pod)
        return succeeded, failed, indexes

    def _drop_finalizer(self, pod: Obj) -> None:
        def drop(new: Obj) -> None:
            remaining = [f for f in new["metadata"].get("finalizers") or [] if f != TRACKING_FINALIZER]
            if remaining:
                new["metadata"]["finalizers"] = remaining
            else:
                new["metadata"].pop("finalizers", None)

        ns, name = podutil.key_of(pod)
        self.store.mutate(PODS, ns, name, drop)

    def _past_deadline(self, job: Obj, status: Obj, now: float) -> bool:
        deadline = job["spec"].get("activeDeadlineSeconds")
        if deadline is None or not status.get("startTime") or job["spec"].get("suspend"):
            return False
        return now - parse_time(status["startTime"]) >= int(deadline)

    def _manage(
        self,
        job: Obj,
        key: Key,
        active: list[Obj],
        status: Obj,
        suspended: bool,
        backoff: _Backoff,
        now: float,
    ) -> None:
        spec = job["spec"]
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        if suspended:
            want = 0
        elif completions is None:
            want = len(active) if status["succeeded"] > 0 else parallelism
        else:
            want = max(0, min(parallelism, int(completions) - status["succeeded"]))
        if spec.get("completionMode") == "Indexed":
            self._manage_indexed(job, key, active, status, want, backoff, now)
            return
        diff = len(active) - want
        if diff > 0:
            victims = podutil.rank_for_deletion(active, active, now)[:diff]
            self.expectations.expect_deletions(key, {f"{key[0]}/{p['metadata']['name']}" for p in victims})
            for pod in victims:
                self._delete(job, pod)
            return
        if diff == 0:
            return
        if self._backing_off(key, backoff, now):
            return
        self._create(job, key, [None] * min(-diff, BURST))

    def _backing_off(self, key: Key, backoff: _Backoff, now: float) -> bool:
        if backoff.failures <= 0:
            return False
        ready_at = backoff.last_failure + min(BACKOFF_BASE * 2 ** (backoff.failures - 1), BACKOFF_MAX)
        if now >= ready_at:
            return False
        self.enqueue(key, after=ready_at - now)
        return True

    def _manage_indexed(
        self, job: Obj, key: Key, active: list[Obj], status: Obj, want: int, backoff: _Backoff, now: float
    ) -> None:
        """One active pod per pending index, lowest indexes first; duplicates and finished indexes go."""
        completions = int(job["spec"].get("completions") or 0)
        done = parse_indexes(str(status.get("completedIndexes") or ""))
        by_index: dict[int, list[Obj]] = {}
        surplus: list[Obj] = []
        for pod in sorted(active, key=lambda p: (podutil.creation_time(p), p["metadata"]["name"])):
            index = completion_index(pod)
            if index is None or not 0 <= index < completions or index in done:
                surplus.append(pod)
            elif index in by_index:
                surplus.append(pod)  # a duplicate: the oldest pod of an index stays
            else:
                by_index[index] = [pod]
        keep = sorted(by_index)
        while len(keep) > want:
            surplus.append(by_index[keep.pop()][0])  # highest indexes stop first
        if surplus:
            self.expectations.expect_deletions(key, {f"{key[0]}/{p['metadata']['name']}" for p in surplus})
            for pod in surplus:
                self._delete(job, pod)
            return
        missing = want - len(keep)
        if missing <= 0 or self._backing_off(key, backoff, now):
            return
        pending = [i for i in range(completions) if i not in done and i not in by_index][:missing]
        self._create(job, key, pending[:BURST])

    def _create(self, job: Obj, key: Key, indexes: Sequence[int | None]) -> None:
        """Create one pod per entry; an int entry is the pod's completion index (Indexed mode)."""
        template = clone(job["spec"].get("template") or {})
        template_md = template.setdefault("metadata", {})
        template_md["finalizers"] = [*(template_md.get("finalizers") or []), TRACKING_FINALIZER]
        bodies = []
        for index in indexes:
            if index is None:
                body = podutil.pod_from_template(template, job, f"{key[1]}-")
            else:
                body = podutil.pod_from_template(template, job, f"{key[1]}-{index}-")
                _set_completion_index(body, key[1], index)
            bodies.append(body)
        if self.create_pods(job, key, bodies, self.expectations) is not None:
            self.retry_later(key)

    def _delete(self, job: Obj, pod: Obj) -> None:
        """Delete a pod the Job no longer wants; it does not count as a failure."""
        ns, name = podutil.key_of(pod)
        if TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
            self._drop_finalizer(pod)
        try:
            self.store.delete(PODS, ns, name)
        except errors.NotFound:
            return
        self.event(job, "SuccessfulDelete", f"Deleted pod: {name}")

    # ---- finishing --------------------------------------------------------------------------
    def _finish(self, job: Obj, status: Obj, finished: tuple[str, str, str], stopped: int) -> None:
        kind, reason, message = finished
        now = rfc3339(self.now())
        interim = "SuccessCriteriaMet" if kind == "Complete" else "FailureTarget"
        conditions = [c for c in status.get("conditions") or [] if c.get("type") not in (interim, kind)]
        for cond_type in (interim, kind):
            conditions.append(
                {
                    "type": cond_type,
                    "status": "True",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                    "reason": reason,
                    "message": message,
                }
            )
        status["conditions"] = conditions
        status["active"] = 0
        status["ready"] = 0
        status["terminating"] = stopped
        if kind == "Complete":
            status["completionTime"] = now
            self.event(job, "Completed", "Job completed")
        else:
            self.event(job, reason, message, type="Warning")
        self._write(job, status)
        updated = self.store.get(JOBS, *podutil.key_of(job))
        if updated is not None:
            self._release_finished_pods(updated)
            self._schedule_ttl(updated)

    def _release_finished_pods(self, job: Obj) -> None:
        for pod in self._owned(job):
            if TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                self._drop_finalizer(pod)

    def _schedule_ttl(self, job: Obj) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        finished_at = next(
            (
                parse_time(c["lastTransitionTime"])
                for c in (job.get("status") or {}).get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            self.now(),
        )
        ns, name = podutil.key_of(job)
        uid = job["metadata"]["uid"]

        def expire() -> None:
            current = self.store.get(JOBS, ns, name)
            if (
                current is None
                or current["metadata"]["uid"] != uid
                or current["metadata"].get("deletionTimestamp")
            ):
                return
            self.store.delete(JOBS, ns, name, propagation="Background")

        self.c.engine.call_at(max(finished_at + int(ttl), self.now()), expire)

    def _set_suspended_condition(self, job: Obj, status: Obj, suspended: bool) -> None:
        conditions = status.setdefault("conditions", [])
        current = next((c for c in conditions if c.get("type") == "Suspended"), None)
        now = rfc3339(self.now())
        if suspended and (current is None or current.get("status") != "True"):
            conditions[:] = [c for c in conditions if c.get("type") != "Suspended"]
            conditions.append(
                {
                    "type": "Suspended",
                    "status": "True",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                    "reason": "JobSuspended",
                    "message": "Job suspended",
                }
            )
            self.event(job, "Suspended", "Job suspended")
        elif not suspended and current is not None and current.get("status") == "True":
            current.update(status="False", reason="JobResumed", message="Job resumed", lastTransitionTime=now)
            self.event(job, "Resumed", "Job resumed")

    def _write(self, job: Obj, status: Obj) -> None:
        rendered = podutil.omit_zero(
            status, "active", "succeeded", "failed", "conditions", "completedIndexes"
        )
        rendered.setdefault("uncountedTerminatedPods", {})
        self.write_status(JOBS, job, rendered)


def completion_index(pod: Obj) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)
    if raw is None:
        raw = (pod["metadata"].get("labels") or {}).get(COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _set_completion_index(pod: Obj, job_name: str, index: int) -> None:
    md = pod["metadata"]
    md.setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
    md.setdefault("labels", {})[COMPLETION_INDEX] = str(index)
    spec = pod["spec"]
    spec.setdefault("hostname", f"{job_name}-{index}")
    env = {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
    }
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            variables = container.setdefault("env", [])
            if not any(v.get("name") == "JOB_COMPLETION_INDEX" for v in variables):
                variables.append(env)


def parse_indexes(text: str) -> set[int]:
    """ "0-2,5" -> {0, 1, 2, 5} (the status.completedIndexes format)."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        try:
            out.update(range(int(first), int(last or first) + 1))
        except ValueError:
            continue
    return out


def format_indexes(indexes: set[int]) -> str:
    """{0, 1, 2, 5} -> "0-2,5": ascending ranges of consecutive indexes."""
    ranges: list[str] = []
    ordered = sorted(indexes)
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = ordered[start], ordered[end]
        ranges.append(str(first) if first == last else f"{first}-{last}")
        start = end + 1
    return ",".join(ranges)
