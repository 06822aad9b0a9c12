"""Placement webhook round trips over HTTPS at a fixed rate of pod creations.

Starts the controller's webhook side on loopback in a child process, as `ControllerProcess` sets it
up (its own CA and serving certificate; by default the webhook in a process of its own, fed by the
controller's fan-out through a `Relay`), sends AdmissionReviews for pods of managed Deployments at
`--rate` per second for `--seconds` seconds over `--connections` keep-alive TLS connections, and
prints JSON with the latency percentiles next to the targets (p50 <= 3 ms, p99 <= 10 ms; with
`--planning`, p99 <= 5 ms) and the CPU seconds of each process.

`--planning` runs the controller process as it runs while its loops plan: informer events arrive at
`--events` per second through the fan-out, and a planning thread (at the loops' nice value, `--nice`)
runs passes back to back over every managed workload (recomputed from scratch, nothing kept: the
heaviest pass there is), each holding the loops' replica for its whole duration. `--webhook thread`
serves the webhook from a thread of the controller process instead (its own replica, one
interpreter: `--webhook-in-process`), `--webhook shared` from a thread reading the loops' replica
(the one-lock design the replicas replaced), for comparison.

    python bench/webhook.py --rate 200 --seconds 10
    python bench/webhook.py --rate 1000 --seconds 10 --connections 4 --planning
    python bench/webhook.py --rate 1000 --seconds 10 --connections 4 --planning --webhook thread
"""

from __future__ import annotations

import argparse
import gc
import http.client
import itertools
import json
import multiprocessing
import os
import random
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.process import ProcessSettings
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import ClusterState, workloads
from shipshape.controller.state.views import Fanout, Relay, Replica
from shipshape.controller.webhook.admission import ReplicaPlacer
from shipshape.controller.webhook.child import ChildSpec, SharedReads, WebhookChild
from shipshape.controller.webhook.server import bind, create_app, https_server
from shipshape.kube.certs import generate_certificates, write_bundle
from shipshape.kube.clock import RealClock
from shipshape.threads import lower_priority

P50_TARGET_MS = 3.0
P99_TARGET_MS = 10.0
# While a planning pass runs (issue 14).
P99_PLANNING_TARGET_MS = 5.0
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


def running_pods(workloads: int, replicas: int, nodes: int) -> list[dict[str, Any]]:
    """`replicas` running pods of each Deployment, spread over the nodes: what a planning pass reads."""
    pods: list[dict[str, Any]] = []
    for i in range(workloads):
        for r in range(replicas):
            pod = admission_review("", i)["request"]["object"]
            pod["metadata"]["name"] = f"svc-{i}-7d4b9c-{r}"
            pod["metadata"]["uid"] = f"pod-{i}-{r}"
            pod["spec"]["nodeName"] = f"node-{(i * replicas + r) % nodes}"
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            pods.append(pod)
    return pods


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


def serve(
    conn: Connection,
    cert_dir: str,
    workloads: int,
    replicas: int,
    nodes: int,
    webhook: str = "process",
    planning: bool = False,
    events: float = 0.0,
    stats: Any = None,
    nice: int | None = None,
) -> None:
    """Child process: the controller's webhook side as `ControllerProcess` sets it up, on a free
    loopback port; with `planning`, informer events and planning passes on other threads meanwhile.

    `webhook`: "process" (the product's default): the webhook serves from a process of its own
    (`WebhookChild`), fed by this one's fan-out through a `Relay`, as `ProcessSettings.webhook_process`
    has it; "thread": from a thread of this process, reading its own replica; "shared": from a thread,
    reading the loops' replica (the one-lock design the replicas replaced)."""
    import uvloop
    from prometheus_client import CollectorRegistry

    config = ControllerConfig()
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    defaults = ProcessSettings(identity="bench")
    # The controller process's interpreter setting (`ProcessSettings.switch_interval_seconds`).
    sys.setswitchinterval(defaults.switch_interval_seconds or 0.005)
    loops = Replica(ClusterState(config))
    relay = Relay() if webhook == "process" else None
    own = loops if webhook == "shared" else Replica(ClusterState(config))
    fanout = Fanout(relay if relay is not None else own, loops) if webhook != "shared" else Fanout(loops)
    objects = cluster_objects(workloads, replicas, nodes)
    pods = running_pods(workloads, replicas, nodes) if planning else []
    for obj in [*objects, *pods]:
        fanout.apply({"type": "ADDED", "object": obj}, str(obj["kind"]))
    sock = bind("127.0.0.1", 0)
    cert, key = Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key"
    risk = RiskModel()
    if relay is not None:
        spec = ChildSpec(config, RealClock(), str(cert), str(key), None, defaults.switch_interval_seconds)
        reads = SharedReads(risk.notices, lambda now: (), dict)
        child = WebhookChild(spec, sock, relay, reads, registry.collect)
        child.start(60.0)
        conn.send((sock.getsockname()[1], child.pid))
    if planning:
        planner = threading.Thread(target=plan, args=(loops, config, stats), name="loops", daemon=True)
        planner.start()
        if nice is not None:
            lower_priority(planner, nice)
        if events > 0:
            threading.Thread(target=feed, args=(fanout, pods, events), daemon=True).start()
    if relay is not None:
        threading.Event().wait()  # until terminated: the webhook process serves
    placer = ReplicaPlacer(own, config, risk, RealClock(), metrics)
    server = https_server(create_app(placer, metrics), cert, key)
    conn.send((sock.getsockname()[1], None))
    uvloop.run(server.serve([sock]))


