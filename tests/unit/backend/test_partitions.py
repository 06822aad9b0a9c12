"""The fair share of the queue's partitions each worker process keeps (`backend/partitions.py`)."""

from __future__ import annotations

import pytest

from shipshape.backend.partitions import candidates, fair_share, plan
from shipshape.backend.queue import partition_of


@pytest.mark.parametrize(
    ("partitions", "members", "share"), [(16, 1, 16), (16, 2, 8), (16, 3, 6), (16, 0, 16), (4, 6, 1)]
)
def test_fair_share_rounds_up_so_that_together_they_hold_every_partition(
    partitions: int, members: int, share: int
) -> None:
    assert fair_share(partitions, members) == share
    assert fair_share(partitions, members) * max(1, members) >= partitions


def test_a_process_over_its_share_lets_go_of_its_highest_partitions() -> None:
    decided = plan({0, 3, 5, 9, 12}, members=6, partitions=16)
    assert decided.release == (9, 12)
    assert decided.wanted == 0


def test_a_process_under_its_share_wants_the_rest() -> None:
    decided = plan({2}, members=2, partitions=16)
    assert decided.release == ()
    assert decided.wanted == 7


def test_candidates_are_the_partitions_not_owned_from_the_start_on_and_round() -> None:
    assert candidates({1, 5}, 6, start=4) == [4, 0, 2, 3]


def test_processes_that_each_take_their_share_in_turn_hold_every_partition_once() -> None:
    """Three processes joining one after the other and rebalancing in rounds (a partition is taken only
    when nobody holds it) end with every partition held by exactly one, each within its share."""
    partitions = 16
    held: dict[int, int] = {}  # partition -> process
    owned: list[set[int]] = [set(), set(), set()]
    for members in (1, 2, 3):
        for _ in range(3):
            for process in range(members):
                decided = plan(owned[process], members, partitions)
                for k in decided.release:
                    owned[process].discard(k)
                    del held[k]
                wanted = decided.wanted
                for k in candidates(owned[process], partitions, start=5 * process):
                    if wanted and k not in held:
                        held[k] = process
                        owned[process].add(k)
                        wanted -= 1
    assert sorted(held) == list(range(partitions))
    assert all(len(o) <= fair_share(partitions, 3) for o in owned)
    assert sum(len(o) for o in owned) == partitions


def test_a_cluster_always_goes_to_the_same_partition() -> None:
    assert partition_of("c-1", 16) == partition_of("c-1", 16)
    spread = {partition_of(f"cluster-{i}", 16) for i in range(200)}
    assert spread == set(range(16))
