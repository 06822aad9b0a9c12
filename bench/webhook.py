"""Placement webhook round trips over HTTPS at a fixed rate of pod creations.

Starts the webhook server on loopback in a child process (as it runs in the controller, with its own
CA and serving certificate), sends AdmissionReviews for pods of managed Deployments at `--rate` per
second for `--seconds` seconds over one keep-alive TLS connection, and prints JSON with the latency
percentiles next to the targets (p50 <= 3 ms, p99 <= 10 ms).

    python bench/webhook.py --rate 200 --seconds 10
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import socket
import ssl
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import ClusterState
from shipshape.controller.webhook.admission import PodPlacer
from shipshape.controller.webhook.server import bind, create_app, https_server
from shipshape.kube.certs import generate_certificates, write_bundle
from shipshape.kube.clock import RealClock

P50_TARGET_MS = 3.0
P99_TARGET_MS = 10.0
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SPOT_TYPES = ("m5.large", "m5a.large", "c5.xlarge", "r5.large")


def cluster_objects(workloads: int, replicas: int, nodes: int) -> list[dict[str, Any]]:
    """A namespace opted in, `workloads` Deployments with their ReplicaSets, and a mix of Ready nodes
    (a third on-demand), which the webhook's packing ranks for every pod."""
    objects: list[dict[str, Any]] = [
        {"kind": "Namespace", "metadata": {"name": "shop", "labels": {"spot.shipshape.dev/enabled": "true"}}}
    ]
    for i in range(workloads):
        name = f"svc-{i}"
        objects.append(
            {
                "kind": "Deployment",
                "metadata": {
                    "name": name,
                    "namespace": "shop",
                    "uid": f"d-{i}",
                    "annotations": {
                        "spot.shipshape.dev/on-demand-base": "2",
                        "spot.shipshape.dev/spot-percentage": "75",
                    },
                },
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}},
            }
        )
        objects.append(
            {
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{name}-7d4b9c",
                    "namespace": "shop",
                    "uid": f"rs-{i}",
                    "ownerReferences": [
                        {"kind": "Deployment", "name": name, "uid": f"d-{i}", "controller": True}
                    ],
                },
                "spec": {"replicas": replicas},
            }
        )
    for n in range(nodes):
        spot = n % 3 != 0
        labels = {
            "kubernetes.io/hostname": f"node-{n}",
            "node.kubernetes.io/capacity": "spot" if spot else "on-demand",
            "node.kubernetes.io/instance-type": SPOT_TYPES[n % len(SPOT_TYPES)] if spot else "m5.xlarge",
            "topology.kubernetes.io/zone": ZONES[n % len(ZONES)],
            "topology.kubernetes.io/region": "us-east-1",
        }
        status = {
            "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        objects.append(
            {
                "kind": "Node",
                "metadata": {"name": f"node-{n}", "labels": labels},
                "spec": {},
                "status": status,
            }
        )
    return objects


def admission_review(uid: str, workload: int) -> dict[str, Any]:
    name = f"svc-{workload}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-7d4b9c-",
            "namespace": "shop",
            "labels": {"app": name, "pod-template-hash": "7d4b9c"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{name}-7d4b9c",
                    "uid": f"rs-{workload}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:1.4.2",
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                    "ports": [{"containerPort": 8080}],
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
        },
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "dryRun": False,
        },
    }


def serve(conn: Connection, cert_dir: str, workloads: int, replicas: int, nodes: int) -> None:
    """Child process: the webhook as the controller runs it, on a free loopback port."""
    import uvloop
    from prometheus_client import CollectorRegistry

    config = ControllerConfig()
    cache = ClusterState(config)
    for obj in cluster_objects(workloads, replicas, nodes):
        cache.apply({"type": "ADDED", "object": obj})
    metrics = ControllerMetrics(CollectorRegistry())
    placer = PodPlacer(cache, config, RiskModel(), RealClock(), metrics)
    server = https_server(create_app(placer, metrics), Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
    sock = bind("127.0.0.1", 0)
    conn.send(sock.getsockname()[1])
    uvloop.run(server.serve(sockets=[sock]))


def server_seconds(exposition: str) -> dict[str, float]:
    """Time spent inside the server (its own latency histogram), all requests included."""
    from prometheus_client.parser import text_string_to_metric_families

    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name.startswith("shipshape_webhook_duration_seconds_")
    }
    count = values.get("shipshape_webhook_duration_seconds_count", 0.0)
    total = values.get("shipshape_webhook_duration_seconds_sum", 0.0)
    return {"requests": count, "mean_ms": round(1000 * total / count, 3) if count else 0.0}


