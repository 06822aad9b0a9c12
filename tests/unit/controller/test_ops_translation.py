"""The status translation every `ClusterOps` implementation shares."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shipshape.controller.ops import EvictionOutcome, OpsError, delete_through, evict_through


def _failing(status: int) -> Callable[..., object]:
    def send(*_: object) -> object:
        raise OpsError("refused", status=status)

    return send


def test_eviction_posts_a_policy_v1_eviction_and_reports_success() -> None:
    posted: list[dict[str, object]] = []
    assert evict_through(posted.append, "shop", "web-1") is EvictionOutcome.EVICTED
    assert posted == [
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1", "namespace": "shop"}}
    ]


@pytest.mark.parametrize(("status", "outcome"), [(429, EvictionOutcome.BLOCKED), (404, EvictionOutcome.GONE)])
def test_eviction_refusals_become_outcomes(status: int, outcome: EvictionOutcome) -> None:
    assert evict_through(_failing(status), "shop", "web-1") is outcome


def test_other_eviction_errors_propagate() -> None:
    with pytest.raises(OpsError):
        evict_through(_failing(500), "shop", "web-1")


def test_delete_reports_whether_something_was_deleted() -> None:
    assert delete_through(lambda: None) is True
    assert delete_through(_failing(404)) is False
    with pytest.raises(OpsError):
        delete_through(_failing(409))
