"""IntOrString scaling, rolling-update fenceposts and PDB desired healthy: Kubernetes' rules, one copy."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.kube import workloads
from shipshape.kube.intstr import IntOrStringError, scaled_value

Obj = dict[str, Any]


@pytest.mark.parametrize(
    ("value", "total", "up", "down"),
    [
        (3, 10, 3, 3),
        ("25%", 10, 3, 2),
        ("25%", 4, 1, 1),
        ("0%", 7, 0, 0),
        ("100%", 3, 3, 3),
        ("10%", 15, 2, 1),  # 1.5
        ("80%", 7, 6, 5),  # 5.6
        ("+50%", 3, 2, 1),  # strconv.Atoi takes a sign
        ("150%", 4, 6, 6),  # scaling does not cap; validation does
        (0, 0, 0, 0),
    ],
)
def test_scaled_as_get_scaled_value_from_int_or_percent(
    value: object, total: int, up: int, down: int
) -> None:
    assert scaled_value(value, total, round_up=True) == up
    assert scaled_value(value, total, round_up=False) == down


@pytest.mark.parametrize("value", ["25", "x%", "12.5%", " 25%", "2_5%", "%", True, None, 2.5, [1]])
def test_anything_but_an_int_or_a_whole_percentage_is_an_error(value: object) -> None:
    with pytest.raises(IntOrStringError):
        scaled_value(value, 10, round_up=True)


def _deployment(replicas: int, rolling: Obj | None = None, strategy: str = "RollingUpdate") -> Obj:
    spec: Obj = {"replicas": replicas, "strategy": {"type": strategy}}
    if rolling is not None:
        spec["strategy"]["rollingUpdate"] = rolling
    return {"spec": spec}


@pytest.mark.parametrize(
    ("replicas", "rolling", "want"),
    [
        (4, None, (1, 1)),  # defaults 25 %: surge rounds up, unavailable down
        (10, None, (3, 2)),
        (1, None, (1, 0)),
        (3, {"maxSurge": 0, "maxUnavailable": "10%"}, (0, 1)),  # both zero: unavailable 1
        (3, {"maxSurge": 1, "maxUnavailable": 0}, (1, 0)),
        (0, {"maxSurge": "25%", "maxUnavailable": "25%"}, (0, 1)),
    ],
)
def test_deployment_fenceposts(replicas: int, rolling: Obj | None, want: tuple[int, int]) -> None:
    assert workloads.resolve_fenceposts(_deployment(replicas, rolling)) == want


def test_a_recreate_deployment_may_lose_every_replica() -> None:
    assert workloads.deployment_max_unavailable(_deployment(5, strategy="Recreate")) == 5
    assert workloads.deployment_max_unavailable(_deployment(5, {"maxUnavailable": 2})) == 2


@pytest.mark.parametrize(
    ("replicas", "max_unavailable", "want"), [(5, None, 1), (10, "25%", 2), (3, "10%", 1), (4, 3, 3)]
)
def test_statefulset_max_unavailable(replicas: int, max_unavailable: object, want: int) -> None:
    rolling = {} if max_unavailable is None else {"maxUnavailable": max_unavailable}
    body = {"spec": {"replicas": replicas, "updateStrategy": {"rollingUpdate": rolling}}}
    assert workloads.statefulset_max_unavailable(body) == want


@pytest.mark.parametrize(
    ("spec", "expected", "healthy"),
    [
        ({"minAvailable": 5}, 6, 5),
        ({"minAvailable": 5}, 2, 5),  # an int is taken as is
        ({"minAvailable": "80%"}, 250, 200),
        ({"minAvailable": "80%"}, 7, 6),  # 5.6 rounds up
        ({"maxUnavailable": "10%"}, 300, 270),
        ({"maxUnavailable": "10%"}, 15, 13),  # 1.5 rounds up to 2 unavailable
        ({"maxUnavailable": 1}, 15, 14),
        ({"maxUnavailable": 4}, 3, 0),  # never below zero
        ({}, 3, 0),
    ],
)
def test_pdb_desired_healthy_as_the_disruption_controller(spec: Obj, expected: int, healthy: int) -> None:
    assert workloads.pdb_desired_healthy(spec, expected) == healthy


def test_pdb_max_unavailable_is_read_before_min_available() -> None:
    assert workloads.pdb_desired_healthy({"maxUnavailable": 1, "minAvailable": 1}, 5) == 4


def test_an_invalid_pdb_value_is_an_error() -> None:
    with pytest.raises(IntOrStringError):
        workloads.pdb_desired_healthy({"minAvailable": "3"}, 5)
