"""The controller with its opt-in batch resources loop, against a served emulator: the leader publishes
`shipshape.dev/batch-cpu` and `batch-memory` on the node from the emulator's metrics.k8s.io, and
withdraws them once the metrics are older than `stale_seconds` (the controller's clock moved ahead, as
metrics-server's samples age when it stops scraping)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config as kube_config

from shipshape.analyzers.efficiency import publish
from shipshape.controller.leader import LeaseSettings
from shipshape.controller.loops import LoopSettings
from shipshape.controller.loops.base import BatchResourcesSettings
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.process import ControllerProcess, ProcessSettings
from shipshape.emulator import assembly
from shipshape.emulator.resources import NODES, PODS
from shipshape.emulator.scenario import Scenario
from shipshape.kube.clock import ScaledClock
from shipshape.simulate.ops import complete
from tests.emulator_fixtures import ServedEmulator, running
from tests.unit.analyzers.efficiency.scenario import SCENARIO

pytestmark = [pytest.mark.integration]
Obj = dict[str, Any]
SPEED = 60.0


class MovableClock:
    """The cluster's clock, moved ahead by `offset` seconds when the test says so."""

    def __init__(self, clock: ScaledClock) -> None:
        self.clock, self.offset = clock, 0.0

    def now(self) -> float:
        return self.clock.now() + self.offset

    def real_seconds(self, emulated: float) -> float:
        return self.clock.real_seconds(emulated)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServedEmulator, ScaledClock]]:
    clock = ScaledClock(SPEED)
    cluster = assembly.build(Scenario.model_validate(SCENARIO), clock)
    with running(cluster, tmp_path / "emulator") as emulator:
        emulator.call(lambda: complete(assembly.apply_objects(cluster)))
        wait_for(
            lambda: (
                len(
                    emulator.call(
                        lambda: [p for p in cluster.store.list(PODS) if p["status"].get("phase") == "Running"]
                    )
                )
                >= 3
            ),
            "the scenario's pods did not start",
        )
        yield emulator, clock


def wait_for(condition: Callable[[], bool], message: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.1)


def node_of(emulator: ServedEmulator) -> Obj:
    (node,) = emulator.call(lambda: emulator.cluster.store.list(NODES))
    return node


def batch_capacity(emulator: ServedEmulator) -> dict[str, str]:
    capacity = node_of(emulator)["status"].get("capacity") or {}
    return {k: v for k, v in capacity.items() if k in (publish.BATCH_CPU, publish.BATCH_MEMORY)}


def test_the_leader_publishes_batch_resources_and_withdraws_them_when_metrics_go_stale(
    served: tuple[ServedEmulator, ScaledClock], tmp_path: Path
) -> None:
    emulator, cluster_clock = served
    clock = MovableClock(cluster_clock)
    loader: Any = kube_config
    api_client = loader.new_client_from_config(config_file=str(emulator.kubeconfig))
    loops = LoopSettings(
        headroom_enabled=False, batch_resources=BatchResourcesSettings(enabled=True, interval_seconds=30.0)
    )
    settings = ProcessSettings(
        identity="controller-0", lease=LeaseSettings(duration_seconds=15, retry_seconds=2.0), loops=loops
    )
    process = ControllerProcess(
        api_client, ControllerConfig(), settings, clock, workdir=tmp_path / "controller"
    )
    process.start()
    try:
        # The capacity (a status patch), then its stamp (an annotation): both written.
        wait_for(
            lambda: (
                len(batch_capacity(emulator)) == 2
                and publish.UPDATED_ANNOTATION in (node_of(emulator)["metadata"].get("annotations") or {})
            ),
            "the leader published no batch resources",
        )
        published = batch_capacity(emulator)
        # 4 cores - 40 % - system 0.1 - latency-sensitive 2 x 0.5 x (1 +- 5 %), in millicores.
        assert 1250 <= int(published[publish.BATCH_CPU]) <= 1350
        node = node_of(emulator)
        assert publish.UPDATED_ANNOTATION in node["metadata"]["annotations"]
        assert node["status"]["allocatable"][publish.BATCH_CPU] == published[publish.BATCH_CPU]

        clock.offset = 16 * 60.0  # the newest sample is now 16 minutes old (> stale_seconds, 15)
        wait_for(lambda: not batch_capacity(emulator), "stale batch resources were not withdrawn")
        assert "cpu" in node_of(emulator)["status"]["capacity"]  # the node's own resources stay
    finally:
        process.stop()
        api_client.close()
