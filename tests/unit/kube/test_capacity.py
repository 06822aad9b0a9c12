"""Capacity-type conventions: classification of nodes and the terms that steer to each capacity type.

The terms are checked against the classification with the scheduler's own matching
(`kube.scheduling.RequiredNodeAffinity`): a node matches the terms of the type it is classified as,
and no other, in every mix of conventions.
"""

from __future__ import annotations

import itertools

import pytest

from shipshape.kube import capacity
from shipshape.kube.capacity import DEFAULT, Convention, ConventionError, Conventions, capacity_type_of
from shipshape.kube.scheduling import RequiredNodeAffinity


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"node.kubernetes.io/capacity": "spot"}, "spot"),
        ({"node.kubernetes.io/capacity": "on-demand"}, "on-demand"),
        ({"karpenter.sh/capacity-type": "spot"}, "spot"),
        ({"karpenter.sh/capacity-type": "on-demand"}, "on-demand"),
        ({"eks.amazonaws.com/capacityType": "SPOT"}, "spot"),
        ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, "on-demand"),
        ({"cloud.google.com/gke-spot": "true"}, "spot"),
        ({"cloud.google.com/gke-preemptible": "true"}, "spot"),
        ({"kubernetes.azure.com/scalesetpriority": "spot"}, "spot"),
        ({"kubernetes.azure.com/scalesetpriority": "regular"}, "on-demand"),
        ({}, None),
        ({"eks.amazonaws.com/capacityType": "spot"}, None),  # EKS writes SPOT: another value says nothing
        # A spot value anywhere wins (a Karpenter node on EKS carries both, and they agree).
        ({"karpenter.sh/capacity-type": "spot", "eks.amazonaws.com/capacityType": "ON_DEMAND"}, "spot"),
    ],
)
def test_capacity_type_of_each_convention(labels: dict[str, str], expected: str | None) -> None:
    assert capacity_type_of(labels) == expected


def test_an_unlabelled_node_is_on_demand_only_where_a_spot_only_convention_is_in_use() -> None:
    assert capacity_type_of({}, present=["cloud.google.com/gke-spot"]) == "on-demand"
    assert capacity_type_of({}, present=["kubernetes.azure.com/scalesetpriority"]) == "on-demand"
    assert capacity_type_of({}, present=["eks.amazonaws.com/capacityType"]) is None
    assert capacity_type_of({}, present=[]) == "on-demand"  # no node says it is spot


def _matches(terms: list[list[dict[str, object]]], labels: dict[str, str]) -> bool:
    pod = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": term} for term in terms]
                    }
                }
            }
        }
    }
    if terms == [[]]:
        return True  # no requirement at all
    return RequiredNodeAffinity.of(pod).matches(labels, "n")


NODES: list[dict[str, str]] = [
    {},
    {"node.kubernetes.io/capacity": "spot"},
    {"node.kubernetes.io/capacity": "on-demand"},
    {"karpenter.sh/capacity-type": "spot"},
    {"karpenter.sh/capacity-type": "on-demand"},
    {"eks.amazonaws.com/capacityType": "SPOT"},
    {"eks.amazonaws.com/capacityType": "ON_DEMAND"},
    {"cloud.google.com/gke-spot": "true"},
    {"cloud.google.com/gke-preemptible": "true"},
    {"kubernetes.azure.com/scalesetpriority": "spot"},
    {"kubernetes.azure.com/scalesetpriority": "regular"},
]


@pytest.mark.parametrize("size", [0, 1, 2])
def test_terms_select_exactly_the_nodes_classified_so(size: int) -> None:
    for present in itertools.combinations(sorted(DEFAULT.keys), size):
        in_use = [n for n in NODES if not n or set(n) <= set(present)]
        for labels in in_use:
            kind = DEFAULT.classify(labels, present)
            for wanted in ("spot", "on-demand"):
                terms = DEFAULT.terms(wanted, present)
                assert _matches(terms, labels) is (kind == wanted), (present, labels, wanted, terms)


def test_gke_on_demand_is_the_absence_of_the_spot_label() -> None:
    present = ["cloud.google.com/gke-spot"]
    assert DEFAULT.terms("on-demand", present) == [
        [{"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]}]
    ]
    assert DEFAULT.terms("spot", present) == [
        [{"key": "cloud.google.com/gke-spot", "operator": "In", "values": ["true"]}]
    ]


def test_mixed_conventions_give_one_term_per_convention() -> None:
    present = ["eks.amazonaws.com/capacityType", "karpenter.sh/capacity-type"]
    spot = DEFAULT.terms("spot", present)
    assert {term[0]["key"] for term in spot} == set(present) and len(spot) == 2
    assert len(DEFAULT.terms("on-demand", present)) == 2
    assert DEFAULT.terms("on-demand", []) == [[]] and DEFAULT.terms("spot", []) == []


def test_pins_recognises_every_convention() -> None:
    assert DEFAULT.pins({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, [])
    term = {"matchExpressions": [{"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"}]}
    assert DEFAULT.pins(None, [term])
    assert not DEFAULT.pins({"disktype": "ssd"}, [{"matchExpressions": [{"key": "zone", "operator": "In"}]}])


def test_overrides_add_and_replace_conventions() -> None:
    custom = Convention("example.com/lifecycle", ("preemptible",), ("standard",))
    conventions = Conventions.with_overrides(
        [custom, Convention("node.kubernetes.io/capacity", ("cheap",), ("on-demand",))]
    )
    assert conventions.classify({"example.com/lifecycle": "preemptible"}) == "spot"
    assert conventions.classify({"node.kubernetes.io/capacity": "cheap"}) == "spot"
    assert conventions.classify({"node.kubernetes.io/capacity": "spot"}) is None
    assert conventions.is_spot_requirement(
        {"key": "example.com/lifecycle", "operator": "In", "values": ["preemptible"]}
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("bad key!", ("spot",), ("on-demand",)), "not a valid label key"),
        (("example.com/x", (), ("on-demand",)), "at least one spot value"),
        (("example.com/x", ("a",), ("a",)), "cannot mean both"),
        (("example.com/x", ("spot",), ()), "absent_means_on_demand"),
        (("example.com/x", ("sp ot",), ("od",)), "not a valid label value"),
    ],
)
def test_bad_conventions_are_refused_with_the_reason(
    args: tuple[str, tuple[str, ...], tuple[str, ...]], message: str
) -> None:
    with pytest.raises(ConventionError, match=message):
        Convention(*args)


def test_node_labels_of_each_named_convention() -> None:
    assert capacity.node_labels("gke", "on-demand") == {}
    assert capacity.node_labels("eks", "spot") == {"eks.amazonaws.com/capacityType": "SPOT"}
    for name in capacity.NODE_LABELS:
        assert capacity_type_of(capacity.node_labels(name, "spot")) == "spot"
    with pytest.raises(ConventionError, match="unknown capacity-label convention 'gcp'"):
        capacity.node_labels("gcp", "spot")
