"""Informer sources by kind: the list call each kind is followed with."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from shipshape.agent import runner
from shipshape.controller import informers
from shipshape.controller.state import KINDS
from shipshape.kube import sources


def test_each_kind_is_listed_cluster_wide_by_its_api() -> None:
    made = sources.cluster_wide(k8s.ApiClient(), ["Node", "Pod", "Job", "PriorityClass"])
    assert [(s.kind, s.list_function.__name__, s.optional) for s in made] == [
        ("Node", "list_node", False),
        ("Pod", "list_pod_for_all_namespaces", False),
        ("Job", "list_job_for_all_namespaces", False),
        ("PriorityClass", "list_priority_class", False),
    ]
    with pytest.raises(ValueError, match="no informer source for 'Gadget'"):
        sources.cluster_wide(k8s.ApiClient(), ["Gadget"])


def test_the_controller_and_the_agent_follow_the_kinds_they_hold() -> None:
    api_client = k8s.ApiClient()
    controller = informers.sources(api_client)
    assert {s.kind for s in controller} == set(KINDS)
    assert {s.kind for s in controller if s.optional} == {"ConfigMap", "NodePool"}
    assert [s.kind for s in runner.sources(api_client)] == list(runner.KINDS)
