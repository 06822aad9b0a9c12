"""Defaulting, built-in admission and validation on the in-process Api."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from shipshape.emulator.api import Api, DeleteOptions
from shipshape.emulator.controllers.namespace import NamespaceController
from shipshape.emulator.resources import (
    BY_KEY,
    DEPLOYMENTS,
    JOBS,
    NAMESPACES,
    PODS,
    PRIORITYCLASSES,
    SERVICES,
    STATEFULSETS,
)
from shipshape.emulator.runtime import Cluster
from shipshape.kube import errors

from .conftest import deployment_body, pod_body


def causes(exc: errors.ApiError) -> dict[str, str]:
    assert isinstance(exc, errors.Invalid)
    return {field: message for field, _, message in exc.causes}


async def test_pod_defaults_and_admission(api: Api) -> None:
    pod = await api.create(PODS, "default", pod_body(image="nginx"))
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["enableServiceLinks"] is True
    assert spec["securityContext"] == {}
    assert spec["serviceAccountName"] == "default"
    assert spec["priority"] == 0
    assert spec["preemptionPolicy"] == "PreemptLowerPriority"
    container = spec["containers"][0]
    assert container["imagePullPolicy"] == "Always"  # untagged image
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert {t["key"]: t["tolerationSeconds"] for t in spec["tolerations"]} == {
        "node.kubernetes.io/not-ready": 300,
        "node.kubernetes.io/unreachable": 300,
    }
    assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert pod["metadata"]["namespace"] == "default"


async def test_pod_keeps_own_not_ready_toleration_and_tagged_pull_policy(api: Api) -> None:
    own = {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 5,
    }
    pod = await api.create(PODS, "default", pod_body(image="nginx:1.27", tolerations=[own]))
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    not_ready = [t for t in pod["spec"]["tolerations"] if t["key"] == "node.kubernetes.io/not-ready"]
    assert not_ready == [own]


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
        ({"requests": {"cpu": "100m"}}, "Burstable"),
        ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}, "Burstable"),
    ],
)
async def test_qos_class_on_create(api: Api, resources: dict[str, dict[str, str]], qos: str) -> None:
    body = pod_body()
    body["spec"]["containers"][0]["resources"] = resources
    pod = await api.create(PODS, "default", body)
    assert pod["status"]["qosClass"] == qos


async def test_priority_from_class_and_global_default(api: Api) -> None:
    await api.create(PRIORITYCLASSES, "", {"metadata": {"name": "high"}, "value": 1000})
    high = await api.create(PODS, "default", pod_body("a", priorityClassName="high"))
    assert high["spec"]["priority"] == 1000
    critical = await api.create(PODS, "default", pod_body("b", priorityClassName="system-node-critical"))
    assert critical["spec"]["priority"] == 2_000_001_000
    with pytest.raises(errors.Forbidden) as missing:
        await api.create(PODS, "default", pod_body("c", priorityClassName="nope"))
    assert missing.value.message == 'pods "c" is forbidden: no PriorityClass with name nope was found'
    with pytest.raises(errors.Forbidden):
        await api.create(PODS, "default", pod_body("d", priority=7))
    await api.create(PRIORITYCLASSES, "", {"metadata": {"name": "base"}, "value": 10, "globalDefault": True})
    defaulted = await api.create(PODS, "default", pod_body("e"))
    assert (defaulted["spec"]["priorityClassName"], defaulted["spec"]["priority"]) == ("base", 10)


async def test_namespace_lifecycle(api: Api, cluster: Cluster) -> None:
    with pytest.raises(errors.NotFound) as missing:
        await api.create(PODS, "nowhere", pod_body())
    assert missing.value.message == 'namespaces "nowhere" not found'
    assert cluster.store.get(PODS, "nowhere", "web") is None

    await api.create(PODS, "dev", pod_body("unbound"))
    gone, removed = await api.delete(NAMESPACES, "", "dev", DeleteOptions())
    assert not removed and gone["status"]["phase"] == "Terminating"
    with pytest.raises(errors.Forbidden) as terminating:
        await api.create(PODS, "dev", pod_body("late"))
    assert "unable to create new content in namespace dev because it is being terminated" in (
        terminating.value.message
    )
    cluster.add(NamespaceController())  # empties and removes the Terminating namespace
    cluster.engine.run_until(cluster.clock.now() + 5)
    assert cluster.store.get(NAMESPACES, "", "dev") is None
    assert cluster.store.get(PODS, "dev", "unbound") is None
    with pytest.raises(errors.Forbidden):
        await api.delete(NAMESPACES, "", "default", DeleteOptions())


async def test_namespace_defaults(api: Api) -> None:
    ns = await api.create(NAMESPACES, "", {"metadata": {"name": "team-a"}})
    assert ns["spec"]["finalizers"] == ["kubernetes"]
    assert ns["status"] == {"phase": "Active"}
    assert ns["metadata"]["labels"]["kubernetes.io/metadata.name"] == "team-a"


async def test_workload_defaults(api: Api) -> None:
    body = deployment_body()
    del body["spec"]["replicas"]
    dep = await api.create(DEPLOYMENTS, "default", body)
    spec = dep["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (10, 600)
    assert spec["template"]["spec"]["restartPolicy"] == "Always"
    assert dep["status"] == {}

    sts_body = deployment_body("db")
    sts_body["kind"] = "StatefulSet"
    sts_body["spec"]["serviceName"] = ""
    sts = await api.create(STATEFULSETS, "default", sts_body)
    assert sts["spec"]["podManagementPolicy"] == "OrderedReady"
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}


async def test_job_selector_is_generated_from_its_uid(api: Api) -> None:
    job = await api.create(
        JOBS,
        "default",
        {
            "metadata": {"name": "once"},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
                }
            },
        },
    )
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"]["job-name"] == "once"
    assert (job["spec"]["completions"], job["spec"]["parallelism"], job["spec"]["backoffLimit"]) == (1, 1, 6)


async def test_service_defaults_allocate_cluster_ip(api: Api) -> None:
    svc = await api.create(
        SERVICES, "default", {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    )
    spec = svc["spec"]
    assert spec["type"] == "ClusterIP"
    assert spec["clusterIP"].startswith("10.") and spec["clusterIPs"] == [spec["clusterIP"]]
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    other = await api.create(
        SERVICES, "default", {"metadata": {"name": "db"}, "spec": {"ports": [{"port": 5432}]}}
    )
    assert other["spec"]["clusterIP"] != spec["clusterIP"]


@pytest.mark.parametrize(
    ("change", "field", "message_part"),
    [
        (lambda b: b["metadata"].update(name="Web_1"), "metadata.name", "RFC 1123 subdomain"),
        (
            lambda b: b["metadata"].update(labels={"bad key!": "x"}),
            "metadata.labels",
            "name part must consist",
        ),
        (lambda b: b["metadata"].update(labels={"app": "-x"}), "metadata.labels", "a valid label must be"),
        (lambda b: b["spec"].update(containers=[]), "spec.containers", "Required value"),
        (lambda b: b["spec"]["containers"][0].pop("image"), "spec.containers[0].image", "Required value"),
        (lambda b: b["spec"]["containers"][0].pop("name"), "spec.containers[0].name", "Required value"),
        (
            lambda b: b["spec"]["containers"].append({"name": "main", "image": "x"}),
            "spec.containers[1].name",
            'Duplicate value: "main"',
        ),
        (lambda b: b["spec"].update(restartPolicy="Sometimes"), "spec.restartPolicy", "Unsupported value"),
        (
            lambda b: b["spec"]["containers"][0].update(
                resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
            ),
            "spec.containers[0].resources.requests",
            "must be less than or equal to cpu limit of 1",
        ),
        (
            lambda b: b["spec"]["containers"][0].update(resources={"limits": {"cpus": "1"}}),
            "spec.containers[0].resources.limits[cpus]",
            "must be a standard resource type or fully qualified",
        ),
        (
            lambda b: b["spec"]["containers"][0].update(ports=[{"containerPort": 70000}]),
            "spec.containers[0].ports[0].containerPort",
            "must be between 1 and 65535, inclusive",
        ),
        (
            lambda b: b["spec"]["containers"][0].update(volumeMounts=[{"name": "nope", "mountPath": "/x"}]),
            "spec.containers[0].volumeMounts[0].name",
            'Not found: "nope"',
        ),
    ],
)
async def test_pod_validation(
    api: Api, cluster: Cluster, change: Callable[[Any], object], field: str, message_part: str
) -> None:
    good = pod_body("ok")
    assert (await api.create(PODS, "default", good))["metadata"]["name"] == "ok"
    bad = pod_body("bad")
    change(bad)
    before = cluster.store.resource_version
    with pytest.raises(errors.Invalid) as invalid:
        await api.create(PODS, "default", bad)
    found = causes(invalid.value)
    assert field in found and message_part in found[field]
    assert invalid.value.code == 422
    assert cluster.store.resource_version == before


async def test_malformed_quantity_is_a_bad_request(api: Api, cluster: Cluster) -> None:
    body = pod_body()
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    with pytest.raises(errors.BadRequest, match="quantities must match"):
        await api.create(PODS, "default", body)
    assert cluster.store.get(PODS, "default", "web") is None


async def test_resource_version_on_create_is_refused_by_storage_after_validation(api: Api) -> None:
    # Upstream's storage refuses it with an unclassified error (500, no reason), after validation
    # and admission: an invalid object with a resourceVersion is a 422 first.
    body = pod_body()
    body["metadata"]["resourceVersion"] = "12"
    with pytest.raises(errors.Unclassified, match="resourceVersion should not be set") as refused:
        await api.create(PODS, "default", body)
    assert (refused.value.code, "reason" in refused.value.status()) == (500, False)
    body["metadata"]["name"] = "Bad_Name"
    with pytest.raises(errors.Invalid):
        await api.create(PODS, "default", body)


async def test_dry_run_create_has_no_resource_version_and_stores_nothing(api: Api, cluster: Cluster) -> None:
    before = cluster.store.resource_version
    created = await api.create(PODS, "default", pod_body(), dry_run=True)
    md = created["metadata"]
    assert "resourceVersion" not in md
    assert md["uid"] and md["creationTimestamp"]
    assert cluster.store.get(PODS, "default", "web") is None
    assert cluster.store.resource_version == before


async def test_stale_update_is_a_conflict_before_validation(api: Api, cluster: Cluster) -> None:
    stored = await api.create(PODS, "default", pod_body())
    stale = json.loads(json.dumps(stored))
    fresh = json.loads(json.dumps(stored))
    fresh["metadata"]["labels"] = {"v": "2"}
    await api.update(PODS, "default", "web", fresh)
    stale["spec"]["containers"][0]["image"] = ""  # invalid too: the precondition answers first
    with pytest.raises(errors.Conflict):
        await api.update(PODS, "default", "web", stale)
    stale["metadata"]["resourceVersion"] = cluster.store.must_get(PODS, "default", "web")["metadata"][
        "resourceVersion"
    ]
    with pytest.raises(errors.Invalid):
        await api.update(PODS, "default", "web", stale)


@pytest.mark.parametrize(
    ("change", "field", "message_part"),
    [
        (
            lambda s: s.update(replicas=-1),
            "spec.replicas",
            "Invalid value: -1: must be greater than or equal to 0",
        ),
        (lambda s: s.pop("selector"), "spec.selector", "Required value"),
        (
            lambda s: s["template"]["metadata"].update(labels={"app": "other"}),
            "spec.template.metadata.labels",
            "`selector` does not match template `labels`",
        ),
        (
            lambda s: s["template"]["spec"].update(restartPolicy="Never"),
            "spec.template.spec.restartPolicy",
            'supported values: "Always"',
        ),
        (
            lambda s: s.update(
                strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}
            ),
            "spec.strategy.rollingUpdate.maxUnavailable",
            "may not be 0 when `maxSurge` is 0",
        ),
    ],
)
async def test_deployment_validation(
    api: Api, change: Callable[[Any], object], field: str, message_part: str
) -> None:
    body = deployment_body()
    change(body["spec"])
    with pytest.raises(errors.Invalid) as invalid:
        await api.create(DEPLOYMENTS, "default", body)
    assert message_part in causes(invalid.value)[field]
    assert invalid.value.message.startswith('Deployment.apps "web" is invalid: ')


async def test_update_immutable_fields(api: Api, cluster: Cluster) -> None:
    pod = await api.create(PODS, "default", pod_body())
    changed_image = {
        **pod,
        "spec": {**pod["spec"], "containers": [{**pod["spec"]["containers"][0], "image": "nginx:2"}]},
    }
    updated = await api.update(PODS, "default", "web", changed_image)
    assert updated["spec"]["containers"][0]["image"] == "nginx:2"
    moved = {**updated, "spec": {**updated["spec"], "nodeName": "node-b"}}
    with pytest.raises(errors.Invalid) as invalid:
        await api.update(PODS, "default", "web", moved)
    assert causes(invalid.value)["spec"].startswith("Forbidden: pod updates may not change fields other than")
    relabelled = {**updated, "metadata": {**updated["metadata"], "labels": {"app": "web", "v": "2"}}}
    assert (await api.update(PODS, "default", "web", relabelled))["metadata"]["labels"]["v"] == "2"

    dep = await api.create(DEPLOYMENTS, "default", deployment_body())
    reselected = {**dep, "spec": {**dep["spec"], "selector": {"matchLabels": {"app": "web", "x": "y"}}}}
    reselected["spec"]["template"] = {
        **dep["spec"]["template"],
        "metadata": {"labels": {"app": "web", "x": "y"}},
    }
    with pytest.raises(errors.Invalid) as immutable:
        await api.update(DEPLOYMENTS, "default", "web", reselected)
    assert causes(immutable.value)["spec.selector"] == (
        'Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"web", "x":"y"}, '
        "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
    )


async def test_update_name_mismatch_and_stale_resource_version(api: Api) -> None:
    pod = await api.create(PODS, "default", pod_body())
    with pytest.raises(errors.BadRequest, match="does not match the name on the URL"):
        await api.update(PODS, "default", "other", pod)
    fresh = await api.update(
        PODS, "default", "web", {**pod, "metadata": {**pod["metadata"], "labels": {"a": "b"}}}
    )
    assert fresh["metadata"]["resourceVersion"] != pod["metadata"]["resourceVersion"]
    with pytest.raises(errors.Conflict):
        await api.update(
            PODS, "default", "web", {**pod, "metadata": {**pod["metadata"], "labels": {"c": "d"}}}
        )


async def test_status_update_changes_only_status(api: Api) -> None:
    dep = await api.create(DEPLOYMENTS, "default", deployment_body())
    body = {**dep, "spec": {**dep["spec"], "replicas": 9}, "status": {"replicas": 2, "readyReplicas": 1}}
    updated = await api.update(DEPLOYMENTS, "default", "web", body, subresource="status")
    assert updated["status"] == {"replicas": 2, "readyReplicas": 1}
    assert updated["spec"]["replicas"] == 2
    with pytest.raises(errors.Invalid):
        await api.update(
            DEPLOYMENTS, "default", "web", {**updated, "status": {"replicas": -3}}, subresource="status"
        )


async def test_dry_run_create_stores_nothing(api: Api, cluster: Cluster) -> None:
    result = await api.create(PODS, "default", pod_body(), dry_run=True)
    assert result["spec"]["schedulerName"] == "default-scheduler"
    assert cluster.store.get(PODS, "default", "web") is None


async def test_service_update_keeps_allocated_cluster_ip_and_node_ports(api: Api) -> None:
    svc = await api.create(
        SERVICES,
        "default",
        {"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}},
    )
    node_port = svc["spec"]["ports"][0]["nodePort"]
    assert 30000 <= node_port <= 32767
    replaced = {
        "metadata": {"name": "web"},
        "spec": {"type": "NodePort", "ports": [{"port": 80, "name": "http"}]},
    }
    updated = await api.update(SERVICES, "default", "web", replaced)
    assert updated["spec"]["clusterIP"] == svc["spec"]["clusterIP"]
    assert updated["spec"]["ports"][0]["nodePort"] == node_port
    moved = {
        **updated,
        "spec": {**updated["spec"], "clusterIP": "10.96.99.99", "clusterIPs": ["10.96.99.99"]},
    }
    with pytest.raises(errors.Invalid, match="may not change once set"):
        await api.update(SERVICES, "default", "web", moved)


async def test_several_errors_are_listed_as_upstream_aggregates_them(api: Api) -> None:
    body = pod_body()
    body["spec"]["containers"][0] = {}
    with pytest.raises(errors.Invalid) as invalid:
        await api.create(PODS, "default", body)
    assert invalid.value.message == (
        'Pod "web" is invalid: '
        "[spec.containers[0].name: Required value, spec.containers[0].image: Required value]"
    )


async def test_config_map_keys(api: Api) -> None:
    from shipshape.emulator.resources import CONFIGMAPS

    ok = await api.create(CONFIGMAPS, "default", {"metadata": {"name": "c"}, "data": {"app.conf": "x"}})
    assert ok["data"] == {"app.conf": "x"}
    with pytest.raises(errors.Invalid) as invalid:
        await api.create(CONFIGMAPS, "default", {"metadata": {"name": "d"}, "data": {"bad/key": "x"}})
    assert "a valid config key must consist of" in causes(invalid.value)["data[bad/key]"]


SPOT_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "node.kubernetes.io/capacity", "operator": "In", "values": ["spot"]}
                    ]
                }
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}
        ],
    },
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                },
            }
        ]
    },
}
SPREAD = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}


async def test_placement_fields_a_webhook_injects_are_validated(api: Api) -> None:
    good = pod_body("good", affinity=SPOT_AFFINITY, topologySpreadConstraints=[SPREAD])
    assert (await api.create(PODS, "default", good))["spec"]["affinity"] == SPOT_AFFINITY

    bad_affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "capacity", "operator": "In"}]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}],
        },
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]},
    }
    spreads = [SPREAD, {**SPREAD, "maxSkew": 0}, {**SPREAD, "minDomains": 2}]
    with pytest.raises(errors.Invalid) as invalid:
        await api.create(
            PODS, "default", pod_body("bad", affinity=bad_affinity, topologySpreadConstraints=spreads)
        )
    found = causes(invalid.value)
    node = "spec.affinity.nodeAffinity"
    assert found[
        f"{node}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values"
    ] == ("Required value: must be specified when `operator` is 'In' or 'NotIn'")
    assert found[f"{node}.preferredDuringSchedulingIgnoredDuringExecution[0].weight"] == (
        "Invalid value: 0: must be in the range 1-100"
    )
    assert found[
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"
    ] == ("Required value: can not be empty")
    assert found["spec.topologySpreadConstraints[1].maxSkew"] == "Invalid value: 0: must be greater than zero"
    assert (
        "can only use minDomains if whenUnsatisfiable=DoNotSchedule"
        in found["spec.topologySpreadConstraints[2].minDomains"]
    )
    assert found["spec.topologySpreadConstraints[1]"].startswith("Duplicate value")


LIMITRANGES = BY_KEY["limitranges"]


async def test_limit_ranger_defaults_and_bounds(api: Api, cluster: Cluster) -> None:
    limit_range = await api.create(
        LIMITRANGES,
        "default",
        {
            "metadata": {"name": "limits"},
            "spec": {
                "limits": [
                    {"type": "Container", "default": {"cpu": "500m"}, "max": {"cpu": "2", "memory": "1Gi"}},
                    {"type": "Pod", "max": {"cpu": "3"}},
                ]
            },
        },
    )
    item = limit_range["spec"]["limits"][0]
    assert item["default"] == {"cpu": "500m", "memory": "1Gi"}  # default limits from max
    assert item["defaultRequest"] == {"cpu": "500m", "memory": "1Gi"}  # default requests from the limits

    body = pod_body()
    body["spec"]["containers"][0]["resources"] = {"requests": {"memory": "256Mi"}}
    pod = await api.create(PODS, "default", body)
    assert pod["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "500m", "memory": "1Gi"},
        "requests": {"cpu": "500m", "memory": "256Mi"},
    }
    assert pod["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu request for container main; cpu, memory limit for container main"
    )
    assert pod["status"]["qosClass"] == "Burstable"

    greedy = pod_body("greedy")
    greedy["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2500m"}}
    with pytest.raises(errors.Forbidden) as too_much:
        await api.create(PODS, "default", greedy)
    assert too_much.value.message == (
        'pods "greedy" is forbidden: maximum cpu usage per Container is 2, but limit is 2500m'
    )
    pair = pod_body("pair")
    pair["spec"]["containers"] = [
        {"name": "a", "image": "x", "resources": {"limits": {"cpu": "2"}}},
        {"name": "b", "image": "x", "resources": {"limits": {"cpu": "2"}}},
    ]
    with pytest.raises(errors.Forbidden, match="maximum cpu usage per Pod is 3, but limit is 4"):
        await api.create(PODS, "default", pair)
    assert cluster.store.get(PODS, "default", "pair") is None


async def test_claims_and_uid_preconditions(api: Api) -> None:
    from shipshape.emulator.resources import BY_KEY

    claims = BY_KEY["persistentvolumeclaims"]
    claim = await api.create(
        claims,
        "default",
        {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    assert claim["spec"]["volumeMode"] == "Filesystem" and claim["status"] == {"phase": "Pending"}
    with pytest.raises(errors.Invalid) as invalid:
        await api.create(claims, "default", {"metadata": {"name": "bad"}, "spec": {}})
    assert set(causes(invalid.value)) == {"spec.accessModes", "spec.resources[storage]"}
    stranger = {**claim, "metadata": {**claim["metadata"], "uid": "not-this-one"}}
    with pytest.raises(errors.Conflict, match="Precondition failed: UID in precondition: not-this-one"):
        await api.update(claims, "default", "data", stranger)


async def test_new_nodes_start_not_ready_for_scheduling(api: Api) -> None:
    from shipshape.emulator.resources import NODES

    node = await api.create(
        NODES, "", {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    )
    assert node["spec"]["taints"] == [
        {"key": "a", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
    ]


async def test_namespace_finalizers_change_only_through_finalize(api: Api, cluster: Cluster) -> None:
    ns = await api.create(NAMESPACES, "", {"metadata": {"name": "team"}})
    stripped = {**ns, "spec": {}}
    assert (await api.update(NAMESPACES, "", "team", stripped))["spec"]["finalizers"] == ["kubernetes"]
    await api.delete(NAMESPACES, "", "team", DeleteOptions())
    assert cluster.store.get(NAMESPACES, "", "team") is not None  # Terminating, held by its finalizer
    gone = await api.update(NAMESPACES, "", "team", {"spec": {"finalizers": []}}, subresource="finalize")
    assert gone["metadata"]["name"] == "team"
    assert cluster.store.get(NAMESPACES, "", "team") is None


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"name": "p"}, "spec": {"containers": ["nginx"]}},
        {"metadata": {"name": "p"}, "spec": "nginx"},
        {"metadata": {"name": "p", "labels": ["a"]}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "ports": "80"}]}},
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "resources": []}]}},
        {"metadata": "p"},
        ["not", "an", "object"],
    ],
)
async def test_garbage_gets_a_client_error_and_stores_nothing(api: Api, cluster: Cluster, body: Any) -> None:
    before = cluster.store.resource_version
    with pytest.raises(errors.ApiError) as failed:
        await api.create(PODS, "default", body)
    assert failed.value.code in (400, 422)
    assert cluster.store.resource_version == before
