"""The agent's manifests (`deploy/agent/`, and the chart's `agent:` section): every object valid against
the Kubernetes OpenAPI schema, the container's arguments accepted by `shipshape agent`, the chart's
objects equal to the kustomize base, and RBAC that grants what the agent's code calls, nothing more.

The emulator does not serve RBAC (so no `kubectl auth can-i`): the calls are recorded instead, by
running the code that makes them (`agent.runner.sources`, the instruction `Executor`, the Lease
elector, the usage collector's metrics.k8s.io reads through `agent.usage.MetricsApi`) against an
API client that answers from memory and keeps each request's method and path. A new kind or write
in the code then fails here until the manifests grant it; a rule the code no longer needs fails too.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from shipshape.agent.instructions import Executor
from shipshape.agent.pusher import Pusher
from shipshape.agent.runner import sources
from shipshape.agent.spool import Spool
from shipshape.agent.usage import MetricsApi, UsageLoop
from shipshape.cli.agent import LEASE_NAME
from shipshape.contracts.instructions import (
    ContainerResources,
    InstructionEnvelope,
    Precondition,
    SetContainerRequests,
    SetReplicas,
    SetSpotPolicy,
    WorkloadRef,
)
from shipshape.emulator.resources import RESOURCES
from shipshape.kube.clock import VirtualClock, rfc3339_micro
from shipshape.kube.leader import LeaseElector, LeaseSettings
from tests.integration.controller.test_deploy import check, definition_for
from tests.integration.emulator.served_cluster import scenario, serve_cluster

from .chart import DEPLOY, Obj, by_key, helm_binary, kustomize, render
from .test_chart import normalised
from .test_cli_args import command, parses

AGENT = DEPLOY / "agent"
HELM = helm_binary()
NAMESPACE = "shipshape-system"
IMAGE = "ghcr.io/shipshape-dev/shipshape:0.1.0"
READ = {"get", "list", "watch"}
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
needs_helm = pytest.mark.skipif(HELM is None, reason="helm is not installed (scripts/ensure-helm.sh)")


# --- the calls the code makes ---------------------------------------------------------------------


class Answer:
    """What `ApiClient.call_api` returns (the parts the generated client reads)."""

    def __init__(self, status: int, body: Obj) -> None:
        self.status = status
        self.reason = "OK" if status < 400 else "Error"
        self.data = json.dumps(body).encode()
        self.headers = {"content-type": "application/json"}
        self.response = self
        self._offset = 0  # what a streaming reader (`_preload_content=False`) has read

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            return self.data
        chunk = self.data[self._offset : self._offset + size]
        self._offset += len(chunk)
        return chunk

    def release_conn(self) -> None:
        """A streamed answer gives its connection back (nothing to give here)."""

    def getheaders(self) -> dict[str, str]:
        return self.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.getheaders().get(name.lower(), default)


class Recorder(k8s.ApiClient):  # type: ignore[misc]
    """An API client that sends nothing: each request is recorded as (verb, group, resource, namespace,
    name) and answered by `answer` (the request's method and path)."""

    def __init__(self) -> None:
        configuration = k8s.Configuration()
        configuration.host = "https://recorder.invalid"
        super().__init__(configuration)
        self.calls: list[tuple[str, str, str, str, str]] = []
        self.answers: dict[tuple[str, str], Answer] = {}  # by (method, resource), else an empty list

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Answer:
        path, _, query = url.removeprefix("https://recorder.invalid").partition("?")
        group, resource, namespace, name = parse_path(path)
        verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update", "PATCH": "patch"}[method]
        if verb == "list" and re.search(r"(^|&)watch=(true|True)", query):
            verb = "watch"
        self.calls.append((verb, group, resource, namespace, name))
        return self.answers.get((method, resource)) or Answer(200, {"items": [], "metadata": {}})


def parse_path(path: str) -> tuple[str, str, str, str]:
    """(group, resource, namespace, name) of an API path."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    return group, rest[0], namespace, rest[1] if len(rest) > 1 else ""


def workload(kind: str) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "web", "namespace": "default", "generation": 3, "resourceVersion": "9"},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "resources": {}}]}}},
    }


def pod_metrics() -> Obj:
    return {
        "metadata": {"name": "web-1", "namespace": "default"},
        "timestamp": "2026-01-01T00:00:00Z",
        "window": "30s",
        "containers": [{"name": "app", "usage": {"cpu": "25000000n", "memory": "65536Ki"}}],
    }


def node_metrics() -> Obj:
    return {
        "metadata": {"name": "n1"},
        "timestamp": "2026-01-01T00:00:00Z",
        "window": "30s",
        "usage": {"cpu": "500000000n", "memory": "1048576Ki"},
    }


def code_calls(spool: Path) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every call the agent's code makes, cluster-wide or in its namespace
    (`spool`: a folder for the usage collector's spool, which this leaves empty)."""
    calls: set[tuple[str, str, str]] = set()

    # The informers: each source is listed, then watched.
    recorder = Recorder()
    for source in sources(recorder):
        source.list_function(limit=500, _preload_content=False)
        source.list_function(watch=True, allow_watch_bookmarks=True, _preload_content=False)
    calls |= {(group, resource, verb) for verb, group, resource, _, _ in recorder.calls}

    # metrics.k8s.io samples (pods and nodes), read as the agent's usage collector reads them.
    recorder = Recorder()
    recorder.answers[("GET", "pods")] = Answer(200, {"items": [pod_metrics()]})
    recorder.answers[("GET", "nodes")] = Answer(200, {"items": [node_metrics()]})
    pusher = Pusher("https://backend.invalid", "token")  # never called: reading sends nothing
    try:
        collector = UsageLoop(
            MetricsApi(recorder),
            lambda namespace, name: ("Deployment", "web"),
            pusher,
            Spool(spool),
            VirtualClock(),
        )
        assert collector.read_once() and collector.aggregator.tracked() == 2  # the pod and the node
    finally:
        pusher.client.close()
    assert [call[:3] for call in recorder.calls] == [
        ("list", "metrics.k8s.io", "pods"),
        ("list", "metrics.k8s.io", "nodes"),
    ]
    calls |= {(group, resource, verb) for verb, group, resource, _, _ in recorder.calls}

    # The instruction executor: a read of the live object, then a patch, for every kind it targets.
    for kind, plural in (("Deployment", "deployments"), ("StatefulSet", "statefulsets")):
        target = WorkloadRef(kind=kind, namespace="default", name="web")  # type: ignore[arg-type]
        for instruction in (
            SetSpotPolicy(
                target=target,
                precondition=Precondition(generation=3),
                annotations={"spot.shipshape.dev/enabled": "true"},
            ),
            SetContainerRequests(
                target=target,
                precondition=Precondition(generation=3),
                containers={"app": ContainerResources(requests={"cpu": "100m"})},
            ),
            # scaling: a look at the namespace's HPAs, then a patch of spec.replicas on the workload
            # itself (the patch verb it has already; no `deployments/scale` subresource grant)
            SetReplicas(target=target, precondition=Precondition(generation=3), replicas=1),
        ):
            recorder = Recorder()
            recorder.answers[("GET", plural)] = Answer(200, workload(kind))
            outcome = Executor(recorder).execute(
                InstructionEnvelope(id="i", recommendation_id="r", instruction=instruction)
            )
            assert outcome.status == "applied", outcome
            calls |= {(group, resource, verb) for verb, group, resource, _, _ in recorder.calls}
    return calls


def lease_calls() -> set[tuple[str, str, str, str]]:
    """(namespace, name, resource, verb) of the Lease elector's calls: create, take over, renew, release."""
    settings = LeaseSettings(LEASE_NAME, NAMESPACE)
    clock = VirtualClock()
    calls: set[tuple[str, str, str, str]] = set()
    held = {
        "metadata": {"name": LEASE_NAME, "namespace": NAMESPACE, "resourceVersion": "1"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15, "renewTime": rfc3339_micro(clock.now())},
    }
    for lease in (None, {**held, "spec": {**held["spec"], "holderIdentity": None}}, held):
        recorder = Recorder()
        recorder.answers[("GET", "leases")] = Answer(
            404, {"kind": "Status", "reason": "NotFound", "code": 404}
        )
        if lease is not None:
            recorder.answers[("GET", "leases")] = Answer(200, lease)
        elector = LeaseElector(recorder, "me", clock, settings)
        assert elector.try_once()
        recorder.answers[("GET", "leases")] = Answer(200, held)
        elector.stop(release=True)
        calls |= {(namespace, name, resource, verb) for verb, _, resource, namespace, name in recorder.calls}
    return calls


# --- the manifests ------------------------------------------------------------------------------


def base() -> dict[tuple[str, str], Obj]:
    return by_key(kustomize(AGENT))


def grants(rules: list[Obj]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@needs_kubectl
def test_every_object_matches_the_openapi_schema() -> None:
    objects = base()
    assert {kind for kind, _ in objects} == {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }
    problems: list[str] = []
    for (kind, name), obj in objects.items():
        check(
            obj,
            {"$ref": "#/definitions/" + definition_for(obj["apiVersion"], kind)},
            f"{kind}/{name}",
            problems,
        )
    assert problems == []


@needs_kubectl
def test_the_cluster_role_grants_what_the_code_calls_and_nothing_else(tmp_path: Path) -> None:
    rules = base()[("ClusterRole", "shipshape-agent")]["rules"]
    assert all("*" not in r["verbs"] + r["resources"] + r["apiGroups"] for r in rules)
    assert not any(r.get("resourceNames") for r in rules)
    granted, needed = grants(rules), code_calls(tmp_path / "spool")
    assert needed <= granted, sorted(needed - granted)
    # Reads (get, list, watch) of exactly the kinds the code reads; writes exactly the ones it makes.
    kinds = {(group, resource) for group, resource, _ in needed}
    assert {(group, resource) for group, resource, _ in granted} == kinds
    writes = {call for call in granted if call[2] not in READ}
    assert (
        writes
        == {call for call in needed if call[2] not in READ}
        == {
            ("apps", "deployments", "patch"),
            ("apps", "statefulsets", "patch"),
        }
    )
    extra = {call for call in granted - needed if call[2] != "get"}
    assert extra == set(), sorted(extra)
    # Nothing that holds secrets or credentials is readable.
    assert not kinds & {("", "secrets"), ("", "configmaps"), ("", "serviceaccounts")}


@needs_kubectl
def test_the_lease_role_is_its_own_lease_in_its_namespace() -> None:
    objects = base()
    role = objects[("Role", "shipshape-agent")]
    assert role["metadata"]["namespace"] == NAMESPACE
    needed = lease_calls()
    assert {(namespace, resource) for namespace, _, resource, _ in needed} == {(NAMESPACE, "leases")}
    assert {verb for *_, verb in needed} == {"get", "create", "update"}
    for _, name, _, verb in needed:
        allowed = [
            r
            for r in role["rules"]
            if "leases" in r["resources"]
            and verb in r["verbs"]
            and (not r.get("resourceNames") or name in r["resourceNames"])
        ]
        assert allowed, (name, verb)
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert [r["resourceNames"] for r in named] == [[LEASE_NAME]] and set(named[0]["verbs"]) == {
        "get",
        "update",
    }
    unnamed = [r for r in role["rules"] if not r.get("resourceNames")]
    assert [r["verbs"] for r in unnamed] == [["create"]]  # the API cannot limit a create by name
    for binding in (
        objects[("ClusterRoleBinding", "shipshape-agent")],
        objects[("RoleBinding", "shipshape-agent")],
    ):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "shipshape-agent", "namespace": NAMESPACE}
        ]


