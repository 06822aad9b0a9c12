from __future__ import annotations

import pytest

from shipshape.controller.events import invalid_policy_event
from shipshape.controller.policy import (
    ConfigError,
    ControllerConfig,
    SingleReplicaMode,
    WorkloadKind,
    resolve_policy,
)

CONFIG = ControllerConfig()


def test_opt_in_by_annotation_or_namespace_label_and_opt_out_wins() -> None:
    assert not resolve_policy(WorkloadKind.DEPLOYMENT, {}, {}, CONFIG).managed
    assert resolve_policy(WorkloadKind.DEPLOYMENT, {"spot.shipshape.dev/enabled": "true"}, {}, CONFIG).valid
    assert resolve_policy(WorkloadKind.DEPLOYMENT, {}, {"spot.shipshape.dev/enabled": "true"}, CONFIG).valid
    opted_out = resolve_policy(
        WorkloadKind.DEPLOYMENT,
        {"spot.shipshape.dev/enabled": "false"},
        {"spot.shipshape.dev/enabled": "true"},
        CONFIG,
    )
    assert not opted_out.managed


def test_defaults_come_from_the_config() -> None:
    config = ControllerConfig.from_mapping({"on_demand_base": 3, "spot_percentage": 50})
    policy = resolve_policy(
        WorkloadKind.DEPLOYMENT, {"spot.shipshape.dev/enabled": "true"}, {}, config
    ).policy
    assert policy is not None
    assert (policy.on_demand_base, policy.spot_percentage, policy.single_replica) == (
        3,
        50,
        SingleReplicaMode.SURGE,
    )
    sts = resolve_policy(WorkloadKind.STATEFULSET, {"spot.shipshape.dev/enabled": "true"}, {}, config).policy
    assert sts is not None and sts.single_replica is SingleReplicaMode.ON_DEMAND
    assert sts.pool_share(pool_count=1, default=0.5) == 1.0
    assert sts.pool_share(pool_count=2, default=0.5) == 0.5


@pytest.mark.parametrize(
    ("annotation", "value", "fragment"),
    [
        ("spot.shipshape.dev/enabled", "yes", '"true" or "false"'),
        ("spot.shipshape.dev/on-demand-base", "-1", "at least 0"),
        ("spot.shipshape.dev/on-demand-base", "two", "integer"),
        ("spot.shipshape.dev/spot-percentage", "101", "between 0 and 100"),
        ("spot.shipshape.dev/max-pool-share", "0", "greater than 0"),
        ("spot.shipshape.dev/max-pool-share", "half", "fraction"),
        ("spot.shipshape.dev/single-replica", "sometimes", '"on-demand" or "surge"'),
    ],
)
def test_invalid_values_are_reported_and_give_no_policy(annotation: str, value: str, fragment: str) -> None:
    result = resolve_policy(
        WorkloadKind.DEPLOYMENT, {"spot.shipshape.dev/enabled": "true", annotation: value}, {}, CONFIG
    )
    assert result.managed and result.policy is None and not result.valid
    assert [p.annotation for p in result.problems] == [annotation]
    assert fragment in str(result.problems[0])


def test_every_problem_is_reported_at_once_and_statefulsets_cannot_surge() -> None:
    result = resolve_policy(
        WorkloadKind.STATEFULSET,
        {
            "spot.shipshape.dev/enabled": "true",
            "spot.shipshape.dev/spot-percentage": "x",
            "spot.shipshape.dev/single-replica": "surge",
        },
        {},
        CONFIG,
    )
    assert [p.annotation for p in result.problems] == [
        "spot.shipshape.dev/spot-percentage",
        "spot.shipshape.dev/single-replica",
    ]
    assert "cannot surge" in result.problems[1].message


def test_percentage_share_and_bad_config() -> None:
    result = resolve_policy(
        WorkloadKind.DEPLOYMENT,
        {"spot.shipshape.dev/enabled": "true", "spot.shipshape.dev/max-pool-share": "40%"},
        {},
        CONFIG,
    )
    assert result.policy is not None and result.policy.max_pool_share == pytest.approx(0.4)
    with pytest.raises(ConfigError, match="spot_percentage"):
        ControllerConfig.from_mapping({"spot_percentage": 120})
    with pytest.raises(ConfigError, match="unknown_key"):
        ControllerConfig.from_mapping({"unknown_key": 1})


def test_invalid_policy_event_on_the_workload() -> None:
    workload = {"metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "7"}}
    result = resolve_policy(
        WorkloadKind.DEPLOYMENT,
        {"spot.shipshape.dev/enabled": "true", "spot.shipshape.dev/on-demand-base": "x"},
        {},
        CONFIG,
    )
    event = invalid_policy_event(workload, "Deployment", result.problems, now=1_767_225_600.5)
    assert event["type"] == "Warning" and event["reason"] == "InvalidSpotPolicy"
    assert event["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "namespace": "shop",
        "uid": "u-1",
        "resourceVersion": "7",
    }
    assert "spot.shipshape.dev/on-demand-base='x': must be an integer" in event["message"]
    assert event["metadata"]["name"] == f"web.{int(1_767_225_600.5 * 1e9):x}"
    assert event["firstTimestamp"] == "2026-01-01T00:00:00Z"
