"""The emulator's object store: what etcd plus the API server's generic registry do.

Objects are plain JSON dicts. **Stored objects are never mutated in place**: every write stores
a new version (which may share the parts that did not change with the version before), so a dict
returned by `get`/`list` (or carried by a `WatchEvent`), and everything in it, stays valid and must
be treated as read-only. Use `clone()` before changing one, then `update()` it.

Semantics kept from Kubernetes: a global resourceVersion, uid, creationTimestamp, generateName,
generation (bumped on spec changes), optimistic concurrency (409), finalizers with
deletionTimestamp, graceful pod deletion, and a bounded history of changes for watches
(410 Gone for a resourceVersion older than the history).
"""

from __future__ import annotations

import bisect
import builtins
import random
import string
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from shipshape.emulator.resources import PODS, ResourceType
from shipshape.kube import errors
from shipshape.kube.clock import Clock, rfc3339
from shipshape.kube.labels import Selector

Obj = dict[str, Any]
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
_ABSENT = object()

# Fields the API server owns: a client's update cannot change them.
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")


def clone(obj: Obj) -> Obj:
    """A deep copy of a JSON object (faster than copy.deepcopy for JSON data)."""
    return orjson.loads(orjson.dumps(obj))  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED
    resource: ResourceType
    object: Obj
    resource_version: int


Listener = Callable[[WatchEvent], None]


def _suffix(n: int = 5) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # as Kubernetes' utilrand: no vowels, no 0/1/3
    return "".join(random.choice(alphabet) for _ in range(n))


def new_uid() -> str:
    """A version 4 UUID drawn from `random`, like the generated names: a simulation that seeds `random`
    replays with the same uids (they break ties in orderings, e.g. the ReplicaSet's deletion ranking)."""
    return str(uuid.UUID(int=random.getrandbits(128), version=4))


def meta(obj: Obj) -> Obj:
    md: Obj = obj.setdefault("metadata", {})
    return md


def _forget(index: dict[Any, dict[Any, Obj]], group: Any, key: Any) -> None:
    """Drop `key` from `index[group]`, and the group once empty (owners and nodes come and go in a
    long simulation: their empty entries would otherwise stay for good)."""
    members = index.get(group)
    if members is not None:
        members.pop(key, None)
        if not members:
            del index[group]