@needs_kubectl
def test_the_deployment_is_safe_to_run_and_its_arguments_parse() -> None:
    objects = base()
    deployment = objects[("Deployment", "shipshape-agent")]
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2 and pod["serviceAccountName"] == "shipshape-agent"
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert objects[("PodDisruptionBudget", "shipshape-agent")]["spec"]["minAvailable"] == 1
    (container,) = pod["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "256Mi"},
    }
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"] and security["runAsUser"] == 65532
    assert not security["allowPrivilegeEscalation"] and security["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsUser"] == 65532
    # The token only as a file from the Secret: never in an environment variable or an argument.
    args = container["args"]
    assert "--token-file=/var/run/secrets/shipshape/token" in args
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["token"]["secret"]["secretName"] == "shipshape-agent-token"
    assert not any("secretKeyRef" in json.dumps(e) for e in container.get("env") or [])
    assert "emptyDir" in volumes["spool"] and "--spool=/var/lib/shipshape/spool" in args
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["spool"] == "/var/lib/shipshape/spool" and mounts["token"] == "/var/run/secrets/shipshape"
    agent = command("agent")
    concrete = [
        a.replace("$(POD_NAME)", "agent-0").replace("$(BACKEND_URL)", "https://b.example") for a in args
    ]
    assert concrete[0] == "agent"
    parses(agent, "agent", concrete[1:])