def connect(port: int, context: ssl.SSLContext, wait_seconds: float = 30.0) -> http.client.HTTPSConnection:
    """A keep-alive TLS connection, once the server answers /healthz. No Nagle delay, like the API server's
    client (the standard library's client is used for its low overhead: the server is what is measured)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5.0)
        try:
            connection.connect()
            assert connection.sock is not None
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if request(connection, "GET", "/healthz")[0] == 200:
                return connection
        except (OSError, http.client.HTTPException):
            connection.close()
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def request(
    connection: http.client.HTTPSConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    headers = {"content-type": "application/json"} if body is not None else {}
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    return response.status, response.read()


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def run(
    rate: float, seconds: float, warmup: float, workloads: int, replicas: int, nodes: int
) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        ca_file, _, _ = write_bundle(
            generate_certificates(["localhost"], ["127.0.0.1"], now=time.time()), Path(tmp)
        )
        parent, child = multiprocessing.Pipe()
        process = multiprocessing.get_context("spawn").Process(
            target=serve, args=(child, tmp, workloads, replicas, nodes), daemon=True
        )
        process.start()
        try:
            if not parent.poll(30):
                raise RuntimeError("the webhook server did not start")
            port = parent.recv()
            connection = connect(port, ssl.create_default_context(cafile=str(ca_file)))
            total = int(rate * (warmup + seconds))
            warm = int(rate * warmup)
            bodies = [
                json.dumps(admission_review(f"bench-{i}", i % workloads)).encode() for i in range(total)
            ]
            latencies: list[float] = []
            errors = patched = 0
            interval = 1.0 / rate
            start = time.perf_counter()
            hard_stop = start + 2 * (warmup + seconds) + 5  # bounded even when the server is slow
            sent_count = 0
            for i, body in enumerate(bodies):
                if time.perf_counter() > hard_stop:
                    break
                pause = start + i * interval - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                sent = time.perf_counter()
                try:
                    status, payload = request(connection, "POST", "/mutate", body)
                    elapsed = time.perf_counter() - sent
                    answer = json.loads(payload)["response"] if status == 200 else {}
                except (OSError, http.client.HTTPException, ValueError):
                    elapsed, answer = time.perf_counter() - sent, {}
                    connection = connect(port, ssl.create_default_context(cafile=str(ca_file)))
                sent_count = i + 1
                if i >= warm:
                    latencies.append(elapsed * 1000)
                    errors += int(answer.get("allowed") is not True)
                    patched += int("patch" in answer)
            duration = time.perf_counter() - start - warmup
            achieved = (sent_count - warm) / duration if sent_count > warm and duration > 0 else 0.0
            server_side = server_seconds(request(connection, "GET", "/metrics")[1].decode())
            connection.close()
        finally:
            process.terminate()
            process.join(5)
    latencies.sort()
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    return {
        "benchmark": "webhook",
        "rate_per_second": rate,
        "achieved_rate_per_second": round(achieved, 1),
        "seconds": seconds,
        "requests": len(latencies),
        "errors": errors,
        "patched": patched,
        "latency_ms": {
            "p50": round(p50, 3),
            "p90": round(percentile(latencies, 0.90), 3),
            "p99": round(p99, 3),
            "max": round(latencies[-1], 3),
            "mean": round(statistics.fmean(latencies), 3),
        },
        "server_side": server_side,
        # The machine's 1-minute load average before and after: latency on a shared machine follows it.
        "load_average": {
            "before": round(load_before, 2),
            "after": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
        },
        "targets_ms": {"p50": P50_TARGET_MS, "p99": P99_TARGET_MS},
        "ratios_to_target": {"p50": round(p50 / P50_TARGET_MS, 3), "p99": round(p99 / P99_TARGET_MS, 3)},
        "meets_targets": p50 <= P50_TARGET_MS and p99 <= P99_TARGET_MS and errors == 0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="pod creations per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured duration (at most 120)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first")
    parser.add_argument("--workloads", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=50)
    parser.add_argument("--nodes", type=int, default=300)
    args = parser.parse_args(argv)
    if not 0 < args.rate <= 5000 or not 0 < args.seconds <= 120 or args.warmup < 0:
        parser.error("rate must be in (0, 5000], seconds in (0, 120], warmup >= 0")
    result = run(args.rate, args.seconds, args.warmup, args.workloads, args.replicas, args.nodes)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
