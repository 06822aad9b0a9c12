"""The reconcile kit on its own: expectations, unchanged inputs, periodic steps and the dirty queue.
Time is passed in; nothing sleeps."""

from __future__ import annotations

import pytest

from shipshape.controller.loops.kit import DirtyQueue, Every, Expectations, Unchanged, same_inputs

# --- expectations ----------------------------------------------------------------------------------


def test_a_write_is_in_flight_until_observed() -> None:
    writes: Expectations[str, frozenset[str]] = Expectations()
    writes.expect("shop/Deployment/web", frozenset({"a-1"}), since=100.0, ttl=30.0)
    expected = writes.get("shop/Deployment/web", 110.0)
    assert expected is not None and expected.value == frozenset({"a-1"})
    assert writes.pending("shop/Deployment/web", 110.0)
    assert not writes.pending("shop/Deployment/api", 110.0)
    writes.observed("shop/Deployment/web")
    assert writes.get("shop/Deployment/web", 110.0) is None
    writes.observed("never-written")  # no error


def test_an_expectation_holds_for_its_ttl_then_lapses_whether_or_not_it_was_observed() -> None:
    writes: Expectations[str, str | None] = Expectations()
    writes.expect("shop/web-0", None, since=100.0, ttl=30.0)
    assert writes.pending("shop/web-0", 129.999)
    assert not writes.pending("shop/web-0", 130.0)  # now - since < ttl
    assert len(writes) == 1  # kept until expired explicitly
    writes.expire(129.0)
    assert len(writes) == 1
    writes.expire(130.0)
    assert len(writes) == 0


def test_a_value_of_none_is_still_a_write_in_flight() -> None:
    evictions: Expectations[str, str | None] = Expectations()
    evictions.expect("shop/db-0", None, since=0.0, ttl=10.0)
    expected = evictions.get("shop/db-0", 1.0)
    assert expected is not None and expected.value is None


def test_writing_again_replaces_what_was_expected() -> None:
    writes: Expectations[str, int] = Expectations()
    writes.expect("k", 1, since=0.0, ttl=10.0)
    writes.expect("k", 2, since=5.0, ttl=10.0)
    expected = writes.get("k", 14.0)
    assert expected is not None and expected.value == 2 and expected.since == 5.0


# --- unchanged inputs ------------------------------------------------------------------------------


def test_inputs_are_the_same_objects_or_equal_values() -> None:
    state = object()
    assert same_inputs((state, {"a": 1}), (state, {"a": 1}))
    assert not same_inputs((state,), (object(),))
    assert not same_inputs((state,), (state, 1))


def test_a_conclusion_is_recalled_only_from_the_same_inputs() -> None:
    memo: Unchanged[str, str] = Unchanged()
    state, view = object(), ("pools", 1)
    memo.keep("web", (state, view), "balanced")
    assert memo.recall("web", (state, ("pools", 1))) == "balanced"
    assert memo.recall("web", (object(), view)) is None
    assert memo.recall("api", (state, view)) is None


def test_a_round_forgets_the_keys_it_did_not_touch() -> None:
    memo: Unchanged[str, bool] = Unchanged()
    with memo.round():
        memo.keep("web", (1,), True)
        memo.keep("api", (1,), True)
    assert len(memo) == 2
    with memo.round():
        assert memo.recall("web", (1,)) is True  # recalled: carried into the next round
        assert memo.recall("api", (2,)) is None  # changed and not kept again: dropped
    assert len(memo) == 1
    assert memo.recall("web", (1,)) is True and memo.recall("api", (1,)) is None


def test_a_round_that_raises_keeps_the_previous_conclusions() -> None:
    memo: Unchanged[str, bool] = Unchanged()
    memo.keep("web", (1,), True)
    with pytest.raises(RuntimeError), memo.round():
        raise RuntimeError("boom")
    assert memo.recall("web", (1,)) is True


# --- periodic steps -------------------------------------------------------------------------------


def test_a_step_is_due_every_so_many_seconds() -> None:
    every = Every(5.0)
    assert every.due(0.0)
    every.ran(0.0)
    assert not every.due(4.9) and every.due(5.0)
    assert every.next_due == 5.0


# --- the dirty queue ------------------------------------------------------------------------------


def test_keys_start_dirty_and_a_round_takes_the_mark() -> None:
    queue: DirtyQueue[str] = DirtyQueue()
    queue.add("rebalancer", 10.0)
    assert queue.dirty("rebalancer") and queue.take("rebalancer")
    assert not queue.dirty("rebalancer") and not queue.take("rebalancer")
    queue.mark("rebalancer")
    assert queue.take("rebalancer")
    queue.add("rebalancer", 99.0)  # already there: unchanged
    assert queue.due("rebalancer") == 10.0 and len(queue) == 1 and "rebalancer" in queue


def test_ready_keys_come_in_the_order_they_were_added() -> None:
    queue: DirtyQueue[str] = DirtyQueue()
    for name, due in (("b", 5.0), ("a", 1.0), ("c", 9.0)):
        queue.add(name, due)
    assert queue.ready(5.0) == ["b", "a"]
    assert queue.next_due() == 1.0
    queue.schedule("a", 20.0)
    assert queue.next_due() == 5.0
    queue.mark_all()
    assert all(queue.dirty(key) for key in queue)
    assert DirtyQueue[str]().next_due() is None


def test_a_wake_only_ever_brings_a_key_forward() -> None:
    queue: DirtyQueue[str] = DirtyQueue()
    queue.add("interruptions", 60.0)
    assert queue.wake("interruptions", 11.0) and queue.due("interruptions") == 11.0
    assert not queue.wake("interruptions", 30.0) and queue.due("interruptions") == 11.0
    assert not queue.wake("interruptions", 11.0)


def test_a_failing_key_backs_off_doubling_up_to_the_cap_and_a_success_resets_it() -> None:
    queue: DirtyQueue[str] = DirtyQueue(base_backoff=1.0, max_backoff=5.0)
    queue.add("k", 0.0)
    queue.take("k")
    assert [queue.failed("k") for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert queue.dirty("k") and queue.failures("k") == 5
    queue.succeeded("k")
    assert queue.failures("k") == 0 and queue.failed("k") == 1.0


def test_the_back_off_must_be_positive_and_capped_above_its_base() -> None:
    with pytest.raises(ValueError):
        DirtyQueue[str](base_backoff=0.0)
    with pytest.raises(ValueError):
        DirtyQueue[str](base_backoff=10.0, max_backoff=5.0)
