"""The three PATCH formats of the Kubernetes API, as pure functions on JSON objects.

- JSON merge patch (RFC 7386), `application/merge-patch+json`.
- JSON patch (RFC 6902, via `jsonpatch`), `application/json-patch+json`.
- Strategic merge patch, `application/strategic-merge-patch+json`: lists of the built-in types
  merge by a key (containers by name, ports by containerPort, ...) instead of being replaced, and
  the `$patch`, `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`
  directives apply, as `kubectl apply`, `scale`, `label`, `cordon` and `rollout` send them.

Server-side apply (`application/apply-patch+yaml`) is supported as a subset: field ownership of
appliers is tracked in `metadata.managedFields` (FieldsV1), fields a manager stops applying are
removed, and conflicts with other appliers answer 409 unless forced. Ownership by non-apply writers
(PUT, other patches) is not tracked.

None of these functions changes its arguments; each returns a new object.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonpatch

from shipshape.kube import errors

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


class PatchFailed(errors.ApiError):
    """A well-formed patch that cannot be applied to the object (HTTP 422, as upstream)."""

    code = 422
    reason = "Invalid"


# ---- JSON merge patch ----------------------------------------------------------------------------


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (dicts and lists copied, scalars shared), much cheaper than
    `copy.deepcopy`; anything else is deep-copied as usual."""
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_json(item) for item in value]
    if value is None or isinstance(value, (str, int, float)):
        return value
    return copy.deepcopy(value)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    result: dict[str, Any] = copy_json(target) if isinstance(target, dict) else {}
    _merge_into(result, patch)
    return result


