"""Differential tests of the incremental state: after random event streams (adds, updates, deletes,
relists, events delivered late, twice or out of order), what `ClusterState` answers equals what a state
rebuilt from scratch from the cluster's final objects answers, and its kept per-workload answers equal
the same derivations run with nothing kept (`state.workloads.recompute_managed`).

Seeded, so that a failure replays: the seed and step are in the assertion message.
"""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import pytest

from shipshape.controller.packing import fullest_fitting
from shipshape.controller.placement import GroupCounts, Pool
from shipshape.controller.policy import DECISION, CapacityType, ControllerConfig
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import KINDS, ClusterState, GroupKey, summarize_nodes, workloads
from shipshape.controller.state import cluster as cluster_state
from shipshape.controller.state.views import Fanout, Replica
from shipshape.kube.objects import is_active

Obj = dict[str, Any]

NAMESPACES = ("shop", "batch")
NODES = tuple(f"node-{i}" for i in range(8))
DEPLOYMENTS = ("web", "api", "worker")
REPLICASETS = tuple(f"{d}-{rev}" for d in DEPLOYMENTS for rev in ("a", "b"))
STATEFULSETS = ("db",)
PODS = tuple(f"pod-{i}" for i in range(40))
PDBS = ("web-pdb", "db-pdb")
TYPES = ("m5.large", "c5.large")
ZONES = ("us-east-1a", "us-east-1b")
TAINTS = (
    "emulator.shipshape.dev/spot-interruption",
    "aws-node-termination-handler/rebalance-recommendation",
    "spot",
)


