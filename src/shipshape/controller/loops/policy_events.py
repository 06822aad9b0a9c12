"""Invalid placement policies reported as a Warning Event on the workload (the webhook also warns at
admission and counts the metric). One Event per workload and set of annotation values: a workload is
reported again only when its annotations change (or after a controller restart)."""

from __future__ import annotations

from typing import Any

from shipshape.controller.events import invalid_policy_event
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.ops import OpsError
from shipshape.controller.policy import POLICY_ANNOTATIONS, WorkloadKind


class PolicyReporter(Reconciler):
    name = "policy-events"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    @property
    def interval(self) -> float:
        return self.settings.rebalance_interval_seconds

    def reconcile(self, now: float) -> None:
        found: list[tuple[tuple[str, tuple[tuple[str, str], ...]], Any, WorkloadKind, Any]] = []
        with self.view(now):
            for kind in (WorkloadKind.DEPLOYMENT, WorkloadKind.STATEFULSET):
                for obj in self.cache.objects(kind.value):
                    result = self.policy_of(kind, obj)
                    if not result.problems:
                        continue
                    metadata = obj.get("metadata") or {}
                    notes = metadata.get("annotations") or {}
                    values = tuple(sorted((k, str(notes[k])) for k in POLICY_ANNOTATIONS if k in notes))
                    ident = metadata.get("uid") or metadata.get("name")
                    key = (f"{kind.value}/{metadata.get('namespace')}/{ident}", values)
                    if key not in self._reported:
                        found.append((key, obj, kind, result.problems))
        for key, obj, kind, problems in found:
            try:
                self.ops.post_event(
                    invalid_policy_event(obj, kind.value, problems, now=now, instance=self.shared.instance)
                )
            except OpsError:
                continue
            self._reported.add(key)
