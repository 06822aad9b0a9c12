"""The backend's kustomize base (`deploy/backend/`): built with the real kubectl, every object checked
against the Kubernetes OpenAPI schema, the settings and arguments it gives the processes accepted by
the backend's own settings and command-line parser, the parts wired to each other (selectors, ports,
probes, Secret keys, HPA targets), and applied with strict validation to an emulated cluster where the
API, the workers and the migrations Job run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from shipshape.backend.settings import BackendSettings
from shipshape.cli.main import app
from shipshape.emulator.resources import BY_KEY, RESOURCES
from tests.integration.controller.test_deploy import check, definition_for
from tests.integration.emulator.served_cluster import is_ready, scenario, serve_cluster

from .chart import DEPLOY, Obj, by_key, kustomize

BASE = DEPLOY / "backend"
NAMESPACE = "shipshape-backend"
IMAGE = "ghcr.io/shipshape-dev/shipshape:0.1.0"
API, WORKER, MIGRATE = "shipshape-backend-api", "shipshape-backend-worker", "shipshape-backend-migrate"
pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


def objects() -> dict[tuple[str, str], Obj]:
    return by_key(kustomize(BASE))


def pod_spec(obj: Obj) -> Obj:
    spec: Obj = obj["spec"]["template"]["spec"]
    return spec


def container(obj: Obj) -> Obj:
    first: Obj = pod_spec(obj)["containers"][0]
    return first


def test_every_object_matches_the_schema_and_every_part_is_there() -> None:
    built = objects()
    assert set(built) == {
        ("Namespace", NAMESPACE),
        ("ServiceAccount", "shipshape-backend"),
        ("ConfigMap", "shipshape-backend"),
        ("Service", "postgresql"),
        ("Service", "nats"),
        ("Job", MIGRATE),
        ("Deployment", API),
        ("Service", API),
        ("Deployment", WORKER),
        ("HorizontalPodAutoscaler", API),
        ("HorizontalPodAutoscaler", WORKER),
        ("PodDisruptionBudget", API),
        ("PodDisruptionBudget", WORKER),
        ("NetworkPolicy", "shipshape-backend-default"),
        ("NetworkPolicy", "shipshape-backend-api-ingress"),
        ("NetworkPolicy", "shipshape-backend-worker-metrics"),
    }
    problems: list[str] = []
    for (kind, name), obj in built.items():
        check(obj, {"$ref": "#/definitions/" + definition_for(obj["apiVersion"], kind)}, name, problems)
    assert problems == []
    assert all(o["metadata"].get("namespace") == NAMESPACE for (k, _), o in built.items() if k != "Namespace")
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "shipshape" for o in built.values())


def test_pods_run_as_non_root_on_a_read_only_root_with_resources() -> None:
    built = objects()
    for key in (("Deployment", API), ("Deployment", WORKER), ("Job", MIGRATE)):
        spec = pod_spec(built[key])
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["runAsGroup"] == 65532
        assert spec["automountServiceAccountToken"] is False  # the backend never calls Kubernetes
        main = container(built[key])
        assert main["image"] == IMAGE
        assert main["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        assert {"cpu", "memory"} <= set(main["resources"]["requests"]) and "memory" in main["resources"][
            "limits"
        ]
        assert [m["mountPath"] for m in main["volumeMounts"]] == ["/tmp"]


def test_api_probes_service_and_availability() -> None:
    built = objects()
    api = built[("Deployment", API)]
    assert api["spec"]["replicas"] >= 2
    assert api["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    main = container(api)
    port = next(p for p in main["ports"] if p["name"] == "http")
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert f"--port={port['containerPort']}" in main["args"] and "--host=0.0.0.0" in main["args"]
    labels = api["spec"]["template"]["metadata"]["labels"]
    service = built[("Service", API)]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    for name in (API, WORKER):
        deployment = built[("Deployment", name)]
        template_labels = deployment["spec"]["template"]["metadata"]["labels"]
        pdb = built[("PodDisruptionBudget", name)]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
        hpa = built[("HorizontalPodAutoscaler", name)]
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
        assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
        assert "cpu" in container(deployment)["resources"]["requests"]  # CPU utilisation needs it
    assert built[("PodDisruptionBudget", API)]["spec"]["minAvailable"] == 1


def test_worker_probes_and_metrics_port() -> None:
    worker = container(objects()[("Deployment", WORKER)])
    port = next(p for p in worker["ports"] if p["name"] == "metrics")
    assert worker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert f"--metrics-port={port['containerPort']}" in worker["args"] and "--host=0.0.0.0" in worker["args"]


def test_network_policies_admit_the_api_and_metrics_ports_only_and_reach_the_three_services() -> None:
    built = objects()
    default = built[("NetworkPolicy", "shipshape-backend-default")]["spec"]
    assert default["podSelector"] == {} and set(default["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in default  # nothing comes in unless allowed below
    egress = {(p["protocol"], p["port"]) for rule in default["egress"] for p in rule["ports"]}
    assert egress == {("TCP", 5432), ("TCP", 4222), ("UDP", 53), ("TCP", 53)}
    api = built[("NetworkPolicy", "shipshape-backend-api-ingress")]["spec"]
    assert api["policyTypes"] == ["Ingress"]
    assert api["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": API}
    api_port = next(p for p in container(built[("Deployment", API)])["ports"] if p["name"] == "http")
    assert [p["port"] for rule in api["ingress"] for p in rule["ports"]] == [api_port["containerPort"]]
    metrics = built[("NetworkPolicy", "shipshape-backend-worker-metrics")]["spec"]
    assert metrics["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": WORKER}
    worker_ports = container(built[("Deployment", WORKER)])["ports"]
    metrics_port = next(p["containerPort"] for p in worker_ports if p["name"] == "metrics")
    assert [p["port"] for rule in metrics["ingress"] for p in rule["ports"]] == [metrics_port]


def environment(obj: Obj, config: Obj) -> dict[str, str]:
    """The container's SHIPSHAPE_BACKEND_* variables, Secret references as `<secret:key>`."""
    main = container(obj)
    out: dict[str, str] = {}
    for source in main.get("envFrom") or []:
        assert source["configMapRef"]["name"] == config["metadata"]["name"]
        out.update(config["data"])
    for var in main.get("env") or []:
        ref = var["valueFrom"]["secretKeyRef"]
        out[var["name"]] = f"<{ref['name']}:{ref['key']}>"
    return out