def merge_patch_owned(target: dict[str, Any], patch: Any) -> Any:
    """`merge_patch` of a target the caller owns outright (a fresh copy no one else holds any part
    of): merged in place instead of copied first. The target is the result unless `patch` is not an
    object."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    _merge_into(target, patch)
    return target


def _merge_into(result: dict[str, Any], patch: dict[str, Any]) -> None:
    """Merge `patch` into `result`, a copy nobody else holds (so its nested objects may change)."""
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            if not isinstance(current, dict):
                current = {}
            _merge_into(current, value)
            result[key] = current
        else:
            result[key] = copy_json(value)


# ---- JSON patch ----------------------------------------------------------------------------------


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902. A malformed document is a 400; an operation that cannot apply is a 422.

    Failures are worded as the API server's JSON patch library words them ("testing value
    /spec/replicas failed: test failed", "remove operation does not apply: doc is missing path").
    """
    if not isinstance(operations, list):
        raise errors.BadRequest("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    for index, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op:
            raise errors.BadRequest(f"invalid JSON patch: operation {index} has no 'op'")
    # One copy of the document, then every operation in place (the library's own copy per
    # operation costs a deep copy of the whole object each time).
    document = copy_json(target)
    for op in operations:
        try:
            document = jsonpatch.JsonPatch([op]).apply(document, in_place=True)
        except jsonpatch.JsonPatchTestFailed as exc:
            raise PatchFailed(f"testing value {op.get('path')} failed: test failed") from exc
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            where = op.get("path")
            raise PatchFailed(
                f'{op.get("op")} operation does not apply: doc is missing path: "{where}": missing value'
            ) from exc
        except (TypeError, KeyError, ValueError) as exc:
            raise errors.BadRequest(f"invalid JSON patch: {exc}") from exc
    return document


# ---- strategic merge patch -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListStrategy:
    """How a list field merges: by `key` for lists of objects, as a set when `key` is empty."""

    key: str = ""
    retain_keys: bool = False


# Lists of the built-in types that merge (patchStrategy "merge" in the Go types), by field name.
# Lists not named here (tolerations, taints, args, envFrom, ...) are atomic: a patch replaces them.
_BY_FIELD: dict[str, ListStrategy] = {
    "containers": ListStrategy("name"),
    "initContainers": ListStrategy("name"),
    "ephemeralContainers": ListStrategy("name"),
    "env": ListStrategy("name"),
    "volumes": ListStrategy("name", retain_keys=True),
    "volumeMounts": ListStrategy("mountPath"),
    "volumeDevices": ListStrategy("devicePath"),
    "imagePullSecrets": ListStrategy("name"),
    "hostAliases": ListStrategy("ip"),
    "topologySpreadConstraints": ListStrategy("topologyKey"),
    "resourceClaims": ListStrategy("name", retain_keys=True),
    "schedulingGates": ListStrategy("name"),
    "conditions": ListStrategy("type"),
    "ownerReferences": ListStrategy("uid"),
    "finalizers": ListStrategy(),
    "podIPs": ListStrategy("ip"),
    "hostIPs": ListStrategy("ip"),
    "podCIDRs": ListStrategy(),
    "addresses": ListStrategy("type"),
}


def list_strategy(path: tuple[str, ...]) -> ListStrategy | None:
    """The merge strategy of the list at `path` (field names from the root, list items skipped)."""
    if not path:
        return None
    name = path[-1]
    if name == "ports":
        # Container ports merge by containerPort; a Service's ports by port.
        parent = path[-2] if len(path) > 1 else ""
        if parent in ("containers", "initContainers", "ephemeralContainers"):
            return ListStrategy("containerPort")
        if path == ("spec", "ports"):
            return ListStrategy("port")
        return None
    parent = path[-2] if len(path) > 1 else ""
    if name in ("conditions", "addresses") and path[0] != "status":
        return None
    if name in ("finalizers", "ownerReferences") and parent != "metadata":
        return None  # e.g. a Namespace's spec.finalizers is atomic
    return _BY_FIELD.get(name)


def strategic_merge_patch(original: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a strategic merge patch to a built-in object (the `kind` only picks list keys)."""
    if not isinstance(patch, Mapping):
        raise errors.BadRequest("a strategic merge patch must be a JSON object")
    result = _merge_map(dict(copy.deepcopy(dict(original))), dict(patch), ())
    if result is None:
        raise PatchFailed("the patch deletes the whole object")
    return result


def _merge_map(
    original: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...]
) -> dict[str, Any] | None:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != _DIRECTIVE}
    if directive not in (None, "merge"):
        raise errors.BadRequest(f"Unknown patch type: {directive}")
    retain = patch.get(_RETAIN_KEYS)
    before = dict(original)  # the server's lists, whose order `$setElementOrder` interleaves with
    orders: dict[str, list[Any]] = {}
    deletions: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS):
            continue
        if key.startswith(_SET_ORDER):
            if not isinstance(value, list):
                raise errors.BadRequest(f"{key} must be a list")
            orders[key[len(_SET_ORDER) :]] = value
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            if not isinstance(value, list):
                raise errors.BadRequest(f"{key} must be a list")
            deletions[key[len(_DELETE_PRIMITIVE) :]] = value
            continue
        if value is None:
            original.pop(key, None)
            continue
        child_path = (*path, key)
        current = original.get(key)
        if isinstance(value, dict):
            merged = _merge_map(dict(current) if isinstance(current, dict) else {}, value, child_path)
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, list):
            original[key] = _merge_list(current if isinstance(current, list) else None, value, child_path)
        else:
            original[key] = value
    for key, values in deletions.items():
        if isinstance(original.get(key), list):
            original[key] = [item for item in original[key] if item not in values]
    for key, order in orders.items():
        if isinstance(original.get(key), list):
            previous = before.get(key)
            server = previous if isinstance(previous, list) else []
            original[key] = _apply_order(original[key], order, server, list_strategy((*path, key)))
    if retain is not None:
        if not isinstance(retain, list):
            raise errors.BadRequest("$retainKeys must be a list")
        original = {k: v for k, v in original.items() if k in retain}
    return original


def _merge_list(original: list[Any] | None, patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    strategy = list_strategy(path)
    if strategy is None or (original is None and not _has_directives(patch)):
        return [_strip(item) for item in patch]
    base = list(original or [])
    if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
        return [_strip(item) for item in patch if not (isinstance(item, dict) and _DIRECTIVE in item)]
    if not strategy.key:
        # A set of primitives: union, keeping the original order first.
        for item in patch:
            if isinstance(item, dict) and item.get(_DIRECTIVE) == "delete":
                continue
            if item not in base:
                base.append(item)
        return base
    key = strategy.key
    for item in patch:
        if not isinstance(item, dict):
            raise errors.BadRequest(f"{'.'.join(path)}: list items must be objects with {key!r}")
        if key not in item:
            raise PatchFailed(f"map: {item} does not contain declared merge key: {key}")
        index = next(
            (i for i, have in enumerate(base) if isinstance(have, dict) and have.get(key) == item[key]), None
        )
        if item.get(_DIRECTIVE) == "delete":
            base = [have for have in base if not (isinstance(have, dict) and have.get(key) == item[key])]
            continue
        if index is None:
            base.append(_strip(item))
        else:
            merged = _merge_map(dict(base[index]), item, path)
            if merged is None:
                del base[index]
            else:
                base[index] = merged
    return base


def _apply_order(
    items: list[Any], order: list[Any], server: list[Any], strategy: ListStrategy | None
) -> list[Any]:
    """`$setElementOrder`, as upstream's normalizeElementOrder: the items the order names come in
    that order, the server-only items keep theirs, and the two are interleaved by server position."""
    key = strategy.key if strategy else ""

    def ident(item: Any) -> Any:
        return _hashable(item.get(key) if key and isinstance(item, dict) else item)

    rank = {ident(o): i for i, o in enumerate(order)}
    server_index = {ident(item): i for i, item in enumerate(server)}
    patched = sorted((item for item in items if ident(item) in rank), key=lambda it: rank[ident(it)])
    server_only = [item for item in items if ident(item) not in rank]
    out: list[Any] = []
    i = j = 0
    while i < len(patched) or j < len(server_only):
        if j >= len(server_only):
            out.append(patched[i])
            i += 1
        elif i >= len(patched):
            out.append(server_only[j])
            j += 1
        else:
            left, right = server_index.get(ident(patched[i])), server_index.get(ident(server_only[j]))
            if left is not None and right is not None and left < right:
                out.append(patched[i])
                i += 1
            else:
                out.append(server_only[j])
                j += 1
    return out


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, dict | list) else value


def _has_directives(patch: list[Any]) -> bool:
    return any(isinstance(item, dict) and _DIRECTIVE in item for item in patch)


def _strip(value: Any) -> Any:
    """A patch fragment stored as a value: drop directives nested in it."""
    if isinstance(value, dict):
        return {
            k: _strip(v)
            for k, v in value.items()
            if k not in (_DIRECTIVE, _RETAIN_KEYS)
            and not k.startswith(_SET_ORDER)
            and not k.startswith(_DELETE_PRIMITIVE)
            and v is not None
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def apply(patch_type: str, original: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Apply a patch of the given content type; the result must still be a JSON object."""
    if patch_type == JSON_PATCH:
        result = json_patch(original, patch)
    elif patch_type == MERGE_PATCH:
        result = merge_patch(original, patch)
    elif patch_type == STRATEGIC_MERGE_PATCH:
        if not isinstance(patch, dict):
            raise errors.BadRequest(
                "json: cannot unmarshal array into Go value of type map[string]interface {}"
            )
        result = strategic_merge_patch(original, patch)
    elif patch_type == APPLY_PATCH:
        raise errors.UnsupportedMediaType(
            "server-side apply (application/apply-patch+yaml) needs a field manager: see server_side_apply()"
        )
    else:
        raise errors.UnsupportedMediaType(
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{', '.join(PATCH_TYPES)}"
        )
    if not isinstance(result, dict):
        raise errors.BadRequest("the patched object is not a JSON object")
    return result


# ---- server-side apply (a subset) ----------------------------------------------------------------

FieldPath = tuple[str, ...]
# Fields a manager never owns: identity, server-set metadata and status (applied via its subresource).
_UNOWNED_TOP = frozenset({"apiVersion", "kind", "status"})
_UNOWNED_META = frozenset(
    {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"}
)


class ApplyConflict(errors.ApiError):
    """An apply that would change fields another manager owns (HTTP 409 unless forced)."""

    code = 409
    reason = "Conflict"


def _token_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _collect(value: Any, path: FieldPath, names: tuple[str, ...], out: set[FieldPath]) -> None:
    if isinstance(value, dict):
        if not value and path:
            out.add(path)
        for key, child in value.items():
            if not path and key in _UNOWNED_TOP:
                continue
            if path == ("f:metadata",) and key in _UNOWNED_META:
                continue
            _collect(child, (*path, f"f:{key}"), (*names, key), out)
        return
    if isinstance(value, list):
        strategy = list_strategy(names)
        if strategy is None or not value:
            out.add(path)  # an atomic list is owned as a whole
            return
        for item in value:
            if not strategy.key:
                out.add((*path, f"v:{_token_json(item)}"))
            elif isinstance(item, dict) and strategy.key in item:
                item_path = (*path, f"k:{_token_json({strategy.key: item[strategy.key]})}")
                out.add((*item_path, "."))
                for key, child in item.items():
                    _collect(child, (*item_path, f"f:{key}"), (*names, key), out)
        return
    out.add(path)


def field_set(obj: Mapping[str, Any]) -> set[FieldPath]:
    """The fields an applied configuration sets, as FieldsV1 paths ("f:spec", "k:{...}", "v:...")."""
    out: set[FieldPath] = set()
    _collect(dict(obj), (), (), out)
    return out


def to_fields_v1(paths: Iterable[FieldPath]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for token in path:
            node = node.setdefault(token, {})
    return tree


def from_fields_v1(tree: Mapping[str, Any], prefix: FieldPath = ()) -> set[FieldPath]:
    out: set[FieldPath] = set()
    for token, child in tree.items():
        path = (*prefix, token)
        if isinstance(child, Mapping) and child:
            out |= from_fields_v1(child, path)
        else:
            out.add(path)
    return out


def _step(value: Any, token: str) -> tuple[bool, Any]:
    """Follow one FieldsV1 token; (found, child)."""
    kind, _, rest = token.partition(":")
    if token == ".":
        return True, value
    if kind == "f" and isinstance(value, dict):
        return (rest in value), value.get(rest)
    if kind == "k" and isinstance(value, list):
        wanted = json.loads(rest)
        for item in value:
            if isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items()):
                return True, item
        return False, None
    if kind == "v" and isinstance(value, list):
        wanted = json.loads(rest)
        return (wanted in value), wanted
    return False, None


def _lookup(obj: Any, path: FieldPath) -> tuple[bool, Any]:
    value = obj
    for token in path:
        found, value = _step(value, token)
        if not found:
            return False, None
    return True, value


def _remove(obj: dict[str, Any], path: FieldPath) -> None:
    """Remove the field, list item or set value at `path`, if present."""
    if path and path[-1] == ".":
        path = path[:-1]
    if not path:
        return
    found, parent = _lookup(obj, path[:-1])
    if not found:
        return
    kind, _, rest = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif kind == "k" and isinstance(parent, list):
        wanted = json.loads(rest)
        parent[:] = [
            item
            for item in parent
            if not (isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items()))
        ]
    elif kind == "v" and isinstance(parent, list):
        wanted = json.loads(rest)
        parent[:] = [item for item in parent if item != wanted]


def display_path(path: FieldPath) -> str:
    """A FieldsV1 path as upstream prints it in conflicts: `.spec.containers[name="main"].image`."""
    out = ""
    for token in path:
        kind, _, rest = token.partition(":")
        if kind == "f":
            out += f".{rest}"
        elif kind == "k":
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(rest).items()) + "]"
        elif kind == "v":
            out += f"[={rest}]"
    return out


def _conflict_error(conflicts: list[tuple[str, FieldPath]]) -> ApplyConflict:
    by_manager: dict[str, list[str]] = {}
    for manager, path in conflicts:
        by_manager.setdefault(manager, []).append(display_path(path))
    count = len(conflicts)
    if count == 1:
        manager, path = conflicts[0]
        text = f'conflict with "{manager}": {display_path(path)}'
    else:
        text = "\n".join(
            f'conflicts with "{manager}":\n' + "\n".join(f"- {p}" for p in sorted(paths))
            for manager, paths in by_manager.items()
        )
    message = f"Apply failed with {count} conflict{'s' if count > 1 else ''}: {text}"
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{manager}"',
            "field": display_path(path),
        }
        for manager, path in conflicts
    ]
    return ApplyConflict(message, details={"causes": causes})