@needs_kubectl
def test_the_network_policy_allows_only_dns_the_api_server_and_the_backend() -> None:
    policy = base()[("NetworkPolicy", "shipshape-agent")]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["ingress"] == []
    assert policy["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "shipshape-agent"}}
    ports = [sorted((p["protocol"], p["port"]) for p in rule["ports"]) for rule in policy["egress"]]
    assert ports == [[("TCP", 53), ("UDP", 53)], [("TCP", 443), ("TCP", 6443)], [("TCP", 443)]]
    dns = policy["egress"][0]["to"][0]
    assert dns["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}


@needs_kubectl
@needs_helm
def test_the_chart_agent_section_equals_the_kustomize_base() -> None:
    assert HELM is not None
    assert not any(name == "shipshape-agent" for _, name in by_key(render(HELM)))  # off by default
    url = base()[("ConfigMap", "shipshape-agent")]["data"]["backend-url"]
    chart = {
        key: normalised(o)
        for key, o in by_key(
            render(HELM, "--set", "agent.enabled=true", "--set", f"agent.backendUrl={url}")
        ).items()
        if key[1] == "shipshape-agent"
    }
    kustomized = {key: normalised(o) for key, o in base().items() if key[0] != "Namespace"}
    assert set(chart) == set(kustomized)
    for key, obj in kustomized.items():
        assert chart[key] == obj, key
    narrowed = by_key(
        render(
            HELM,
            "--set",
            "agent.enabled=true",
            "--set",
            f"agent.backendUrl={url}",
            "--set",
            "agent.networkPolicy.apiServerCIDRs={10.0.0.1/32}",
            "--set",
            "agent.instructions=false",
        )
    )
    egress = narrowed[("NetworkPolicy", "shipshape-agent")]["spec"]["egress"]
    assert egress[1]["to"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}]
    args = narrowed[("Deployment", "shipshape-agent")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-instructions" in args


def served_by_emulator(obj: Obj) -> bool:
    return any(rt.api_version == obj["apiVersion"] and rt.kind == obj["kind"] for rt in RESOURCES)


@pytest.mark.integration
@needs_kubectl
def test_the_base_applies_to_the_emulator_and_spreads_its_replicas(tmp_path: Path) -> None:
    objects = kustomize(AGENT)
    served = [o for o in objects if served_by_emulator(o)]
    # RBAC and NetworkPolicy are not served by the emulator (checked against the schema above).
    assert {o["kind"] for o in objects if not served_by_emulator(o)} == {
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
    }
    with serve_cluster(tmp_path, scenario(kubelet={"preloadedImages": [IMAGE]})) as cluster:
        done = cluster.kubectl("apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(served))
        assert all(line.endswith(" created") for line in done.stdout.splitlines() if line.strip()), (
            done.stdout
        )
        cluster.kubectl(
            "-n", NAMESPACE, "create", "secret", "generic", "shipshape-agent-token", "--from-literal=token=t"
        )

        def running() -> list[Obj] | None:
            pods = [
                p
                for p in cluster.pods(NAMESPACE, **{"app.kubernetes.io/name": "shipshape-agent"})
                if p.get("status", {}).get("phase") == "Running"
            ]
            return pods if len(pods) == 2 else None

        pods = cluster.wait("two agent replicas running", running, 120)
        assert len({p["spec"]["nodeName"] for p in pods}) == 2  # on two nodes
        assert all(p["spec"]["serviceAccountName"] == "shipshape-agent" for p in pods)