class Store:
    """In-memory objects by resource type, namespace and name, with change notification."""

    def __init__(self, clock: Clock, history: int = 100_000) -> None:
        self.clock = clock
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._history: deque[WatchEvent] = deque(maxlen=history)
        # Subscriptions in the order they were made: (listener, resource type keys or None = all).
        self._subscriptions: list[tuple[Listener, frozenset[str] | None]] = []
        self._listeners_by_kind: dict[str, tuple[Listener, ...]] = {}  # derived, rebuilt on demand
        self._rv = 1
        # Indexes the models need on hot paths.
        self._pods_by_node: dict[str, dict[tuple[str, str], Obj]] = {}
        self._by_owner: dict[str, dict[tuple[str, str, str], Obj]] = {}  # owner uid -> dependents
        # (owner uid, type) -> that type's dependents, in `_by_owner`'s order: `dependents_of` (every
        # sync of a ReplicaSet or DaemonSet) reads it without walking the owner's other dependents.
        self._by_owner_kind: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        # Each type's keys in list order, dropped when a key comes or goes (not on updates).
        self._sorted_keys: dict[str, builtins.list[tuple[str, str]]] = {}
        # Label index: type -> (label key, value) -> the keys of the objects with that label, kept
        # sorted (list order). `list` with a selector walks the smallest bucket its equality
        # requirements name instead of the whole type; `_index` keeps it in step with every write.
        self._by_label: dict[str, dict[tuple[str, str], builtins.list[tuple[str, str]]]] = {}

    # ---- reading -----------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._objects.get(rt.key, {}).get((namespace if rt.namespaced else "", name))

    def must_get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.get(rt, namespace, name)
        if obj is None:
            raise errors.NotFound.of(rt.plural, name, rt.group)
        return obj

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        selector: Selector | None = None,
        predicate: Callable[[Obj], bool] | None = None,
    ) -> list[Obj]:
        """Objects sorted by namespace then name, as etcd returns them."""
        bucket = self._objects.get(rt.key, {})
        if selector is not None:
            labelled = self._labelled(rt, selector)
            if labelled is not None:
                # A selector of one requirement is the bucket's own: every object in the bucket matches.
                check = None if len(selector.requirements) == 1 else selector
                return self._list_keys(rt, bucket, labelled, namespace, check, predicate)
        keys = self._sorted_keys.get(rt.key)
        if keys is None:
            keys = self._sorted_keys[rt.key] = sorted(bucket)
        return self._list_keys(rt, bucket, keys, namespace, selector, predicate)

    def _labelled(self, rt: ResourceType, selector: Selector) -> builtins.list[tuple[str, str]] | None:
        """The smallest label-index bucket that holds every object `selector` matches, if any.

        Only single-value `In` requirements (what `matchLabels` compiles to) narrow the search; a
        selector without one is answered by a scan.
        """
        if selector.match_nothing:
            return []
        index = self._by_label.get(rt.key, {})
        best: builtins.list[tuple[str, str]] | None = None
        for req in selector.requirements:
            if req.operator == "In" and len(req.values) == 1 and isinstance(req.values[0], str):
                keys = index.get((req.key, req.values[0]), [])
                if best is None or len(keys) < len(best):
                    best = keys
        return best

    def _list_keys(
        self,
        rt: ResourceType,
        bucket: dict[tuple[str, str], Obj],
        keys: builtins.list[tuple[str, str]],
        namespace: str | None,
        selector: Selector | None,
        predicate: Callable[[Obj], bool] | None,
    ) -> builtins.list[Obj]:
        """The objects of `keys` (sorted: every key of the type, or a label-index bucket holding every
        match) in `namespace` that `selector` and `predicate` accept."""
        start, stop = 0, len(keys)
        if namespace and rt.namespaced:
            # (namespace,) sorts before every (namespace, name): the namespace's keys are one run.
            start = bisect.bisect_left(keys, (namespace,))
            stop = bisect.bisect_left(keys, (namespace + "\x00",), lo=start)
        out = []
        for i in range(start, stop):
            obj = bucket[keys[i]]
            if selector is not None and not selector.matches(obj["metadata"].get("labels")):
                continue
            if predicate is not None and not predicate(obj):
                continue
            out.append(obj)
        return out

    def iter(self, rt: ResourceType) -> Iterator[Obj]:
        """Unsorted, fast iteration over every object of a type."""
        return iter(list(self._objects.get(rt.key, {}).values()))

    def count(self, rt: ResourceType) -> int:
        return len(self._objects.get(rt.key, {}))

    def pods_on_node(self, node: str) -> builtins.list[Obj]:
        return list(self._pods_by_node.get(node, {}).values())

    def dependents(self, owner_uid: str) -> builtins.list[tuple[ResourceType, Obj]]:
        from shipshape.emulator.resources import BY_KEY

        return [(BY_KEY[key], obj) for (key, _, _), obj in self._by_owner.get(owner_uid, {}).items()]

    def dependents_of(self, owner_uid: str, rt: ResourceType) -> builtins.list[Obj]:
        """`dependents` of one type, in the same order."""
        return list(self._by_owner_kind.get((owner_uid, rt.key), {}).values())

    # ---- watching ----------------------------------------------------------------------
    def subscribe(
        self, listener: Listener, kinds: Iterable[ResourceType] | None = None
    ) -> Callable[[], None]:
        """Call `listener` synchronously after every change (of the `kinds` given, else of any type).

        Listeners are called in the order they subscribed, whatever their kinds. Returns the
        unsubscribe function.
        """
        entry = (listener, None if kinds is None else frozenset(rt.key for rt in kinds))
        self._subscriptions.append(entry)
        self._listeners_by_kind.clear()

        def unsubscribe() -> None:
            for i, subscription in enumerate(self._subscriptions):
                if subscription is entry:
                    del self._subscriptions[i]
                    self._listeners_by_kind.clear()
                    return

        return unsubscribe

    def _listeners_of(self, kind: str) -> tuple[Listener, ...]:
        listeners = self._listeners_by_kind.get(kind)
        if listeners is None:
            listeners = self._listeners_by_kind[kind] = tuple(
                listener for listener, kinds in self._subscriptions if kinds is None or kind in kinds
            )
        return listeners

    def events_since(self, resource_version: int) -> builtins.list[WatchEvent]:
        """Changes after `resource_version`; raises Gone if that version is no longer in the history."""
        if resource_version >= self._rv:
            return []
        if not self._history or self._history[0].resource_version > resource_version + 1:
            oldest = self._history[0].resource_version if self._history else self._rv
            if resource_version + 1 < oldest:
                raise errors.Gone(f"too old resource version: {resource_version} ({oldest - 1})")
        return [ev for ev in self._history if ev.resource_version > resource_version]

    def _emit(self, event_type: str, rt: ResourceType, obj: Obj) -> None:
        # Every write emits right after taking its resourceVersion (`_next_rv`): `obj` carries `_rv`.
        event = WatchEvent(event_type, rt, obj, self._rv)
        self._history.append(event)
        for listener in self._listeners_of(rt.key):
            listener(event)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    # ---- indexes -----------------------------------------------------------------------
    def _index(self, rt: ResourceType, old: Obj | None, new: Obj | None) -> None:
        ref = old or new
        assert ref is not None
        md = ref["metadata"]
        key = (md.get("namespace", ""), md["name"])
        old_labels = _labels(old)
        new_labels = _labels(new)
        if old_labels is not new_labels and old_labels != new_labels:
            self._index_labels(rt.key, key, old_labels, new_labels)
        if rt is PODS:
            old_node = (old or {}).get("spec", {}).get("nodeName")
            new_node = (new or {}).get("spec", {}).get("nodeName")
            if old_node and old_node != new_node:
                _forget(self._pods_by_node, old_node, key)
            if new_node:
                self._pods_by_node.setdefault(new_node, {})[key] = new  # type: ignore[assignment]
        old_refs = (old or {}).get("metadata", {}).get("ownerReferences") or []
        new_refs = (new or {}).get("metadata", {}).get("ownerReferences") or []
        if not old_refs and not new_refs:
            return  # no owners before or after (nodes, events, most objects but pods)
        new_owners = {o.get("uid") for o in new_refs}
        # The same list (a status write, a metadata patch that left the owners alone): none leaves.
        old_owners = new_owners if old_refs is new_refs else {o.get("uid") for o in old_refs}
        okey = (rt.key, *key)
        for uid in old_owners - new_owners:
            if uid:
                _forget(self._by_owner, uid, okey)
                _forget(self._by_owner_kind, (uid, rt.key), key)
        for uid in new_owners:
            if uid and new is not None:
                self._by_owner.setdefault(uid, {})[okey] = new
                self._by_owner_kind.setdefault((uid, rt.key), {})[key] = new

    def _index_labels(
        self, kind: str, key: tuple[str, str], old: dict[str, str], new: dict[str, str]
    ) -> None:
        """Move `key` from the label buckets of `old` labels to those of `new` (both maybe empty).

        Only string values are indexed: a selector's values are strings, so no other value matches.
        """
        index = self._by_label.setdefault(kind, {})
        for item in old.items():
            if not isinstance(item[1], str) or new.get(item[0], _ABSENT) == item[1]:
                continue
            keys = index.get(item)
            if keys is not None:
                i = bisect.bisect_left(keys, key)
                if i < len(keys) and keys[i] == key:
                    del keys[i]
                if not keys:
                    del index[item]
        for item in new.items():
            if not isinstance(item[1], str) or old.get(item[0], _ABSENT) == item[1]:
                continue
            keys = index.setdefault(item, [])
            i = bisect.bisect_left(keys, key)
            if i == len(keys) or keys[i] != key:
                keys.insert(i, key)

    # ---- writing -----------------------------------------------------------------------
    def _key(self, rt: ResourceType, obj: Obj) -> tuple[str, str]:
        md = obj["metadata"]
        return (md.get("namespace", "") if rt.namespaced else "", md["name"])

    def create(
        self,
        rt: ResourceType,
        obj: Obj,
        *,
        dry_run: bool = False,
        uid: str | None = None,
        created_at: float | None = None,
    ) -> Obj:
        """Store a new object. Fills uid (unless given), resourceVersion, creationTimestamp, generation.

        `created_at` backdates creationTimestamp, for objects a model says existed before the
        emulated cluster started (e.g. nodes that booted earlier)."""
        obj = clone(obj)
        md = meta(obj)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        if not rt.namespaced:
            md.pop("namespace", None)
        bucket = self._objects.setdefault(rt.key, {})
        if not md.get("name"):
            prefix = md.get("generateName")
            if not prefix:
                raise errors.Invalid(
                    rt.kind,
                    "",
                    [("metadata.name", "FieldValueRequired", "name or generateName is required")],
                    rt.group,
                )
            for _ in range(100):
                candidate = prefix + _suffix()
                if (md.get("namespace", "") if rt.namespaced else "", candidate) not in bucket:
                    md["name"] = candidate
                    break
        key = self._key(rt, obj)
        if key in bucket:
            raise errors.AlreadyExists.of(rt.plural, md["name"], rt.group)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            md.pop(field, None)
        md["uid"] = uid or new_uid()
        md["creationTimestamp"] = rfc3339(self.clock.now() if created_at is None else created_at)
        md["generation"] = 1
        if dry_run:
            # Nothing is written, so nothing has a resourceVersion: the object comes back as admitted
            # (with its uid and creationTimestamp), as upstream's dry-run storage returns it.
            return obj
        md["resourceVersion"] = self._next_rv()
        bucket[key] = obj
        self._sorted_keys.pop(rt.key, None)
        self._index(rt, None, obj)
        self._emit(ADDED, rt, obj)
        return obj

    def update(
        self,
        rt: ResourceType,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        copy: bool = True,
    ) -> Obj:
        """Replace an object (PUT semantics), honouring resourceVersion preconditions.

        With `subresource="status"` only `.status` changes; a main-resource write of a type with a
        status subresource keeps the stored status. Removing the last finalizer of an object being
        deleted completes its deletion. `copy=False`: the caller hands `obj` over, built for this write
        (nobody else holds it or changes it later), and it is stored without another copy: its top
        level and metadata must be its own (the store sets fields there); anything deeper may be
        shared with stored versions, as those are never changed.
        """
        return self._update(rt, clone(obj) if copy else obj, subresource=subresource, dry_run=dry_run)

    def _update(self, rt: ResourceType, obj: Obj, *, subresource: str | None, dry_run: bool) -> Obj:
        """`update` of an object this store owns already (a copy no caller holds): no copy again."""
        md = meta(obj)
        if not rt.namespaced:
            md.pop("namespace", None)
        name = md.get("name", "")
        current = self.get(rt, md.get("namespace", ""), name)
        if current is None:
            raise errors.NotFound.of(rt.plural, name, rt.group)
        cur_md = current["metadata"]
        wanted_rv = md.get("resourceVersion")
        if wanted_rv and wanted_rv != cur_md["resourceVersion"]:
            raise errors.Conflict.of(rt.plural, name, rt.group)
        if subresource == "status":
            # Only the status and the metadata's resourceVersion change: the new version shares
            # the rest with the current one (stored dicts are never changed in place), which
            # saves a deep copy per status write.
            new = {**current, "metadata": {**cur_md}, "status": obj.get("status", {})}
        elif subresource is not None:
            raise errors.BadRequest(f"unsupported subresource {subresource!r} for update")
        else:
            new = obj
            new["apiVersion"] = rt.api_version
            new["kind"] = rt.kind
            if rt.status_subresource:
                if "status" in current:
                    new["status"] = current["status"]
                else:
                    new.pop("status", None)
            for field in _SYSTEM_META:
                if field in cur_md:
                    new["metadata"][field] = cur_md[field]
                else:
                    new["metadata"].pop(field, None)
            if cur_md.get("deletionTimestamp"):
                # A terminating object accepts no new finalizers.
                added = set(new["metadata"].get("finalizers") or []) - set(cur_md.get("finalizers") or [])
                if added:
                    raise errors.Forbidden(
                        f"no new finalizers can be added if the object is being deleted, found new "
                        f"finalizers {sorted(added)}"
                    )
            if _spec_of(new) != _spec_of(current):
                new["metadata"]["generation"] = int(cur_md.get("generation", 1)) + 1
        if new == current:
            return current  # no-op writes do not bump the resourceVersion, as in Kubernetes
        if dry_run:
            return new
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._objects[rt.key][self._key(rt, new)] = new
        self._index(rt, current, new)
        finalized = new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers")
        if finalized and (rt is not PODS or _pod_may_vanish(new)):
            return self._remove(rt, new)
        self._emit(MODIFIED, rt, new)
        return new

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        grace_seconds: int | None = None,
        propagation: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Delete an object. Returns (object, removed_now).

        Objects with finalizers (including those added for Foreground/Orphan propagation) and bound
        pods with a grace period get a deletionTimestamp and stay until finalized / terminated.
        """
        current = self.must_get(rt, namespace, name)
        cur_md = current["metadata"]
        if uid and cur_md["uid"] != uid:
            raise errors.Conflict(
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {cur_md['uid']}"
            )
        if resource_version and cur_md["resourceVersion"] != resource_version:
            raise errors.Conflict(
                f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
                f"ResourceVersion in object meta: {cur_md['resourceVersion']}"
            )
        new = self._metadata_version(current)
        md = new["metadata"]
        finalizers: list[str] = list(md.get("finalizers") or [])
        if propagation == "Foreground" and "foregroundDeletion" not in finalizers:
            if self._by_owner.get(cur_md["uid"]):
                finalizers.append("foregroundDeletion")
        elif propagation == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        grace = 0
        if rt is PODS:
            default = int(new.get("spec", {}).get("terminationGracePeriodSeconds", 30))
            grace = default if grace_seconds is None else max(0, grace_seconds)
            if not new.get("spec", {}).get("nodeName") or new.get("status", {}).get("phase") in (
                "Succeeded",
                "Failed",
            ):
                grace = 0
        if not finalizers and grace == 0:
            if dry_run:
                return current, True
            return self._remove(rt, current), True
        now = self.clock.now()
        if md.get("deletionTimestamp"):
            # Already terminating: a shorter grace period may bring the deadline forward.
            if rt is PODS and grace_seconds is not None:
                old_grace = int(md.get("deletionGracePeriodSeconds", grace))
                if grace < old_grace:
                    md["deletionGracePeriodSeconds"] = grace
                    md["deletionTimestamp"] = rfc3339(now + grace)
        else:
            md["deletionTimestamp"] = rfc3339(now + grace)
            md["deletionGracePeriodSeconds"] = grace
        md["finalizers"] = finalizers
        if not finalizers:
            md.pop("finalizers")
        if new == current or dry_run:
            return (current if new == current else new), False
        md["resourceVersion"] = self._next_rv()
        self._objects[rt.key][self._key(rt, new)] = new
        self._index(rt, current, new)
        self._emit(MODIFIED, rt, new)
        return new, False

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        key = self._key(rt, obj)
        current = self._objects[rt.key].pop(key)
        self._sorted_keys.pop(rt.key, None)
        self._index(rt, current, None)
        # The last version with the deletion's resourceVersion.
        gone = self._metadata_version(obj)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(DELETED, rt, gone)
        return gone

    @staticmethod
    def _metadata_version(obj: Obj) -> Obj:
        """A new version of a stored object whose metadata alone may be changed: it shares the rest
        with `obj` (stored objects are plain JSON, never changed in place, so a deep copy would be
        equal to it)."""
        return {**obj, "metadata": {**obj["metadata"]}}

    def remove(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        """Remove an object now, whatever its finalizers (what the kubelet's final delete does)."""
        current = self.get(rt, namespace, name)
        if current is None:
            return None
        return self._remove(rt, current)

    # ---- helpers for the models --------------------------------------------------------
    def mutate(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[Obj], None],
        *,
        subresource: str | None = None,
    ) -> Obj | None:
        """Read-modify-write without conflicts (the models are single-threaded). None if absent."""
        current = self.get(rt, namespace, name)
        if current is None:
            return None
        new = clone(current)
        change(new)
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self._update(rt, new, subresource=subresource, dry_run=False)

    def write_status(self, rt: ResourceType, namespace: str, name: str, status: Obj) -> Obj | None:
        """`mutate` of the status subresource that replaces `.status` with `status` (None if absent).

        `status` is stored as it is: the caller hands it over and must not change it afterwards (it
        may share parts with the stored status, which are never changed either). No deep copy of the
        object is made, unlike `mutate`.
        """
        if self.get(rt, namespace, name) is None:
            return None
        # `_update` of the status subresource takes the status alone and shares the rest.
        only_status = {"metadata": {"name": name, "namespace": namespace}, "status": status}
        return self._update(rt, only_status, subresource="status", dry_run=False)

    def all_types(self) -> Iterable[str]:
        return self._objects.keys()


def _labels(obj: Obj | None) -> dict[str, str]:
    """An object's labels for the label index ({} for none, or for no object)."""
    if obj is None:
        return {}
    labels = obj["metadata"].get("labels")
    return labels if isinstance(labels, dict) else {}


def _spec_of(obj: Obj) -> Any:
    """What counts as "spec" for the generation counter (everything but metadata and status)."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _pod_may_vanish(pod: Obj) -> bool:
    """A terminating pod disappears once unbound, finished, or its grace period is zero."""
    md = pod["metadata"]
    return (
        not pod.get("spec", {}).get("nodeName")
        or pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
        or int(md.get("deletionGracePeriodSeconds", 1)) == 0
    )


def random_token(n: int = 32) -> str:
    return "".join(random.SystemRandom().choice(string.ascii_letters + string.digits) for _ in range(n))