def test_settings_are_backend_settings_and_urls_come_from_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    built = objects()
    config = built[("ConfigMap", "shipshape-backend")]
    for key in (("Deployment", API), ("Deployment", WORKER), ("Job", MIGRATE)):
        env = environment(built[key], config)
        assert env["SHIPSHAPE_BACKEND_DB"] == "<shipshape-backend:db>"
        if key[1] != MIGRATE:
            assert env["SHIPSHAPE_BACKEND_QUEUE"] == "<shipshape-backend:queue>"
        # Every variable sets a field of the settings (an unknown one would be ignored: caught here).
        values = {**env, "SHIPSHAPE_BACKEND_DB": "postgresql://u@postgresql/db"}
        values["SHIPSHAPE_BACKEND_QUEUE"] = "nats://nats:4222"
        for name in [n for n in os.environ if n.startswith("SHIPSHAPE_BACKEND_")]:
            monkeypatch.delenv(name)
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        settings = BackendSettings()
        assert set(settings.model_fields_set) == {
            n.removeprefix("SHIPSHAPE_BACKEND_").lower() for n in values
        }
        if key[1] != MIGRATE:
            assert settings.migrate is False  # the Job migrates; the processes wait for it
    # The URLs name the ExternalName Services; nothing secret is in the ConfigMap.
    assert not any(k.endswith(("_DB", "_QUEUE")) for k in config["data"])
    assert {built[("Service", n)]["spec"]["type"] for n in ("postgresql", "nats")} == {"ExternalName"}


