"""Headroom: low-priority placeholder Deployments on on-demand capacity, sized from the largest set of
pods one spot pool could lose (by default only those whose loss would take a workload below its floor,
`pods_to_cover`) that the room left on other nodes would not already take (`uncovered_plan`), so that
those replacements after a notice preempt placeholders or land in free room and start at once. Keeps
the PriorityClass, creates/updates the placeholders and removes the ones no longer needed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from shipshape.controller.headroom import (
    HEADROOM_LABEL,
    node_room,
    placeholder_deployments,
    pod_load,
    pods_to_cover,
    priority_class,
    spare_room,
    uncovered_plan,
)
from shipshape.controller.loops.base import Reconciler
from shipshape.controller.ops import ObjectRef, OpsError
from shipshape.controller.placement import Pool

LOG = logging.getLogger("shipshape.controller.loops.headroom")
Load = tuple[str, bool, int, int]


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
        # Per node name: the node object last seen and its `node_room` (rebuilt every round, so
        # nodes that left are dropped).
        self._rooms: dict[str, tuple[Mapping[str, Any], tuple[Pool | None, int, int, int] | None]] = {}
        # Per pod object (by id; each entry holds its pod, so no id is reused while kept): the pod
        # and its `pod_load`, from the last round (`_last_loads`) and this one (`_loads`). Stored
        # objects are replaced, never changed, so an unchanged pod is the same object.
        self._last_loads: dict[int, tuple[Mapping[str, Any], Load | None]] = {}
        self._loads: dict[int, tuple[Mapping[str, Any], Load | None]] = {}

    def _room_of(self, node: Mapping[str, Any]) -> tuple[Pool | None, int, int, int] | None:
        """A node's `node_room`, worked out once per node object (a changed node is a new object)."""
        name = str((node.get("metadata") or {}).get("name"))
        kept = self._rooms.get(name)
        if kept is not None and kept[0] is node:
            return kept[1]
        room = node_room(node)
        self._rooms[name] = (node, room)
        return room

    def _load_of(self, pod: Mapping[str, Any]) -> Load | None:
        """A pod's `pod_load`, worked out once per pod object: a round reads every pod of the cluster."""
        kept = self._last_loads.get(id(pod))
        load = kept[1] if kept is not None and kept[0] is pod else pod_load(pod)
        self._loads[id(pod)] = (pod, load)
        return load

    @property
    def interval(self) -> float:
        return self.settings.headroom_interval_seconds

    def reconcile(self, now: float) -> None:
        if not self.settings.headroom_enabled:
            return
        namespace = self.config.namespace
        with self.reading():
            nodes = list(self.cache.objects("Node"))
            kept, self._rooms = self._rooms, {}
            for node in nodes:  # the rooms of the nodes there now, the unchanged ones as they were
                name = str((node.get("metadata") or {}).get("name"))
                if name in kept:
                    self._rooms[name] = kept[name]
            self._last_loads, self._loads = self._loads, {}
            rooms = spare_room(nodes, self.cache.objects("Pod"), self._load_of, self._room_of)
            self._last_loads = {}
            covered = pods_to_cover((m.state for m in self.managed()), self.settings.headroom_covers)
            plan = uncovered_plan(covered, rooms)
            wanted = placeholder_deployments(plan, namespace)
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
