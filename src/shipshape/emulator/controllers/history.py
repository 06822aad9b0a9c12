"""ControllerRevisions for StatefulSets and DaemonSets (upstream `controller/history`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.deploymentutil import canonical, safe_encode
from shipshape.emulator.resources import CONTROLLERREVISIONS
from shipshape.emulator.store import Obj, Store, clone
from shipshape.kube import errors
from shipshape.kube.labels import from_label_selector

HASH_LABEL = "controller.kubernetes.io/hash"
POD_REVISION_LABEL = "controller-revision-hash"


def template_patch(owner: Mapping[str, Any]) -> Obj:
    """What a revision stores: the pod template as a replace patch (upstream `getPatch`)."""
    template = canonical(clone(dict((owner.get("spec") or {}).get("template") or {})))
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def template_of(revision: Mapping[str, Any]) -> Obj:
    """The pod template a revision recorded."""
    template = clone(dict(((revision.get("data") or {}).get("spec") or {}).get("template") or {}))
    template.pop("$patch", None)
    return template


def _fnv32(data: bytes, h: int = 0x811C9DC5) -> int:
    for byte in data:
        h = ((h * 0x01000193) & 0xFFFFFFFF) ^ byte
    return h


def hash_revision(data: Mapping[str, Any], probe: int | None) -> str:
    """Upstream `HashControllerRevision`: FNV-32 of the data, then the collision count as decimal."""
    h = _fnv32(orjson.dumps(data, option=orjson.OPT_SORT_KEYS))
    if probe is not None:
        h = _fnv32(str(probe).encode(), h)
    return safe_encode(str(h))


def revision_name(prefix: str, hash_value: str) -> str:
    return f"{prefix[:223]}-{hash_value}"


def sort_key(revision: Mapping[str, Any]) -> tuple[int, float, str]:
    return (
        int(revision.get("revision") or 0),
        podutil.creation_time(revision),
        str(revision["metadata"]["name"]),
    )


def equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    labels_a = podutil.meta(a).get("labels") or {}
    labels_b = podutil.meta(b).get("labels") or {}
    return labels_a.get(HASH_LABEL) == labels_b.get(HASH_LABEL) and a.get("data") == b.get("data")


class History:
    """The revisions an owner controls, listed, created (with collision probing), bumped and pruned."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def owned(self, owner: Mapping[str, Any]) -> list[Obj]:
        ns = podutil.meta(owner).get("namespace", "")
        selector = from_label_selector((owner.get("spec") or {}).get("selector"))
        return sorted(
            (
                rev
                for rev in self.store.list(CONTROLLERREVISIONS, ns)
                if podutil.is_controlled_by(rev, owner) and selector.matches(podutil.meta(rev).get("labels"))
            ),
            key=sort_key,
        )

    def new_revision(self, owner: Mapping[str, Any], number: int, collision_count: int) -> Obj:
        """An unsaved revision of the owner's current template."""
        labels = dict(
            (((owner.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
        )
        data = template_patch(owner)
        hash_value = hash_revision(data, collision_count)
        labels[HASH_LABEL] = hash_value
        return {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": revision_name(str(podutil.meta(owner)["name"]), hash_value),
                "namespace": podutil.meta(owner).get("namespace", ""),
                "labels": labels,
                "ownerReferences": [podutil.new_controller_ref(owner)],
            },
            "data": data,
            "revision": number,
        }

    def create(self, owner: Mapping[str, Any], revision: Obj, collision_count: int) -> tuple[Obj, int]:
        """Store a revision, probing past hash collisions. Returns (revision, collision count)."""
        count = collision_count
        while True:
            candidate = clone(revision)
            hash_value = hash_revision(candidate["data"], count)
            candidate["metadata"]["name"] = revision_name(str(podutil.meta(owner)["name"]), hash_value)
            candidate["metadata"]["labels"][HASH_LABEL] = hash_value
            try:
                return self.store.create(CONTROLLERREVISIONS, candidate), count
            except errors.AlreadyExists:
                existing = self.store.get(
                    CONTROLLERREVISIONS, candidate["metadata"]["namespace"], candidate["metadata"]["name"]
                )
                if existing is not None and equal(existing, candidate):
                    return existing, count
                count += 1

    def bump(self, revision: Obj, number: int) -> Obj:
        if int(revision.get("revision") or 0) == number:
            return revision

        def change(new: Obj) -> None:
            new["revision"] = number

        ns, name = podutil.key_of(revision)
        return self.store.mutate(CONTROLLERREVISIONS, ns, name, change) or revision

    def delete(self, revision: Obj) -> None:
        ns, name = podutil.key_of(revision)
        try:
            self.store.delete(CONTROLLERREVISIONS, ns, name)
        except errors.NotFound:
            return

    def sync(self, owner: Mapping[str, Any], current_name: str | None) -> tuple[Obj, Obj, int, list[Obj]]:
        """(current, update, collision count, all revisions): find or create the update revision as upstream.

        An equal revision that is not the latest is a rollback: its number is bumped instead of
        creating a new one.
        """
        revisions = self.owned(owner)
        collision = int((owner.get("status") or {}).get("collisionCount") or 0)
        next_number = int(revisions[-1].get("revision") or 0) + 1 if revisions else 1
        update = self.new_revision(owner, next_number, collision)
        equals = [rev for rev in revisions if equal(rev, update)]
        if equals and equal(revisions[-1], equals[-1]):
            update = revisions[-1]
        elif equals:
            update = self.bump(equals[-1], next_number)
        else:
            update, collision = self.create(owner, update, collision)
            revisions.append(update)
        current = next((rev for rev in revisions if rev["metadata"]["name"] == current_name), update)
        return current, update, collision, revisions
