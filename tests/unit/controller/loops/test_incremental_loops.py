"""Loops skip workloads whose state did not change, and keep their writes per round bounded."""

from __future__ import annotations

from shipshape.controller.loops import LoopSettings
from shipshape.controller.loops.deletion_cost import DeletionCostKeeper
from shipshape.controller.loops.rebalance import Rebalancer
from shipshape.controller.placement import Pool

from ..builders import deployment, namespace, node, with_room
from .test_loops import World


def test_a_balanced_workload_is_looked_at_again_once_it_changes() -> None:
    w = World()
    w.spot_room()
    w.workload("web", 4, ["od-1", "a-1", "b-1", "a-1"])  # base 1, 100 %: 1 on-demand, 3 spot
    rebalancer = w.loop(Rebalancer)
    rebalancer.reconcile(w.h.clock.now())
    w.h.clock.advance(600)
    rebalancer.reconcile(w.h.clock.now())
    assert w.ops.of("evict") == []
    # b-1 turns out to be on-demand (one on-demand pod too many), and pool B gets a node with room.
    w.h.add(node("b-1", "on-demand"), with_room(node("b-2", "spot", "m5.large", "us-east-1b")))
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


def test_managed_workloads_are_worked_out_again_only_after_a_change_they_read() -> None:
    w = World()
    w.workload("web", 3, ["od-1", "a-1", "b-1"])
    rebalancer, keeper = w.loop(Rebalancer), w.loop(DeletionCostKeeper)
    first = rebalancer.managed()
    assert [m.ref.name for m in first] == ["web"]
    # Another loop of the same controller gets the same answer; a node status change alters nothing.
    assert [m.state for m in keeper.managed()] == [m.state for m in first]
    assert keeper.managed()[0].state is first[0].state
    w.h.add({**node("a-1", "spot"), "status": {"phase": "Running"}})
    assert rebalancer.managed()[0].state is first[0].state
    # A new workload, a pod of it and a node moving to another pool are seen.
    w.workload("api", 1, ["a-1"])
    assert [m.ref.name for m in rebalancer.managed()] == ["web", "api"]
    w.h.add(node("a-1", "spot", "m5.large", "us-east-1c"))
    pools = {pod.pool for m in keeper.managed() for pod in m.state.pods if pod.pool is not None}
    assert Pool("m5.large", "us-east-1c") in pools
    # A workload opting out is dropped.
    w.patch_cached(
        "Deployment", "shop", "api", {"metadata": {"annotations": {"spot.shipshape.dev/enabled": "false"}}}
    )
    assert [m.ref.name for m in rebalancer.managed()] == ["web"]
    # A Deployment without the annotation follows its namespace's label, read again when it changes.
    w.h.add(deployment("batch", 2, ns="jobs"), namespace("jobs"))
    assert [m.ref.name for m in rebalancer.managed()] == ["web"]
    w.h.add(namespace("jobs", {"spot.shipshape.dev/enabled": "true"}))
    assert [m.ref.name for m in rebalancer.managed()] == ["web", "batch"]


def test_the_responder_reads_notices_from_the_noticed_nodes_in_node_order() -> None:
    w = World()
    cache = w.h.cache
    assert cache.noticed_nodes() == []
    w.h.add(node("c-1", "spot", "m5.large", "us-east-1c"))
    w.taint("c-1", Pool("m5.large", "us-east-1c"))
    w.taint("a-1")
    # a-1 came before c-1, so it is listed first although it was tainted last.
    assert [n["metadata"]["name"] for n in cache.noticed_nodes()] == ["a-1", "c-1"]
    assert list(cache.nodes_by_name()) == ["od-1", "a-1", "b-1", "c-1"]
    w.h.add(node("a-1", "spot"))  # the taint is gone
    assert [n["metadata"]["name"] for n in cache.noticed_nodes()] == ["c-1"]
    cache.apply({"type": "DELETED", "object": node("c-1", "spot")})
    assert cache.noticed_nodes() == [] and "c-1" not in cache.nodes_by_name()
