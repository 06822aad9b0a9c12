"""The poller's rounds in virtual time: spacing, one publication per notice, errors retried."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from shipshape.kube.client import KubeClientError
from shipshape.kube.clock import VirtualClock
from shipshape.nodecollector.notices import publish
from shipshape.nodecollector.notices.model import Kind, MetadataError, NodeNotice
from shipshape.nodecollector.notices.poller import NoticePoller


class ScriptedSource:
    """Answers each poll from a script (a list of notices, or an error to raise); then the last one."""

    cloud = "azure"
    long_polls = False

    def __init__(self, script: list[list[NodeNotice] | Exception]) -> None:
        self.script = script
        self.polls = 0
        self.acknowledged: list[str] = []

    def poll(self, clock: Callable[[], float], wait_seconds: float = 0.0) -> list[NodeNotice]:
        step = self.script[min(self.polls, len(self.script) - 1)]
        self.polls += 1
        if isinstance(step, Exception):
            raise step
        return step

    def published(self, notice: NodeNotice) -> None:
        assert notice.ack_id is not None
        self.acknowledged.append(notice.ack_id)

    def probe(self) -> bool:
        return True


class NodeInMemory:
    """A Node the writes land on; `fail` makes the next apply raise."""

    def __init__(self) -> None:
        self.node: dict[str, Any] = {
            "metadata": {"name": "n1", "resourceVersion": "1"},
            "spec": {},
            "status": {},
        }
        self.writes: list[str] = []
        self.events: set[str] = set()
        self.fail: Exception | None = None

    def read(self) -> dict[str, Any]:
        return self.node

    def apply(self, node: Mapping[str, Any], writes: publish.Writes) -> list[str]:
        if self.fail is not None:
            error, self.fail = self.fail, None
            raise error
        done = []
        if writes.taints is not None:
            self.node["spec"]["taints"] = writes.taints
            done.append("taint")
        if writes.condition is not None:
            self.node["status"]["conditions"] = [writes.condition]
            done.append("condition")
        if writes.event["metadata"]["name"] not in self.events:
            self.events.add(writes.event["metadata"]["name"])
            done.append("event")
        self.writes.extend(done)
        return done


def preempt(clock: VirtualClock) -> NodeNotice:
    return NodeNotice(
        cloud="azure",
        kind=Kind.INTERRUPTION,
        event_id="azure-1",
        reason="Preempted",
        detail="Azure scheduled event Preempt",
        deadline=clock.now() + 30,
        ack_id="8E3B6F2A-51C4-4D9E-A07B-3C6D2E9F1B48",
    )


def run(poller: NoticePoller, clock: VirtualClock, rounds: int) -> list[float]:
    started: list[float] = []

    def stop() -> bool:
        if len(started) == rounds:
            return True
        started.append(clock.now())
        return False

    poller.run(stop, clock.advance)
    return started


def test_rounds_are_spaced_and_a_notice_is_published_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()
    notice = preempt(clock)
    source = ScriptedSource(
        [
            [],
            MetadataError("Azure scheduled events: HTTP 500"),
            MetadataError("Azure scheduled events: HTTP 500"),
            [notice],
        ]
    )
    node = NodeInMemory()
    poller = NoticePoller(source, node, clock.now, interval=2.0)
    node_error = KubeClientError("API request failed: 409 Conflict", status=409)
    with caplog.at_level(logging.WARNING, logger="shipshape.nodecollector.notices"):
        starts = run(poller, clock, 4)
        assert [round(t - starts[0], 3) for t in starts] == [0.0, 2.0, 4.0, 6.0]
        # The same error twice is logged once.
        assert [r.getMessage() for r in caplog.records].count(
            "notice poll failed (retrying every 2s): Azure scheduled events: HTTP 500"
        ) == 1
        assert node.writes == ["taint", "condition", "event"]
        assert source.acknowledged == [notice.ack_id]
        # Read again in later rounds: nothing is written or acknowledged twice.
        run(poller, clock, 3)
        assert node.writes == ["taint", "condition", "event"] and len(source.acknowledged) == 1
    # A restarted poller whose first write conflicts: retried, and still nothing twice.
    again = ScriptedSource([[notice]])
    restarted = NoticePoller(again, node, clock.now, interval=2.0)
    node.fail = node_error
    assert not restarted.step()
    assert restarted.step()
    assert node.writes == ["taint", "condition", "event"]
    assert again.acknowledged == [notice.ack_id]
