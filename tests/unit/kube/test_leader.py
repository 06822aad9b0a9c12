"""The Lease decision: take a free or expired Lease, renew our own, follow a live holder; the bodies
written for each; the entry-point defaults; API answers translated to `kube.errors`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shipshape.controller import leader as controller_leader
from shipshape.kube import errors
from shipshape.kube.clock import parse_time, rfc3339_micro
from shipshape.kube.leader import (
    DEFAULT_NAMESPACE,
    LeaseSettings,
    Step,
    default_identity,
    default_namespace,
    lease_body,
    lease_holder,
    lease_step,
    released_body,
)

NOW = 1_767_225_600.0
SETTINGS = LeaseSettings("shipshape-agent", "shipshape-system", duration_seconds=15)


def lease(holder: str | None, renewed: float, duration: int = 15, transitions: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": "shipshape-agent", "namespace": "shipshape-system", "resourceVersion": "7"},
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
    assert lease_step(lease("b", NOW - 5, duration=3), "a", NOW) is Step.ACQUIRE  # the Lease's own duration
    assert lease_step(lease(None, NOW), "a", NOW) is Step.ACQUIRE  # released on a graceful stop
    assert lease_step(lease("", NOW), "a", NOW) is Step.ACQUIRE
    unreadable = lease("b", NOW)
    unreadable["spec"] = {"holderIdentity": "b", "renewTime": "yesterday", "leaseDurationSeconds": 15}
    assert lease_step(unreadable, "a", NOW) is Step.ACQUIRE


def test_holder_is_the_live_one_only() -> None:
    assert lease_holder(None, NOW) is None
    assert lease_holder(lease("b", NOW - 5), NOW) == "b"
    assert lease_holder(lease("b", NOW - 16), NOW) is None
    assert lease_holder(lease(None, NOW), NOW) is None


def test_bodies_keep_optimistic_concurrency_and_count_transitions() -> None:
    taken = lease_body(lease("b", NOW - 30, transitions=2), Step.ACQUIRE, "a", NOW, SETTINGS)
    assert taken["metadata"] == {
        "name": "shipshape-agent",
        "namespace": "shipshape-system",
        "resourceVersion": "7",
    }
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


def test_a_released_lease_is_free_at_once_and_keeps_its_version() -> None:
    held = lease("a", NOW, transitions=4)
    released = released_body(held)
    assert released["metadata"]["resourceVersion"] == "7"
    assert released["spec"]["holderIdentity"] is None and released["spec"]["leaseDurationSeconds"] == 1
    assert lease_step(released, "b", NOW) is Step.ACQUIRE
    assert held["spec"]["holderIdentity"] == "a"  # the Lease read is left as it was


def test_the_controller_keeps_its_lease_name() -> None:
    settings = controller_leader.LeaseSettings(duration_seconds=15, retry_seconds=2.0)
    assert settings.name == controller_leader.LEASE_NAME == "shipshape-controller"
    assert settings.namespace == "shipshape-system"
    assert isinstance(settings, LeaseSettings)


def test_namespace_from_the_service_account_file_else_the_default(tmp_path: Path) -> None:
    file = tmp_path / "namespace"
    assert default_namespace(file) == DEFAULT_NAMESPACE == "shipshape-system"
    file.write_text("cost-tools\n")
    assert default_namespace(file) == "cost-tools"
    file.write_text("")
    assert default_namespace(file) == DEFAULT_NAMESPACE
    host, _, pid = default_identity().rpartition("-")
    assert host and pid.isdigit()


@pytest.mark.parametrize(
    ("code", "body", "cls", "retryable"),
    [
        (
            409,
            b'{"kind":"Status","reason":"AlreadyExists","message":"exists","code":409}',
            errors.AlreadyExists,
            False,
        ),
        (409, '{"kind":"Status","reason":"Conflict","message":"modified","code":409}', errors.Conflict, True),
        (404, None, errors.NotFound, False),
        (403, {"reason": "Forbidden", "message": "no"}, errors.Forbidden, False),
        (503, b"<html>bad gateway</html>", errors.ServiceUnavailable, True),
        (429, b"", errors.TooManyRequests, True),
    ],
)
def test_api_answers_become_kube_errors(
    code: int, body: object, cls: type[errors.ApiError], retryable: bool
) -> None:
    error = errors.from_status(code, body)
    assert type(error) is cls
    assert error.code == code and error.retryable is retryable


def test_unknown_answers_keep_their_code() -> None:
    bad_gateway = errors.from_status(502, b'{"message":"upstream"}')
    assert (bad_gateway.code, bad_gateway.retryable, bad_gateway.message) == (502, True, "upstream")
    invalid = errors.from_status(
        422, {"reason": "Invalid", "message": "spec: bad", "details": {"kind": "leases"}}
    )
    assert (invalid.code, invalid.reason, invalid.details) == (422, "Invalid", {"kind": "leases"})
    teapot = errors.from_status(418, None)
    assert (teapot.code, teapot.retryable) == (418, False)
    assert errors.Unreachable("no route").retryable and errors.Unreachable("x").code == 503
