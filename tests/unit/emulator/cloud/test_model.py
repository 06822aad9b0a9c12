"""The cloud model in virtual time: nodes, boot, cost, interruptions, shortages, timeline."""

from __future__ import annotations

import re
from typing import Any

import pytest

from shipshape.emulator.cloud import CloudError, CloudModel, UnknownTarget, nodes
from shipshape.emulator.cloud.boot import MILESTONES
from shipshape.emulator.resources import NODES
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import ScenarioError
from shipshape.kube.clock import VirtualClock, parse_time, rfc3339
from shipshape.kube.quantity import cpu_millis, to_int

from .builders import ON_DEMAND_B, SPOT_A, scenario, start


def _ready(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def test_initial_nodes_exist_ready_with_the_conventional_labels() -> None:
    gpu_pool = {
        **ON_DEMAND_B,
        "name": "gpu",
        "instanceType": "g4dn.xlarge",
        "gpus": 1,
        "initialSize": 1,
        "labels": {"team": "ml"},
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
    }
    env = start(scenario([SPOT_A, ON_DEMAND_B, gpu_pool], kubernetesVersion="v1.32.3"))
    all_nodes = env.nodes()
    assert len(all_nodes) == 2 + 1 + 1
    for node in all_nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"]["labels"]
        inst = env.cloud.instance_for(name)
        assert inst is not None
        pool = env.cloud.pools[inst.pool].spec
        assert re.fullmatch(r"ip-10-0-\d+-\d+\.ec2\.internal", name)
        assert labels["kubernetes.io/hostname"] == name
        assert labels["node.kubernetes.io/capacity"] == pool.capacity_type
        assert labels["node.kubernetes.io/instance-type"] == pool.instance_type
        assert labels["topology.kubernetes.io/zone"] == pool.zone
        assert labels["topology.kubernetes.io/region"] == "us-east-1"
        assert labels["emulator.shipshape.dev/pool"] == pool.name
        assert node["spec"]["providerID"] == f"aws:///{pool.zone}/{inst.id}"
        assert re.fullmatch(r"i-[0-9a-f]{17}", inst.id)
        ready = _ready(node)
        assert (ready["status"], ready["reason"], ready["message"]) == (
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        )
        # Booted before the cluster started.
        assert parse_time(ready["lastTransitionTime"]) < env.clock.now()
        created = parse_time(node["metadata"]["creationTimestamp"])
        assert created == int(inst.timeline.registered) < parse_time(ready["lastTransitionTime"]) + 1
        assert all(t["key"] != nodes.NOT_READY_TAINT for t in node["spec"].get("taints", []))
        assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.32.3"
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.7.")
        capacity, allocatable = node["status"]["capacity"], node["status"]["allocatable"]
        assert cpu_millis(capacity["cpu"]) == cpu_millis(pool.cpu)
        assert 0 < cpu_millis(allocatable["cpu"]) < cpu_millis(capacity["cpu"])
        assert 0 < to_int(allocatable["memory"]) < to_int(capacity["memory"])
        assert {a["type"] for a in node["status"]["addresses"]} >= {"InternalIP", "Hostname"}
        assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    gpu_node = next(n for n in all_nodes if n["metadata"]["labels"]["emulator.shipshape.dev/pool"] == "gpu")
    assert gpu_node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert gpu_node["metadata"]["labels"]["team"] == "ml"
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in gpu_node["spec"]["taints"]


def test_eks_kube_reserved_matches_the_ami_formula() -> None:
    # 2 vCPU: 60m + 10m; 4 vCPU: + 2 x 5m; 110 pods: 255Mi + 1210Mi.
    assert nodes.kube_reserved_cpu_millis(2000) == 70
    assert nodes.kube_reserved_cpu_millis(4000) == 80
    assert nodes.kube_reserved_cpu_millis(8000) == 90
    assert nodes.kube_reserved_memory(110) == (255 + 11 * 110) * 2**20


def test_a_new_instance_registers_not_ready_then_becomes_ready_on_its_timeline() -> None:
    env = start(scenario([{**SPOT_A, "initialSize": 0}]))
    launched_at = env.clock.now()
    env.cloud.set_desired("spot-a", 1)
    (inst,) = env.cloud.active_instances("spot-a")
    timeline = inst.timeline.as_dict()
    times = [timeline[m] for m in MILESTONES]
    assert times == sorted(times) and timeline["launched"] == launched_at
    assert 27.0 <= timeline["ready"] - launched_at <= 33.0  # 30 s +/- 10 % jitter
    env.cluster.engine.run_until(timeline["registered"] - 0.001)
    assert env.node(inst.node_name) is None
    env.cluster.engine.run_until(timeline["registered"])
    node = env.node(inst.node_name)
    assert node is not None
    assert node["metadata"]["creationTimestamp"] == rfc3339(timeline["registered"])
    assert _ready(node)["status"] == "False"
    assert "cni plugin not initialized" in _ready(node)["message"]
    assert {"key": nodes.NOT_READY_TAINT, "effect": "NoSchedule"} in node["spec"]["taints"]
    env.cluster.engine.run_until(timeline["ready"])
    node = env.node(inst.node_name)
    assert node is not None
    assert _ready(node)["status"] == "True"
    assert not node["spec"].get("taints")
    assert inst.ready


def test_same_seed_same_cluster_other_seed_other_cluster() -> None:
    def fingerprint(seed: int) -> list[tuple[str, tuple[float, ...], float | None]]:
        pools = [{**SPOT_A, "interruptionRate": 2.0}]
        env = start(scenario(pools, seed=seed))
        env.cloud.set_desired("spot-a", 4)
        env.run(3600)
        return sorted(
            (
                i.node_name,
                tuple(t - i.launched for t in i.timeline.times),
                i.terminated_at and i.terminated_at - 0,
            )
            for i in env.cloud.instances.values()
        )

    assert fingerprint(11) == fingerprint(11)
    assert fingerprint(11) != fingerprint(12)


def test_cost_is_price_times_node_seconds_by_pool_and_capacity_type() -> None:
    pools = [
        {**SPOT_A, "pricePerHour": 0.04, "initialSize": 2},
        {**ON_DEMAND_B, "pricePerHour": 0.2, "initialSize": 1},
    ]
    env = start(scenario(pools, interruptions={"enabled": False}, autoscaler={"enabled": False}))
    env.run(1800)
    env.cloud.set_desired("od-b", 2)  # one more on-demand node for the next half hour
    env.run(1800)
    cost = env.cloud.cost()
    assert cost["byPool"]["spot-a"]["nodeHours"] == pytest.approx(2.0)
    assert cost["byPool"]["spot-a"]["cost"] == pytest.approx(2 * 0.04)
    assert cost["byPool"]["od-b"]["nodeHours"] == pytest.approx(1.5)
    assert cost["byPool"]["od-b"]["cost"] == pytest.approx(1.5 * 0.2)
    assert cost["byCapacityType"]["spot"]["cost"] == pytest.approx(0.08)
    assert cost["byCapacityType"]["on-demand"]["cost"] == pytest.approx(0.3)
    assert cost["total"] == pytest.approx(0.38)
    assert cost["nodeHours"] == pytest.approx(3.5)
    assert cost["seconds"] == pytest.approx(3600)


def test_catalog_prices_spot_below_on_demand() -> None:
    env = start(scenario([SPOT_A, {**ON_DEMAND_B, "instanceType": "m5.large", "cpu": "2", "memory": "8Gi"}]))
    spot, on_demand = env.cloud.pools["spot-a"], env.cloud.pools["od-b"]
    assert on_demand.price_per_hour == on_demand.on_demand_price
    assert spot.on_demand_price == on_demand.price_per_hour
    assert 0 < spot.price_per_hour < on_demand.price_per_hour
    assert spot.band is not None and spot.hazard_per_hour > 0
    assert on_demand.hazard_per_hour == 0


def test_a_type_missing_from_the_catalog_needs_a_price() -> None:
    with pytest.raises(
        ScenarioError, match=r"pool spot-a: no spot price for instance type 'm7i\.large'.*pricePerHour"
    ):
        scenario([{**SPOT_A, "instanceType": "m7i.large"}])
    priced = start(scenario([{**SPOT_A, "instanceType": "m7i.large", "pricePerHour": 0.05}]))
    assert priced.cloud.pools["spot-a"].price_per_hour == 0.05


# ---- interruptions -----------------------------------------------------------------------------
def test_a_notice_taints_records_an_event_answers_metadata_then_deletes_the_node_on_time() -> None:
    env = start(scenario(interruptions={"enabled": False}))
    victim = env.nodes_of("spot-a")[0]
    assert env.cloud.instance_action(victim) is None
    noticed_at = env.clock.now()
    assert env.cloud.interrupt(node=victim, notice=90) == [victim]
    env.cluster.engine.settle()
    node = env.node(victim)
    assert node is not None
    taint = {"key": nodes.SPOT_INTERRUPTION_TAINT, "value": "terminate", "effect": "NoSchedule"}
    assert taint in node["spec"]["taints"]
    (event,) = env.events("SpotInterruption")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["name"] == victim
    assert rfc3339(noticed_at + 90) in event["message"]
    assert env.cloud.instance_action(victim) == {"action": "terminate", "time": rfc3339(noticed_at + 90)}
    # A second notice for the same node is ignored.
    assert env.cloud.interrupt(node=victim, notice=10) == []
    assert env.cloud.metadata_speakers() == {victim}
    env.cluster.engine.run_until(noticed_at + 89.999)
    assert env.node(victim) is not None
    env.cluster.engine.run_until(noticed_at + 90)
    assert env.node(victim) is None
    assert env.cloud.metadata_speakers() == frozenset()  # the instance is gone
    assert env.cloud.instance_for(victim).terminated_at == noticed_at + 90  # type: ignore[union-attr]
    assert len(env.events("SpotInterruption")) == 1


def test_the_pool_keeps_its_size_by_replacing_a_reclaimed_instance() -> None:
    env = start(scenario(interruptions={"enabled": False}))
    before = set(env.nodes_of("spot-a"))
    env.cloud.interrupt(node=sorted(before)[0], notice=120)
    env.run(120)
    after = set(env.nodes_of("spot-a"))
    assert len(after) == 2 and len(after - before) == 1
    env.run(60)
    assert all(env.cloud.instance_for(n).ready for n in after)  # type: ignore[union-attr]


def test_pool_wide_and_zone_wide_reclaims() -> None:
    env = start(scenario(interruptions={"enabled": False}))
    assert sorted(env.cloud.interrupt(pool="spot-a")) == env.nodes_of("spot-a")
    # Zone us-east-1b holds spot-b (spot) and od-b (on-demand): only spot instances are reclaimed.
    assert env.cloud.interrupt(zone="us-east-1b") == env.nodes_of("spot-b")
    env.run(120)
    assert env.cloud.pools["od-b"].desired == 1
    assert len(env.nodes()) == 1  # replacements are still booting; the on-demand node stays
    assert env.nodes()[0]["metadata"]["labels"]["node.kubernetes.io/capacity"] == "on-demand"


def test_bad_interruption_requests_change_nothing() -> None:
    env = start(scenario(interruptions={"enabled": False}))
    on_demand = env.nodes_of("od-b")[0]
    with pytest.raises(UnknownTarget, match="unknown pool 'nope'"):
        env.cloud.interrupt(pool="nope")
    with pytest.raises(UnknownTarget, match="unknown zone"):
        env.cloud.interrupt(zone="eu-west-1a")
    with pytest.raises(UnknownTarget):
        env.cloud.interrupt(node="ip-1-2-3-4.ec2.internal")
    with pytest.raises(CloudError, match="on-demand"):
        env.cloud.interrupt(node=on_demand)
    with pytest.raises(CloudError, match="on-demand"):
        env.cloud.interrupt(pool="od-b")
    with pytest.raises(CloudError, match="exactly one"):
        env.cloud.interrupt(pool="spot-a", zone="us-east-1a")
    with pytest.raises(CloudError, match="notice"):
        env.cloud.interrupt(pool="spot-a", notice=-1)
    assert all(i.notice is None for i in env.cloud.instances.values())
    assert env.events("SpotInterruption") == []


def test_poisson_reclaims_follow_the_pool_rate() -> None:
    # 1 interruption per node-hour: over 1 h about 63 % of 40 nodes get a notice.
    pools = [{**SPOT_A, "initialSize": 40, "maxSize": 40, "interruptionRate": 1.0}]
    env = start(scenario(pools, autoscaler={"enabled": False}))
    t0 = env.clock.now()
    env.run(3600)
    initial = [i for i in env.cloud.instances.values() if i.launched < t0]
    assert len(initial) == 40
    noticed = [i for i in initial if i.notice is not None and i.notice.issued <= t0 + 3600]
    assert 15 <= len(noticed) <= 38
    every_notice = [i for i in env.cloud.instances.values() if i.notice is not None]
    assert len(env.events("SpotInterruption")) == sum(1 for i in every_notice if i.registered)
    # rateMultiplier 0 turns the process off.
    quiet = start(scenario(pools, autoscaler={"enabled": False}, interruptions={"rateMultiplier": 0}))
    quiet.run(3600)
    assert all(i.notice is None for i in quiet.cloud.instances.values())


def test_timeline_events_fire_at_their_times() -> None:
    timeline = [
        {"at": "5m", "action": "interrupt", "pool": "spot-a", "notice": "2m"},
        {"at": "6m", "action": "shortage", "pool": "spot-b", "for": "10m"},
    ]
    env = start(scenario(timeline=timeline, interruptions={"enabled": False}))
    t0 = env.clock.now()
    env.run(299)
    assert all(i.notice is None for i in env.cloud.instances.values())
    env.run(1)
    noticed = {i.node_name for i in env.cloud.instances.values() if i.notice is not None}
    assert noticed == set(env.nodes_of("spot-a"))
    env.run(60)
    assert env.cloud.in_shortage("spot-b")
    assert env.cloud.pools["spot-b"].shortage_until == t0 + 360 + 600


def test_metadata_url_annotation_when_the_http_layer_publishes_one() -> None:
    from shipshape.emulator.cloud.model import CloudModel
    from shipshape.emulator.runtime import Cluster
    from shipshape.kube.clock import VirtualClock

    cluster = Cluster(VirtualClock(), scenario())
    cluster.add(CloudModel())
    cluster.services["metadata_url"] = "http://127.0.0.1:9999"  # published after the models started
    cluster.engine.settle()
    for node in cluster.store.list(NODES):
        name = node["metadata"]["name"]
        assert (
            node["metadata"]["annotations"][nodes.METADATA_URL_ANNOTATION] == f"http://127.0.0.1:9999/{name}"
        )


def test_boot_log_parses_with_the_node_collector_including_the_first_pod() -> None:
    from shipshape.emulator.resources import PODS
    from shipshape.nodecollector.collect import timeline_from_text

    env = start(scenario([{**SPOT_A, "initialSize": 0}], interruptions={"enabled": False}))
    env.cloud.set_desired("spot-a", 1)
    (inst,) = env.cloud.active_instances("spot-a")
    env.cluster.engine.run_until(inst.timeline.ready + 5)
    started = env.clock.now()
    env.cluster.store.create(
        PODS,
        {
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"nodeName": inst.node_name, "containers": [{"name": "web", "image": "nginx"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "web",
                        "containerID": "containerd://abc123",
                        "state": {"running": {"startedAt": rfc3339(started)}},
                    }
                ],
            },
        },
    )
    log = env.cloud.boot_log(inst.node_name)
    assert log is not None
    timeline = timeline_from_text(log, year=2026, cni_log=env.cloud.cni_log(inst.node_name))
    assert not timeline.missing
    expected = inst.timeline.as_dict()
    assert timeline.events["registered"].time == pytest.approx(expected["registered"], abs=1e-5)
    assert timeline.events["node_ready"].time == pytest.approx(expected["ready"], abs=1e-5)
    assert timeline.events["cni_ready"].time == pytest.approx(expected["cniReady"], abs=1e-3)
    # startedAt has second resolution, as in the API.
    assert timeline.events["first_pod_started"].time == pytest.approx(parse_time(rfc3339(started)), abs=1e-5)


