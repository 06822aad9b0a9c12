"""The leader Lease decision: take a free or expired Lease, renew our own, follow a live holder."""

from __future__ import annotations

from shipshape.controller.leader import LeaseSettings, Step, lease_body, lease_step
from shipshape.kube.clock import parse_time, rfc3339_micro

NOW = 1_767_225_600.0
SETTINGS = LeaseSettings(duration_seconds=15)


def lease(holder: str | None, renewed: float, duration: int = 15, transitions: int = 0) -> dict[str, object]:
    return {
        "metadata": {"name": "shipshape-controller", "namespace": "shipshape-system", "resourceVersion": "7"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": rfc3339_micro(renewed),
            "acquireTime": rfc3339_micro(renewed - 100),
            "leaseTransitions": transitions,
        },
    }


def test_steps() -> None:
    assert lease_step(None, "a", NOW) is Step.CREATE
    assert lease_step(lease("a", NOW - 60), "a", NOW) is Step.RENEW
    assert lease_step(lease("b", NOW - 5), "a", NOW) is Step.FOLLOW
    assert lease_step(lease("b", NOW - 15), "a", NOW) is Step.ACQUIRE  # expired exactly now
    assert lease_step(lease(None, NOW), "a", NOW) is Step.ACQUIRE  # released on a graceful stop
    assert lease_step(lease("", NOW), "a", NOW) is Step.ACQUIRE


def test_bodies_keep_optimistic_concurrency_and_count_transitions() -> None:
    taken = lease_body(lease("b", NOW - 30, transitions=2), Step.ACQUIRE, "a", NOW, SETTINGS)
    assert taken["metadata"]["resourceVersion"] == "7"
    assert taken["spec"]["holderIdentity"] == "a"
    assert taken["spec"]["leaseTransitions"] == 3
    assert parse_time(taken["spec"]["acquireTime"]) == parse_time(taken["spec"]["renewTime"]) == NOW

    renewed = lease_body(lease("a", NOW - 2, transitions=3), Step.RENEW, "a", NOW, SETTINGS)
    assert renewed["spec"]["leaseTransitions"] == 3
    assert parse_time(renewed["spec"]["acquireTime"]) == NOW - 102  # unchanged on renewal
    assert parse_time(renewed["spec"]["renewTime"]) == NOW

    created = lease_body(None, Step.CREATE, "a", NOW, SETTINGS)
    assert "resourceVersion" not in created["metadata"]
    assert created["spec"]["leaseTransitions"] == 0 and created["spec"]["leaseDurationSeconds"] == 15
