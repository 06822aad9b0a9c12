"""ResourceQuota admission."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator.api import Api
from shipshape.emulator.resources import BY_KEY, CONFIGMAPS, PODS
from shipshape.emulator.runtime import Cluster
from shipshape.kube import errors

from .conftest import pod_body

QUOTAS = BY_KEY["resourcequotas"]


def sized(name: str, cpu: str, memory: str = "128Mi") -> dict[str, Any]:
    body = pod_body(name)
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu, "memory": memory},
    }
    return body


async def test_compute_quota_refuses_what_exceeds_it_and_records_usage(api: Api, cluster: Cluster) -> None:
    await api.create(
        QUOTAS,
        "default",
        {"metadata": {"name": "compute"}, "spec": {"hard": {"requests.cpu": "1", "pods": "3"}}},
    )
    await api.create(PODS, "default", sized("a", "600m"))
    quota = api.get(QUOTAS, "default", "compute")
    assert quota["status"]["used"] == {"requests.cpu": "600m", "pods": "1"}
    with pytest.raises(errors.Forbidden) as exceeded:
        await api.create(PODS, "default", sized("b", "500m"))
    assert exceeded.value.message == (
        'pods "b" is forbidden: exceeded quota: compute, requested: requests.cpu=500m, '
        "used: requests.cpu=600m, limited: requests.cpu=1"
    )
    assert cluster.store.get(PODS, "default", "b") is None
    await api.create(PODS, "default", sized("c", "400m"))

    def finish(pod: dict[str, Any]) -> None:
        pod["status"] = {"phase": "Succeeded"}

    cluster.store.mutate(PODS, "default", "a", finish, subresource="status")
    await api.create(PODS, "default", sized("d", "500m"))  # a finished pod no longer counts


async def test_compute_quota_requires_requests(api: Api) -> None:
    await api.create(
        QUOTAS, "default", {"metadata": {"name": "compute"}, "spec": {"hard": {"limits.memory": "1Gi"}}}
    )
    with pytest.raises(errors.Forbidden) as missing:
        await api.create(PODS, "default", pod_body("naked"))
    assert (
        missing.value.message
        == 'pods "naked" is forbidden: failed quota: compute: must specify limits.memory for: main'
    )


async def test_scoped_quota_counts_only_its_pods(api: Api) -> None:
    await api.create(
        QUOTAS,
        "default",
        {
            "metadata": {"name": "placeholders"},
            "spec": {
                "hard": {"pods": "1"},
                "scopeSelector": {
                    "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["low"]}]
                },
            },
        },
    )
    await api.create(
        BY_KEY["priorityclasses.scheduling.k8s.io"], "", {"metadata": {"name": "low"}, "value": -10}
    )
    await api.create(PODS, "default", pod_body("p1", priorityClassName="low"))
    await api.create(PODS, "default", pod_body("other"))  # out of scope
    with pytest.raises(errors.Forbidden, match="exceeded quota: placeholders"):
        await api.create(PODS, "default", pod_body("p2", priorityClassName="low"))


async def test_object_count_quota(api: Api) -> None:
    await api.create(
        QUOTAS, "default", {"metadata": {"name": "objects"}, "spec": {"hard": {"count/configmaps": "1"}}}
    )
    await api.create(CONFIGMAPS, "default", {"metadata": {"name": "one"}})
    with pytest.raises(errors.Forbidden, match=r"requested: count/configmaps=1, used: count/configmaps=1"):
        await api.create(CONFIGMAPS, "default", {"metadata": {"name": "two"}})
    await api.create(CONFIGMAPS, "dev", {"metadata": {"name": "two"}})  # another namespace