def test_unreachable_marks_nodes_and_heals() -> None:
    env = start(scenario(interruptions={"enabled": False}, autoscaler={"enabled": False}))
    zone_b = sorted(env.nodes_of("spot-b") + env.nodes_of("od-b"))
    assert sorted(env.cloud.set_unreachable(zone="us-east-1b")) == zone_b
    for name in zone_b:
        node = env.node(name)
        assert node is not None
        assert node["metadata"]["annotations"][nodes.UNREACHABLE_ANNOTATION] == "true"
    assert env.cloud.set_unreachable(zone="us-east-1b") == []  # nothing changes twice
    assert sorted(env.cloud.set_unreachable(zone="us-east-1b", unreachable=False)) == zone_b
    assert all(nodes.UNREACHABLE_ANNOTATION not in env.node(n)["metadata"]["annotations"] for n in zone_b)  # type: ignore[index]
    with pytest.raises(UnknownTarget):
        env.cloud.set_unreachable(pool="nope")


def test_rebalance_recommendations_only_for_spot_instances() -> None:
    env = start(scenario(interruptions={"enabled": False}, autoscaler={"enabled": False}))
    assert env.cloud.rebalance(zone="us-east-1b") == env.nodes_of("spot-b")
    (name,) = env.nodes_of("spot-b")
    assert env.cloud.rebalance_recommendation(name) == {"noticeTime": rfc3339(env.clock.now())}
    assert env.cloud.instance_action(name) is None  # a recommendation is not a notice
    assert env.cloud.metadata_speakers() == {name}
    assert env.cloud.rebalance(pool="od-b") == []


