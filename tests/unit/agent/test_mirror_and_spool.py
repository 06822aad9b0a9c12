"""The agent's mirror (snapshots and deltas from informer events) and its spool (durable, ordered,
bounded)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from shipshape.agent.mirror import Mirror
from shipshape.agent.spool import Spool
from shipshape.contracts.push import ClusterDelta, ClusterSnapshot, parse_push

NOW = datetime(2026, 11, 25, tzinfo=UTC)


def pod(name: str, rv: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "shop", "resourceVersion": rv, "managedFields": [{}]},
        "spec": {"containers": [{"name": "c", "env": [{"name": "TOKEN", "value": "t"}]}], **spec},
    }


def names(push: ClusterSnapshot) -> dict[str, list[str]]:
    return {kind: sorted(o["metadata"]["name"] for o in items) for kind, items in push.objects.items()}


def test_snapshot_and_deltas_follow_events_and_relists() -> None:
    mirror = Mirror()
    mirror.replace("Pod", [pod("a", "1"), pod("b", "2")])
    mirror.replace("Node", [{"metadata": {"name": "n1", "resourceVersion": "3"}}])
    snap = parse_push(orjson.loads(mirror.snapshot(100, NOW)))
    assert isinstance(snap, ClusterSnapshot)
    assert names(snap) == {"pods": ["a", "b"], "nodes": ["n1"]}
    stored = snap.objects["pods"][0]
    assert stored["kind"] == "Pod" and "managedFields" not in stored["metadata"]
    assert stored["spec"]["containers"][0]["env"][0]["value"] == "<redacted>"
    assert mirror.take_delta(101, 100, NOW) is None  # the snapshot held every change

    mirror.apply({"type": "ADDED", "object": pod("c", "4")}, "Pod")
    mirror.apply({"type": "MODIFIED", "object": pod("a", "5", nodeName="n1")}, "Pod")
    mirror.apply({"type": "ADDED", "object": pod("gone", "6")}, "Pod")
    mirror.apply({"type": "DELETED", "object": pod("gone", "7")}, "Pod")  # came and went: untold
    mirror.apply({"type": "MODIFIED", "object": pod("c", "8", nodeName="n1")}, "Pod")  # still ADDED
    delta = parse_push(orjson.loads(mirror.take_delta(101, 100, NOW) or b""))
    assert isinstance(delta, ClusterDelta) and (delta.sequence, delta.base_sequence) == (101, 100)
    changes = {(c.type, c.object["metadata"]["name"]) for c in delta.changes}
    assert changes == {("ADDED", "c"), ("MODIFIED", "a")}
    assert (
        next(c for c in delta.changes if c.object["metadata"]["name"] == "c").object["spec"]["nodeName"]
        == "n1"
    )

    # A relist after a watch gap: b vanished, a changed, d appeared, c unchanged.
    mirror.replace("Pod", [pod("a", "9"), pod("c", "8", nodeName="n1"), pod("d", "10")])
    delta = parse_push(orjson.loads(mirror.take_delta(102, 101, NOW) or b""))
    assert isinstance(delta, ClusterDelta)
    assert {(c.type, c.object["metadata"]["name"]) for c in delta.changes} == {
        ("DELETED", "b"),
        ("MODIFIED", "a"),
        ("ADDED", "d"),
    }
    final = parse_push(orjson.loads(mirror.snapshot(103, NOW)))
    assert isinstance(final, ClusterSnapshot)
    assert names(final)["pods"] == ["a", "c", "d"]


def test_spool_is_ordered_durable_and_bounded(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", max_bytes=4096)
    (tmp_path / "spool" / "00000000000000000009.delta.json.tmp").write_bytes(b"half")
    spool = Spool(tmp_path / "spool", max_bytes=4096)  # a restart removes a write cut short
    assert not list((tmp_path / "spool").glob("*.tmp"))
    spool.add(20, "delta", b'{"n": 20}')
    spool.add(3, "snapshot", b'{"n": 3}')
    assert [(i.sequence, i.kind) for i in spool.items()] == [(3, "snapshot"), (20, "delta")]
    assert spool.items()[1].body() == b'{"n": 20}'
    # Another process (a restarted agent) sees the same spool and the same last sequence.
    assert Spool(tmp_path / "spool").last_sequence() == 20

    noise = os.urandom(8192)  # random bytes do not compress below the bound
    with pytest.raises(ValueError, match="spool full"):
        spool.add(21, "delta", noise)
    # The spool's in-memory index equals what a fresh look at the folder finds.
    assert spool.size() == Spool(tmp_path / "spool").size() and bool(spool)
    folded = spool.fold(22, b'{"snapshot": true}')
    assert [(i.sequence, i.kind) for i in spool.items()] == [(22, "snapshot")]
    assert spool.size() == Spool(tmp_path / "spool").size() == folded.path.stat().st_size
    spool.remove(folded)
    assert spool.items() == [] and not spool and spool.size() == 0
