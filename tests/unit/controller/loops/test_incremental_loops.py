"""Loops skip workloads whose state did not change, and keep their writes per round bounded."""

from __future__ import annotations

import itertools
import random

import pytest

from shipshape.controller.loops import LoopSettings, SharedState
from shipshape.controller.loops.deletion_cost import DeletionCostKeeper
from shipshape.controller.loops.policy_events import PolicyReporter
from shipshape.controller.loops.rebalance import Rebalancer
from shipshape.controller.ops import OpsError, RecordingOps
from shipshape.controller.placement import Pool
from shipshape.controller.policy import DELETION_COST
from shipshape.controller.state import DirtyWorkloads

from ..builders import deployment, namespace, node, pod_of, replicaset, with_room
from .test_loops import ON, World


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


# --- per-workload loops driven by the state's dirty workloads ---------------------------------------


def costs_written(w: World) -> dict[str, str]:
    """The deletion costs the round wrote, applied to the cache as the API server would echo them."""
    written = {args[1]: args[2][DELETION_COST] for args in w.ops.of("annotate_pod")}
    for pod, cost in written.items():
        w.patch_cached("Pod", "shop", pod, {"metadata": {"annotations": {DELETION_COST: cost}}})
    w.ops.calls.clear()
    return written


def test_a_loop_looks_only_at_the_workloads_that_changed_between_resyncs() -> None:
    w = World()
    for name in ("api", "web", "cart"):
        w.workload(name, 3, ["od-1", "a-1", "b-1"])
    keeper = w.loop(DeletionCostKeeper)
    keeper.reconcile(w.h.clock.now())  # the first round looks at every workload
    assert keeper.workloads.handed == 3 and len(costs_written(w)) == 9
    w.h.clock.advance(5)
    keeper.reconcile(w.h.clock.now())  # the costs it wrote came back: every workload changed
    assert keeper.workloads.handed == 3 and costs_written(w) == {}
    w.h.clock.advance(5)
    keeper.reconcile(w.h.clock.now())
    assert keeper.workloads.handed == 0  # nothing changed: nothing looked at
    # A pod's status report marks its workload, but what the loop decides from is the same.
    w.patch_cached("Pod", "shop", "api-0", {"status": {"hostIP": "10.0.0.9"}})
    w.h.clock.advance(5)
    keeper.reconcile(w.h.clock.now())
    assert keeper.workloads.handed == 0
    # A pod of web leaves: web alone is looked at, and its costs are kept (no renumbering).
    w.h.cache.apply({"type": "DELETED", "object": w.h.cache.get("Pod", "shop", "web-1")})
    w.h.clock.advance(5)
    keeper.reconcile(w.h.clock.now())
    assert keeper.workloads.handed == 1 and costs_written(w) == {}
    # A new pod of cart: cart alone is looked at, and only its pods get costs.
    w.h.add(pod_of(replicaset(w.h.cache.get("Deployment", "shop", "cart") or {}), "cart-9", node="a-1"))
    w.h.clock.advance(5)
    keeper.reconcile(w.h.clock.now())
    written = costs_written(w)
    assert keeper.workloads.handed == 1 and "cart-9" in written
    assert {pod.split("-")[0] for pod in written} == {"cart"}


def test_a_resync_catches_a_change_the_loop_was_not_told_of() -> None:
    w = World(LoopSettings(poll_instance_metadata=False, workload_resync_seconds=600))
    for name in ("api", "web"):
        w.workload(name, 3, ["od-1", "a-1", "b-1"])
    keeper = w.loop(DeletionCostKeeper)
    keeper.reconcile(w.h.clock.now())
    costs_written(w)
    w.h.clock.advance(5)
    keeper.reconcile(w.h.clock.now())
    assert keeper.workloads.full_passes == 1
    # web's costs are swapped, and the change goes missing (another reader takes it in the loop's name).
    web0 = w.h.cache.get("Pod", "shop", "web-0") or {}
    web2 = w.h.cache.get("Pod", "shop", "web-2") or {}
    swapped = {"web-0": web2["metadata"]["annotations"][DELETION_COST]}
    swapped["web-2"] = web0["metadata"]["annotations"][DELETION_COST]
    for pod, cost in swapped.items():
        w.patch_cached("Pod", "shop", pod, {"metadata": {"annotations": {DELETION_COST: cost}}})
    w.h.cache.take_dirty(keeper.workloads)
    w.h.clock.advance(5)
    keeper.reconcile(w.h.clock.now())
    assert keeper.workloads.handed == 0 and w.ops.of("annotate_pod") == []
    # The resync compares every workload with the state it was settled with: web's differs, so web
    # (alone) is ranked again and its costs are put back in order.
    w.h.clock.advance(600)
    keeper.reconcile(w.h.clock.now())
    assert keeper.workloads.full_passes == 2 and keeper.workloads.handed == 1
    assert w.ops.of("annotate_pod") and {args[1] for args in w.ops.of("annotate_pod")} <= {"web-0", "web-2"}


