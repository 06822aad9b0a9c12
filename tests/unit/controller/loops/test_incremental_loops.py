"""Loops skip workloads whose state did not change, and keep their writes per round bounded."""

from __future__ import annotations

from shipshape.controller.loops import LoopSettings
from shipshape.controller.loops.deletion_cost import DeletionCostKeeper
from shipshape.controller.loops.rebalance import Rebalancer

from ..builders import node
from .test_loops import World


def test_a_balanced_workload_is_looked_at_again_once_it_changes() -> None:
    w = World()
    w.workload("web", 4, ["od-1", "a-1", "b-1", "a-1"])  # base 1, 100 %: 1 on-demand, 3 spot
    rebalancer = w.loop(Rebalancer)
    rebalancer.reconcile(w.h.clock.now())
    w.h.clock.advance(600)
    rebalancer.reconcile(w.h.clock.now())
    assert w.ops.of("evict") == []
    w.h.add(node("b-1", "on-demand"))  # b-1 turns out to be on-demand: one on-demand pod too many
    w.h.clock.advance(600)
    rebalancer.reconcile(w.h.clock.now())
    assert len(w.ops.of("evict")) == 1


def test_deletion_costs_are_written_in_bounded_batches_of_whole_workloads() -> None:
    w = World(LoopSettings(poll_instance_metadata=False, deletion_cost_writes_per_round=3))
    w.workload("api", 3, ["od-1", "a-1", "b-1"])
    w.workload("web", 3, ["od-1", "a-1", "b-1"])
    keeper = w.loop(DeletionCostKeeper)
    keeper.reconcile(w.h.clock.now())
    first = w.ops.of("annotate_pod")
    assert len(first) == 3 and {args[1].split("-")[0] for args in first} == {"api"}
    for args in first:
        w.patch_cached("Pod", args[0], args[1], {"metadata": {"annotations": args[2]}})
    w.ops.calls.clear()
    keeper.reconcile(w.h.clock.now())
    assert {args[1].split("-")[0] for args in w.ops.of("annotate_pod")} == {"web"}