class Cluster:
    """The truth: the objects as the API server holds them, with a global resourceVersion."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.version = 0
        self.objects: dict[tuple[str, str, str], Obj] = {}

    def _stamp(self, obj: Obj) -> Obj:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def change(self) -> Obj:
        """One write: an add or update of a random object (a delete now and then); its watch event."""
        rng = self.rng
        kind = rng.choice(
            ("Pod",) * 8 + ("Node",) * 3 + ("ReplicaSet", "Deployment", "StatefulSet", "Namespace", "PDB")
        )
        kind = "PodDisruptionBudget" if kind == "PDB" else kind
        make = getattr(self, "_" + kind.lower())
        obj = make()
        key = (kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if key in self.objects and rng.random() < 0.15:
            gone = self._stamp(json.loads(json.dumps(self.objects.pop(key))))
            return {"type": "DELETED", "object": gone, "kind": kind}
        event_type = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = self._stamp(obj)
        return {"type": event_type, "object": json.loads(json.dumps(obj)), "kind": kind}

    def status_update(self) -> Obj | None:
        """A status write of a workload or a PDB as an in-process store makes it: the new version
        shares its spec and annotations with the one before (None when there is no such object)."""
        keys = [key for key in self.objects if key[0] in ("Deployment", "StatefulSet", "PodDisruptionBudget")]
        if not keys:
            return None
        key = self.rng.choice(keys)
        current = self.objects[key]
        new = {**current, "metadata": {**current["metadata"]}, "status": {"observed": self.rng.randint(0, 9)}}
        self.objects[key] = self._stamp(new)
        return {"type": "MODIFIED", "object": new, "kind": key[0]}

    def of_kind(self, kind: str) -> list[Obj]:
        return [json.loads(json.dumps(obj)) for key, obj in self.objects.items() if key[0] == kind]

    # --- random objects ---------------------------------------------------------------------------

    def _namespace(self) -> Obj:
        name = self.rng.choice(NAMESPACES)
        labels = {"spot.shipshape.dev/enabled": "true"} if self.rng.random() < 0.7 else {}
        return {"metadata": {"name": name, "labels": labels}}

    def _node(self) -> Obj:
        rng = self.rng
        name = rng.choice(NODES)
        spot = rng.random() < 0.7
        labels = {
            "kubernetes.io/hostname": name,
            "node.kubernetes.io/capacity": "spot" if spot else "on-demand",
            "node.kubernetes.io/instance-type": rng.choice(TYPES),
            "topology.kubernetes.io/zone": rng.choice(ZONES),
            "topology.kubernetes.io/region": "us-east-1",
        }
        taints = [
            {"key": key, "effect": rng.choice(("NoSchedule", "PreferNoSchedule"))}
            for key in TAINTS
            if rng.random() < 0.15
        ]
        status = {
            "allocatable": {"cpu": rng.choice(("2", "4")), "memory": "8Gi", "pods": "30"},
            "conditions": [{"type": "Ready", "status": "True" if rng.random() < 0.9 else "False"}],
        }
        spec: Obj = {"taints": taints}
        if rng.random() < 0.1:
            spec["unschedulable"] = True
        return {"metadata": {"name": name, "labels": labels}, "spec": spec, "status": status}

    def _deployment(self) -> Obj:
        rng = self.rng
        name = rng.choice(DEPLOYMENTS)
        annotations = {"spot.shipshape.dev/on-demand-base": str(rng.randint(0, 2))}
        if rng.random() < 0.3:
            annotations["spot.shipshape.dev/spot-percentage"] = rng.choice(("50", "75", "bad"))
        metadata: Obj = {"name": name, "namespace": "shop", "uid": f"d-{name}", "annotations": annotations}
        if rng.random() < 0.05:
            metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return {
            "metadata": metadata,
            "spec": {
                "replicas": rng.randint(1, 6),
                "selector": {"matchLabels": {"app": name}},
                "strategy": {"rollingUpdate": {"maxUnavailable": rng.choice((1, "25%"))}},
            },
        }

    def _statefulset(self) -> Obj:
        name = self.rng.choice(STATEFULSETS)
        return {
            "metadata": {"name": name, "namespace": "shop", "uid": f"s-{name}"},
            "spec": {"replicas": self.rng.randint(1, 4), "selector": {"matchLabels": {"app": name}}},
        }

    def _replicaset(self) -> Obj:
        name = self.rng.choice(REPLICASETS)
        owner = name.rsplit("-", 1)[0] if self.rng.random() < 0.9 else self.rng.choice(DEPLOYMENTS)
        return {
            "metadata": {
                "name": name,
                "namespace": "shop",
                "uid": f"rs-{name}",
                "ownerReferences": [
                    {"kind": "Deployment", "name": owner, "uid": f"d-{owner}", "controller": True}
                ],
            },
            "spec": {"replicas": 2},
        }

    def _poddisruptionbudget(self) -> Obj:
        name = self.rng.choice(PDBS)
        app = name.split("-")[0]
        spec: Obj = {"selector": {"matchLabels": {"app": app}}}
        spec["minAvailable" if self.rng.random() < 0.5 else "maxUnavailable"] = self.rng.choice((1, "50%"))
        return {"metadata": {"name": name, "namespace": "shop"}, "spec": spec}

    def _pod(self) -> Obj:
        rng = self.rng
        name = rng.choice(PODS)
        if rng.random() < 0.2:
            owner_kind, owner = "StatefulSet", rng.choice(STATEFULSETS)
            app = owner
        else:
            owner_kind, owner = "ReplicaSet", rng.choice(REPLICASETS)
            app = owner.rsplit("-", 1)[0]
        metadata: Obj = {
            "name": name,
            "namespace": "shop",
            "labels": {"app": app},
            "ownerReferences": [{"kind": owner_kind, "name": owner, "controller": True}],
        }
        if rng.random() < 0.5:
            decision = {
                "id": f"d-{rng.randint(0, 99)}",
                "capacityType": rng.choice(("spot", "on-demand")),
                "pool": f"{rng.choice(TYPES)}/{rng.choice(ZONES)}" if rng.random() < 0.7 else "",
                "node": rng.choice(NODES) if rng.random() < 0.5 else "",
            }
            metadata["annotations"] = {DECISION: json.dumps(decision)}
        if rng.random() < 0.05:
            metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        spec: Obj = {
            "containers": [
                {
                    "name": "app",
                    "resources": {"requests": {"cpu": rng.choice(("100m", "250m")), "memory": "128Mi"}},
                }
            ]
        }
        if rng.random() < 0.7:
            spec["nodeName"] = rng.choice(NODES)
        phase = rng.choice(("Running",) * 8 + ("Pending", "Succeeded"))
        ready = "True" if phase == "Running" and rng.random() < 0.8 else "False"
        return {
            "metadata": metadata,
            "spec": spec,
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]},
        }


def rebuilt(cluster: Cluster, config: ControllerConfig) -> ClusterState:
    state = ClusterState(config)
    for kind in KINDS:
        state.replace(kind, cluster.of_kind(kind))
    return state


def counted(counts: GroupCounts) -> tuple[int, list[tuple[Pool, int]], int]:
    """Counts without the order pools were first named in (which follows event order)."""
    return counts.on_demand, sorted(counts.spot_by_pool.items()), counts.spot_unplaced


def facts(state: ClusterState, config: ControllerConfig, now: float) -> dict[str, Any]:
    """Everything the webhook and the loops read, in a form independent of insertion order."""
    groups = sorted(
        {GroupKey("shop", "ReplicaSet", name) for name in REPLICASETS}
        | {GroupKey("shop", "StatefulSet", name) for name in STATEFULSETS}
    )
    pools = [Pool(t, z) for t in TYPES for z in ZONES]
    view = state.placement_view(now, RiskModel())
    pod = {"metadata": {"name": "new", "namespace": "shop"}, "spec": {"containers": []}}
    managed = sorted(((m.ref.kind.value, m.ref.name), m.state) for m in state.managed(config))
    return {
        "objects": {
            kind: sorted(
                (o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in state.objects(kind)
            )
            for kind in KINDS
        },
        "unbound": sorted(p["metadata"]["name"] for p in state.unbound_pods()),
        "requested": {node: state.requested_on(node) for node in NODES},
        "spare_rooms": sorted(state.spare_rooms(), key=repr),
        "groups": {
            str(group): (
                sorted(p["metadata"]["name"] for p in state.pods_of_group(group)),
                counted(state.group_counts(group, now)),
            )
            for group in groups
        },
        "pool_nodes": {pool: sorted(names) for pool, names in state.pool_nodes().items()},
        "tolerations": state.spot_tolerations(),
        "noticed": sorted(n["metadata"]["name"] for n in state.noticed_nodes()),
        "view": (sorted(view.excluded.items()), sorted(view.avoided_nodes), sorted(view.populated)),
        "rooms": {
            str(pool): sorted(repr(room) for room in state.packing_rooms(pod, capacity, pool))
            for capacity, pool in [(c, p) for c in (CapacityType.SPOT,) for p in pools]
            + [(CapacityType.ON_DEMAND, None)]
        },
        "pool_rooms": state.pool_rooms(pools, frozenset()),
        "managed": managed,
        "recomputed": sorted(
            ((ref.kind.value, ref.name), ws) for ref, ws in workloads.recompute_managed(state, config)
        ),
        "pdbs": {
            app: sorted(p["metadata"]["name"] for p in state.pdbs_matching("shop", {"app": app}))
            for app in (*DEPLOYMENTS, *STATEFULSETS)
        },
    }


def check(state: ClusterState, cluster: Cluster, config: ControllerConfig, where: str) -> None:
    now = 1000.0
    incremental, scratch = facts(state, config, now), facts(rebuilt(cluster, config), config, now)
    for name in incremental:
        assert incremental[name] == scratch[name], f"{where}: {name} differs"
    # The kept per-workload answers equal the derivations with nothing kept.
    assert incremental["managed"] == incremental["recomputed"], where


@pytest.mark.parametrize("seed", range(4))
def test_incremental_state_equals_a_state_rebuilt_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    config = ControllerConfig()
    cluster = Cluster(rng)
    state = ClusterState(config)
    delivered: list[Obj] = []  # events already delivered: re-sent now and then (stale)
    late: list[Obj] = []  # events held back: delivered later, out of order
    steps = 1500

    def deliver(event: Obj) -> None:
        state.apply({"type": event["type"], "object": json.loads(json.dumps(event["object"]))}, event["kind"])
        delivered.append(event)

    for step in range(steps):
        roll = rng.random()
        if roll < 0.70:
            event = cluster.change()
            if rng.random() < 0.15:
                late.append(event)
            else:
                deliver(event)
        elif roll < 0.82 and late:
            deliver(late.pop(rng.randrange(len(late))))
        elif roll < 0.94 and delivered:
            deliver(rng.choice(delivered))  # a duplicate, usually stale
        elif roll < 0.97:
            kind = rng.choice(("Pod", "Node", "ReplicaSet", "Deployment"))
            state.replace(kind, cluster.of_kind(kind))  # a relist of one kind
        if step % 250 == 249:
            for event in late:
                deliver(event)
            late.clear()
            check(state, cluster, config, f"seed {seed}, step {step}")
    for event in late:
        deliver(event)
    check(state, cluster, config, f"seed {seed}, end")


@pytest.mark.parametrize("seed", range(2))
def test_dirty_workloads_cover_every_workload_whose_state_changed(seed: int) -> None:
    rng = random.Random(100 + seed)
    config = ControllerConfig()
    cluster = Cluster(rng)
    state = ClusterState(config)
    assert state.take_dirty().everything  # at first, every workload
    before = {(m.ref.kind.value, m.ref.namespace, m.ref.name): m.state for m in state.managed(config)}
    for step in range(1500):
        event = cluster.change()
        state.apply({"type": event["type"], "object": event["object"]}, event["kind"])
        if step % 10 != 9:
            continue
        dirty = state.take_dirty()
        after = {(m.ref.kind.value, m.ref.namespace, m.ref.name): m.state for m in state.managed(config)}
        for key in before.keys() | after.keys():
            if before.get(key) != after.get(key):
                assert dirty.covers(*key), f"seed {seed}, step {step}: {key} changed, not dirty"
        before = after


def managed_now(state: ClusterState, config: ControllerConfig) -> list[tuple[str, str, str, Any]]:
    """`managed`'s answer in its order, each workload's object checked to be the one the state holds."""
    out = []
    for m in state.managed(config):
        assert m.ref.obj is state.get(m.ref.kind.value, m.ref.namespace, m.ref.name)
        out.append((m.ref.kind.value, m.ref.namespace, m.ref.name, m.state))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_managed_kept_between_changes_equals_managed_worked_out_afresh_in_order(seed: int) -> None:
    """`managed` brings its answer up to date from the dirty workloads only: asked now and then between
    random changes (status writes sharing spec and annotations, relists, workloads deleted and created
    again, PDBs and namespace labels changing), its answer, in order, equals the derivation with nothing
    kept (`recompute_managed`, which lists the objects in the state's order)."""
    rng = random.Random(400 + seed)
    config = ControllerConfig()
    cluster = Cluster(rng)
    state = ClusterState(config)
    other = ClusterState(config)  # the same events, with a reader taking marks too (as the loops do)
    asked = 0
    for step in range(1500):
        roll = rng.random()
        event: Obj | None
        if roll < 0.75:
            event = cluster.change()
            if event["type"] != "DELETED":  # the cluster's own version, as an in-process store hands out
                md = event["object"]["metadata"]
                event["object"] = cluster.objects[(event["kind"], md.get("namespace", ""), md["name"])]
        elif roll < 0.95:
            event = cluster.status_update()
        else:
            event = None
            kind = rng.choice(("Pod", "Node", "ReplicaSet", "Deployment", "StatefulSet", "Namespace"))
            state.replace(kind, cluster.of_kind(kind))
            other.replace(kind, cluster.of_kind(kind))
        if event is not None:
            state.apply({"type": event["type"], "object": event["object"]}, event["kind"])
            other.apply({"type": event["type"], "object": event["object"]}, event["kind"])
        if rng.random() < 0.2:
            other.take_dirty("loop")
        if rng.random() < 0.3:
            asked += 1
            fresh = [
                (ref.kind.value, ref.namespace, ref.name, ws)
                for ref, ws in workloads.recompute_managed(state, config)
            ]
            assert managed_now(state, config) == fresh, f"seed {seed}, step {step}"
            if rng.random() < 0.5:
                assert managed_now(other, config) == fresh, f"seed {seed}, step {step} (with a reader)"
    assert asked > 100


def test_a_status_write_keeps_the_workload_state_and_policy() -> None:
    """A workload's status write shares its spec and annotations: its state and policy are kept (the
    same objects), while `managed` hands out the new version of the workload object."""
    rng = random.Random(9)
    config = ControllerConfig()
    cluster = Cluster(rng)
    state = ClusterState(config)
    while not state.managed(config):
        event = cluster.change()
        state.apply({"type": event["type"], "object": event["object"]}, event["kind"])
    (first, *_) = state.managed(config)
    current = first.ref.obj
    new = {**current, "metadata": {**current["metadata"], "resourceVersion": "999999"}, "status": {"x": 1}}
    state.apply({"type": "MODIFIED", "object": new}, first.ref.kind.value)
    (again, *_) = state.managed(config)
    assert again.ref.obj["status"] == {"x": 1}
    assert again.state is first.state
    assert state.policy_of(again.ref.kind, again.ref.obj, config) is state.policy_of(
        first.ref.kind, first.ref.obj, config
    )


def test_a_workload_state_whose_group_another_workload_read_meanwhile_is_worked_out_afresh() -> None:
    """A ReplicaSet goes to another Deployment and back while the first is unmanaged (its state kept,
    not asked): the pod changes the other one took are not lost to the first."""
    config = ControllerConfig()
    state = ClusterState(config)
    version = iter(range(1, 100))

    def put(obj: Obj, kind: str, event: str = "MODIFIED") -> None:
        obj["metadata"]["resourceVersion"] = str(next(version))
        state.apply({"type": event, "object": obj}, kind)

    def deployment(name: str, spec: Obj, notes: dict[str, str]) -> Obj:
        return {
            "metadata": {"name": name, "namespace": "shop", "uid": name, "annotations": notes},
            "spec": spec,
        }

    def replicaset(owner: str) -> Obj:
        ref = {"kind": "Deployment", "name": owner, "uid": owner, "controller": True}
        return {"metadata": {"name": "rs", "namespace": "shop", "ownerReferences": [ref]}, "spec": {}}

    def pod(name: str) -> Obj:
        ref = {"kind": "ReplicaSet", "name": "rs", "controller": True}
        return {
            "metadata": {"name": name, "namespace": "shop", "ownerReferences": [ref]},
            "spec": {"nodeName": "node-0", "containers": []},
            "status": {"phase": "Running"},
        }

    def pods_of(name: str) -> list[str]:
        assert managed_now(state, config) == [
            (ref.kind.value, ref.namespace, ref.name, ws)
            for ref, ws in workloads.recompute_managed(state, config)
        ]
        return [p.name for m in state.managed(config) if m.ref.name == name for p in m.state.pods]

    on, off = {"spot.shipshape.dev/enabled": "true"}, {"spot.shipshape.dev/enabled": "false"}
    spec_a, spec_b = {"replicas": 2}, {"replicas": 2}
    put(deployment("a", spec_a, on), "Deployment", "ADDED")
    put(deployment("b", spec_b, on), "Deployment", "ADDED")
    put(replicaset("a"), "ReplicaSet", "ADDED")
    put(pod("p1"), "Pod", "ADDED")
    put(pod("p2"), "Pod", "ADDED")
    assert pods_of("a") == ["p1", "p2"]
    put(deployment("a", spec_a, off), "Deployment")  # the same spec: a's state stays kept
    put(replicaset("b"), "ReplicaSet")
    assert pods_of("b") == ["p1", "p2"]
    put(pod("p1"), "Pod", "DELETED")
    assert pods_of("b") == ["p2"]
    put(replicaset("a"), "ReplicaSet")
    put(deployment("a", spec_a, on), "Deployment")
    assert pods_of("a") == ["p2"]


def test_a_state_no_reader_asks_keeps_no_marks() -> None:
    rng = random.Random(5)
    config = ControllerConfig()
    cluster = Cluster(rng)
    state = ClusterState(config)  # as the webhook's replica: no loop takes its changes
    for _ in range(500):
        event = cluster.change()
        state.apply({"type": event["type"], "object": event["object"]}, event["kind"])
    assert not state._dirty_groups and not state._dirty_namespaces
    assert state.take_dirty().everything  # a first reader still starts from every workload


def test_replicas_fed_by_one_fanout_hold_the_same_objects() -> None:
    rng = random.Random(7)
    config = ControllerConfig()
    cluster = Cluster(rng)
    webhook, loops = Replica(ClusterState(config)), Replica(ClusterState(config))
    fanout = Fanout(webhook, loops)
    holding, done = threading.Event(), threading.Event()

    def planning_pass() -> None:
        with loops.view():  # a planning pass holds the loops' replica: events queue for it
            holding.set()
            done.wait(10)

    planner = threading.Thread(target=planning_pass)
    planner.start()
    assert holding.wait(10)
    for _ in range(300):
        event = cluster.change()
        fanout.apply({"type": event["type"], "object": event["object"]}, event["kind"])
    # The webhook's replica was never held: it caught up at once; the loops' waits for its pass.
    assert loops.pending() == 300 and webhook.pending() == 0
    done.set()
    planner.join(10)
    with loops.view(now=0.0) as state, webhook.view(now=0.0) as other:
        assert loops.pending() == 0
        assert facts(state, config, 0.0) == facts(other, config, 0.0)
        check(state, cluster, config, "replica")


def test_a_nested_view_does_not_change_what_the_enclosing_view_reads() -> None:
    rng = random.Random(11)
    config = ControllerConfig()
    cluster = Cluster(rng)
    replica = Replica(ClusterState(config))
    fanout = Fanout(replica)
    with replica.view() as state:
        before = len(list(state.objects("Pod")))
        for _ in range(50):
            event = cluster.change()
            fanout.apply({"type": event["type"], "object": event["object"]}, event["kind"])
        with replica.view() as same:  # the loops nest `view()`: still the same snapshot
            assert len(list(same.objects("Pod"))) == before
        assert replica.pending() == 50
    with replica.view() as state:
        assert replica.pending() == 0
        check(state, cluster, config, "nested")


@pytest.mark.parametrize("seed", range(3))
def test_the_node_summary_kept_per_node_equals_the_summary_of_every_node(seed: int) -> None:
    """The node summary is put together from each node's share, kept per node event: after every
    event (a capacity-label key of another convention appearing, which reads every node again) it
    equals `summarize_nodes` over the state's nodes (a pool's region aside, which the kept summary
    takes from the first node it saw); so do the nodes of each capacity type, kept in order."""
    rng = random.Random(500 + seed)
    config = ControllerConfig()
    cluster = Cluster(rng)
    state = ClusterState(config)
    for step in range(800):
        event = cluster.change()
        if event["kind"] == "Node" and event["type"] != "DELETED" and rng.random() < 0.1:
            # A node labelled the GKE way: spot nodes carry the label, on-demand nodes none (so a node
            # without a capacity label reads as on-demand once a GKE spot node was seen).
            labels = event["object"]["metadata"]["labels"]
            if labels.pop("node.kubernetes.io/capacity") == "spot" and rng.random() < 0.3:
                labels["cloud.google.com/gke-spot"] = "true"
        state.apply({"type": event["type"], "object": event["object"]}, event["kind"])
        if rng.random() < 0.05:
            kind = rng.choice(("Node", "Pod"))
            state.replace(kind, cluster.of_kind(kind))
        held = sorted(state._node_by_name)
        if held and rng.random() < 0.2:  # a heartbeat: a new status beside the same spec and labels
            current = state._node_by_name[rng.choice(held)]
            beat = cluster._stamp({**current, "metadata": dict(current["metadata"])})
            beat["status"] = {**(current.get("status") or {}), "heartbeat": step}
            state.apply({"type": "MODIFIED", "object": beat}, "Node")
        kept = state._nodes()
        fresh = summarize_nodes(list(state.objects("Node")), config, state._present, state.conventions)
        where = f"seed {seed}, step {step}"
        # The nodes of each capacity type, kept between events, in the cache's order.
        for capacity in (*CapacityType, None):
            listed = state.nodes_of_capacity(capacity)  # type: ignore[arg-type]
            assert [(n["metadata"]["name"], n["metadata"]["resourceVersion"]) for n in listed] == [
                (n["metadata"]["name"], n["metadata"]["resourceVersion"])
                for n in state.objects("Node")
                if state.node_capacity(n) is capacity
            ], where
        assert kept.spot_pools.keys() == fresh.spot_pools.keys(), where
        assert (kept.noticed_pools, kept.avoided, kept.tolerations) == (
            fresh.noticed_pools,
            fresh.avoided,
            fresh.tolerations,
        ), where
        assert (dict(kept.pool_nodes), kept.on_demand_nodes) == (
            dict(fresh.pool_nodes),
            fresh.on_demand_nodes,
        ), where


@pytest.mark.parametrize("seed", range(2))
def test_packing_rooms_kept_per_pod_shape_equal_rooms_worked_out_afresh(seed: int) -> None:
    """The nodes a pod shape may land on are kept between node changes: after every single event the
    kept answer equals a state's rebuilt from scratch, for pods with and without tolerations and
    affinity (a missed invalidation shows at the next question)."""
    rng = random.Random(300 + seed)
    config = ControllerConfig()
    zone_key, zone = "topology.kubernetes.io/zone", "us-east-1a"
    cluster = Cluster(rng)
    state = ClusterState(config)
    plain = {"metadata": {"name": "new", "namespace": "shop"}, "spec": {"containers": []}}
    tolerant = {
        "metadata": {"name": "new", "namespace": "shop"},
        "spec": {
            "containers": [],
            "tolerations": [{"key": "spot", "operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": zone_key, "operator": "In", "values": [zone]}]}
                        ]
                    }
                }
            },
        },
    }
    shapes = [(CapacityType.ON_DEMAND, None)]
    shapes += [(CapacityType.SPOT, Pool(t, z)) for t in TYPES for z in ZONES]
    extra = [{"key": "emulator.shipshape.dev/spot-interruption", "operator": "Exists"}]

    def rooms(of: ClusterState) -> list[Any]:
        return [
            sorted(repr(r) for r in of.packing_rooms(pod, capacity, pool, tolerations, avoided))
            for pod in (plain, tolerant)
            for capacity, pool in shapes
            for tolerations in ((), extra)
            for avoided in ((), ("node-1",))
        ]

    for step in range(600):
        event = cluster.change()
        state.apply({"type": event["type"], "object": event["object"]}, event["kind"])
        assert rooms(state) == rooms(rebuilt(cluster, config)), f"seed {seed}, step {step}"