def test_a_change_of_the_view_every_workload_is_decided_from_is_a_full_pass() -> None:
    w = World()
    w.spot_room()
    for name in ("api", "web"):
        w.workload(name, 4, ["od-1", "a-1", "b-1", "a-1"])
    rebalancer = w.loop(Rebalancer)
    rebalancer.reconcile(w.h.clock.now())
    w.h.clock.advance(60)
    rebalancer.reconcile(w.h.clock.now())
    assert (rebalancer.workloads.full_passes, rebalancer.workloads.handed) == (1, 0)
    w.h.risk.record_notice("a-1", Pool("m5.large", "us-east-1a"), w.h.clock.now())  # pool risk moves
    w.h.clock.advance(60)
    rebalancer.reconcile(w.h.clock.now())
    assert (rebalancer.workloads.full_passes, rebalancer.workloads.handed) == (2, 2)


@pytest.mark.parametrize("seed", range(3))
def test_the_dirty_driven_loops_decide_as_full_scans_do_over_random_changes(seed: int) -> None:
    """A rebalancer and a deletion-cost keeper that decide only for changed workloads write exactly
    what the same loops write looking at every workload every round: a deletion-cost keeper made anew
    each round (it decides for every workload), a rebalancer (whose rate limit and expectations must
    carry over) comparing every workload's state every round (a resync every round)."""
    rng = random.Random(seed)
    w = World(LoopSettings(poll_instance_metadata=False, deletion_cost_writes_per_round=8))
    w.spot_room()
    full = World.__new__(World)  # the same cache, other ops and settings: loops that scan everything
    full.h, full.ops = w.h, RecordingOps(objects=w.h.objects)
    full.shared = SharedState(
        risk=w.h.risk,
        shortages=w.shared.shortages,
        settings=w.shared.settings.model_copy(update={"workload_resync_seconds": 1e-9}),
    )
    names = ["api", "web", "cart", "db"]
    places = ["od-1", "a-1", "b-1"]
    for name in names:
        w.workload(name, 4, [rng.choice(places) for _ in range(4)])
    rebalancer, scanning_rebalancer = w.loop(Rebalancer), full.loop(Rebalancer)
    keeper = w.loop(DeletionCostKeeper)
    loops = [(rebalancer, lambda: scanning_rebalancer), (keeper, lambda: full.loop(DeletionCostKeeper))]
    serial = itertools.count(10)
    for _ in range(120):
        roll = rng.random()
        name = rng.choice(names)
        dep = w.h.cache.get("Deployment", "shop", name) or {}
        if roll < 0.35:
            w.h.add(pod_of(replicaset(dep), f"{name}-{next(serial)}", node=rng.choice(places)))
        elif roll < 0.6:
            pods = [p for p in w.h.cache.objects("Pod") if p["metadata"]["name"].startswith(name + "-")]
            if pods:
                w.h.cache.apply({"type": "DELETED", "object": rng.choice(pods)})
        elif roll < 0.7:
            count = sum(1 for p in w.h.cache.objects("Pod") if p["metadata"]["name"].startswith(name + "-"))
            w.patch_cached("Deployment", "shop", name, {"spec": {"replicas": count}})
        elif roll < 0.75:
            zone = rng.choice(["us-east-1a", "us-east-1b"])
            w.h.risk.record_notice(f"{zone}-{next(serial)}", Pool("m5.large", zone), w.h.clock.now())
        elif roll < 0.8:
            w.h.add(with_room(node(f"c-{next(serial)}", "spot", "m5.large", "us-east-1c")))
        w.h.clock.advance(rng.choice([5, 30, 60]))
        now = w.h.clock.now()
        for dirty_driven, scanning in loops:
            dirty_driven.reconcile(now)
            scanning().reconcile(now)
            assert w.ops.calls == full.ops.calls, f"seed {seed}: {type(dirty_driven).__name__} differs"
        for op, args in [(c.op, c.args) for c in w.ops.calls if c.op in ("annotate_pod", "evict")]:
            pod = w.h.cache.get("Pod", args[0], args[1])
            if pod is None:
                continue  # evicted earlier in the round
            if op == "annotate_pod":
                w.patch_cached("Pod", args[0], args[1], {"metadata": {"annotations": args[2]}})
            elif op == "evict":
                w.h.cache.apply({"type": "DELETED", "object": pod})
        w.ops.calls.clear()
        full.ops.calls.clear()
    assert rebalancer.workloads.full_passes < scanning_rebalancer.workloads.full_passes


