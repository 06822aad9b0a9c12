"""`shipshape.heap`: what lives long is kept out of the cyclic collector's walks, and cyclic garbage
still goes, at the next full collection."""

from __future__ import annotations

import asyncio
import contextlib
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


def test_long_lived_freezes_what_the_block_built_while_the_process_ages_its_heap() -> None:
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    async def scenario() -> tuple[list[dict[str, dict[str, str]]], list[list[int]], int, int]:
        aging = asyncio.create_task(heap.age(freeze_seconds=3600))
        await asyncio.sleep(0)  # started
        before = gc.get_freeze_count()
        gc.callbacks.append(count)
        try:
            with heap.long_lived():
                kept = [{"pod": {"name": f"p{i}"}} for i in range(100_000)]
            # Frozen before the collector came back: the next allocations do not set off a
            # collection (which would walk all of it first).
            after = [[i] for i in range(100)]
        finally:
            gc.callbacks.remove(count)
        frozen = gc.get_freeze_count()
        aging.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await aging
        return kept, after, frozen - before, gc.get_freeze_count()

    kept, after, frozen, left = asyncio.run(scenario())
    assert collections == [] and len(after) == 100
    # Each record (a dict of only strings is not tracked: it cannot be part of a cycle).
    assert frozen >= 100_000
    assert left == 0  # the last `age` stopped: everything handed back
    assert gc.isenabled() and len(kept) == 100_000


def test_long_lived_freezes_nothing_in_a_process_that_does_not_age_its_heap() -> None:
    with heap.long_lived():
        kept = [{"pod": {"name": f"p{i}"}} for i in range(1_000)]
    assert gc.get_freeze_count() == 0 and gc.isenabled() and len(kept) == 1_000


def test_frozen_objects_are_still_freed_by_reference_counting() -> None:
    kept = [{"pod": {"name": f"p{i}"}} for i in range(10_000)]
    gc.freeze()
    frozen = gc.get_freeze_count()
    del kept
    assert gc.get_freeze_count() <= frozen - 10_000


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


def test_age_collects_young_cyclic_garbage_before_it_freezes_what_lives() -> None:
    async def scenario() -> bool:
        gc.disable()  # only `age` collects
        cycle = Cycle()
        gone = weakref.ref(cycle)
        del cycle  # garbage, in a cycle: reference counting cannot free it
        collector = asyncio.create_task(heap.age(freeze_seconds=0.02, full_seconds=3600))
        await asyncio.sleep(0.1)
        collector.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collector
        return gone() is None

    assert asyncio.run(scenario())
