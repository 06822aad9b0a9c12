from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.controllers.expectations import Expectations
from shipshape.emulator.resources import CONFIGMAPS
from shipshape.emulator.runtime import Cluster
from shipshape.kube.clock import VirtualClock

from .helpers import run


class Flaky(Controller):
    name = "flaky-controller"
    watches = (CONFIGMAPS,)

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.attempts: list[float] = []

    def reconcile(self, key: Any) -> None:
        self.attempts.append(self.now())
        if len(self.attempts) <= self.failures:
            raise RuntimeError("transient")


def test_a_sync_that_raises_is_retried_with_exponential_backoff(caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster(VirtualClock())
    flaky = Flaky(failures=3)
    cluster.add(flaky)
    start = cluster.clock.now()
    cluster.store.create(CONFIGMAPS, {"metadata": {"name": "c", "namespace": "default"}})
    run(cluster, 1)
    assert [round(t - start, 3) for t in flaky.attempts] == [0.0, 0.005, 0.015, 0.035]
    assert "failed to sync" in caplog.text


def test_expectations_block_until_observed_or_expired() -> None:
    clock = VirtualClock()
    expectations = Expectations(clock)
    assert expectations.satisfied("rs")
    expectations.expect_creations("rs", 2)
    expectations.expect_deletions("rs", {"ns/a"})
    assert expectations.pending("rs") == (2, 1)
    expectations.creation_observed("rs")
    expectations.creation_observed("rs")
    assert not expectations.satisfied("rs")
    expectations.deletion_observed("rs", "ns/a")
    assert expectations.satisfied("rs")
    expectations.expect_creations("rs", 1)
    clock.advance(301)
    assert expectations.satisfied("rs")
