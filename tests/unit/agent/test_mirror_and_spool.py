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
from shipshape.contracts import compression
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


class _Page:
    def __init__(self, items: list[dict[str, Any]], rv: str, token: str | None) -> None:
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if token:
            metadata["continue"] = token
        self.data = orjson.dumps({"metadata": metadata, "items": items})


def test_a_list_reaches_the_mirror_page_by_page_and_a_failed_page_changes_nothing() -> None:
    import threading

    from kubernetes.client import ApiException

    from shipshape.kube.informers import Informer, PagedSink, Source, WatchFailed

    mirror = Mirror()
    assert isinstance(mirror, PagedSink)
    mirror.replace("Pod", [pod("old", "1")])
    mirror.take_delta(1, 0, NOW)
    pages: list[Any] = [
        _Page([pod("a", "2"), pod("b", "3")], "5", "t1"),
        _Page([pod("c", "4")], "7", None),
    ]
    seen: list[str | None] = []

    def list_pods(**kwargs: Any) -> Any:
        seen.append(kwargs.get("_continue"))
        answer = pages.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    informer = Informer(Source("Pod", list_pods), mirror, threading.Event())
    assert informer._list() == "7"
    assert seen == [None, "t1"]
    snap = parse_push(orjson.loads(mirror.snapshot(2, NOW)))
    assert isinstance(snap, ClusterSnapshot) and names(snap) == {"pods": ["a", "b", "c"]}

    pages[:] = [_Page([pod("d", "8")], "9", "t2"), ApiException(status=500, reason="boom")]
    with pytest.raises(WatchFailed):
        informer._list()
    assert mirror.take_delta(3, 2, NOW) is None  # nothing replaced, nothing to tell
    snap = parse_push(orjson.loads(mirror.snapshot(4, NOW)))
    assert isinstance(snap, ClusterSnapshot) and names(snap) == {"pods": ["a", "b", "c"]}


def test_a_snapshot_spooled_in_pieces_reads_back_whole(tmp_path: Path) -> None:
    mirror = Mirror()
    mirror.replace("Pod", [pod(f"p{i}", str(i)) for i in range(2500)])
    mirror.replace("Node", [{"metadata": {"name": "n1", "resourceVersion": "3"}}])
    spool = Spool(tmp_path / "spool")
    item = spool.add_chunks(7, "snapshot", mirror.snapshot_chunks(7, NOW))
    assert item.body() == mirror.snapshot(7, NOW)
    snap = parse_push(orjson.loads(item.body()))
    assert isinstance(snap, ClusterSnapshot) and len(snap.objects["pods"]) == 2500
    small = Spool(tmp_path / "small", max_bytes=1024)
    with pytest.raises(ValueError, match="spool full"):
        small.add_chunks(8, "snapshot", mirror.snapshot_chunks(8, NOW))
    assert not small and not list((tmp_path / "small").iterdir())


def test_the_spool_writes_zstd_and_still_sends_what_an_older_agent_spooled_in_gzip(tmp_path: Path) -> None:
    import gzip

    directory = tmp_path / "spool"
    directory.mkdir()
    # Left by an agent of the version before: gzip files, sent as they are.
    (directory / "00000000000000000004.snapshot.json.gz").write_bytes(gzip.compress(b'{"n": 4}'))
    spool = Spool(directory)
    new = spool.add(5, "delta", b'{"n": 5}')
    assert new.path.name == "00000000000000000005.delta.json.zst"
    assert [(i.sequence, i.encoding) for i in spool.items()] == [(4, "gzip"), (5, "zstd")]
    old, fresh = spool.items()
    assert old.body() == b'{"n": 4}' and fresh.body() == b'{"n": 5}'
    assert compression.encoding_of(fresh.compressed()) == compression.ZSTD
    assert b"".join(fresh.pieces(size=3)) == fresh.compressed()
    assert compression.inflate_received(fresh.compressed(), fresh.encoding, 1024) == b'{"n": 5}'
    assert spool.size() == Spool(directory).size() == sum(i.path.stat().st_size for i in spool.items())
