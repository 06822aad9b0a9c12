"""The garbage collector: delete dependents whose owners are gone, honour foreground and orphan deletion.

As upstream's, it classifies each dependent's owner references as solid (owner present),
dangling (owner absent or replaced) or waiting (owner being deleted in the foreground), and:
- a dependent with a solid owner only loses its dangling/waiting references;
- a dependent an owner is waiting for is deleted (in the foreground if it has dependents itself);
- any other dependent is deleted (background, unless its own finalizers say otherwise).
An owner with the `foregroundDeletion` finalizer loses it once no dependent blocks it
(`blockOwnerDeletion: true`); one with the `orphan` finalizer first has its dependents' references
to it removed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.resources import BY_KEY, EVENTS, EVENTS_V1, STORED, ResourceType
from shipshape.emulator.store import ADDED, DELETED, Obj, WatchEvent
from shipshape.kube import errors

log = logging.getLogger(__name__)

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"

_BY_KIND: dict[tuple[str, str], ResourceType] = {(rt.api_version, rt.kind): rt for rt in STORED}


def owner_type(ref: Mapping[str, Any]) -> ResourceType | None:
    return _BY_KIND.get((str(ref.get("apiVersion", "")), str(ref.get("kind", ""))))


class GarbageCollector(Controller):
    name = "garbage-collector-controller"
    watches = tuple(rt for rt in STORED if rt not in (EVENTS, EVENTS_V1))

    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        md = obj["metadata"]
        ns, name = md.get("namespace", ""), md["name"]
        keys: list[Any] = []
        if event.type == DELETED:
            keys.append(("dependents", md["uid"]))
            # An owner waiting in the foreground may be unblocked now.
            for ref in md.get("ownerReferences") or []:
                rt = owner_type(ref)
                if rt is not None:
                    keys.append(("owner", rt.key, ns if rt.namespaced else "", str(ref.get("name"))))
            return keys
        finalizers = md.get("finalizers") or []
        if md.get("deletionTimestamp") and (FOREGROUND in finalizers or ORPHAN in finalizers):
            keys.append(("owner", event.resource.key, ns, name))
        if event.type == ADDED and md.get("ownerReferences"):
            keys.append(("item", event.resource.key, ns, name))
        return keys

    def reconcile(self, key: Any) -> None:
        kind = key[0]
        if kind == "dependents":
            for rt, dependent in self.store.dependents(key[1]):
                self._attempt_to_delete(rt, dependent)
            return
        rt = BY_KEY[key[1]]
        obj = self.store.get(rt, key[2], key[3])
        if obj is None:
            return
        if kind == "item":
            self._attempt_to_delete(rt, obj)
        elif kind == "owner":
            self._process_deleting_owner(rt, obj)

    # ---- owners being deleted -----------------------------------------------------------------
    def _process_deleting_owner(self, rt: ResourceType, owner: Obj) -> None:
        md = owner["metadata"]
        if not md.get("deletionTimestamp"):
            return
        finalizers = md.get("finalizers") or []
        uid = md["uid"]
        if ORPHAN in finalizers:
            for dep_rt, dependent in self.store.dependents(uid):
                self._drop_refs(dep_rt, dependent, {uid})
            self._remove_finalizer(rt, owner, ORPHAN)
            return
        if FOREGROUND not in finalizers:
            return
        blocking = [
            (dep_rt, dep)
            for dep_rt, dep in self.store.dependents(uid)
            if any(
                r.get("uid") == uid and r.get("blockOwnerDeletion")
                for r in dep["metadata"].get("ownerReferences") or []
            )
        ]
        if not blocking:
            self._remove_finalizer(rt, owner, FOREGROUND)
            return
        for dep_rt, dependent in self.store.dependents(uid):
            if FOREGROUND not in (dependent["metadata"].get("finalizers") or []):
                self._attempt_to_delete(dep_rt, dependent)

    def _remove_finalizer(self, rt: ResourceType, obj: Obj, finalizer: str) -> None:
        def drop(new: Obj) -> None:
            remaining = [f for f in new["metadata"].get("finalizers") or [] if f != finalizer]
            if remaining:
                new["metadata"]["finalizers"] = remaining
            else:
                new["metadata"].pop("finalizers", None)

        ns, name = podutil.key_of(obj)
        self.store.mutate(rt, ns, name, drop)

    # ---- dependents ----------------------------------------------------------------------------
    def _classify(self, obj: Obj) -> tuple[list[str], list[str], list[str]]:
        """(solid, dangling, waiting) owner uids of an object."""
        solid: list[str] = []
        dangling: list[str] = []
        waiting: list[str] = []
        ns = obj["metadata"].get("namespace", "")
        for ref in obj["metadata"].get("ownerReferences") or []:
            uid = str(ref.get("uid", ""))
            rt = owner_type(ref)
            if rt is None:
                # A kind the emulator does not serve: upstream cannot resolve it either and leaves
                # the dependent alone (it retries), so it counts as present.
                solid.append(uid)
                continue
            owner = self.store.get(rt, ns if rt.namespaced else "", str(ref.get("name")))
            if owner is None or owner["metadata"]["uid"] != uid:
                dangling.append(uid)
            elif owner["metadata"].get("deletionTimestamp") and FOREGROUND in (
                owner["metadata"].get("finalizers") or []
            ):
                waiting.append(uid)
            else:
                solid.append(uid)
        return solid, dangling, waiting

    def _attempt_to_delete(self, rt: ResourceType, obj: Obj) -> None:
        md = obj["metadata"]
        ns, name = md.get("namespace", ""), md["name"]
        current = self.store.get(rt, ns, name)
        if current is None or current["metadata"]["uid"] != md["uid"]:
            return
        cur_md = current["metadata"]
        if cur_md.get("deletionTimestamp") and FOREGROUND not in (cur_md.get("finalizers") or []):
            return  # already going away
        if not cur_md.get("ownerReferences"):
            return
        solid, dangling, waiting = self._classify(current)
        if solid:
            if dangling or waiting:
                self._drop_refs(rt, current, set(dangling) | set(waiting))
            return
        if waiting and self.store.dependents(cur_md["uid"]):
            self._delete(rt, current, "Foreground")
            return
        finalizers = cur_md.get("finalizers") or []
        if ORPHAN in finalizers:
            policy = "Orphan"
        elif FOREGROUND in finalizers:
            policy = "Foreground"
        else:
            policy = "Background"
        self._delete(rt, current, policy)

    def _delete(self, rt: ResourceType, obj: Obj, policy: str) -> None:
        md = obj["metadata"]
        try:
            self.store.delete(rt, md.get("namespace", ""), md["name"], propagation=policy, uid=md["uid"])
        except (errors.NotFound, errors.Conflict):
            return

    def _drop_refs(self, rt: ResourceType, obj: Obj, uids: set[str]) -> None:
        def drop(new: Obj) -> None:
            refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") not in uids]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)

        ns, name = podutil.key_of(obj)
        self.store.mutate(rt, ns, name, drop)
