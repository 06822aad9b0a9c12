"""`kube.leader.LeaseElector` against the served emulator's coordination.k8s.io Leases, through the
official client, in virtual time: one holder at a time, callbacks when that changes, a leader that
cannot renew stops at the lease's end, a release hands over at once, a race is lost by one side."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config

from shipshape.kube import errors
from shipshape.kube.clock import VirtualClock
from shipshape.kube.leader import LeaseElector, LeaseSettings
from tests.emulator_fixtures import ServedEmulator

pytestmark = pytest.mark.integration
SETTINGS = LeaseSettings("shipshape-agent", "shipshape-system", duration_seconds=15, retry_seconds=2.0)


@pytest.fixture
def api_client(served_emulator: ServedEmulator) -> Iterator[k8s.ApiClient]:
    # The official client's functions and models are only partly typed: used as Any here.
    kube_config: Any = config
    api = kube_config.new_client_from_config(config_file=str(served_emulator.kubeconfig))
    yield api
    api.close()


class Recorder:
    def __init__(self) -> None:
        self.changes: list[str] = []

    def elector(self, api_client: k8s.ApiClient, identity: str, clock: VirtualClock) -> LeaseElector:
        return LeaseElector(
            api_client,
            identity,
            clock,
            SETTINGS,
            on_start_leading=lambda: self.changes.append(f"{identity} leads"),
            on_stop_leading=lambda: self.changes.append(f"{identity} stopped"),
        )


def read_lease(api_client: k8s.ApiClient) -> dict[str, Any]:
    coordination: Any = k8s.CoordinationV1Api(api_client)
    response = coordination.read_namespaced_lease(SETTINGS.name, SETTINGS.namespace, _preload_content=False)
    body: dict[str, Any] = json.loads(response.data)
    return body


def create_namespace(api_client: k8s.ApiClient) -> None:
    core: Any = k8s.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": SETTINGS.namespace}})


def test_one_holder_takes_over_from_another_at_the_end_of_the_lease(api_client: k8s.ApiClient) -> None:
    create_namespace(api_client)
    clock, seen = VirtualClock(), Recorder()
    a, b = seen.elector(api_client, "a", clock), seen.elector(api_client, "b", clock)
    assert a.step() and a.is_leader
    assert not b.step() and not b.is_leader
    assert seen.changes == ["a leads"]
    clock.advance(10)
    assert a.step() and not b.step()  # renewed: b keeps following
    clock.advance(14)
    assert a.is_leader and not b.step()

    # a stops renewing (a paused or killed process): when its lease ends, b takes it and a knows it is out.
    clock.advance(1)
    assert not a.is_leader
    assert b.step() and b.is_leader
    assert not a.step()
    assert seen.changes == ["a leads", "b leads", "a stopped"]
    lease = read_lease(api_client)
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1


def test_a_graceful_stop_hands_over_at_once(api_client: k8s.ApiClient) -> None:
    create_namespace(api_client)
    clock, seen = VirtualClock(), Recorder()
    a, b = seen.elector(api_client, "a", clock), seen.elector(api_client, "b", clock)
    assert a.step() and not b.step()
    a.stop(release=True)
    assert not a.is_leader
    assert read_lease(api_client)["spec"].get("holderIdentity") is None
    assert b.step()  # no waiting for the lease duration
    assert seen.changes == ["a leads", "a stopped", "b leads"]

    # A stop without release (as a kill) leaves the Lease held until it expires.
    b.stop(release=False)
    c = seen.elector(api_client, "c", clock)
    assert not c.step()
    clock.advance(15)
    assert c.step()


def test_two_replicas_racing_for_the_lease_cannot_both_win(api_client: k8s.ApiClient) -> None:
    create_namespace(api_client)
    clock, seen = VirtualClock(), Recorder()
    a, b = seen.elector(api_client, "a", clock), seen.elector(api_client, "b", clock)
    read = a.api.read_namespaced_lease

    def read_then_lose_the_race(*args: Any, **kwargs: Any) -> Any:
        answer = read(*args, **kwargs)
        assert b.step()  # b writes between a's read and a's write
        return answer

    assert b.step()
    b.stop(release=True)  # free: both see a Lease they may take
    a.api.read_namespaced_lease = read_then_lose_the_race  # type: ignore[method-assign]
    assert not a.try_once()  # its replace carried a stale resourceVersion: 409, not an error
    assert not a.is_leader and read_lease(api_client)["spec"]["holderIdentity"] == "b"


def test_a_leader_that_cannot_reach_the_api_server_stops_at_the_end_of_its_lease(
    api_client: k8s.ApiClient,
) -> None:
    create_namespace(api_client)
    clock, seen = VirtualClock(), Recorder()
    a = seen.elector(api_client, "a", clock)
    assert a.step()
    away = k8s.Configuration()
    away.host = "https://127.0.0.1:9"  # nothing listens there
    away.verify_ssl = False
    a.api = k8s.CoordinationV1Api(k8s.ApiClient(away))
    with pytest.raises(errors.Unreachable):
        a.try_once()
    clock.advance(10)
    assert a.step() and seen.changes == ["a leads"]  # not renewed, but its lease still holds
    clock.advance(5)
    assert not a.step() and seen.changes == ["a leads", "a stopped"]


def test_no_namespace_for_the_lease_is_an_error_retried_not_a_crash(api_client: k8s.ApiClient) -> None:
    clock, seen = VirtualClock(), Recorder()
    a = seen.elector(api_client, "a", clock)
    with pytest.raises(errors.NotFound):
        a.try_once()
    assert not a.step() and seen.changes == []
    create_namespace(api_client)
    assert a.step()
