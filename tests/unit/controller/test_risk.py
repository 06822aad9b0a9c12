from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from shipshape.controller.placement import Pool
from shipshape.controller.risk import UNKNOWN_BAND, RiskModel, SpotAdvisor, load_spot_advisor

# The shape of AWS's spot advisor feed (spot-advisor-data.json), cut down to a few records.
FEED = {
    "global_rate": "<10%",
    "ranges": [
        {"index": 0, "label": "<5%", "dots": 0, "max": 5},
        {"index": 3, "label": "15-20%", "dots": 3, "max": 22},
    ],
    "instance_types": {"m5.large": {"emr": True, "cores": 2, "ram_gb": 8.0}},
    "spot_advisor": {
        "us-east-1": {
            "Linux": {"m5.large": {"s": 66, "r": 3}, "c5.large": {"s": 59, "r": 0}},
            "Windows": {"m5.large": {"s": 40, "r": 1}},
        }
    },
}
REAL_FEED = Path("/work/shared/data/aws-spot-advisor/spot-advisor-data.json")


def test_bands_from_the_feed(tmp_path: Path) -> None:
    path = tmp_path / "spot-advisor-data.json"
    path.write_text(json.dumps(FEED))
    advisor = load_spot_advisor(path)
    assert advisor.band("m5.large", "us-east-1") == 3
    assert advisor.band("c5.large", "us-east-1") == 0
    assert advisor.band("m5.large", "eu-west-1") is None
    assert advisor.band("m5.large", None) is None
    assert advisor.labels[3] == "15-20%"
    assert SpotAdvisor.from_json(FEED, os_name="Windows").band("m5.large", "us-east-1") == 1


def test_score_adds_observed_interruptions_within_the_window() -> None:
    model = RiskModel(advisor=SpotAdvisor.from_json(FEED), window_seconds=100.0, cooldown_seconds=10.0)
    m5, c5, other = Pool("m5.large", "us-east-1a"), Pool("c5.large", "us-east-1a"), Pool("x1.large", "z")
    assert model.score(c5, "us-east-1", 0.0) < model.score(m5, "us-east-1", 0.0)
    assert model.score(other, "us-east-1", 0.0) == UNKNOWN_BAND
    for i, node in enumerate(("n1", "n2", "n3", "n4")):
        model.record_notice(node, c5, at=float(i))
    assert model.score(c5, "us-east-1", 5.0) == 4.0  # band 0 + four interruptions
    assert model.score(c5, "us-east-1", 102.5) == 1.0  # three of them left the window
    assert model.at_risk(5.0) == {c5}
    assert model.at_risk(14.0) == frozenset()
    model.forget_before(3.0)
    assert model.observed(c5, 5.0) == 1


def test_scores_of_many_pools_are_each_pools_score() -> None:
    model = RiskModel(advisor=SpotAdvisor.from_json(FEED), window_seconds=100.0, observed_weight=0.5)
    m5, c5, other = Pool("m5.large", "us-east-1a"), Pool("c5.large", "us-east-1b"), Pool("x1.large", "z")
    for i, (node, pool) in enumerate((("n1", c5), ("n2", m5), ("n3", c5), ("n4", other), ("n5", c5))):
        model.record_notice(node, pool, at=float(10 * i))
    pools = {m5: "us-east-1", other: None, c5: "us-east-1"}
    for now in (0.0, 25.0, 45.0, 105.0, 130.0, 500.0):
        scores = model.scores(pools, now)
        assert list(scores) == [m5, other, c5]
        assert scores == {pool: model.score(pool, region, now) for pool, region in pools.items()}
    assert model.scores(pools, 45.0)[c5] == 1.5  # band 0 + three interruptions of weight 0.5


@pytest.mark.skipif(not REAL_FEED.exists(), reason="the spot advisor data set is not staged here")
def test_the_real_feed_loads() -> None:
    advisor = load_spot_advisor(REAL_FEED)
    assert len(advisor.bands) > 10_000
    assert set(advisor.bands.values()) <= {0, 1, 2, 3, 4}


def test_window_answers_equal_a_scan_of_every_notice() -> None:
    rng = random.Random(7)
    model = RiskModel(advisor=SpotAdvisor.from_json(FEED), window_seconds=300.0, cooldown_seconds=60.0)
    pools = [Pool("m5.large", f"us-east-1{z}") for z in "abc"] + [Pool("c5.large", "us-east-1a")]
    regions = dict.fromkeys(pools, "us-east-1")
    seen: dict[str, tuple[Pool, float]] = {}
    now = 0.0
    for step in range(400):
        now += rng.choice([0.0, 1.0, 7.0, 45.0])
        if rng.random() < 0.4:
            node, pool, at = f"n{rng.randrange(150)}", rng.choice(pools), now - rng.choice([0.0, 30.0, 90.0])
            assert model.record_notice(node, pool, at) == (node not in seen)
            seen.setdefault(node, (pool, at))
            # the model keeps nothing older than its longest window before its newest notice
            newest = max(at for _, at in seen.values())
            seen = {node: (pool, at) for node, (pool, at) in seen.items() if at >= newest - 300.0}
        if step % 97 == 96:
            model.forget_before(now - 200.0)
            seen = {node: (pool, at) for node, (pool, at) in seen.items() if at >= now - 200.0}
        scanned = {
            pool: (model.advisor.band(pool.instance_type, "us-east-1") or 0)  # type: ignore[union-attr]
            + sum(1 for p, at in seen.values() if p == pool and now - 300.0 <= at <= now)
            for pool in pools
        }
        assert model.scores(regions, now) == scanned, step
        assert scanned == {pool: model.score(pool, "us-east-1", now) for pool in pools}, step
        assert model.at_risk(now) == {p for p, at in seen.values() if now - 60.0 <= at <= now}, step


def test_memory_stays_bounded_over_months_of_notices() -> None:
    model = RiskModel(window_seconds=7 * 86400.0, cooldown_seconds=1800.0)
    pool = Pool("m5.large", "us-east-1a")
    for i in range(90 * 24):  # a notice an hour for 90 days, every node a new one
        model.record_notice(f"node-{i}", pool, at=i * 3600.0)
    now = (90 * 24 - 1) * 3600.0
    assert model.observed(pool, now) == 7 * 24 + 1  # the window's notices, all still counted
    assert len(model._notices) <= 7 * 24 + 1
    assert len(model._times) == len(model._pools) == len(model._notices)