def server_side_apply(
    current: Mapping[str, Any] | None,
    applied: Mapping[str, Any],
    manager: str,
    *,
    force: bool = False,
    now: str = "",
) -> dict[str, Any]:
    """The object after `manager` applies `applied` to `current` (None: the apply creates it)."""
    if not isinstance(applied, Mapping):
        raise errors.BadRequest("an apply patch must be an object")
    config = {k: copy.deepcopy(v) for k, v in applied.items() if k != "status"}
    config_md = config.get("metadata")
    if config_md is not None and not isinstance(config_md, dict):
        raise errors.BadRequest("metadata must be an object")
    if isinstance(config_md, dict) and "managedFields" in config_md:
        raise errors.BadRequest("metadata.managedFields must be nil")
    new_fields = field_set(config)
    base: dict[str, Any] = copy.deepcopy(dict(current)) if current is not None else {}
    entries: list[dict[str, Any]] = [
        dict(e) for e in (base.get("metadata") or {}).get("managedFields") or [] if isinstance(e, dict)
    ]
    mine = next((e for e in entries if e.get("manager") == manager and e.get("operation") == "Apply"), None)
    old_fields = from_fields_v1(mine.get("fieldsV1") or {}) if mine else set()
    others = [(e, from_fields_v1(e.get("fieldsV1") or {})) for e in entries if e is not mine]
    conflicts: list[tuple[str, FieldPath]] = []
    for entry, fields in others:
        for path in sorted(new_fields & fields):
            if path[-1] == ".":
                continue
            if _lookup(base, path) != _lookup(config, path):
                conflicts.append((str(entry.get("manager", "")), path))
    if conflicts and not force:
        raise _conflict_error(conflicts)
    if force:
        lost = {path for _, path in conflicts}
        others = [(entry, fields - lost) for entry, fields in others]
    merged = strategic_merge_patch(base, config) if base else copy.deepcopy(config)
    owned_elsewhere: set[FieldPath] = set().union(*(fields for _, fields in others)) if others else set()
    # Shortest first: a list item that goes takes its fields with it (they are then not found).
    for path in sorted(old_fields - new_fields - owned_elsewhere, key=lambda p: len(p) - (p[-1] == ".")):
        _remove(merged, path)
    kept = []
    for entry, fields in others:
        if fields:
            entry["fieldsV1"] = to_fields_v1(fields)
            kept.append(entry)
    kept.append(
        {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": str(config.get("apiVersion") or base.get("apiVersion") or ""),
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(new_fields),
        }
    )
    merged.setdefault("metadata", {})["managedFields"] = kept
    return merged
