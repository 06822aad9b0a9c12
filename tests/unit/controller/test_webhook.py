from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest

from shipshape.controller.policy import ControllerConfig, TolerationSpec
from shipshape.controller.state import ClusterState, WorkloadRef
from shipshape.controller.webhook.admission import BadReview
from shipshape.controller.webhook.mutators import diff

from .builders import Harness, deployment, namespace, node, pod_of, replicaset, review

ENABLED = {"spot.shipshape.dev/enabled": "true"}


def spot_setup(config: ControllerConfig | None = None) -> tuple[Harness, dict[str, Any]]:
    h = Harness(config)
    dep = deployment(
        "web",
        4,
        {**ENABLED, "spot.shipshape.dev/on-demand-base": "0", "spot.shipshape.dev/max-pool-share": "1"},
    )
    rs = replicaset(dep)
    spot_taint = {"key": "node.kubernetes.io/capacity", "value": "spot", "effect": "NoSchedule"}
    h.add(
        namespace("shop"),
        dep,
        rs,
        node("s1", "spot", "m5.large", "us-east-1a", taints=[spot_taint]),
        node("s2", "spot", "m5.large", "us-east-1b", taints=[spot_taint]),
        node("s3", "spot", "c5.large", "us-east-1a", taints=[spot_taint]),
    )
    return h, rs


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    assert answer["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(answer["patch"]))
    return ops


def test_patch_applied_to_the_original_gives_the_mutated_pod() -> None:
    h, rs = spot_setup()
    pod = pod_of(rs)
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                        ]
                    },
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
                        ]
                    },
                ]
            }
        }
    }
    pod["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    original = copy.deepcopy(pod)
    answer = h.placer.review(review(pod, uid="uid-1"))["response"]
    assert pod == original  # the request's object is not touched
    mutated = jsonpatch.apply_patch(original, patch_of(answer))

    spec = mutated["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # Each of the pod's own terms is kept and ANDed with each allowed pool term (2 instance types).
    assert len(terms) == 4
    for term in terms:
        keys = [e["key"] for e in term["matchExpressions"]]
        assert keys[0] == "kubernetes.io/arch"
        assert {"key": "node.kubernetes.io/capacity", "operator": "In", "values": ["spot"]} in term[
            "matchExpressions"
        ]
    zones = sorted(
        tuple(e["values"])
        for t in terms
        for e in t["matchExpressions"]
        if e["key"] == "topology.kubernetes.io/zone"
    )
    assert zones == [
        ("us-east-1a",),
        ("us-east-1a",),
        ("us-east-1a", "us-east-1b"),
        ("us-east-1a", "us-east-1b"),
    ]
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred[0]["weight"] == 100
    assert spec["tolerations"] == [
        {"key": "dedicated", "operator": "Exists"},
        {"key": "node.kubernetes.io/capacity", "operator": "Equal", "effect": "NoSchedule", "value": "spot"},
    ]
    assert [c["topologyKey"] for c in spec["topologySpreadConstraints"]] == [
        "topology.kubernetes.io/zone",
        "node.kubernetes.io/instance-type",
    ]
    assert spec["topologySpreadConstraints"][0]["labelSelector"] == {"matchLabels": {"app": "web"}}
    decision = json.loads(mutated["metadata"]["annotations"]["spot.shipshape.dev/decision"])
    assert decision == {
        "v": 1,
        "capacityType": "spot",
        "pool": "c5.large/us-east-1a",
        "reason": "spot-share",
        "id": "uid-1",
    }
    # Nothing else changed.
    for path in (("spec", "containers"), ("metadata", "labels"), ("metadata", "ownerReferences")):
        assert mutated[path[0]][path[1]] == original[path[0]][path[1]]


def test_existing_spread_constraint_and_toleration_are_not_duplicated() -> None:
    config = ControllerConfig(spot_tolerations=(TolerationSpec(key="spot", operator="Exists"),))
    h, rs = spot_setup(config)
    pod = pod_of(rs)
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]  # tolerates everything
    pod["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 2,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    mutated = jsonpatch.apply_patch(pod, patch_of(h.placer.review(review(pod))["response"]))
    assert mutated["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert [c["topologyKey"] for c in mutated["spec"]["topologySpreadConstraints"]] == [
        "topology.kubernetes.io/zone",
        "node.kubernetes.io/instance-type",
    ]


def test_on_demand_decision_patch() -> None:
    h = Harness()
    dep = deployment("api", 3, ENABLED)
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, node("s1", "spot"))
    pod = pod_of(rs)
    mutated = jsonpatch.apply_patch(pod, patch_of(h.placer.review(review(pod))["response"]))
    assert mutated["spec"]["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "node.kubernetes.io/capacity", "operator": "In", "values": ["on-demand"]}
                        ]
                    }
                ]
            }
        }
    }
    assert "tolerations" not in mutated["spec"]
    assert "topologySpreadConstraints" not in mutated["spec"]


