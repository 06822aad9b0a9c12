"""The opt-in batch resource publisher against the served emulator: publish, hysteresis, withdraw."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from shipshape.analyzers.efficiency import publish
from shipshape.controller.batch_resources import BatchResourcePublisher
from shipshape.emulator import assembly
from shipshape.emulator.resources import PODS
from shipshape.emulator.scenario import Scenario
from shipshape.kube.clock import ScaledClock
from shipshape.simulate.ops import complete
from tests.emulator_fixtures import ServedEmulator, running
from tests.unit.analyzers.efficiency.scenario import GIB, RESERVED_MEMORY_BYTES, SCENARIO

pytestmark = [pytest.mark.integration]


class ShiftedClock:
    """The cluster's clock moved by `offset` seconds (to age the metrics without waiting)."""

    def __init__(self, clock: ScaledClock, offset: float) -> None:
        self.clock, self.offset = clock, offset

    def now(self) -> float:
        return self.clock.now() + self.offset


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServedEmulator, ScaledClock, Any]]:
    clock = ScaledClock(60.0)
    cluster = assembly.build(Scenario.model_validate(SCENARIO), clock)
    with running(cluster, tmp_path_factory.mktemp("emulator")) as emulator:
        emulator.call(lambda: complete(assembly.apply_objects(cluster)))
        deadline = time.monotonic() + 30
        while (
            len(
                emulator.call(
                    lambda: [p for p in cluster.store.list(PODS) if p["status"].get("phase") == "Running"]
                )
            )
            < 3
        ):
            assert time.monotonic() < deadline, "the scenario's pods did not start"
            time.sleep(0.1)
        api = k8s_config.new_client_from_config(config_file=str(emulator.kubeconfig))  # type: ignore[no-untyped-call]
        try:
            yield emulator, clock, api
        finally:
            api.close()


def _node(api: Any) -> dict[str, Any]:
    (node,) = api.sanitize_for_serialization(k8s.CoreV1Api(api).list_node().items)
    return node  # type: ignore[no-any-return]


def test_publish_keep_within_the_band_then_withdraw_when_stale(served: Any) -> None:
    _, clock, api = served
    first = BatchResourcePublisher(api, clock).reconcile()
    assert [o.decision.action for o in first] == ["publish"]
    node = _node(api)
    cpu = int(node["status"]["capacity"][publish.BATCH_CPU])
    memory = int(node["status"]["allocatable"][publish.BATCH_MEMORY])
    # usage policy: 4 cores - 40 % - system 0.1 - LS 2 x 0.5 x (1 +- 5 %); memory as in the analyzer tests
    assert 1250 <= cpu <= 1350
    base = 16 * GIB * 0.65 - RESERVED_MEMORY_BYTES
    assert base - 2.4 * GIB * 1.02 - 1e5 <= memory <= base - 2.4 * GIB * 0.98 + 1e5
    stamp = node["metadata"]["annotations"][publish.UPDATED_ANNOTATION]

    again = BatchResourcePublisher(api, clock).reconcile()
    assert [o.decision.action for o in again] == ["keep"]  # +-5 % jitter stays within the 10 % band
    assert _node(api)["metadata"]["annotations"][publish.UPDATED_ANNOTATION] == stamp

    stale = BatchResourcePublisher(api, ShiftedClock(clock, 16 * 60)).reconcile()
    assert [o.decision.action for o in stale] == ["withdraw"]
    capacity = _node(api)["status"]["capacity"]
    assert publish.BATCH_CPU not in capacity and publish.BATCH_MEMORY not in capacity
    assert "cpu" in capacity  # the node's own resources stay


def _published(node: dict[str, Any]) -> tuple[object, ...]:
    """What the publisher writes on a node (the emulated kubelet updates its status meanwhile, so the
    node's resourceVersion moves on its own)."""
    status, annotations = node["status"], node["metadata"].get("annotations") or {}
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    return (
        capacity.get(publish.BATCH_CPU),
        capacity.get(publish.BATCH_MEMORY),
        allocatable.get(publish.BATCH_CPU),
        allocatable.get(publish.BATCH_MEMORY),
        annotations.get(publish.UPDATED_ANNOTATION),
    )


def test_a_dry_run_writes_nothing(served: Any) -> None:
    _, clock, api = served
    before = _published(_node(api))
    outcomes = BatchResourcePublisher(api, clock, dry_run=True).reconcile()
    assert [o.decision.action for o in outcomes] == ["publish"]  # a write it would have made
    assert _published(_node(api)) == before
