from __future__ import annotations

from shipshape.emulator.controllers.endpoints import ENDPOINTS
from shipshape.emulator.resources import DEPLOYMENTS, PODS, SERVICES
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj

from .helpers import create, make_cluster, pod_template, run, set_running, update
from .test_deployment import deployment


def service(name: str = "web", **spec: object) -> Obj:
    ports = [{"name": "http", "port": 80, "targetPort": "http"}]
    return {
        "metadata": {"name": name, "labels": {"tier": "front"}},
        "spec": {"selector": {"app": "web"}, "ports": ports, **spec},
    }


def named_port_deployment(replicas: int) -> Obj:
    d = deployment(replicas=replicas)
    d["spec"]["template"] = pod_template(
        {"app": "web"},
        containers=[
            {"name": "app", "image": "nginx:1.27", "ports": [{"name": "http", "containerPort": 8080}]}
        ],
    )
    return d


def endpoints(cluster: Cluster, name: str = "web") -> Obj:
    return cluster.store.must_get(ENDPOINTS, "default", name)


def test_ready_pods_are_addresses_with_resolved_named_ports() -> None:
    cluster, _ = make_cluster()
    create(cluster, DEPLOYMENTS, named_port_deployment(2))
    create(cluster, SERVICES, service())
    run(cluster, 10)
    ep = endpoints(cluster)
    assert ep["metadata"]["labels"] == {"tier": "front"}
    (subset,) = ep["subsets"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    pods = {p["metadata"]["name"]: p for p in cluster.store.list(PODS, "default")}
    assert sorted(a["targetRef"]["name"] for a in subset["addresses"]) == sorted(pods)
    assert {a["ip"] for a in subset["addresses"]} == {p["status"]["podIP"] for p in pods.values()}
    assert "notReadyAddresses" not in subset

    victim = next(iter(pods.values()))
    set_running(cluster, victim, ready=False)
    run(cluster, 0)
    (subset,) = endpoints(cluster)["subsets"]
    assert [a["targetRef"]["name"] for a in subset["notReadyAddresses"]] == [victim["metadata"]["name"]]
    assert len(subset["addresses"]) == 1


def test_pods_leaving_the_selector_or_terminating_drop_out_and_service_deletion_removes_endpoints() -> None:
    cluster, fake = make_cluster()
    fake.terminate_after = 30.0
    create(cluster, DEPLOYMENTS, named_port_deployment(2))
    create(cluster, SERVICES, service())
    run(cluster, 10)
    first, second = cluster.store.list(PODS, "default")
    cluster.store.delete(PODS, "default", first["metadata"]["name"])
    update(cluster, PODS, second["metadata"]["name"], lambda p: p["metadata"]["labels"].update(app="debug"))
    run(cluster, 0)
    listed = {a["targetRef"]["name"] for s in endpoints(cluster)["subsets"] for a in s.get("addresses", [])}
    assert first["metadata"]["name"] not in listed and second["metadata"]["name"] not in listed
    cluster.store.delete(SERVICES, "default", "web")
    run(cluster, 0)
    assert cluster.store.get(ENDPOINTS, "default", "web") is None


def test_headless_service_gets_the_headless_label_and_hostnames() -> None:
    cluster, _ = make_cluster()
    pod = {
        "metadata": {"name": "db-0", "labels": {"app": "web"}},
        "spec": pod_template({}, hostname="db-0", subdomain="web")["spec"],
    }
    set_running(cluster, create(cluster, PODS, pod))
    create(cluster, SERVICES, service(clusterIP="None", ports=[{"name": "sql", "port": 5432}]))
    run(cluster, 1)
    ep = endpoints(cluster)
    assert ep["metadata"]["labels"]["service.kubernetes.io/headless"] == ""
    (subset,) = ep["subsets"]
    assert subset["addresses"][0]["hostname"] == "db-0"
    assert subset["ports"] == [{"name": "sql", "port": 5432, "protocol": "TCP"}]