def command(name: str) -> Any:
    root: Any = typer.main.get_command(app)
    with root.context_class(root) as ctx:
        return root.get_command(ctx, name)


def parses(args: list[str]) -> None:
    """The arguments as the real `shipshape` parser takes them (nothing runs). A group's own options
    come before its sub-command, as `--name=value` (the manifests' style)."""
    name, rest, parent = args[0], args[1:], None
    cmd = command(name)
    assert cmd is not None, f"`shipshape {name}` is not registered"
    while hasattr(cmd, "get_command"):  # a group (typer's own click)
        at = next(i for i, arg in enumerate(rest) if not arg.startswith("-"))
        parent = cmd.make_context(name, rest[:at], parent=parent, resilient_parsing=False)
        name, rest = rest[at], rest[at + 1 :]
        sub = cmd.get_command(parent, name)
        assert sub is not None, f"No such command {name!r}"
        cmd = sub
    with cmd.make_context(name, list(rest), parent=parent, resilient_parsing=False) as ctx:
        assert ctx.params


def test_each_container_s_arguments_parse() -> None:
    built = objects()
    seen = []
    for key in (("Deployment", API), ("Deployment", WORKER), ("Job", MIGRATE)):
        args = container(built[key])["args"]
        parses(args)
        seen.append(args[0] if args[0] != "admin" else f"admin {args[-1]}")
    assert seen == ["backend", "worker", "admin migrate"]
    with pytest.raises(AssertionError, match="No such command"):
        parses(["admin", "--log-format=json", "migrat"])
    with pytest.raises(Exception, match="No such option"):  # the parser's own error (typer's click)
        parses(["worker", "--log-formatt=json"])


def served_by_emulator(obj: Obj) -> bool:
    return any(rt.api_version == obj["apiVersion"] and rt.kind == obj["kind"] for rt in RESOURCES)


@pytest.mark.integration
def test_applies_to_the_emulator_and_runs(tmp_path: Path) -> None:
    built = list(objects().values())
    served = [o for o in built if served_by_emulator(o)]
    # Served by a real API server (autoscaling/v2, networking.k8s.io/v1), checked above by schema.
    assert {o["kind"] for o in built if not served_by_emulator(o)} == {
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
    }
    sc = scenario(kubelet={"preloadedImages": [IMAGE]})
    with serve_cluster(tmp_path, sc) as cluster:
        namespace = next(o for o in served if o["kind"] == "Namespace")
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(namespace))
        cluster.kubectl(
            "-n",
            NAMESPACE,
            "create",
            "secret",
            "generic",
            "shipshape-backend",
            "--from-literal=db=postgresql://shipshape:pw@postgresql:5432/shipshape",
            "--from-literal=queue=nats://nats:4222",
        )
        rest = [o for o in served if o["kind"] != "Namespace"]
        done = cluster.kubectl("apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(rest))
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        assert len(lines) == len(rest) and all(line.endswith(" created") for line in lines), done.stdout

        def running(name: str, count: int) -> list[Obj] | None:
            pods = [p for p in cluster.pods(NAMESPACE, **{"app.kubernetes.io/name": name}) if is_ready(p)]
            return pods if len(pods) >= count else None

        apis = cluster.wait("two API replicas ready", lambda: running(API, 2), 180)
        assert len({p["spec"]["nodeName"] for p in apis}) == 2  # spread over nodes
        cluster.wait("two workers running", lambda: running(WORKER, 2), 180)
        job = cluster.get(BY_KEY["jobs.batch"], NAMESPACE, MIGRATE)
        assert job is not None and job["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "migrate"
        cluster.wait(
            "a migrations pod",
            lambda: cluster.pods(NAMESPACE, **{"app.kubernetes.io/name": MIGRATE}) or None,
            120,
        )
