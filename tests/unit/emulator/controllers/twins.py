"""Two clusters driven through the same random pod changes: one controller keeps facts between syncs,
the other works everything out anew, and the tests compare what they give."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from shipshape.emulator.resources import PODS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj

MakePod = Callable[[int, random.Random], Obj]
Change = Callable[[random.Random, float], tuple[Any, str | None]]


def pods_view(c: Cluster) -> list[tuple[str, str, Any]]:
    """Each pod's name, resourceVersion and owners: equal in both clusters when they wrote the same."""
    return [
        (p["metadata"]["name"], p["metadata"]["resourceVersion"], p["metadata"].get("ownerReferences"))
        for p in c.store.list(PODS)
    ]


def random_step(
    rng: random.Random, twins: Sequence[Cluster], created: int, make_pod: MakePod, change: Change, prefix: str
) -> int:
    """Create the next pod (`make_pod`) or change an existing one (`change`) the same way in every
    cluster of `twins`; returns how many pods were created so far."""
    seed = rng.random()
    if seed < 0.3 or created < 5:
        body = make_pod(created, random.Random(seed))
        for c in twins:
            c.store.create(PODS, body, uid=f"00000000-0000-4000-8000-{created + 100:012d}")
        return created + 1
    name = f"{prefix}-{random.Random(seed).randrange(created)}"
    for c in twins:
        if c.store.get(PODS, "default", name) is not None:
            apply, subresource = change(random.Random(seed), c.clock.now())
            c.store.mutate(PODS, "default", name, apply, subresource=subresource)
    return created
