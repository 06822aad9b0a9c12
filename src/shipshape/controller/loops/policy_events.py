"""Invalid placement policies reported as a Warning Event on the workload (the webhook also warns at
admission and counts the metric). One Event per workload and set of annotation values: a workload is
reported again only when its annotations change (or after a controller restart).

A policy is read from the workload's annotations and its namespace's labels, so a round looks at the
workloads only when the state marks one of them, or a namespace, changed since the loop's last round
(`ClusterState.take_dirty`) with a report still to make, or when a post failed; it then scans every
workload, in the state's order, as the first round does.
"""

from __future__ import annotations

from typing import Any

from shipshape.controller.events import invalid_policy_event
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.ops import OpsError
from shipshape.controller.policy import POLICY_ANNOTATIONS, WorkloadKind
from shipshape.controller.state import DirtyWorkloads

ReportKey = tuple[str, tuple[tuple[str, str], ...]]
_KINDS = {kind.value: kind for kind in (WorkloadKind.DEPLOYMENT, WorkloadKind.STATEFULSET)}


class PolicyReporter(Reconciler):
    name = "policy-events"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[ReportKey] = set()
        # A post failed last round: the next one scans every workload again.
        self._retry = False

    @property
    def interval(self) -> float:
        return self.settings.rebalance_interval_seconds

    def reconcile(self, now: float) -> None:
        found: list[tuple[ReportKey, Any, WorkloadKind, Any]] = []
        with self.view(now):
            dirty = self.cache.take_dirty(self)
            if self._retry or self._to_report(dirty):
                for kind in _KINDS.values():
                    for obj in self.cache.objects(kind.value):
                        result = self.policy_of(kind, obj)
                        if not result.problems:
                            continue
                        key = _report_key(kind, obj)
                        if key not in self._reported:
                            found.append((key, obj, kind, result.problems))
        self._retry = False
        for key, obj, kind, problems in found:
            try:
                self.ops.post_event(
                    invalid_policy_event(obj, kind.value, problems, now=now, instance=self.shared.instance)
                )
            except OpsError:
                self._retry = True
                continue
            self._reported.add(key)

    def _to_report(self, dirty: DirtyWorkloads) -> bool:
        """Whether a workload that changed may have a report to make (any, after a namespace's labels
        changed or at the first round); a workload that did not change was looked at before."""
        if dirty.everything or dirty.namespaces:
            return True
        for kind_name, namespace, name in dirty.workloads:
            kind = _KINDS.get(kind_name)
            obj = self.cache.get(kind_name, namespace, name) if kind is not None else None
            if kind is None or obj is None or not self.policy_of(kind, obj).problems:
                continue
            if _report_key(kind, obj) not in self._reported:
                return True
        return False


def _report_key(kind: WorkloadKind, obj: Any) -> ReportKey:
    """The workload and its policy annotations' values: reported once."""
    metadata = obj.get("metadata") or {}
    notes = metadata.get("annotations") or {}
    values = tuple(sorted((k, str(notes[k])) for k in POLICY_ANNOTATIONS if k in notes))
    ident = metadata.get("uid") or metadata.get("name")
    return (f"{kind.value}/{metadata.get('namespace')}/{ident}", values)