def _recounted(state: ClusterState, group: GroupKey) -> tuple[int, list[tuple[Pool, int]], int]:
    """The group's counts worked out from its pods with nothing kept (placements read afresh)."""
    counts = GroupCounts()
    for pod in state.pods_of_group(group):
        if is_active(pod):
            capacity, pool = state._placement_of(pod)
            if capacity is not None:
                counts.add(capacity, pool)
    return counted(counts)


@pytest.mark.parametrize("seed", range(3))
def test_group_counts_kept_between_changes_equal_counts_worked_out_afresh(seed: int) -> None:
    """The webhook's group counts, brought up to date per changed pod, checked after every event
    (read now and then, so that changes pile up between reads), and against a rebuilt state."""
    rng = random.Random(300 + seed)
    config = ControllerConfig()
    cluster = Cluster(rng)
    state = ClusterState(config)
    groups = sorted(
        {GroupKey("shop", "ReplicaSet", name) for name in REPLICASETS}
        | {GroupKey("shop", "StatefulSet", name) for name in STATEFULSETS}
    )
    delivered: list[Obj] = []
    for step in range(3000):
        roll = rng.random()
        if roll < 0.85:
            event = cluster.change()
        elif delivered:
            event = rng.choice(delivered)  # a duplicate, usually stale
        else:
            continue
        state.apply({"type": event["type"], "object": json.loads(json.dumps(event["object"]))}, event["kind"])
        delivered.append(event)
        if rng.random() < 0.02:
            kind = rng.choice(("Pod", "Node"))
            state.replace(kind, cluster.of_kind(kind))
        for group in rng.sample(groups, rng.choice((0, 0, 1, 2))):
            got = counted(state.group_counts(group, 1000.0))
            assert got == _recounted(state, group), f"seed {seed}, step {step}, {group}"
        if step % 500 == 499:
            scratch = rebuilt(cluster, config)
            for group in groups:
                assert counted(state.group_counts(group, 1000.0)) == counted(
                    scratch.group_counts(group, 1000.0)
                ), f"seed {seed}, step {step}, {group} against a rebuilt state"


