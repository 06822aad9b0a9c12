"""Adoption and release of dependents by selector (upstream `ControllerRefManager.ClaimObject`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.resources import ResourceType
from shipshape.emulator.store import DELETED, Obj, Store, WatchEvent
from shipshape.kube.labels import Selector


def claim(
    store: Store,
    rt: ResourceType,
    owner: Mapping[str, Any],
    candidates: list[Obj],
    selector: Selector,
    *,
    can_adopt: Callable[[], bool] | None = None,
) -> list[Obj]:
    """The candidates `owner` controls after adopting matching orphans and releasing non-matching ones.

    Objects controlled by someone else are ignored, and so are orphans being deleted. An owner being
    deleted neither adopts nor releases.
    """
    owner_md = podutil.meta(owner)
    owner_uid = owner_md.get("uid")
    owner_deleting = bool(owner_md.get("deletionTimestamp"))
    claimed: list[Obj] = []
    controller_ref, matches_labels = podutil.controller_ref, selector.matches
    for obj in candidates:
        ref = controller_ref(obj)
        matches = matches_labels((obj.get("metadata") or {}).get("labels"))
        if ref is not None:
            if ref.get("uid") != owner_uid:
                continue
            if matches or owner_deleting:
                claimed.append(obj)
                continue
            _release(store, rt, obj, str(owner_uid))
            continue
        if not matches or owner_deleting or podutil.is_terminating(obj):
            continue
        if can_adopt is not None and not can_adopt():
            continue
        adopted = _adopt(store, rt, obj, owner)
        if adopted is not None:
            claimed.append(adopted)
    return claimed


def _adopt(store: Store, rt: ResourceType, obj: Obj, owner: Mapping[str, Any]) -> Obj | None:
    def add_ref(new: Obj) -> None:
        refs = [
            r
            for r in new["metadata"].get("ownerReferences") or []
            if r.get("uid") != owner["metadata"]["uid"]
        ]
        refs.append(podutil.new_controller_ref(owner))
        new["metadata"]["ownerReferences"] = refs

    ns, name = podutil.key_of(obj)
    return store.mutate(rt, ns, name, add_ref)


def _release(store: Store, rt: ResourceType, obj: Obj, owner_uid: str) -> None:
    def drop_ref(new: Obj) -> None:
        refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)

    ns, name = podutil.key_of(obj)
    store.mutate(rt, ns, name, drop_ref)


class OrphanIndex:
    """Objects of one type that have no controller, by namespace: the only candidates for adoption.

    With it a controller's candidates are its dependents (the store's owner index) plus these,
    instead of every object in the namespace.
    """

    def __init__(self, rt: ResourceType) -> None:
        self.rt = rt
        self._by_ns: dict[str, dict[str, None]] = {}

    def observe(self, event: WatchEvent) -> None:
        if event.resource is not self.rt:
            return
        ns, name = podutil.key_of(event.object)
        bucket = self._by_ns.setdefault(ns, {})
        if event.type == DELETED or podutil.controller_ref(event.object) is not None:
            bucket.pop(name, None)
        else:
            bucket[name] = None

    def any_in(self, namespace: str) -> bool:
        """Whether the namespace may hold an orphan (a name here may since have gained a controller)."""
        return bool(self._by_ns.get(namespace))

    def candidates(self, store: Store, owner: Mapping[str, Any]) -> list[Obj]:
        md = podutil.meta(owner)
        ns = md.get("namespace", "")
        out = store.dependents_of(str(md.get("uid")), self.rt)
        orphans = self._by_ns.get(ns)
        if not orphans:
            return out
        seen = {podutil.key_of(obj) for obj in out}
        for name in list(orphans):
            obj = store.get(self.rt, ns, name)
            if obj is not None and (ns, name) not in seen and podutil.controller_ref(obj) is None:
                out.append(obj)
        return out
