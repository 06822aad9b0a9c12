"""Pure scheduling helpers: requests, allocatable, taints, node affinity, QoS."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.kube import scheduling

Obj = dict[str, Any]
GI = 2**30
MI = 2**20


def _container(name: str, requests: Obj | None = None, limits: Obj | None = None, **extra: Any) -> Obj:
    resources: Obj = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def _pod(containers: list[Obj], init: list[Obj] | None = None, **spec: Any) -> Obj:
    return {
        "metadata": {"name": "p"},
        "spec": {"containers": containers, "initContainers": init or [], **spec},
    }


def _node(labels: Obj | None = None, name: str = "n1", **status: Any) -> Obj:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {}, "status": status}


def test_pod_requests_sum_containers_and_take_init_maximum() -> None:
    pod = _pod(
        [_container("a", {"cpu": "250m", "memory": "1Gi"}), _container("b", {"cpu": "250m"})],
        init=[_container("migrate", {"cpu": "2", "memory": "512Mi"})],
        overhead={"cpu": "100m"},
    )
    assert scheduling.pod_requests(pod) == {"cpu": 2100, "memory": GI}


def test_pod_requests_sidecars_add_up_and_count_during_later_inits() -> None:
    sidecar = _container("proxy", {"cpu": "500m"}, restartPolicy="Always")
    late_init = _container("late", {"cpu": "1"})
    pod = _pod([_container("app", {"cpu": "1"})], init=[sidecar, late_init])
    # app + sidecar = 1500m; the late init container runs next to the sidecar: 1000m + 500m = 1500m.
    assert scheduling.pod_requests(pod)["cpu"] == 1500
    big_init = _container("big", {"cpu": "3"})
    assert (
        scheduling.pod_requests(_pod([_container("app", {"cpu": "1"})], init=[sidecar, big_init]))["cpu"]
        == 3500
    )


def test_limits_default_requests_and_extended_resources() -> None:
    pod = _pod(
        [_container("gpu", limits={"nvidia.com/gpu": "2", "memory": "2Gi"}, requests={"memory": "1Gi"})]
    )
    assert scheduling.pod_requests(pod) == {"nvidia.com/gpu": 2, "memory": GI}


def test_non_zero_requests_fill_defaults_per_container() -> None:
    pod = _pod([_container("a"), _container("b", {"cpu": "1"})])
    assert scheduling.pod_non_zero_requests(pod) == (1100, 2 * 200 * MI)
    assert scheduling.pod_requests(pod) == {"cpu": 1000}


def test_node_allocatable_prefers_allocatable_over_capacity() -> None:
    node = _node(capacity={"cpu": "4", "memory": "16Gi", "pods": "58"}, allocatable={"cpu": "3920m"})
    assert scheduling.node_allocatable(node) == {"cpu": 3920, "memory": 16 * GI, "pods": 58}
    assert scheduling.node_allocatable(_node())["pods"] == scheduling.DEFAULT_MAX_PODS


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}, True),
        ({"key": "spot", "value": "true"}, True),  # empty operator means Equal; empty effect matches all
        ({"key": "spot", "operator": "Equal", "value": "false"}, False),
        ({"key": "spot", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
        ({"key": "spot", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerates(toleration: Obj, expected: bool) -> None:
    taint = {"key": "spot", "value": "true", "effect": "NoSchedule"}
    assert scheduling.tolerates([toleration], taint) is expected


def test_untolerated_taints_by_effect() -> None:
    node = {
        "metadata": {"name": "n"},
        "spec": {
            "taints": [
                {"key": "a", "effect": "NoSchedule"},
                {"key": "b", "effect": "PreferNoSchedule"},
                {"key": "c", "effect": "NoExecute"},
            ]
        },
    }
    pod = _pod([], tolerations=[{"key": "a", "operator": "Exists"}])
    assert [t["key"] for t in scheduling.untolerated_taints(pod, node)] == ["c"]
    assert [t["key"] for t in scheduling.untolerated_taints(pod, node, ("PreferNoSchedule",))] == ["b"]
    assert scheduling.taint_text({"key": "k", "value": "v"}) == "{k: v}"


def _required(*terms: Obj) -> Obj:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ({"key": "cap", "operator": "In", "values": ["spot", "x"]}, True),
        ({"key": "cap", "operator": "NotIn", "values": ["spot"]}, False),
        ({"key": "cap", "operator": "Exists"}, True),
        ({"key": "gpu", "operator": "DoesNotExist"}, True),
        ({"key": "cores", "operator": "Gt", "values": ["8"]}, True),
        ({"key": "cores", "operator": "Lt", "values": ["8"]}, False),
        ({"key": "cores", "operator": "Gt", "values": ["eight"]}, False),
    ],
)
def test_node_affinity_operators(expression: Obj, expected: bool) -> None:
    node = _node({"cap": "spot", "cores": "16"})
    pod = _pod([], affinity=_required({"matchExpressions": [expression]}))
    assert scheduling.node_affinity_matches(pod, node) is expected


def test_node_affinity_terms_are_ored_fields_and_selector_anded() -> None:
    node = _node({"cap": "spot"}, name="n7")
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]}
    wrong = {"matchExpressions": [{"key": "cap", "operator": "In", "values": ["on-demand"]}]}
    assert scheduling.node_affinity_matches(_pod([], affinity=_required(wrong, by_name)), node)
    assert not scheduling.node_affinity_matches(_pod([], affinity=_required(wrong)), node)
    assert not scheduling.node_affinity_matches(_pod([], affinity=_required({})), node)  # empty term: nothing
    with_selector = _pod([], affinity=_required(by_name), nodeSelector={"cap": "on-demand"})
    assert not scheduling.node_affinity_matches(with_selector, node)
    assert scheduling.node_selector_matches(_pod([], nodeSelector={"cap": "spot"}), node)


def test_preferred_affinity_score_sums_matching_weights() -> None:
    prefs = [
        {
            "weight": 80,
            "preference": {"matchExpressions": [{"key": "cap", "operator": "In", "values": ["spot"]}]},
        },
        {
            "weight": 20,
            "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        },
    ]
    pod = _pod([], affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefs}})
    assert scheduling.preferred_affinity_score(pod, _node({"cap": "spot", "zone": "b"})) == 80
    assert scheduling.preferred_affinity_score(pod, _node({"cap": "spot", "zone": "a"})) == 100


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        ([_container("a")], "BestEffort"),
        ([_container("a", limits={"cpu": "1", "memory": "1Gi"})], "Guaranteed"),
        ([_container("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], "Guaranteed"),
        ([_container("a", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], "Burstable"),
        ([_container("a", {"cpu": "1"})], "Burstable"),
        ([_container("a", limits={"cpu": "1", "memory": "1Gi"}), _container("b")], "Burstable"),
    ],
)
def test_qos_class(containers: list[Obj], expected: str) -> None:
    assert scheduling.qos_class(_pod(containers)) == expected


def test_required_node_affinity_compiled_once_per_distinct_fields_and_never_confused() -> None:
    from shipshape.kube.scheduling import RequiredNodeAffinity

    def affinity_pod(values: list[str], selector: dict[str, str] | None = None) -> dict[str, object]:
        term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": values}]}
        required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        return {"spec": {"nodeSelector": selector or {}, "affinity": {"nodeAffinity": required}}}

    a1, a2 = RequiredNodeAffinity.of(affinity_pod(["a"])), RequiredNodeAffinity.of(affinity_pod(["a"]))
    assert a1 is a2
    b = RequiredNodeAffinity.of(affinity_pod(["b"]))
    assert a1.matches({"zone": "a"}, "n") and not b.matches({"zone": "a"}, "n")
    with_selector = RequiredNodeAffinity.of(affinity_pod(["a"], {"disk": "ssd"}))
    assert not with_selector.matches({"zone": "a"}, "n")
    assert with_selector.matches({"zone": "a", "disk": "ssd"}, "n")
    assert RequiredNodeAffinity.of({"spec": {}}).empty
