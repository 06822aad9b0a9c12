"""When batch extended resources are published, kept or withdrawn."""

from __future__ import annotations

import pytest

from shipshape.analyzers.efficiency.publish import BATCH_CPU, BATCH_MEMORY, PublishSettings, decide

NOW = 10_000.0
V = {BATCH_CPU: 1000, BATCH_MEMORY: 4 * 2**30}


def test_first_publication_and_the_hysteresis_band() -> None:
    assert decide(None, V, None, NOW - 30, NOW).action == "publish"
    nudged = {BATCH_CPU: 1090, BATCH_MEMORY: V[BATCH_MEMORY]}
    assert decide(V, nudged, NOW - 60, NOW - 30, NOW).action == "keep"  # 9 % < 10 %
    moved = {BATCH_CPU: 1110, BATCH_MEMORY: V[BATCH_MEMORY]}
    decision = decide(V, moved, NOW - 60, NOW - 30, NOW)
    assert decision.action == "publish" and decision.values == moved and BATCH_CPU in decision.reason
    # a small change goes out once the last update is older than max_update_seconds
    assert decide(V, nudged, NOW - 301, NOW - 30, NOW).action == "publish"
    assert decide(V, V, NOW - 3000, NOW - 30, NOW).action == "keep"  # nothing changed


def test_stale_or_missing_metrics_withdraw() -> None:
    assert decide(V, V, NOW - 60, NOW - 901, NOW).action == "withdraw"
    assert decide(V, V, NOW - 60, None, NOW).action == "withdraw"
    assert decide(None, V, None, None, NOW).action == "keep"
    assert decide(V, V, NOW - 60, NOW - 100, NOW, PublishSettings(stale_seconds=60)).action == "withdraw"


def test_from_zero_any_capacity_is_a_move() -> None:
    zero = {BATCH_CPU: 0, BATCH_MEMORY: 0}
    assert decide(zero, V, NOW - 10, NOW, NOW).action == "publish"


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="diff_threshold"):
        PublishSettings(diff_threshold=0)