@pytest.mark.parametrize(("seed", "bounds"), [(0, None), (1, None), (2, (3, 5))])
def test_fullest_rooms_equal_ranking_the_packing_rooms(
    seed: int, bounds: tuple[int, int] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The webhook's packing answer from its kept rankings (`fullest_rooms`) equals
    `packing.fullest_fitting` over `packing_rooms`, of this state and of one rebuilt from scratch,
    after every single event: pods that fit everywhere, on some nodes or nowhere, with and without
    avoided nodes; `bounds`: so few rankings and usage changes kept that both run over."""
    if bounds is not None:
        monkeypatch.setattr(cluster_state, "MAX_RANKINGS", bounds[0])
        monkeypatch.setattr(cluster_state, "MAX_USAGE_LOG", bounds[1])
    rng = random.Random(700 + seed)
    config = ControllerConfig()
    cluster = Cluster(rng)
    state = ClusterState(config)
    pod = {"metadata": {"name": "new", "namespace": "shop"}, "spec": {"containers": []}}
    shapes = [(CapacityType.ON_DEMAND, None)]
    shapes += [(CapacityType.SPOT, Pool(t, z)) for t in TYPES for z in ZONES]
    extra = ({"key": "spot", "operator": "Exists"},)
    gi = 1024**3
    requests = ((100, 128 * 1024**2), (1500, gi), (3000, 6 * gi), (500, 8 * gi - 1))
    for step in range(500):
        event = cluster.change()
        state.apply({"type": event["type"], "object": event["object"]}, event["kind"])
        fresh = rebuilt(cluster, config) if step % 5 == 0 else None
        for capacity, pool in shapes:
            for tolerations in ((), extra):
                for avoided in ((), ("node-1", "node-4")):
                    for wanted in requests:
                        for limit in (1, 3):
                            kept = state.fullest_rooms(
                                pod, wanted, capacity, pool, tolerations, avoided, limit
                            )
                            ranked = fullest_fitting(
                                wanted, state.packing_rooms(pod, capacity, pool, tolerations, avoided), limit
                            )
                            assert kept == ranked, f"seed {seed}, step {step}"
                            if fresh is not None:
                                rooms = fresh.packing_rooms(pod, capacity, pool, tolerations, avoided)
                                assert kept == fullest_fitting(wanted, rooms, limit), (
                                    f"seed {seed}, step {step}"
                                )
