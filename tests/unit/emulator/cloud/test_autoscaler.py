"""The autoscaler: scale-up for unschedulable pods, scale-down of empty nodes, shortages."""

from __future__ import annotations

from typing import Any

from shipshape.controller import growth
from shipshape.emulator.cloud import fit, nodes
from shipshape.emulator.cloud.autoscaler import SCAN_INTERVAL
from shipshape.emulator.resources import CONFIGMAPS, PODS
from shipshape.emulator.scenario import Scenario

from .builders import ON_DEMAND_B, SPOT_A, Env, add_running, add_unschedulable, scenario, start

NO_INTERRUPTIONS = {"enabled": False}


def _quiet(pools: list[dict[str, Any]], **autoscaler: object) -> Scenario:
    return scenario(pools, interruptions=NO_INTERRUPTIONS, autoscaler={"scaleUpAfter": "10s", **autoscaler})


def test_unschedulable_pods_trigger_a_scale_up_of_the_cheapest_fitting_pool() -> None:
    pools = [{**SPOT_A, "initialSize": 0}, {**ON_DEMAND_B, "initialSize": 0}]
    env = start(_quiet(pools))
    # m5.large allocatable cpu is 1930m: three 1.5-cpu pods need three spot nodes.
    for i in range(3):
        add_unschedulable(env, f"web-{i}", cpu="1500m")
    env.run(SCAN_INTERVAL * 2)
    assert env.cloud.pools["spot-a"].desired == 3
    assert env.cloud.pools["od-b"].desired == 0
    events = env.events("TriggeredScaleUp")
    assert sorted(e["involvedObject"]["name"] for e in events) == ["web-0", "web-1", "web-2"]
    assert {e["message"] for e in events} == {"pod triggered scale-up: [{spot-a 0->3 (max: 6)}]"}
    assert {e["source"]["component"] for e in events} == {"cluster-autoscaler"}
    (scaled,) = env.events("ScaledUpGroup")
    assert scaled["involvedObject"]["kind"] == "ConfigMap"
    assert scaled["involvedObject"]["name"] == "cluster-autoscaler-status"
    assert scaled["message"] == "Scale-up: setting group spot-a size to 3 instead of 0 (max: 6)"
    # The pods stay pending while the nodes boot: no second scale-up for them.
    env.run(SCAN_INTERVAL * 2)
    assert env.cloud.pools["spot-a"].desired == 3
    assert len(env.events("TriggeredScaleUp")) == 3


def test_scale_up_waits_for_scale_up_after() -> None:
    pools = [{**SPOT_A, "initialSize": 0}]
    env = start(_quiet(pools, scaleUpAfter="45s"))
    add_unschedulable(env, "late", cpu="1")
    env.run(40)
    assert env.cloud.pools["spot-a"].desired == 0
    env.run(20)
    assert env.cloud.pools["spot-a"].desired == 1


def test_a_node_selector_picks_the_pool_whose_nodes_match() -> None:
    pools = [{**SPOT_A, "initialSize": 0}, {**ON_DEMAND_B, "initialSize": 0}]
    env = start(_quiet(pools))
    add_unschedulable(env, "needs-od", cpu="1", node_selector={"node.kubernetes.io/capacity": "on-demand"})
    env.run(SCAN_INTERVAL * 2)
    assert (env.cloud.pools["spot-a"].desired, env.cloud.pools["od-b"].desired) == (0, 1)


def test_pods_that_fit_no_pool_get_not_trigger_scale_up() -> None:
    pools = [{**SPOT_A, "initialSize": 0}]
    env = start(_quiet(pools))
    add_unschedulable(env, "huge", cpu="16")
    env.run(SCAN_INTERVAL * 2)
    assert env.cloud.pools["spot-a"].desired == 0
    (event,) = env.events("NotTriggerScaleUp")
    assert event["message"] == "pod didn't trigger scale-up: 1 Insufficient cpu"


def test_max_size_caps_a_scale_up() -> None:
    pools = [{**SPOT_A, "initialSize": 0, "maxSize": 2}]
    env = start(_quiet(pools))
    for i in range(4):
        add_unschedulable(env, f"p-{i}", cpu="1500m")
    env.run(SCAN_INTERVAL * 2)
    assert env.cloud.pools["spot-a"].desired == 2
    assert len(env.events("TriggeredScaleUp")) == 2


def test_a_shortage_blocks_growth_and_scale_up_goes_elsewhere_or_waits() -> None:
    pools = [{**SPOT_A, "initialSize": 0}, {**ON_DEMAND_B, "initialSize": 0}]
    env = start(_quiet(pools))
    env.cloud.shortage("spot-a", 600)
    add_unschedulable(env, "any", cpu="1")
    env.run(SCAN_INTERVAL * 2)
    assert (env.cloud.pools["spot-a"].desired, env.cloud.pools["od-b"].desired) == (0, 1)

    only_spot = start(_quiet([{**SPOT_A, "initialSize": 0}]))
    only_spot.cloud.shortage("spot-a", 300)
    add_unschedulable(only_spot, "waits", cpu="1")
    only_spot.run(SCAN_INTERVAL * 2)
    assert only_spot.cloud.pools["spot-a"].desired == 0
    (event,) = only_spot.events("NotTriggerScaleUp")
    assert event["message"] == "pod didn't trigger scale-up: 1 in backoff after failed scale-up"
    (failed,) = only_spot.events("FailedToScaleUpGroup")  # reported once per shortage
    assert failed["type"] == "Warning"
    assert "InsufficientInstanceCapacity" in failed["message"] and "m5.large" in failed["message"]
    only_spot.run(300)
    assert only_spot.cloud.pools["spot-a"].desired == 1
    assert len(only_spot.cloud.active_instances("spot-a")) == 1