def plan(loops: Replica, config: ControllerConfig, stats: Any) -> None:
    """Planning passes back to back, each holding the loops' replica throughout: every managed
    workload's state recomputed from scratch, and the cluster-wide reads the loops make."""
    risk = RiskModel()
    while True:
        started = time.perf_counter()
        with loops.view(time.time()) as state:
            found = workloads.recompute_managed(state, config)
            state.placement_view(time.time(), risk, strict=True)
            state.spare_rooms()
            state.nodes_by_name()
        took = time.perf_counter() - started
        if stats is not None:
            with stats.get_lock():
                stats[0] += 1
                stats[1] += took
                stats[2] = max(stats[2], took)
                stats[3] = len(found)
        time.sleep(0.001)  # a breath between passes, as the scheduler takes between lanes


def feed(fanout: Fanout, pods: list[dict[str, Any]], rate: float) -> None:
    """Informer events at `rate` per second: a running pod's status changes (a new object each time)."""
    rng = random.Random(1)
    version = 1_000_000
    interval = 1.0 / rate
    next_at = time.perf_counter()
    while True:
        pod = dict(rng.choice(pods))
        version += 1
        pod["metadata"] = {**pod["metadata"], "resourceVersion": str(version)}
        ready = "True" if rng.random() < 0.9 else "False"
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}
        fanout.apply({"type": "MODIFIED", "object": pod}, "Pod")
        next_at += interval
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)


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


