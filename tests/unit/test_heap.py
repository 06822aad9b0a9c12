"""`shipshape.heap`: what lives long is kept out of the cyclic collector's walks, and cyclic garbage
still goes, at the next full collection."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from shipshape import heap


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen and the collector on."""
    gc.unfreeze()
    gc.enable()
    yield
    gc.unfreeze()
    gc.enable()


def test_paused_stops_automatic_collections_and_restores_the_collectors_state() -> None:
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with heap.paused():
            assert not gc.isenabled()
            kept = [{"n": [i]} for i in range(50_000)]  # far past the young generation's threshold
            inside = len(collections)
        assert gc.isenabled()
        gc.disable()
        with heap.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.callbacks.remove(count)
    assert inside == 0 and len(kept) == 50_000


def test_long_lived_freezes_what_the_block_built_and_nothing_walks_it_until_thawed() -> None:
    before = gc.get_freeze_count()
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with heap.long_lived():
            kept = [{"pod": {"name": f"p{i}"}} for i in range(100_000)]
        # Frozen before the collector came back: the next allocations do not set off a collection
        # (which would walk all of it first).
        after = [[i] for i in range(100)]
    finally:
        gc.callbacks.remove(count)
    assert collections == [] and len(after) == 100
    assert gc.isenabled()
    # Each record (a dict of only strings is not tracked: it cannot be part of a cycle).
    assert gc.get_freeze_count() >= before + 100_000
    tracked = {id(o) for generation in range(3) for o in gc.get_objects(generation)}
    assert id(kept[0]) not in tracked and id(kept[-1]["pod"]) not in tracked
    # Frozen objects are still freed by reference counting.
    frozen = gc.get_freeze_count()
    del kept
    assert gc.get_freeze_count() <= frozen - 100_000


def test_age_freezes_what_lives_and_collects_frozen_cyclic_garbage_at_the_full_collection() -> None:
    async def scenario() -> tuple[int, bool, bool]:
        cycle = Cycle()
        gone = weakref.ref(cycle)
        collector = asyncio.create_task(heap.age(freeze_seconds=0.02, full_seconds=0.3))
        await asyncio.sleep(0.1)
        frozen = gc.get_freeze_count()
        del cycle
        gc.collect()  # no collection reaches a frozen cycle
        kept = gone() is not None
        await asyncio.sleep(0.4)  # a full collection came
        collector.cancel()
        return frozen, kept, gone() is None

    frozen, kept, collected = asyncio.run(scenario())
    assert frozen > 0 and kept and collected
