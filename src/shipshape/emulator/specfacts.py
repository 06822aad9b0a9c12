"""What an update works out about a stored pod's spec, kept by the spec object itself.

Stored objects are never changed in place (`store.py`), and the versions of a pod share their
`spec` object until something rewrites it: a status write, a binding's annotations, the
deletion-cost keeper's annotation patches all keep it. An update that keeps the stored spec (a
metadata-only patch, `Api.patch`) asks three questions of it that depend on that object alone:
does it decode, does defaulting leave it as it is, and what does the pod validator say of an update
that keeps it. The answers are kept by the object's identity (the entry holds the object, so its id
is not reused while kept), and the write shares the spec instead of copying it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shipshape.emulator import defaults, validation

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PodSpecFacts:
    """`validation` and `defaults`' answers for one pod spec object."""

    plain: bool  # dicts with str keys, lists, str, int, bool, finite floats, None: what a JSON copy keeps
    decodable: bool  # `validation.check_decodable` finds nothing wrong in it
    defaulted: bool  # `defaults.pod_spec` would change nothing in it
    # The pod validator's causes for an update keeping it; None where working them out raised (the
    # full validation then runs, and raises as it always did).
    update_causes: tuple[validation.Cause, ...] | None

    @property
    def shareable(self) -> bool:
        """An update may keep this spec object as it is instead of a JSON copy of it: the copy would
        be equal and of the same types, it decodes, and it needs no defaults."""
        return self.plain and self.decodable and self.defaulted

    @staticmethod
    def of(spec: Any) -> PodSpecFacts:
        """Worked out anew (the kept answers' reference)."""
        decodable = validation.pod_spec_decodes(spec)
        defaulted = False
        if decodable:
            try:
                defaulted = defaults.pod_spec_defaulted(spec)
            except Exception:  # whatever defaulting raises, the full path raises it
                defaulted = False
        try:
            causes: tuple[validation.Cause, ...] | None = tuple(validation.pod_update_spec_causes(spec))
        except Exception:  # the same: the full validation runs and raises it
            causes = None
        return PodSpecFacts(
            plain=plain_json(spec), decodable=decodable, defaulted=defaulted, update_causes=causes
        )


_SCALARS = (str, int, bool, type(None))
# Nesting below which orjson writes a document (it refuses 255 levels; a spec is a few levels deep).
_MAX_DEPTH = 200


def plain_json(value: Any, depth: int = 0) -> bool:
    """Whether `value` is made of JSON's own types only, so that a copy through JSON (`store.clone`)
    is equal to it and of the very same types (no tuples, subclasses, non-str keys, NaN), and nested
    less deeply than orjson refuses to write (a copy of it would fail)."""
    kind = type(value)
    if kind is dict:
        return depth < _MAX_DEPTH and all(
            type(key) is str and plain_json(item, depth + 1) for key, item in value.items()
        )
    if kind is list:
        return depth < _MAX_DEPTH and all(plain_json(item, depth + 1) for item in value)
    if kind is float:
        return bool(math.isfinite(value))
    if kind is int:
        return bool(-(2**63) <= value < 2**64)  # what orjson writes
    return kind in _SCALARS


class PodSpecMemo:
    """`PodSpecFacts` per stored pod spec object, for at most `limit` objects (then forgotten at once:
    the live pods' specs are asked again as their next writes come)."""

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self._kept: dict[int, tuple[Any, PodSpecFacts]] = {}

    def facts(self, spec: Any) -> PodSpecFacts:
        """The facts of `spec`, a stored object's spec (which nobody changes)."""
        entry = self._kept.get(id(spec))
        if entry is not None and entry[0] is spec:
            return entry[1]
        facts = PodSpecFacts.of(spec)
        if len(self._kept) >= self.limit:
            self._kept.clear()
        self._kept[id(spec)] = (spec, facts)
        return facts

    def __len__(self) -> int:
        return len(self._kept)
