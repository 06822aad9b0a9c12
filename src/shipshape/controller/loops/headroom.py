"""Headroom: low-priority placeholder Deployments on on-demand capacity, sized from the largest set of
pods one spot pool could lose (by default only those whose loss would take a workload below its floor,
`pods_to_cover`) that the room left on other nodes (`ClusterState.spare_rooms`, kept per node from the
pod events) would not already take (`uncovered_plan`), so that
those replacements after a notice preempt placeholders or land in free room and start at once. Keeps
the PriorityClass, creates/updates the placeholders and removes the ones no longer needed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from shipshape.controller.headroom import (
    HeadroomPlan,
    placeholder_deployments,
    pods_to_cover,
    priority_class,
    uncovered_plan,
)
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.loops.kit import Unchanged
from shipshape.controller.ops import ObjectRef, OpsError
from shipshape.controller.packing import Room
from shipshape.controller.policy import HEADROOM_LABEL, CapacityType
from shipshape.controller.state import WorkloadState

LOG = logging.getLogger("shipshape.controller.loops.headroom")


def _same(have: Mapping[str, Any] | None, want: Mapping[str, Any]) -> bool:
    """The cached placeholder already has the replicas, affinity and requests we want."""
    if have is None:
        return False
    have_spec, want_spec = have.get("spec") or {}, want["spec"]
    if have_spec.get("replicas") != want_spec["replicas"]:
        return False
    have_pod = (have_spec.get("template") or {}).get("spec") or {}
    want_pod = want_spec["template"]["spec"]
    if have_pod.get("affinity") != want_pod.get("affinity"):
        return False
    have_containers = have_pod.get("containers") or []
    return [c.get("resources") for c in have_containers] == [c["resources"] for c in want_pod["containers"]]


class HeadroomKeeper(Reconciler):
    name = "headroom"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._priority_class_applied = False
        # The last plan and what it was worked out from (the rooms, the covers setting and the
        # workload states, which the cache hands out as the same objects until they change).
        self._plan_memo: Unchanged[str, HeadroomPlan] = Unchanged()

    @property
    def interval(self) -> float:
        return self.settings.headroom_interval_seconds

    def reconcile(self, now: float) -> None:
        if not self.settings.headroom_enabled:
            return
        namespace = self.config.namespace
        with self.view(now):
            plan = self._plan(self.cache.spare_rooms(), tuple(m.state for m in self.managed()))
            wanted = placeholder_deployments(
                plan, namespace, on_demand_terms=self.cache.capacity_terms(CapacityType.ON_DEMAND)
            )
            existing = {
                d["metadata"]["name"]: d
                for d in self.cache.objects("Deployment")
                if d["metadata"].get("namespace") == namespace
                and ((d["metadata"].get("labels") or {}).get(HEADROOM_LABEL) == "true")
            }
        try:
            if not self._priority_class_applied:
                self.ops.apply(priority_class())
                self._priority_class_applied = True
            for body in wanted:
                if not _same(existing.get(body["metadata"]["name"]), body):
                    result = self.ops.apply(body)
                    LOG.info("headroom placeholder %s %s", body["metadata"]["name"], result)
            names = {body["metadata"]["name"] for body in wanted}
            for name, body in existing.items():
                if name not in names:
                    self.ops.delete(ObjectRef.of({**body, "apiVersion": "apps/v1", "kind": "Deployment"}))
        except OpsError as error:
            LOG.warning("headroom not updated: %s", error)

    def _plan(self, rooms: tuple[Room, ...], states: tuple[WorkloadState, ...]) -> HeadroomPlan:
        covers = self.settings.headroom_covers
        inputs = (rooms, covers, states)
        kept = self._plan_memo.recall("plan", inputs)
        if kept is not None:
            return kept
        plan = uncovered_plan(pods_to_cover(states, covers), rooms)
        self._plan_memo.keep("plan", inputs, plan)
        return plan
