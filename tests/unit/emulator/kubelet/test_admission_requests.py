"""The kubelet's admission check may take the admitted pods' requests from the caller's memory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shipshape.emulator.kubelet.resources import admission_check
from shipshape.kube.scheduling import pod_requests

Obj = dict[str, Any]


def pod(cpu: str) -> Obj:
    return {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}}


def test_admitted_requests_come_from_requests_of_once_per_pod() -> None:
    admitted = [pod("1"), pod("1")]
    asked: list[int] = []

    def remembered(other: Obj) -> Mapping[str, int]:
        asked.append(id(other))
        return {"cpu": 1500}  # what the caller remembers, not what the body says

    rejection = admission_check(pod("2"), {"cpu": "4"}, admitted, requests_of=remembered)
    assert rejection is not None
    assert (
        rejection.message
        == "Node didn't have enough resource: cpu, requested: 2000, used: 3000, capacity: 4000"
    )
    assert sorted(asked) == sorted(id(p) for p in admitted)
    # By default the requests are read from the bodies: 2 x 1 CPU leaves room for 2 more.
    assert admission_check(pod("2"), {"cpu": "4"}, admitted) is None
    assert pod_requests(admitted[0]) == {"cpu": 1000}