class ScanningReporter(PolicyReporter):
    """The reporter looking at every workload every round, as it did before it read the dirty marks."""

    def _to_report(self, dirty: DirtyWorkloads) -> bool:
        return True


@pytest.mark.parametrize("seed", range(3))
def test_the_policy_reporter_posts_what_a_full_scan_posts_over_random_changes(seed: int) -> None:
    """Reading only the workloads that changed (and scanning every one when one of them has a report to
    make, a namespace changed or a post failed), the reporter posts the same Events in the same rounds
    and order as a reporter scanning every workload every round."""
    rng = random.Random(50 + seed)
    w = World()
    full = World.__new__(World)  # the same cache, other ops: a reporter that scans everything
    full.h, full.ops, full.shared = w.h, RecordingOps(objects=w.h.objects), w.shared
    reporter, scanning = w.loop(PolicyReporter), full.loop(ScanningReporter)
    names = ["api", "web", "cart", "db", "jobs"]
    values = ["50", "150", "x", "75"]
    serial = itertools.count()
    posted = 0
    for _ in range(150):
        roll = rng.random()
        name = rng.choice(names)
        notes = {"spot.shipshape.dev/spot-percentage": rng.choice(values)}
        if roll < 0.3:  # in namespace jobs, a workload follows the namespace's label
            ns = rng.choice(["shop", "jobs"])
            w.h.add(deployment(name, 2, notes if ns == "jobs" else {**ON, **notes}, ns=ns))
        elif roll < 0.5 and w.h.cache.get("Deployment", "shop", name) is not None:
            w.patch_cached("Deployment", "shop", name, {"metadata": {"annotations": notes}})
        elif roll < 0.6 and w.h.cache.get("Deployment", "shop", name) is not None:
            w.patch_cached("Deployment", "shop", name, {"status": {"observedGeneration": next(serial)}})
        elif roll < 0.65:
            gone = w.h.cache.get("Deployment", "shop", name)
            if gone is not None:
                w.h.cache.apply({"type": "DELETED", "object": gone})
        elif roll < 0.7:
            w.h.add(namespace("jobs", {"spot.shipshape.dev/enabled": rng.choice(["true", "false"])}))
        elif roll < 0.8:
            w.h.add(pod_of(replicaset(deployment(name, 2)), f"{name}-{next(serial)}", node="a-1"))
        failing = rng.random() < 0.15
        for ops in (w.ops, full.ops):
            if failing:
                ops.fail["post_event"] = OpsError("cannot reach the API server")
            else:
                ops.fail.pop("post_event", None)
        w.h.clock.advance(60)
        now = w.h.clock.now()
        reporter.reconcile(now)
        scanning.reconcile(now)
        assert w.ops.calls == full.ops.calls, f"seed {seed}"
        posted += sum(1 for call in w.ops.calls if call.op == "post_event" and not failing)
        w.ops.calls.clear()
        full.ops.calls.clear()
    assert posted > 3