def test_a_shortage_also_holds_back_replacements() -> None:
    env = start(_quiet([{**SPOT_A, "initialSize": 2}], enabled=False))
    env.cloud.shortage("spot-a", 600)
    env.cloud.interrupt(pool="spot-a", notice=120)
    env.run(120)
    assert env.cloud.active_instances("spot-a") == []
    assert env.cloud.pools["spot-a"].desired == 2
    env.run(480)
    assert len(env.cloud.active_instances("spot-a")) == 2


def test_empty_nodes_are_removed_after_scale_down_unneeded_down_to_min_size() -> None:
    pools = [{**SPOT_A, "initialSize": 4, "minSize": 1}]
    env = start(_quiet(pools, scaleDownUnneeded="10m"))
    names = env.nodes_of("spot-a")
    add_running(env, "busy", names[0], cpu="1")
    for i, name in enumerate(names):  # a DaemonSet pod everywhere does not keep a node
        add_running(env, f"ds-{i}", name, cpu="50m", owner_kind="DaemonSet")
    env.run(590)
    assert env.cloud.pools["spot-a"].desired == 4
    env.run(SCAN_INTERVAL * 2 + 10)
    # Three empty nodes go; the busy one stays (and is the min size).
    assert env.cloud.pools["spot-a"].desired == 1
    assert env.nodes_of("spot-a") == [names[0]]
    scale_downs = env.events("ScaleDown")
    assert len(scale_downs) == 3
    assert {e["message"] for e in scale_downs} == {"marked the node as toBeDeleted/unschedulable"}
    removed = {e["involvedObject"]["name"] for e in scale_downs}
    assert {e["message"] for e in env.events("ScaleDownEmpty")} == {
        message
        for name in removed
        for message in (f"Scale-down: removing empty node {name}", f"Scale-down: empty node {name} removed")
    }
    assert all(env.node(e["involvedObject"]["name"]) is None for e in scale_downs)


def test_scale_down_marks_the_node_to_be_deleted_first() -> None:
    env = start(_quiet([{**SPOT_A, "initialSize": 2, "minSize": 0}], scaleDownUnneeded="1m"))
    seen: list[list[str]] = []
    env.cluster.store.subscribe(
        lambda ev: (
            seen.append([t["key"] for t in ev.object["spec"].get("taints", [])])
            if ev.resource.kind == "Node" and ev.type == "MODIFIED"
            else None
        )
    )
    env.run(90)
    assert env.cloud.pools["spot-a"].desired == 0
    assert [nodes.TO_BE_DELETED_TAINT] in seen


