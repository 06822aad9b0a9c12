"""The scheduler's status writes store what a status `mutate` of the whole pod stores."""

from __future__ import annotations

import random
from typing import Any

from shipshape.emulator.resources import PODS
from shipshape.emulator.scheduler.model import _mutate_status, _set_condition
from shipshape.emulator.store import Obj, Store
from shipshape.kube.clock import VirtualClock


def test_status_writes_match_mutate() -> None:
    rng = random.Random(21)
    stores = Store(VirtualClock()), Store(VirtualClock())
    body: Obj = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": []}}
    for store in stores:
        store.create(PODS, body, uid="u")
    for step in range(300):
        condition: dict[str, Any] = {"type": rng.choice(["PodScheduled", "DisruptionTarget"])}
        condition["status"] = rng.choice(["True", "False"])
        if rng.random() < 0.5:
            condition.update(reason="Unschedulable", message=f"m{rng.randrange(3)}")
        nominate = rng.choice([None, "n1", "n2"])

        now = float(step)

        def change(
            p: Obj, condition: dict[str, Any] = condition, nominate: Any = nominate, now: float = now
        ) -> None:
            _set_condition(p, condition, now)
            if nominate is None:
                p["status"].pop("nominatedNodeName", None)
            else:
                p["status"]["nominatedNodeName"] = nominate

        got = _mutate_status(stores[0], "default", "p", change)
        want = stores[1].mutate(PODS, "default", "p", change, subresource="status")
        assert got == want
    assert _mutate_status(stores[0], "default", "gone", lambda p: None) is None
