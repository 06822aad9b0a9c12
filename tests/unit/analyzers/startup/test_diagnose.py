"""Each diagnosis rule on a case that triggers it and on one that must not."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shipshape.analyzers.startup import diagnose, nodes
from shipshape.analyzers.startup.diagnose import DiagnosisInput
from shipshape.analyzers.startup.model import NodeInfo, PodTimeline
from shipshape.analyzers.startup.pods import analyze_pods

from .builders import T0, C, Json, PodPlan, event, node, pod_and_events


def timelines(plans: Sequence[PodPlan], extra: Sequence[Json] = ()) -> list[PodTimeline]:
    pods, events = [], list(extra)
    for plan in plans:
        pod, pod_events = pod_and_events(plan)
        pods.append(pod)
        events.extend(pod_events)
    return analyze_pods(pods, events)


def ready_pod(name: str, **changes: object) -> PodPlan:
    plan = PodPlan(
        name=name,
        created=0.0,
        scheduled=0.5,
        sandbox=1.0,
        initialized=0.0,
        containers_ready=3.0,
        ready=3.0,
        containers=[C("app", started=2.0)],
    )
    for key, value in changes.items():
        setattr(plan, key, value)
    return plan


def rules_fired(data: DiagnosisInput) -> set[str]:
    return {finding.rule for finding in diagnose.diagnose(data)}


def pulls_on_node(serial: bool) -> list[PodTimeline]:
    plans = []
    for i in range(4):
        # serial: each pull starts when the previous ends (10 s each), having waited for it
        start = 1.0
        wait = 10.0 * i if serial else 0.0
        done = start + wait + 10.0
        plans.append(
            ready_pod(
                f"p{i}",
                containers_ready=done + 2,
                ready=done + 2,
                containers=[
                    C("app", started=done + 0.5, image=f"img{i}", pull_start=start, wait=wait, pull=10.0)
                ],
            )
        )
    return timelines(plans)


def test_serialized_pulls_fire_when_pulls_queue_one_after_another() -> None:
    (finding,) = diagnose.serialized_image_pulls(DiagnosisInput(pulls_on_node(serial=True)))
    assert finding.subjects == ("node-a",)
    assert "serializeImagePulls: false" in finding.fix and "maxParallelImagePulls" in finding.fix
    assert len(finding.evidence) == 4
    assert "waited 30.0s" in finding.evidence[-1]


def test_serialized_pulls_do_not_fire_for_parallel_pulls() -> None:
    assert diagnose.serialized_image_pulls(DiagnosisInput(pulls_on_node(serial=False))) == []


def test_large_images() -> None:
    big = C("app", started=60.0, image="ml/model:1", pull_start=1.0, pull=55.0, size=3 * 1024**3)
    slow = timelines([ready_pod("a", containers=[big], containers_ready=61.0, ready=61.0)])
    (finding,) = diagnose.large_images(DiagnosisInput(slow))
    assert "ml/model:1" in finding.cause and "3072 MiB" in finding.cause
    assert "DaemonSet" in finding.fix
    small = C("app", started=3.0, image="nginx", pull_start=1.0, pull=1.5, size=50 * 1024**2)
    assert diagnose.large_images(DiagnosisInput(timelines([ready_pod("b", containers=[small])]))) == []


def test_slow_scheduling_names_the_reason() -> None:
    message = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available."
    slow = ready_pod("a", scheduled=40.2, sandbox=41.0, containers_ready=43.0, ready=43.0)
    slow.containers = [C("app", started=42.0)]
    slow.failed_scheduling = [(0.1, message, 6)]
    (finding,) = diagnose.slow_scheduling(DiagnosisInput(timelines([slow])))
    assert "Insufficient cpu" in finding.cause and "headroom" in finding.fix
    strict = PodPlan(
        name="b",
        created=0.0,
        containers=[C("app", started=None)],
        failed_scheduling=[
            (0.1, "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.", 3)
        ],
    )
    (finding,) = diagnose.slow_scheduling(DiagnosisInput(timelines([strict])))
    assert "constraints too strict" in finding.cause and "still pending" in finding.cause
    assert diagnose.slow_scheduling(DiagnosisInput(timelines([ready_pod("c")]))) == []


def test_slow_admission() -> None:
    plan = ready_pod(
        "web-6b7f9c8d5-a", created=10.0, scheduled=10.5, sandbox=11.0, containers_ready=13.0, ready=13.0
    )
    plan.containers = [C("app", started=12.0)]
    scale_up = event(
        "Deployment",
        "default",
        "web",
        "ScalingReplicaSet",
        "Scaled up replica set web-6b7f9c8d5 from 0 to 1",
        2.0,
    )
    webhook = event(
        "ReplicaSet",
        "default",
        "web-6b7f9c8d5",
        "FailedCreate",
        'Error creating: Internal error occurred: failed calling webhook "policy.example.com": '
        "context deadline exceeded",
        5.0,
    )
    (finding,) = diagnose.slow_admission(DiagnosisInput(timelines([plan], [scale_up, webhook])))
    assert "policy.example.com" in finding.cause and "timeoutSeconds" in finding.fix
    quick = event(
        "Deployment",
        "default",
        "web",
        "ScalingReplicaSet",
        "Scaled up replica set web-6b7f9c8d5 from 0 to 1",
        10.0,
    )
    assert diagnose.slow_admission(DiagnosisInput(timelines([plan], [quick]))) == []


def _webhook_configuration(kind: str, name: str, resources: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"{name}.example.com",
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": resources,
                    }
                ],
                **extra,
            }
        ],
    }


def test_slow_admission_names_the_webhooks_that_intercept_pods() -> None:
    plan = ready_pod(
        "web-6b7f9c8d5-a", created=10.0, scheduled=10.5, sandbox=11.0, containers_ready=13.0, ready=13.0
    )
    plan.containers = [C("app", started=12.0)]
    scale_up = event(
        "Deployment",
        "default",
        "web",
        "ScalingReplicaSet",
        "Scaled up replica set web-6b7f9c8d5 from 0 to 1",
        4.0,
    )
    data = timelines([plan], [scale_up])
    configurations = [
        _webhook_configuration("ValidatingWebhookConfiguration", "guard", ["pods"], timeoutSeconds=5),
        _webhook_configuration("MutatingWebhookConfiguration", "inject", ["pods"], failurePolicy="Ignore"),
        _webhook_configuration("MutatingWebhookConfiguration", "services", ["services"]),
    ]
    webhooks = diagnose.pod_webhooks(configurations)
    assert [(w.name, w.kind) for w in webhooks] == [
        ("inject.example.com", "mutating"),
        ("guard.example.com", "validating"),
    ]
    (named,) = diagnose.slow_admission(DiagnosisInput(data, webhooks=webhooks))
    assert "inject.example.com, guard.example.com" in named.cause
    assert any("failurePolicy=Ignore" in line for line in named.evidence)
    assert any("apiserver_admission_webhook_admission_duration_seconds" in line for line in named.evidence)
    # configurations read, none intercepts pods: the webhooks are not blamed
    (no_webhook,) = diagnose.slow_admission(
        DiagnosisInput(data, webhooks=diagnose.pod_webhooks(configurations[2:]))
    )
    assert "no admission webhook intercepts pods" in no_webhook.cause
    assert "apiserver_request_duration_seconds" in no_webhook.fix
    # configurations not read: said so
    (unknown,) = diagnose.slow_admission(DiagnosisInput(data))
    assert "were not read" in unknown.cause


def test_long_init_containers() -> None:
    plan = ready_pod("a", initialized=25.0, containers_ready=27.0, ready=27.0)
    plan.init = [C("migrate", started=2.0, finished=24.0)]
    plan.containers = [C("app", started=26.0)]
    (finding,) = diagnose.long_init_containers(DiagnosisInput(timelines([plan])))
    assert "migrate" in finding.cause
    short = ready_pod("b", initialized=4.0, containers_ready=6.0, ready=6.0)
    short.init = [C("setup", started=2.0, finished=3.0)]
    short.containers = [C("app", started=5.0)]
    assert diagnose.long_init_containers(DiagnosisInput(timelines([short]))) == []


def test_readiness_gated_by_initial_delay() -> None:
    gated = ready_pod(
        "a", containers_ready=33.0, ready=33.0, containers=[C("app", started=2.0, readiness_delay=30)]
    )
    (finding,) = diagnose.readiness_initial_delay(DiagnosisInput(timelines([gated])))
    assert "initialDelaySeconds=30" in finding.cause and "startupProbe" in finding.fix
    with_startup = ready_pod(
        "b",
        containers_ready=33.0,
        ready=33.0,
        containers=[C("app", started=2.0, readiness_delay=30, startup_probe=True)],
    )
    assert diagnose.readiness_initial_delay(DiagnosisInput(timelines([with_startup]))) == []


def test_low_cpu_limit() -> None:
    throttled = ready_pod(
        "a", containers_ready=40.0, ready=40.0, containers=[C("app", started=20.0, cpu_limit="200m")]
    )
    (finding,) = diagnose.low_cpu_limits(DiagnosisInput(timelines([throttled])))
    assert "200m" in finding.cause
    roomy = ready_pod(
        "b", containers_ready=40.0, ready=40.0, containers=[C("app", started=20.0, cpu_limit="4")]
    )
    fast = ready_pod("c", containers=[C("app", started=2.0, cpu_limit="200m")])
    assert diagnose.low_cpu_limits(DiagnosisInput(timelines([roomy, fast]))) == []


def burst(slow: bool, count: int) -> list[PodTimeline]:
    plans = []
    for i in range(count):
        sandbox = 0.5 + i * 0.2 + (8.0 if slow else 0.5)
        started = sandbox + (4.0 if slow else 0.5)
        plans.append(
            ready_pod(
                f"p{i}",
                scheduled=0.5 + i * 0.2,
                sandbox=sandbox,
                containers_ready=started + 1,
                ready=started + 1,
                containers=[C("app", started=started)],
            )
        )
    return timelines(plans)


def test_start_burst_on_node() -> None:
    (finding,) = diagnose.start_burst_on_node(DiagnosisInput(burst(slow=True, count=20)))
    assert "kubeAPIQPS" in finding.fix and finding.subjects == ("node-a",)
    assert diagnose.start_burst_on_node(DiagnosisInput(burst(slow=False, count=20))) == []
    assert diagnose.start_burst_on_node(DiagnosisInput(burst(slow=True, count=3))) == []


def test_cni_not_ready_on_new_nodes() -> None:
    plan = ready_pod("a", scheduled=5.0, sandbox=25.0, containers_ready=27.0, ready=27.0)
    plan.containers = [C("app", started=26.0)]
    pods = timelines([plan])
    node_timeline = nodes.node_timeline(node("node-a", created=0.0, ready=24.0))
    node_timeline.events[nodes.CNI_READY] = T0 + 24.0
    data = DiagnosisInput(pods, {"node-a": NodeInfo("node-a", created=T0)}, {"node-a": node_timeline})
    (finding,) = diagnose.cni_not_ready_on_new_nodes(data)
    assert "CNI ready at +24 s" in finding.evidence[0]
    old_node = DiagnosisInput(pods, {"node-a": NodeInfo("node-a", created=T0 - 3600)})
    assert diagnose.cni_not_ready_on_new_nodes(old_node) == []


def test_cni_errors_in_sandbox_events_fire() -> None:
    plan = ready_pod("a", scheduled=5.0, sandbox=12.0, containers_ready=14.0, ready=14.0)
    plan.containers = [C("app", started=13.0)]
    failure = event(
        "Pod",
        "default",
        "a",
        "FailedCreatePodSandBox",
        "Failed to create pod sandbox: rpc error: code = Unknown desc = "
        'failed to setup network for sandbox "x": '
        "plugin type=aws-cni name=aws-cni failed (add): add cmd: Error received from AddNetwork gRPC call",
        6.0,
        event_type="Warning",
    )
    data = DiagnosisInput(timelines([plan], [failure]), {"node-a": NodeInfo("node-a", created=T0)})
    assert [f.rule for f in diagnose.cni_not_ready_on_new_nodes(data)] == ["cni-not-ready-on-new-node"]


def test_registry_runs_every_rule_and_a_healthy_pod_triggers_none() -> None:
    assert len({name for name, _ in diagnose.RULES}) == len(diagnose.RULES) == 9
    healthy = timelines([ready_pod(f"p{i}") for i in range(3)])
    assert rules_fired(DiagnosisInput(healthy, {"node-a": NodeInfo("node-a", created=T0 - 3600)})) == set()


def test_kubelet_network_not_ready_event_fires_the_cni_rule() -> None:
    plan = ready_pod("a", scheduled=5.0, sandbox=18.0, containers_ready=20.0, ready=20.0)
    plan.containers = [C("app", started=19.0)]
    waiting = event(
        "Pod",
        "default",
        "a",
        "NetworkNotReady",
        "network is not ready: container runtime network not ready: NetworkReady=false "
        "reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
        5.5,
        event_type="Warning",
    )
    data = DiagnosisInput(timelines([plan], [waiting]), {"node-a": NodeInfo("node-a", created=T0)})
    (finding,) = diagnose.cni_not_ready_on_new_nodes(data)
    assert "cni plugin not initialized" in finding.evidence[-1]
    # the same pod without the event, on a node whose CNI readiness is unknown, does not fire
    quiet = DiagnosisInput(timelines([plan]), {"node-a": NodeInfo("node-a", created=T0)})
    assert diagnose.cni_not_ready_on_new_nodes(quiet) == []
