"""Field selectors and REST path parsing follow the API server's rules."""

from __future__ import annotations

import pytest

from shipshape.emulator.apiserver import paths
from shipshape.kube import fields


def _pod(node: str = "", phase: str = "Pending", ips: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "podIPs": [{"ip": ip} for ip in ips]},
    }


def test_parse_operators_and_escapes() -> None:
    sel = fields.parse(r"spec.nodeName=n1,status.phase!=Running,metadata.name==a\,b")
    assert [(r.field, r.equals, r.value) for r in sel.requirements] == [
        ("spec.nodeName", True, "n1"),
        ("status.phase", False, "Running"),
        ("metadata.name", True, "a,b"),
    ]
    assert sel.value_of("metadata.name") == "a,b"
    assert fields.parse("").empty and fields.parse(None).empty


@pytest.mark.parametrize("text", ["spec.nodeName", "=x", r"a=b\q"])
def test_malformed_selectors_are_refused(text: str) -> None:
    with pytest.raises(fields.FieldSelectorError):
        fields.parse(text)


def test_pod_fields_match_like_upstream() -> None:
    match = fields.compile_for(fields.parse("spec.nodeName=n1,status.phase!=Succeeded"), "pods", True)
    assert match is not None
    assert match(_pod("n1", "Running"))
    assert not match(_pod("n2", "Running"))
    assert not match(_pod("n1", "Succeeded"))
    unscheduled = fields.compile_for(fields.parse("spec.nodeName="), "pods", True)
    assert unscheduled is not None and unscheduled(_pod()) and not unscheduled(_pod("n1"))
    by_ip = fields.compile_for(fields.parse("status.podIPs=10.0.0.2"), "pods", True)
    assert (
        by_ip is not None and by_ip(_pod(ips=("10.0.0.1", "10.0.0.2"))) and not by_ip(_pod(ips=("10.0.0.1",)))
    )
    host_network = fields.compile_for(fields.parse("spec.hostNetwork=false"), "pods", True)
    assert host_network is not None and host_network(_pod())


def test_unsupported_field_uses_upstream_message() -> None:
    with pytest.raises(fields.FieldSelectorError, match=r"field label not supported: spec\.foo"):
        fields.compile_for(fields.parse("spec.foo=x"), "pods", True)
    # Cluster-scoped kinds have no metadata.namespace field.
    with pytest.raises(fields.FieldSelectorError):
        fields.compile_for(fields.parse("metadata.namespace=x"), "nodes", False)
    assert fields.compile_for(fields.EVERYTHING, "pods", True) is None


def test_event_fields() -> None:
    event = {
        "metadata": {"name": "e", "namespace": "ns"},
        "involvedObject": {"kind": "Node", "name": "n1"},
        "reason": "SpotInterruption",
        "source": {"component": "cloud"},
        "type": "Warning",
    }
    match = fields.compile_for(
        fields.parse("involvedObject.kind=Node,involvedObject.name=n1,reason=SpotInterruption,source=cloud"),
        "events",
        True,
    )
    assert match is not None and match(event)
    other = fields.compile_for(fields.parse("type=Normal"), "events", True)
    assert other is not None and not other(event)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1/pods", paths.Target("", "v1", "pods")),
        ("/api/v1/namespaces/ns/pods", paths.Target("", "v1", "pods", "ns")),
        ("/api/v1/namespaces/ns/pods/p/status", paths.Target("", "v1", "pods", "ns", "p", "status")),
        ("/api/v1/namespaces/ns", paths.Target("", "v1", "namespaces", "", "ns")),
        ("/api/v1/namespaces/ns/finalize", paths.Target("", "v1", "namespaces", "", "ns", "finalize")),
        ("/api/v1/nodes/n1", paths.Target("", "v1", "nodes", "", "n1")),
        (
            "/apis/apps/v1/namespaces/ns/deployments/d/scale",
            paths.Target("apps", "v1", "deployments", "ns", "d", "scale"),
        ),
        ("/api/v1/watch/namespaces/ns/pods/p", paths.Target("", "v1", "pods", "ns", "p", "", True)),
        (
            "/apis/coordination.k8s.io/v1/watch/leases",
            paths.Target("coordination.k8s.io", "v1", "leases", "", "", "", True),
        ),
    ],
)
def test_paths(path: str, expected: paths.Target) -> None:
    assert paths.parse(path) == expected


@pytest.mark.parametrize(
    "path", ["/api", "/api/v1", "/apis/apps/v1", "/healthz", "/api/v1/namespaces/ns/pods/p/status/x"]
)
def test_non_resource_paths(path: str) -> None:
    assert paths.parse(path) is None