def test_fallback_fit_check_reasons() -> None:
    template = nodes.template_node(scenario([SPOT_A]).pools[0], "us-east-1", "v1.32.0")
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}
    assert fit.fits(pod, template, []) == ["Insufficient nvidia.com/gpu"]
    tainted = {**template, "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}}
    small = {"spec": {"containers": [{"resources": {"requests": {"cpu": "100m"}}}]}}
    assert fit.fits(small, tainted, []) == ["node(s) had untolerated taint {dedicated: ml}"]
    tolerant = {"spec": {**small["spec"], "tolerations": [{"key": "dedicated", "operator": "Exists"}]}}
    assert fit.fits(tolerant, tainted, []) == []
    affinity = {
        "spec": {
            **small["spec"],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "node.kubernetes.io/capacity",
                                        "operator": "In",
                                        "values": ["on-demand"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        }
    }
    assert fit.fits(affinity, template, []) == ["node(s) didn't match Pod's node affinity/selector"]
    full = [{"spec": {"containers": [{"resources": {"requests": {"cpu": "1900m"}}}]}}]
    assert fit.fits(small, template, full) == ["Insufficient cpu"]


def test_pods_already_bound_are_not_scale_up_candidates() -> None:
    env = start(_quiet([{**SPOT_A, "initialSize": 1}]))
    pod = add_unschedulable(env, "bound", cpu="1")

    def bind(p: dict[str, Any]) -> None:
        p["spec"]["nodeName"] = env.nodes_of("spot-a")[0]

    env.cluster.store.mutate(PODS, "default", pod["metadata"]["name"], bind)
    env.run(SCAN_INTERVAL * 3)
    assert env.cloud.pools["spot-a"].desired == 1


def test_min_size_stops_scale_down() -> None:
    env = start(_quiet([{**SPOT_A, "initialSize": 3, "minSize": 2}], scaleDownUnneeded="1m"))
    env.run(300)
    assert env.cloud.pools["spot-a"].desired == 2
    assert len(env.nodes_of("spot-a")) == 2


def test_scale_up_uses_the_scheduler_filters_when_registered() -> None:
    from types import SimpleNamespace

    from shipshape.emulator.scheduler.framework import fits as scheduler_fits

    def env_with_scheduler() -> Env:
        env = start(_quiet([{**SPOT_A, "initialSize": 0}]))
        env.cluster.services["scheduler"] = SimpleNamespace(fits=scheduler_fits)
        return env

    spread = env_with_scheduler()
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "zk"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    for i in range(3):
        add_unschedulable(spread, f"zk-{i}", cpu="100m", labels={"app": "zk"}, affinity=anti)
    spread.run(SCAN_INTERVAL * 2)
    assert spread.cloud.pools["spot-a"].desired == 3  # one per node: the anti-affinity holds

    packed = env_with_scheduler()
    for i in range(3):
        add_unschedulable(packed, f"web-{i}", cpu="100m", labels={"app": "web"})
    packed.run(SCAN_INTERVAL * 2)
    assert packed.cloud.pools["spot-a"].desired == 1


def test_scale_down_settings_are_validated_with_clear_errors() -> None:
    import pytest

    from shipshape.emulator.scenario import ScenarioError, parse

    def load(**autoscaler: object) -> Scenario:
        return parse({"name": "t", "pools": [SPOT_A], "autoscaler": autoscaler}, "s.yaml")

    defaults = load().autoscaler
    assert (defaults.scale_down_utilization_threshold, defaults.scale_down_delay_after_add) == (0.5, 600.0)
    assert (defaults.expendable_pods_priority_cutoff, defaults.max_drain_parallelism) == (-10, 1)
    assert not defaults.scale_down_empty_only
    tuned = load(
        scaleDownUtilizationThreshold=0.7, scaleDownDelayAfterAdd="2m", expendablePodsPriorityCutoff=-5
    )
    assert tuned.autoscaler.scale_down_delay_after_add == 120.0
    with pytest.raises(ScenarioError, match=r"autoscaler.scaleDownUtilizationThreshold: .*greater than 0"):
        load(scaleDownUtilizationThreshold=0)
    with pytest.raises(
        ScenarioError, match=r"autoscaler.scaleDownUtilizationThreshold: .*less than or equal to 1"
    ):
        load(scaleDownUtilizationThreshold=1.5)
    with pytest.raises(ScenarioError, match=r"maxDrainParallelism 3 is above maxScaleDownParallelism 2"):
        load(maxDrainParallelism=3, maxScaleDownParallelism=2)
    with pytest.raises(ScenarioError, match=r"autoscaler.scaleDownDelayAfterAdd"):
        load(scaleDownDelayAfterAdd="soon")
    with pytest.raises(
        ScenarioError, match=r"autoscaler.scaleDownUtilisation: Extra inputs are not permitted"
    ):
        load(scaleDownUtilisation=0.5)


def test_expendable_pods_do_not_trigger_a_scale_up() -> None:
    env = start(_quiet([{**SPOT_A, "initialSize": 0}]))
    filler = add_unschedulable(env, "filler", cpu="1")

    def lowest(p: dict[str, Any]) -> None:
        p["spec"]["priority"] = -100

    env.cluster.store.mutate(PODS, "default", filler["metadata"]["name"], lowest)
    env.run(SCAN_INTERVAL * 3)
    assert env.cloud.pools["spot-a"].desired == 0
    assert env.events("TriggeredScaleUp") == [] and env.events("NotTriggerScaleUp") == []
    add_unschedulable(env, "edge", cpu="1")  # priority 0, at or above the cutoff: it counts
    env.run(SCAN_INTERVAL * 2)
    assert env.cloud.pools["spot-a"].desired == 1


def test_the_status_configmap_reports_each_node_group_as_cluster_autoscaler_does() -> None:
    """What a reader of kube-system/cluster-autoscaler-status sees: each pool's target and bounds, and a
    scale-up back-off once a scale-up failed for lack of capacity (read back by the controller's
    `growth.autoscaler_groups`, the same function that reads a real cluster-autoscaler's)."""
    env = start(_quiet([{**SPOT_A, "initialSize": 1}, {**ON_DEMAND_B, "initialSize": 1}]))
    env.run(SCAN_INTERVAL * 2)

    def groups() -> dict[str, tuple[int | None, int | None, bool]]:
        status = env.cluster.store.get(CONFIGMAPS, "kube-system", "cluster-autoscaler-status")
        return {g.name: (g.target, g.max_size, g.backoff) for g in growth.autoscaler_groups(status)}

    assert groups() == {"spot-a": (1, 6, False), "od-b": (1, 4, False)}
    env.cloud.shortage("spot-a", 3600)
    add_unschedulable(env, "big", cpu="1500m", node_selector={"node.kubernetes.io/capacity": "spot"})
    env.run(SCAN_INTERVAL * 3)
    assert groups()["spot-a"] == (1, 6, True)
    assert len(env.events("FailedToScaleUpGroup")) == 1
