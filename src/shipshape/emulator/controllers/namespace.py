"""The namespace controller: empty a Terminating namespace, then drop its `kubernetes` finalizer.

A namespace being deleted (deletionTimestamp or phase Terminating) has everything in it deleted;
its status conditions say what remains (`NamespaceContentRemaining`, `NamespaceFinalizersRemaining`)
as upstream's deleter reports them. Once nothing is left the `kubernetes` finalizer is removed
from `spec.finalizers`, and a namespace with no finalizers left is removed.
"""

from __future__ import annotations

import logging
from typing import Any

from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.resources import EVENTS, NAMESPACES, STORED, ResourceType
from shipshape.emulator.store import DELETED, Obj, WatchEvent
from shipshape.kube import errors
from shipshape.kube.clock import rfc3339

log = logging.getLogger(__name__)

FINALIZER = "kubernetes"
NAMESPACED: tuple[ResourceType, ...] = tuple(rt for rt in STORED if rt.namespaced)


def is_terminating(ns: Obj) -> bool:
    return (
        bool(ns["metadata"].get("deletionTimestamp"))
        or (ns.get("status") or {}).get("phase") == "Terminating"
    )


class NamespaceController(Controller):
    name = "namespace-controller"
    watches = (*NAMESPACED, NAMESPACES)

    def __init__(self) -> None:
        super().__init__()
        self._terminating: set[str] = set()

    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        if event.resource is NAMESPACES:
            name = obj["metadata"]["name"]
            if event.type == DELETED:
                self._terminating.discard(name)
                return []
            if is_terminating(obj):
                self._terminating.add(name)
                return [name]
            return []
        ns = obj["metadata"].get("namespace", "")
        return [ns] if ns in self._terminating and event.type == DELETED else []

    def reconcile(self, name: str) -> None:
        ns = self.store.get(NAMESPACES, "", name)
        if ns is None or not is_terminating(ns):
            return
        if FINALIZER not in ((ns.get("spec") or {}).get("finalizers") or []):
            self._remove_if_finalized(ns)
            return
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        for rt in NAMESPACED:
            for obj in self.store.list(rt, name):
                md = obj["metadata"]
                if not md.get("deletionTimestamp"):
                    try:
                        self.store.delete(rt, name, md["name"], propagation="Background")
                    except errors.NotFound:
                        continue
                current = self.store.get(rt, name, md["name"])
                if current is None or rt is EVENTS:
                    continue  # Events recorded while terminating do not hold the namespace
                remaining[rt.key] = remaining.get(rt.key, 0) + 1
                for finalizer in current["metadata"].get("finalizers") or []:
                    finalizers[finalizer] = finalizers.get(finalizer, 0) + 1
        ns = self._update_conditions(ns, remaining, finalizers)
        if remaining:
            return  # the remaining objects' deletion events bring us back

        def finalize(new: Obj) -> None:
            kept = [f for f in new.get("spec", {}).get("finalizers") or [] if f != FINALIZER]
            new.setdefault("spec", {})["finalizers"] = kept

        finalized = self.store.mutate(NAMESPACES, "", name, finalize)
        if finalized is not None:
            self._remove_if_finalized(finalized)

    def _remove_if_finalized(self, ns: Obj) -> None:
        if (ns.get("spec") or {}).get("finalizers") or ns["metadata"].get("finalizers"):
            return
        self.store.remove(NAMESPACES, "", ns["metadata"]["name"])

    def _update_conditions(self, ns: Obj, remaining: dict[str, int], finalizers: dict[str, int]) -> Obj:
        now = rfc3339(self.now())
        if remaining:
            listed = ", ".join(
                f"{key} has {count} resource instances" for key, count in sorted(remaining.items())
            )
            content = ("True", "SomeResourcesRemain", f"Some resources are remaining: {listed}")
        else:
            content = ("False", "ContentRemoved", "All content successfully removed")
        if finalizers:
            listed = ", ".join(
                f"{name} in {count} resource instances" for name, count in sorted(finalizers.items())
            )
            final = (
                "True",
                "SomeFinalizersRemain",
                f"Some content in the namespace has finalizers remaining: {listed}",
            )
        else:
            final = ("False", "ContentHasNoFinalizers", "All content-preserving finalizers finished")
        wanted = {
            "NamespaceDeletionDiscoveryFailure": (
                "False",
                "ResourcesDiscovered",
                "All resources successfully discovered",
            ),
            "NamespaceDeletionGroupVersionParsingFailure": (
                "False",
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed",
            ),
            "NamespaceDeletionContentFailure": (
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            ),
            "NamespaceContentRemaining": content,
            "NamespaceFinalizersRemaining": final,
        }
        old = {c["type"]: c for c in (ns.get("status") or {}).get("conditions") or []}
        conditions = []
        for kind, (status, reason, message) in wanted.items():
            previous = old.get(kind)
            unchanged = previous is not None and (
                previous["status"],
                previous.get("reason"),
                previous.get("message"),
            ) == (
                status,
                reason,
                message,
            )
            conditions.append(
                previous
                if unchanged
                else {
                    "type": kind,
                    "status": status,
                    "lastTransitionTime": now,
                    "reason": reason,
                    "message": message,
                }
            )
        status_body = {**(ns.get("status") or {}), "phase": "Terminating", "conditions": conditions}
        written = self.write_status(NAMESPACES, ns, status_body)
        return written if written is not None else ns
