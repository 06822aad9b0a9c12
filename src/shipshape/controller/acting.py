"""Every write the loops make, logged as one structured line; in recommend-only mode, not made at all.

`ActingOps` wraps the process's `ClusterOps`. Each write (evict, delete, annotate, patch, apply, taint)
is logged once (`action`, `object`, and what it changes) and counted in
`shipshape_actions_total{action,dry_run}`. With `dry_run`, the write is logged as what would have been
done and not sent: the loops are told it succeeded (so they neither retry it every round nor take
another path), Events are still posted (their message starts with "dry run, not done: "), and reads
(`spot_metadata`) go through. Nothing else in the cluster changes.

Since nothing is written, the loops find the same writes to make round after round (a deletion cost,
a placeholder): in recommend-only mode the same write, or the same Event, is logged, counted and
posted once per `repeat_seconds` (10 minutes), not every round.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.ops import ApplyResult, ClusterOps, EvictionOutcome, ObjectRef, SpotMetadata
from shipshape.controller.policy import WorkloadKind
from shipshape.kube.clock import Clock

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.actions")
DRY_RUN_PREFIX = "dry run, not done: "
# Recommend-only mode reports the same write (or Event) again after this long (emulated seconds).
DRY_RUN_REPEAT_SECONDS = 600.0


class ActingOps:
    """A `ClusterOps` that logs every write, and sends none when `dry_run` (Events excepted)."""

    def __init__(
        self,
        inner: ClusterOps,
        metrics: ControllerMetrics,
        *,
        dry_run: bool = False,
        clock: Clock | None = None,
        repeat_seconds: float = DRY_RUN_REPEAT_SECONDS,
    ) -> None:
        self.inner = inner
        self.metrics = metrics
        self.dry_run = dry_run
        self.clock = clock
        self.repeat_seconds = repeat_seconds
        # Recommend-only: when each write or Event was last reported.
        self._reported: dict[str, float] = {}

    def _first_in_a_while(self, key: str) -> bool:
        """Recommend-only: whether `key` was not reported within `repeat_seconds` (and mark it now)."""
        if self.clock is None:
            return True
        now = self.clock.now()
        last = self._reported.get(key)
        if last is not None and now - last < self.repeat_seconds:
            return False
        if len(self._reported) > 10_000:  # forget what has not come back for a while
            self._reported = {k: t for k, t in self._reported.items() if now - t < self.repeat_seconds}
        self._reported[key] = now
        return True

    def _log(self, action: str, target: str, **details: Any) -> bool:
        """Log and count one write; True when it is to be sent."""
        fields = {"action": action, "object": target, "dry_run": self.dry_run}
        fields.update({key: _text(value) for key, value in details.items()})
        if self.dry_run and not self._first_in_a_while(json.dumps(fields, sort_keys=True, default=str)):
            return False
        self.metrics.actions.labels(action=action, dry_run=str(self.dry_run).lower()).inc()
        LOG.info("would act (dry run)" if self.dry_run else "action", extra=fields)
        return not self.dry_run

    def evict(self, namespace: str, pod: str) -> EvictionOutcome:
        if not self._log("evict", f"pod/{namespace}/{pod}"):
            return EvictionOutcome.EVICTED
        return self.inner.evict(namespace, pod)

    def delete_pod(self, namespace: str, pod: str) -> bool:
        if not self._log("delete", f"pod/{namespace}/{pod}"):
            return True
        return self.inner.delete_pod(namespace, pod)

    def annotate_pod(self, namespace: str, pod: str, annotations: Mapping[str, str | None]) -> None:
        if self._log("annotate", f"pod/{namespace}/{pod}", annotations=dict(annotations)):
            self.inner.annotate_pod(namespace, pod, annotations)

    def patch_workload(self, kind: WorkloadKind, namespace: str, name: str, patch: Obj) -> None:
        if self._log("patch", f"{kind.value.lower()}/{namespace}/{name}", patch=patch):
            self.inner.patch_workload(kind, namespace, name, patch)

    def apply(self, body: Obj) -> ApplyResult:
        ref = ObjectRef.of(body)
        if not self._log("apply", _name(ref)):
            return "unchanged"
        return self.inner.apply(body)

    def delete(self, ref: ObjectRef) -> bool:
        if not self._log("delete", _name(ref)):
            return True
        return self.inner.delete(ref)

    def post_event(self, body: Obj) -> None:
        if self.dry_run:
            involved = body.get("involvedObject") or {}
            parts = (involved.get("namespace"), involved.get("name"), body.get("reason"), body.get("message"))
            key = "event/" + "/".join(str(part) for part in parts)
            if not self._first_in_a_while(key):
                return
            body = {**body, "message": DRY_RUN_PREFIX + str(body.get("message") or "")}
        self.inner.post_event(body)

    def taint_node(self, node: str, taints: Sequence[Obj], resource_version: str) -> None:
        keys = [str(t.get("key")) for t in taints]
        if self._log("taint", f"node/{node}", taints=keys):
            self.inner.taint_node(node, taints, resource_version)

    def spot_metadata(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, SpotMetadata]:
        return self.inner.spot_metadata(nodes)


def _name(ref: ObjectRef) -> str:
    return "/".join(part for part in (ref.kind.lower(), ref.namespace, ref.name) if part)


def _text(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value
