"""The workers' reading of a snapshot's objects: the fast path (raw JSON per object, msgspec) agrees
with the full parse, and leaves to it whatever it is not sure of."""

from __future__ import annotations

import gzip
from typing import Any

import orjson
import pytest

from shipshape.backend import pushbody
from shipshape.contracts.push import ClusterSnapshot, parse_push


def _snapshot(**objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema": "shipshape.dev/snapshot/v1",
        "sequence": 7,
        "taken_at": "2026-11-25T12:00:00+00:00",
        "objects": objects,
    }


def _pod(name: str, namespace: str = "shop", **status: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "status": status}


def test_the_fast_read_agrees_with_the_full_parse() -> None:
    body = _snapshot(
        nodes=[{"kind": "Node", "metadata": {"name": "n1"}, "status": {"x": [1, 2.5, None]}}],
        pods=[_pod("a", phase="Running"), _pod("b", phase="Pending", note="caf\u00e9")],
    )
    raw = orjson.dumps(body)
    fast = pushbody.read_snapshot(raw)
    parsed = parse_push(orjson.loads(raw))
    assert isinstance(parsed, ClusterSnapshot)
    full = pushbody.snapshot_objects(parsed)
    assert fast is not None and fast.sequence == full.sequence == 7
    assert (
        list(fast.objects)
        == list(full.objects)
        == [("nodes", "", "n1"), ("pods", "shop", "a"), ("pods", "shop", "b")]
    )
    for key, obj in fast.objects.items():
        # orjson writes what it reads back byte for byte: the digests of both paths are the same.
        assert obj.digest == full.objects[key].digest == pushbody.digest(obj.raw)
        assert obj.body() == full.objects[key].body()
    changed = pushbody.read_snapshot(orjson.dumps(_snapshot(pods=[_pod("a", phase="Failed")])))
    assert changed is not None
    assert changed.objects[("pods", "shop", "a")].digest != fast.objects[("pods", "shop", "a")].digest


@pytest.mark.parametrize(
    "objects",
    [
        {"pods": [_pod("a"), _pod("a")]},  # twice
        {"pods": [_pod("Bad_Name")]},
        {"pods": [{"kind": "Pod", "metadata": {"name": "a"}}]},  # no namespace
        {"nodes": [{"metadata": {"name": "n", "namespace": "x"}}]},  # cluster-scoped with one
        {"widgets": [{"metadata": {"name": "w"}}]},  # unknown kind
        {"pods": [[1, 2]]},  # not an object
        {"pods": [{"kind": "Pod"}]},  # no metadata
    ],
)
def test_what_the_contract_refuses_goes_to_the_full_parse(objects: dict[str, Any]) -> None:
    raw = orjson.dumps(_snapshot(**objects))
    assert pushbody.read_snapshot(raw) is None
    with pytest.raises(ValueError):
        parse_push(orjson.loads(raw))


def test_a_push_of_another_shape_is_not_read_as_a_snapshot() -> None:
    assert pushbody.read_snapshot(orjson.dumps({**_snapshot(), "extra": 1})) is None
    assert pushbody.read_snapshot(orjson.dumps({**_snapshot(), "sequence": -1})) is None
    assert pushbody.read_snapshot(b"not json") is None
    assert pushbody.inflate(gzip.compress(b"{}")) == b"{}"
