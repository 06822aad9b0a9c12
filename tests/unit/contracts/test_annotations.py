"""The annotations one process writes and another reads back: versioned records, tolerant readers."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from shipshape.contracts import annotations as names
from shipshape.contracts.annotations import (
    AnnotationError,
    DecisionRecord,
    NodeStartupTimeline,
    RestartNote,
    SurgeNote,
)

Obj = dict[str, Any]


def _on(annotation: str, text: str, name: str = "web-1") -> Obj:
    return {"metadata": {"name": name, "annotations": {annotation: text}}}


def test_a_decision_record_round_trips_and_says_its_version() -> None:
    record = DecisionRecord(capacity_type="spot", pool="m5.large/us-east-1a", reason="spot-share", id="d-1")
    text = record.dump()
    assert json.loads(text) == {
        "v": 1,
        "capacityType": "spot",
        "pool": "m5.large/us-east-1a",
        "reason": "spot-share",
        "id": "d-1",
    }
    assert DecisionRecord.parse(text) == record
    packed = DecisionRecord(capacity_type="on-demand", reason="base", id="d-2", node="n1", dry_run=True)
    assert json.loads(packed.dump())["node"] == "n1" and json.loads(packed.dump())["dryRun"] is True
    assert DecisionRecord.parse(packed.dump()) == packed


def test_a_record_written_before_versions_is_version_one() -> None:
    text = '{"capacityType":"on-demand","pool":"","reason":"on-demand-base","id":"x"}'
    assert DecisionRecord.parse(text).v == 1
    # A newer writer of the same version may add fields: they are ignored.
    assert DecisionRecord.parse(text[:-1] + ',"later":1}').id == "x"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"v":2,"capacityType":"spot","reason":"r","id":"x"}', "unknown version 2"),
        ('{"v":true,"capacityType":"spot","reason":"r","id":"x"}', "v:"),
        ('{"capacityType":"moon","reason":"r","id":"x"}', "capacityType"),
        ('{"capacityType":"spot","reason":"r"}', "id: Field required"),
        ("[1, 2]", "must be a JSON object"),
        ("{not json", "is not JSON"),
    ],
)
def test_a_malformed_or_unknown_decision_is_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(AnnotationError, match=reason):
        DecisionRecord.parse(text)


def test_a_reader_answers_none_and_logs_the_reason_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="shipshape.contracts.annotations")
    assert DecisionRecord.read({"metadata": {"name": "p"}}) is None
    assert not caplog.records
    bad = _on(names.DECISION, '{"v":9,"capacityType":"spot","reason":"r","id":"once"}', name="web-7")
    assert DecisionRecord.read(bad) is None
    assert DecisionRecord.read(bad) is None
    (record,) = caplog.records
    assert "web-7" in record.getMessage() and "unknown version 9" in record.getMessage()


def test_surge_note_round_trip_and_end() -> None:
    note = SurgeNote(surge=2, pods=("web-1", "web-2"), nodes=("a-1",), since=100.0, deadline=220.5)
    deployment = _on(names.SURGE_NOTE, note.dump())
    assert SurgeNote.read(deployment) == note and note.active
    ended = note.ended()
    assert ended.done and not ended.active and ended.surge == 0 and ended.pods == note.pods
    assert SurgeNote.read(_on(names.SURGE_NOTE, '{"surge": -1, "since": 0, "deadline": 0}')) is None
    assert SurgeNote.read(_on(names.SURGE_NOTE, '{"surge": 1}')) is None  # since, deadline missing
    # What controllers wrote before the version field is read as version 1.
    old = '{"deadline":2.0,"done":false,"nodes":["a"],"pods":["p"],"since":1.0,"surge":1}'
    assert SurgeNote.parse(old) == SurgeNote(surge=1, pods=("p",), nodes=("a",), since=1.0, deadline=2.0)


def test_restart_note_is_the_same_bytes_for_the_same_notice() -> None:
    first = RestartNote(nodes=("b", "a"), at=1700000000.0).dump()
    assert first == RestartNote(nodes=("b", "a"), at=1700000000.0).dump()
    assert RestartNote.parse(first).nodes == ("b", "a")
    assert RestartNote.read(_on(names.RESTART_NOTE, '{"at": "t1"}')) is None


def test_node_startup_timeline_is_flat_in_time_order_and_checks_its_events() -> None:
    timeline = NodeStartupTimeline.of_seconds(
        {names.KUBELET_START: 7.5, names.VM_INITIALIZED: 0.0, names.CLOUD_INIT_START: 0.0}
    )
    text = timeline.dump()
    assert list(json.loads(text)) == ["v", names.VM_INITIALIZED, names.CLOUD_INIT_START, names.KUBELET_START]
    assert json.loads(text)[names.KUBELET_START] == "1970-01-01T00:00:07.500000Z"
    assert NodeStartupTimeline.parse(text) == timeline
    assert NodeStartupTimeline.parse('{"vm_initialized":"2022-11-28T02:59:07Z"}').v == 1
    for text, reason in (
        ('{"teleported": "2022-11-28T02:59:07Z"}', "unknown event 'teleported'"),
        ('{"v": 2}', "unknown version 2"),
        ('{"vm_initialized": 3}', "must be an RFC 3339 time"),
        ('{"vm_initialized": "yesterday"}', "vm_initialized"),
    ):
        with pytest.raises(AnnotationError, match=reason):
            NodeStartupTimeline.parse(text)


def test_every_name_is_under_a_shipshape_prefix() -> None:
    for value in (
        names.DECISION,
        names.SURGE_NOTE,
        names.RESTART_NOTE,
        names.GUARD_LABEL,
        *names.POLICY_ANNOTATIONS,
    ):
        assert value.startswith(names.PREFIX)
    assert names.STARTUP_TIMELINE.startswith("startup.shipshape.dev/")