def cpu_seconds(pid: int | None, system_only: bool = False) -> float:
    """User + system (or only system) CPU seconds of a process so far (Linux /proc), 0 where unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[12]) + (0 if system_only else int(fields[11]))) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def run(
    rate: float,
    seconds: float,
    warmup: float,
    workloads: int,
    replicas: int,
    nodes: int,
    webhook: str = "process",
    planning: bool = False,
    events: float = 0.0,
    connections: int = 1,
    nice: int | None = None,
) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    context = multiprocessing.get_context("spawn")
    # Planning passes in the child: count, seconds in all, longest, workloads per pass.
    stats = context.Array("d", 4)
    with tempfile.TemporaryDirectory() as tmp:
        ca_file, _, _ = write_bundle(
            generate_certificates(["localhost"], ["127.0.0.1"], now=time.time()), Path(tmp)
        )
        parent, child = multiprocessing.Pipe()
        process = context.Process(
            target=serve,
            args=(child, tmp, workloads, replicas, nodes, webhook, planning, events, stats, nice),
            # Not a daemon: a daemonic process may not start the webhook process (terminated below).
            daemon=False,
        )
        process.start()
        try:
            if not parent.poll(90):
                raise RuntimeError("the webhook server did not start")
            port, webhook_pid = parent.recv()
            pids = {"controller": process.pid, "webhook": webhook_pid}
            total = int(rate * (warmup + seconds))
            warm = int(rate * warmup)
            bodies = [
                json.dumps(admission_review(f"bench-{i}", i % workloads)).encode() for i in range(total)
            ]
            # (index, latency ms, answer) of each request, from `connections` senders in parallel: the
            # API server calls a webhook over several connections at once, so one slow answer does not
            # hold up the next admission (the rate is kept open-loop: request i is due at i / rate).
            results: list[tuple[int, float, dict[str, Any]]] = []
            interval = 1.0 / rate
            indices = itertools.count()
            start = time.perf_counter() + 0.05
            hard_stop = start + 2 * (warmup + seconds) + 5  # bounded even when the server is slow

            def sender() -> None:
                context = ssl.create_default_context(cafile=str(ca_file))
                connection = connect(port, context)
                while (i := next(indices)) < total and time.perf_counter() < hard_stop:
                    pause = start + i * interval - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
                    sent = time.perf_counter()
                    try:
                        status, payload = request(connection, "POST", "/mutate", bodies[i])
                        elapsed = time.perf_counter() - sent
                        answer = json.loads(payload)["response"] if status == 200 else {}
                    except (OSError, http.client.HTTPException, ValueError):
                        elapsed, answer = time.perf_counter() - sent, {}
                        connection = connect(port, context)
                    results.append((i, elapsed * 1000, answer))
                connection.close()

            senders = [threading.Thread(target=sender) for _ in range(connections)]
            # The client's own garbage collector stays out of the latencies (the API server is not a
            # Python process): nothing it holds is walked while it sends.
            gc.collect()
            gc.freeze()
            gc.disable()
            cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            system_before = {name: cpu_seconds(pid, system_only=True) for name, pid in pids.items()}
            client_before = time.process_time()
            for thread in senders:
                thread.start()
            for thread in senders:
                thread.join()
            gc.enable()
            duration = time.perf_counter() - start - warmup
            cpu = {name: round(cpu_seconds(pid) - cpu_before[name], 2) for name, pid in pids.items() if pid}
            system = {
                name: round(cpu_seconds(pid, system_only=True) - system_before[name], 2)
                for name, pid in pids.items()
                if pid
            }
            cpu["client"] = round(time.process_time() - client_before, 2)
            measured = [(latency, answer) for i, latency, answer in results if i >= warm]
            latencies = [latency for latency, _ in measured]
            errors = sum(int(answer.get("allowed") is not True) for _, answer in measured)
            patched = sum(int("patch" in answer) for _, answer in measured)
            achieved = len(measured) / duration if duration > 0 else 0.0
            connection = connect(port, ssl.create_default_context(cafile=str(ca_file)))
            server_side = server_seconds(request(connection, "GET", "/metrics")[1].decode())
            with stats.get_lock():
                passes, held, longest, managed = (float(stats[i]) for i in range(4))
            connection.close()
        finally:
            process.terminate()
            process.join(5)
    latencies.sort()
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    p99_target = P99_PLANNING_TARGET_MS if planning else P99_TARGET_MS
    return {
        "benchmark": "webhook",
        "rate_per_second": rate,
        "connections": connections,
        "webhook": webhook,
        "planning": None
        if not planning
        else {
            "loops_nice": nice,
            "events_per_second": events,
            "passes": int(passes),
            "workloads_per_pass": int(managed),
            "pass_ms": {
                "mean": round(1000 * held / passes, 3) if passes else 0.0,
                "max": round(1000 * longest, 3),
            },
        },
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
        # CPU seconds of each process over the run (warm-up included): the sending client, the
        # controller (planning, informer events, the feed) and the webhook process (when there is one).
        "cpu_seconds": cpu,
        # The part of them spent in the kernel (sockets, pipes, scheduling).
        "system_cpu_seconds": system,
        # The machine's 1-minute load average before and after: latency on a shared machine follows it.
        "load_average": {
            "before": round(load_before, 2),
            "after": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
        },
        "targets_ms": {"p50": P50_TARGET_MS, "p99": p99_target},
        "ratios_to_target": {"p50": round(p50 / P50_TARGET_MS, 3), "p99": round(p99 / p99_target, 3)},
        "meets_targets": p50 <= P50_TARGET_MS and p99 <= p99_target and errors == 0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="pod creations per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured duration (at most 120)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first")
    parser.add_argument("--workloads", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=50)
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument(
        "--planning", action="store_true", help="planning passes and informer events run meanwhile"
    )
    parser.add_argument(
        "--webhook",
        choices=("process", "thread", "shared"),
        default="process",
        help="process: a webhook process of its own (the controller's default); thread: a thread of the "
        "controller reading its own replica; shared: a thread reading the loops' replica (one lock)",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=ProcessSettings(identity="bench").loops_nice,
        help="nice value of the planning thread (--planning; default: the controller's loops_nice); "
        "-1: left as it is",
    )
    parser.add_argument("--connections", type=int, default=1, help="parallel keep-alive connections")
    parser.add_argument("--events", type=float, default=500.0, help="informer events per second (--planning)")
    args = parser.parse_args(argv)
    if not 0 < args.rate <= 5000 or not 0 < args.seconds <= 120 or args.warmup < 0:
        parser.error("rate must be in (0, 5000], seconds in (0, 120], warmup >= 0")
    result = run(
        args.rate,
        args.seconds,
        args.warmup,
        args.workloads,
        args.replicas,
        args.nodes,
        webhook=args.webhook,
        planning=args.planning,
        events=args.events if args.planning else 0.0,
        connections=args.connections,
        nice=None if args.nice is None or args.nice < 0 else args.nice,
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