def test_invalid_annotations_leave_the_pod_unmodified_with_a_warning() -> None:
    h = Harness()
    dep = deployment("web", 3, {**ENABLED, "spot.shipshape.dev/spot-percentage": "150"})
    rs = replicaset(dep)
    h.add(namespace("shop"), dep, rs, node("s1", "spot"))
    answer = h.placer.review(review(pod_of(rs)))["response"]
    assert answer["allowed"] is True
    assert "patch" not in answer
    assert len(answer["warnings"]) == 1
    assert "spot.shipshape.dev/spot-percentage='150'" in answer["warnings"][0]
    assert (
        h.metric("shipshape_invalid_policies_total", {"annotation": "spot.shipshape.dev/spot-percentage"})
        == 1
    )
    assert h.cache.assumed_count(h.clock.now()) == 0


@pytest.mark.parametrize(
    ("ns", "operation", "cause"),
    [
        ("kube-system", "CREATE", "excluded-namespace"),
        ("shipshape-system", "CREATE", "excluded-namespace"),
        ("shop", "UPDATE", "not-pod-create"),
    ],
)
def test_requests_that_are_not_ours_pass_unmodified(ns: str, operation: str, cause: str) -> None:
    h, rs = spot_setup()
    answer = h.placer.review(review(pod_of(rs), ns=ns, operation=operation))["response"]
    assert answer == {"uid": answer["uid"], "allowed": True}
    assert h.metric("shipshape_webhook_skipped_total", {"cause": cause}) == 1


def test_unmanaged_unknown_and_pinned_pods_pass_unmodified() -> None:
    h, rs = spot_setup()
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "shop"}, "spec": {}}
    assert "patch" not in h.placer.review(review(bare))["response"]
    pinned = pod_of(rs)
    pinned["spec"]["nodeSelector"] = {"node.kubernetes.io/capacity": "on-demand"}
    assert "patch" not in h.placer.review(review(pinned))["response"]
    other = deployment("plain", 2)
    other_rs = replicaset(other)
    h.add(other, other_rs)
    assert "patch" not in h.placer.review(review(pod_of(other_rs)))["response"]
    assert h.metric("shipshape_webhook_skipped_total", {"cause": "no-workload"}) == 1
    assert h.metric("shipshape_webhook_skipped_total", {"cause": "capacity-pinned"}) == 1
    assert h.metric("shipshape_webhook_skipped_total", {"cause": "not-managed"}) == 1


class BrokenCache(ClusterState):
    def workload_of(self, pod: Any, namespace: str | None = None) -> WorkloadRef | None:
        raise RuntimeError("cache corrupted")


def test_internal_error_admits_without_patch_and_counts() -> None:
    h, rs = spot_setup()
    h.placer.cache = BrokenCache(h.config)
    answer = h.placer.review(review(pod_of(rs)))["response"]
    assert answer["allowed"] is True and "patch" not in answer
    assert h.metric("shipshape_webhook_errors_total", {"stage": "decide"}) == 1


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 5}},
    ],
)
def test_malformed_reviews_are_refused(body: dict[str, Any]) -> None:
    h, _ = spot_setup()
    with pytest.raises(BadReview):
        h.placer.review(body)


def test_diff_field_by_field_matches_a_whole_document_diff() -> None:
    original: dict[str, Any] = {
        "metadata": {"name": "p", "annotations": {"a/b": "1", "keep": "x"}},
        "spec": {"containers": [{"name": "c"}], "tolerations": [{"key": "k", "operator": "Exists"}]},
    }
    mutated = copy.deepcopy(original)
    mutated["metadata"]["annotations"]["spot.shipshape.dev/decision"] = "{}"
    mutated["metadata"]["annotations"]["a/b"] = "2"
    mutated["spec"]["tolerations"].append({"key": "spot", "operator": "Exists"})
    mutated["spec"]["affinity"] = {"nodeAffinity": {}}
    ops = diff(original, mutated)
    assert jsonpatch.apply_patch(original, ops) == mutated
    assert {op["path"] for op in ops} >= {
        "/metadata/annotations/spot.shipshape.dev~1decision",
        "/spec/affinity",
    }
    # A change outside the fields the chain writes is still part of the patch (whole-document diff).
    mutated["spec"]["containers"][0]["image"] = "x"
    assert jsonpatch.apply_patch(original, diff(original, mutated)) == mutated
    assert diff(original, copy.deepcopy(original)) == []