def test_replacements_get_fresh_names() -> None:
    pools = [{**SPOT_A, "initialSize": 5, "interruptionRate": 3.0}]
    env = start(scenario(pools, autoscaler={"enabled": False}))
    env.run(4 * 3600)
    names = [i.node_name for i in env.cloud.instances.values()]
    assert len(names) > 20  # many reclaims and replacements
    assert len(set(names)) == len(names)
    assert len(env.cloud.active_instances("spot-a")) == 5


def test_a_timeline_names_a_node_by_pool_and_ordinal() -> None:
    timeline = [{"at": "1m", "action": "interrupt", "node": "spot-a-1", "notice": "30s"}]
    env = start(scenario(timeline=timeline, interruptions={"enabled": False}, autoscaler={"enabled": False}))
    second = env.cloud.active_instances("spot-a")[1]
    env.run(60)
    assert [i.node_name for i in env.cloud.instances.values() if i.notice is not None] == [second.node_name]
    with pytest.raises(UnknownTarget):
        env.cloud.interrupt(node="spot-a-7")


class _TickingClock(VirtualClock):
    """Virtual time that, once `ticking`, moves on one second at every read: a fast clock as seen
    between two statements of one request."""

    ticking = False

    def now(self) -> float:
        current = super().now()
        if self.ticking:
            self.advance(1.0)
        return current


def test_one_interruption_request_gives_its_instances_one_notice_time() -> None:
    clock = _TickingClock()
    cluster = Cluster(clock, scenario(interruptions={"enabled": False}, autoscaler={"enabled": False}))
    cloud = CloudModel()
    cluster.add(cloud)
    cluster.engine.settle()
    clock.ticking = True
    noticed = cloud.interrupt(pool="spot-a")
    assert len(noticed) == 2
    actions = [cloud.instance_action(name) for name in noticed]
    assert actions[0] is not None and actions[0] == actions[1]


def test_active_instances_agree_with_a_scan_of_every_instance_through_reclaims() -> None:
    env = start(scenario(interruptions={"enabled": False}))

    def check() -> None:
        every = list(env.cloud.instances.values())
        assert env.cloud.active_instances() == [i for i in every if i.active]
        for pool in env.cloud.pools:
            assert env.cloud.active_instances(pool) == [i for i in every if i.active and i.pool == pool]

    check()
    env.cloud.interrupt(pool="spot-a", notice=120)
    check()
    env.run(121)  # reclaimed, replacements launched
    check()
    assert any(not i.active for i in env.cloud.instances.values())
    env.run(600)
    check()
