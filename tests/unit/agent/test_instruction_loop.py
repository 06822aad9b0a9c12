"""The instruction loop acts only while its replica leads: a follower does not poll, and a leader that
loses the Lease during a long poll executes and reports nothing of what that poll handed it."""

from __future__ import annotations

import threading
from typing import Any

from shipshape.agent.instructions import InstructionLoop
from shipshape.contracts.instructions import (
    InstructionEnvelope,
    InstructionOutcome,
    Precondition,
    SetSpotPolicy,
    WorkloadRef,
)


def envelope(instruction_id: str) -> InstructionEnvelope:
    return InstructionEnvelope(
        id=instruction_id,
        recommendation_id="r-" + instruction_id,
        instruction=SetSpotPolicy(
            target=WorkloadRef(kind="Deployment", namespace="default", name="web"),
            precondition=Precondition(generation=1),
            annotations={"spot.shipshape.dev/enabled": "true"},
        ),
    )


class Backend:
    """Hands out the given instructions once per poll; records polls and reports."""

    def __init__(self, batches: list[list[InstructionEnvelope | str]], on_poll: Any = None) -> None:
        self.batches = batches
        self.on_poll = on_poll
        self.polls = 0
        self.reports: list[tuple[str, str]] = []
        self.reported = threading.Event()

    def poll(self, wait: float) -> list[InstructionEnvelope | str]:
        self.polls += 1
        if self.on_poll is not None:
            self.on_poll()
        return self.batches.pop(0) if self.batches else []

    def report(self, instruction_id: str, outcome: InstructionOutcome) -> None:
        self.reports.append((instruction_id, outcome.status))
        self.reported.set()


class Cluster:
    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, item: InstructionEnvelope) -> InstructionOutcome:
        self.executed.append(item.id)
        return InstructionOutcome(status="applied", detail="done")


def test_a_leader_executes_and_reports_each_instruction() -> None:
    backend, cluster = Backend([[envelope("i1"), "unknown-kind"]]), Cluster()
    loop = InstructionLoop(backend, cluster, is_leader=lambda: True)  # type: ignore[arg-type]
    assert loop.run_once(0) == 2
    assert cluster.executed == ["i1"]
    assert backend.reports == [("i1", "applied"), ("unknown-kind", "refused")]


def test_a_leader_losing_the_lease_during_a_poll_acts_on_none_of_it() -> None:
    leading = threading.Event()
    leading.set()
    backend, cluster = Backend([[envelope("i1"), envelope("i2")]], on_poll=leading.clear), Cluster()
    loop = InstructionLoop(backend, cluster, is_leader=leading.is_set)  # type: ignore[arg-type]
    assert loop.run_once(0) == 0
    assert cluster.executed == [] and backend.reports == []


def test_a_follower_does_not_poll_until_it_leads() -> None:
    leading = threading.Event()
    polled = threading.Event()
    backend, cluster = Backend([[envelope("i1")]], on_poll=polled.set), Cluster()
    loop = InstructionLoop(backend, cluster, wait=0, is_leader=leading.is_set, idle=0.01)  # type: ignore[arg-type]
    loop.start()
    try:
        assert not polled.wait(0.1) and backend.polls == 0
        leading.set()
        assert backend.reported.wait(5)
    finally:
        loop.stop()
    assert cluster.executed == ["i1"] and backend.reports == [("i1", "applied")]


def test_a_stop_waits_for_the_instruction_in_hand_not_for_a_poll() -> None:
    executing, release = threading.Event(), threading.Event()

    class Slow(Cluster):
        def execute(self, item: InstructionEnvelope) -> InstructionOutcome:
            executing.set()
            release.wait(5)
            return super().execute(item)

    backend, cluster = Backend([[envelope("i1"), envelope("i2")]]), Slow()
    loop = InstructionLoop(backend, cluster, wait=0, idle=0.01)  # type: ignore[arg-type]
    loop.start()
    assert executing.wait(5)
    stopper = threading.Thread(target=loop.stop)
    stopper.start()
    stopper.join(0.05)
    assert stopper.is_alive()  # i1 is being executed: the stop waits for it
    release.set()
    stopper.join(5)
    assert not stopper.is_alive()
    # i1 was finished and reported; i2, handed over by the same poll, was left alone.
    assert cluster.executed == ["i1"] and backend.reports == [("i1", "applied")]
