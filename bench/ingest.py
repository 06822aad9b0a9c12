"""Ingestion benchmarks: how fast the backend takes and applies what agents push, how soon a push
becomes a recommendation, and what the agent costs on a 1,000-node cluster.

Prints one JSON document on stdout (progress goes to stderr). Every case runs in its own process on
each backend stack, side by side, with the ratio of the two:

  scale     `shipshape backend` on PostgreSQL (a fresh database per run) and NATS JetStream (a fresh
            stream per run), with two `shipshape worker` processes
  embedded  `shipshape backend` on its embedded defaults: SQLite and the in-process queue (its own
            workers in the API process)

The backend processes are started through the real CLI (`shipshape admin create-org/create-cluster
--json`, `shipshape backend`, `shipshape worker`) and driven over HTTP with aiohttp, as agents and
users would. Pushes are what the agent's mirror writes (`shipshape.agent.mirror.Mirror`), compressed as
the agent spools and sends them (zstd; `--encoding gzip` as an older agent did), of a 100-node /
3,000-pod cluster that the emulator built and ran.

Cases and targets:
  snapshots  full snapshots accepted per second (HTTP 202), and applied per second by the workers  (>= 20/s)
  deltas     small deltas (10 pod changes each) accepted per second, and applied per second       (>= 500/s)
  latency    push -> recommendation: from sending a delta that makes a workload eligible for spot
             adoption until GET /api/v1/clusters/{id}/recommendations lists it                   (p99 <= 5 s)
  agent      `shipshape agent` on the emulator's 1,000-node / 30,000-pod cluster at 10 pod changes/s:
             peak RSS and CPU of one core, measured from /proc             (< 200 MiB, < 5 % of a core)

    .venv/bin/python bench/ingest.py                              # every case on both stacks
    .venv/bin/python bench/ingest.py --quick                      # fewer pushes and trials, shorter agent run
    .venv/bin/python bench/ingest.py --case deltas --stack embedded
    .venv/bin/python bench/ingest.py --quick --case snapshots --encoding gzip   # as older agents send
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from served import Served, served_cluster
from shipshape.contracts import compression

Json = dict[str, Any]
MIB = 1024 * 1024

TARGET_SNAPSHOTS_PER_SECOND = 20.0
TARGET_DELTAS_PER_SECOND = 500.0
TARGET_LATENCY_P99_SECONDS = 5.0
TARGET_AGENT_RSS_MIB = 200.0
TARGET_AGENT_CPU_PERCENT = 5.0

CASES = ("snapshots", "deltas", "latency", "agent")
STACKS = ("scale", "embedded")
# Cases that run on each stack; the agent case has its own (embedded) backend.
STACKED = ("snapshots", "deltas", "latency")

POSTGRES_ADMIN = os.environ.get("SHIPSHAPE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
NATS_SERVER = os.environ.get("SHIPSHAPE_BENCH_NATS", "nats://127.0.0.1:4222")
# Older agents spooled (and so sent) their pushes gzipped at this level; the agent now spools zstd at
# `compression.AGENT_LEVEL` (`shipshape.agent.spool`).
SPOOL_GZIP_LEVEL = 5
ENCODINGS = (compression.ZSTD, compression.GZIP)
CLI = [sys.executable, "-c", "from shipshape.cli.main import app; app()"]


def log(message: str) -> None:
    print(f"[bench/ingest] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Sizes:
    """How much work each case does (`--quick` shortens every one of them)."""

    snapshot_clusters: int = 8
    snapshots: int = 200
    delta_clusters: int = 16
    deltas: int = 6000
    changes_per_delta: int = 10
    latency_clusters: int = 4
    latency_trials: int = 24
    # Seconds between two pushes of one cluster in the latency case: the agent's delta period.
    latency_spacing: float = 15.0
    # Other clusters pushing deltas meanwhile, at this rate in all (a fifth of the deltas target).
    latency_background_clusters: int = 8
    latency_background_per_second: float = 100.0
    agent_nodes: int = 1000
    agent_pods_per_node: int = 30
    agent_seconds: float = 60.0
    agent_changes_per_second: float = 10.0
    drain_limit: float = 300.0


QUICK = Sizes(
    snapshot_clusters=4,
    snapshots=40,
    delta_clusters=8,
    deltas=1500,
    latency_clusters=2,
    latency_trials=6,
    latency_spacing=15.0,
    latency_background_clusters=4,
    latency_background_per_second=50.0,
    agent_seconds=20.0,
    drain_limit=120.0,
)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def now_text() -> str:
    return datetime.now(UTC).isoformat()


# ---- process figures from /proc ----------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reaped_children_cpu_seconds(pid: int) -> float:
    """User + system CPU time of the children process `pid` has waited for (those that ended)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def database_backends(db: str) -> list[int]:
    """The server processes of the connections to `db` but this one's (PostgreSQL; none readable in
    /proc when the server runs elsewhere)."""
    import psycopg

    with psycopg.connect(db, autocommit=True, connect_timeout=5) as connection:
        rows = connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(pid) for (pid,) in rows if Path(f"/proc/{pid}/stat").exists()]


def local_processes(executable: str) -> list[int]:
    """Processes of this machine running `executable` (by the name of their program)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if Path((entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode()).name == executable:
                    found.append(int(entry.name))
    return found


def memory_mib(pid: int) -> tuple[float, float]:
    """(resident now, peak resident) of process `pid` in MiB: VmRSS and VmHWM."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024  # kB
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


# ---- the fixture: a 100-node / 3,000-pod cluster the emulator built, as the agent's mirror sends it ---


FIXTURE_NAMESPACES = ("shop", "payments", "search", "platform")
ON_DEMAND = {"node.kubernetes.io/capacity": "on-demand"}


def fixture_scenario() -> Json:
    """100 nodes up at start: 40 on demand (m5.2xlarge) and 60 spot (m5.xlarge, c5.2xlarge), two zones."""
    pools = []
    for zone in ("us-east-1a", "us-east-1b"):
        for name, itype, capacity, cpu, memory, size in (
            ("od-m5-2xl", "m5.2xlarge", "on-demand", "8", "32Gi", 20),
            ("spot-m5-xl", "m5.xlarge", "spot", "4", "16Gi", 15),
            ("spot-c5-2xl", "c5.2xlarge", "spot", "8", "16Gi", 15),
        ):
            pools.append(
                {
                    "name": f"{name}-{zone[-1]}",
                    "instanceType": itype,
                    "zone": zone,
                    "capacityType": capacity,
                    "cpu": cpu,
                    "memory": memory,
                    "initialSize": size,
                    "minSize": size,
                    "maxSize": size,
                }
            )
    return {
        "name": "ingest",
        "seed": 11,
        "pools": pools,
        "autoscaler": {"enabled": False},
        "interruptions": {"enabled": False},
        "kubelet": {"preloadedImages": ["registry.example/app:1", "registry.example/exporter:1"]},
        "namespaces": list(FIXTURE_NAMESPACES),
    }


def _template(app: str, *, image: str = "registry.example/app:1", pinned: bool = False) -> Json:
    spec: Json = {
        "containers": [
            {
                "name": app.split("-")[0],
                "image": image,
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "DB_PASSWORD", "value": "s3cret"}],
                "resources": {
                    "requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"memory": "128Mi"},
                },
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
            }
        ]
    }
    if pinned:
        spec["nodeSelector"] = dict(ON_DEMAND)
    return {"metadata": {"labels": {"app": app}}, "spec": spec}


def fixture_workloads() -> list[Json]:
    """3,000 pods: a DaemonSet (100), four StatefulSets of 5 on demand (20), 96 Deployments of 30
    replicas (2,880), every fourth pinned to on-demand nodes (spot-adoption findings); PDBs."""
    objects: list[Json] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "node-exporter", "namespace": "platform"},
            "spec": {
                "selector": {"matchLabels": {"app": "node-exporter"}},
                "template": _template("node-exporter", image="registry.example/exporter:1"),
            },
        }
    ]
    for i in range(4):
        name = f"db-{i}"
        namespace = FIXTURE_NAMESPACES[i % 3]
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "replicas": 5,
                    "serviceName": name,
                    "selector": {"matchLabels": {"app": name}},
                    "template": _template(name, pinned=True),
                },
            }
        )
        objects.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
            }
        )
    for i in range(96):
        name = f"svc-{i:02d}"
        namespace = FIXTURE_NAMESPACES[i % 3]
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace, "labels": {"team": f"t{i % 7}"}},
                "spec": {
                    "replicas": 30,
                    "selector": {"matchLabels": {"app": name}},
                    "template": _template(name, pinned=i % 4 == 0),
                },
            }
        )
    return objects


def build_fixture(path: Path) -> Json:
    """Run the fixture cluster in discrete-event mode until every pod runs, pass its objects through
    the agent's mirror, and write what a full snapshot carries (`objects`) to `path`."""
    from shipshape.agent.mirror import KIND_PLURALS, Mirror
    from shipshape.emulator import assembly
    from shipshape.emulator import scenario as scenario_mod
    from shipshape.emulator.resources import BY_KEY, NODES, PODS
    from shipshape.kube.clock import VirtualClock

    began = time.perf_counter()
    cluster = assembly.build(scenario_mod.parse(fixture_scenario()), VirtualClock())
    api = cluster.services["api"]
    wanted_nodes = sum(p["initialSize"] for p in fixture_scenario()["pools"])
    while True:
        cluster.engine.run_until(cluster.now() + 10)
        ready = sum(
            1
            for node in cluster.store.iter(NODES)
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", [])
            )
        )
        if ready >= wanted_nodes:
            break
        if cluster.now() > 600:
            raise RuntimeError(f"{ready} of {wanted_nodes} nodes Ready after 600 emulated seconds")

    by_kind = {"DaemonSet": "daemonsets.apps", "StatefulSet": "statefulsets.apps"}
    by_kind |= {"Deployment": "deployments.apps", "PodDisruptionBudget": "poddisruptionbudgets.policy"}

    async def create() -> None:
        for manifest in fixture_workloads():
            await api.create(BY_KEY[by_kind[manifest["kind"]]], manifest["metadata"]["namespace"], manifest)

    asyncio.run(create())
    deadline = cluster.now() + 900
    running = 0
    while cluster.now() < deadline:
        cluster.engine.run_until(cluster.now() + 5)
        running = sum(1 for p in cluster.store.iter(PODS) if p.get("status", {}).get("phase") == "Running")
        if running >= 3000:
            break
    if running < 3000:
        raise RuntimeError(f"only {running} of 3000 fixture pods Running")
    # The cluster as an agent would find it an hour after this rollout: the rollout's Events have
    # expired (kube-apiserver's --event-ttl is 1 h), so the snapshot carries none.
    mirror = Mirror()
    plural_keys = {"deployments": "deployments.apps", "replicasets": "replicasets.apps"}
    plural_keys |= {"statefulsets": "statefulsets.apps", "daemonsets": "daemonsets.apps"}
    plural_keys |= {"jobs": "jobs.batch", "poddisruptionbudgets": "poddisruptionbudgets.policy"}
    plural_keys |= {"priorityclasses": "priorityclasses.scheduling.k8s.io"}
    plural_keys |= {"horizontalpodautoscalers": "horizontalpodautoscalers.autoscaling"}
    for kind, plural in KIND_PLURALS.items():
        if kind == "Event":
            continue
        rt = BY_KEY.get(plural_keys.get(plural, plural))
        items = [] if rt is None else [orjson.loads(orjson.dumps(o)) for o in cluster.store.iter(rt)]
        mirror.replace(kind, items)
    snapshot = orjson.loads(mirror.snapshot(1, datetime.now(UTC), "bench"))
    objects = snapshot["objects"]
    raw = orjson.dumps(objects)
    path.write_bytes(raw)
    return {
        "objects": {kind: len(items) for kind, items in objects.items()},
        "bytes": len(raw),
        "gzipBytes": len(gzip.compress(raw, SPOOL_GZIP_LEVEL)),
        "zstdBytes": len(compression.compress(raw, compression.AGENT_LEVEL)),
        "buildSeconds": round(time.perf_counter() - began, 1),
    }


@dataclass
class Fixture:
    objects_json: bytes
    objects: dict[str, list[Json]]
    # How pushes are compressed (`Content-Encoding`): zstd as the agent sends them, or gzip.
    encoding: str = compression.ZSTD

    @classmethod
    def load(cls, path: Path, encoding: str = compression.ZSTD) -> Fixture:
        raw = path.read_bytes()
        return cls(raw, orjson.loads(raw), encoding)

    def pods(self) -> list[Json]:
        return self.objects["pods"]

    def on_demand_nodes(self) -> list[str]:
        return [
            n["metadata"]["name"]
            for n in self.objects["nodes"]
            if n["metadata"].get("labels", {}).get("node.kubernetes.io/capacity") == "on-demand"
        ]


# ---- pushes as the agent writes them -------------------------------------------------------------------


class SnapshotBodies:
    """The fixture snapshot compressed as the agent spools it, once per sequence number.

    zstd: each body compressed whole at the agent's level (about 5 ms for 8.6 MiB). gzip: only the
    sequence and the time differ between two snapshots of one cluster, so the document is written with
    `objects` first and the compressor's state after them is kept: each body costs a copy of that state
    and a few bytes, instead of 36 ms of gzip on a client that shares two cores with the server it
    measures. Key order in a JSON object means nothing to the receiver.
    """

    def __init__(self, objects_json: bytes, encoding: str = compression.ZSTD) -> None:
        self._prefix = (
            b'{"objects":' + objects_json + b',"schema":"shipshape.dev/snapshot/v1","agent_version":"bench"'
        )
        self.encoding = encoding
        self._compressor = zlib.compressobj(SPOOL_GZIP_LEVEL, zlib.DEFLATED, 31)
        self._head = self._compressor.compress(self._prefix) if encoding == compression.GZIP else b""
        self.raw_bytes = len(self._prefix) + 60

    def body(self, sequence: int) -> bytes:
        tail = b',"sequence":%d,"taken_at":"%s"}' % (sequence, now_text().encode())
        if self.encoding == compression.ZSTD:
            return compression.compress(self._prefix + tail, compression.AGENT_LEVEL)
        compressor = self._compressor.copy()
        return self._head + compressor.compress(tail) + compressor.flush()


class DeltaWriter:
    """Deltas of pod changes written by a real `Mirror` that holds the fixture's pods (so each change
    is a MODIFIED of an object it knows, as in the agent)."""

    def __init__(self, fixture: Fixture) -> None:
        from shipshape.agent.mirror import Mirror

        self.encoding = fixture.encoding
        self.mirror = Mirror()
        self.pods = fixture.pods()
        self.mirror.replace("Pod", self.pods)
        self.mirror.take_delta(1, 0, datetime.now(UTC))
        self._next = 0
        self._version = 10_000_000

    def changed_pod(self) -> Json:
        """The next pod of the fixture with its first container restarted once more."""
        pod: Json = orjson.loads(orjson.dumps(self.pods[self._next % len(self.pods)]))
        self._next += 1
        self._version += 1
        pod["metadata"]["resourceVersion"] = str(self._version)
        for status in pod.get("status", {}).get("containerStatuses") or []:
            status["restartCount"] = int(status.get("restartCount", 0)) + 1
            status["lastState"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            break
        return pod

    def delta(self, sequence: int, base: int, changes: int, extra: Sequence[tuple[str, Json]] = ()) -> bytes:
        """A compressed delta of `changes` pod changes (and `extra` (kind, object) additions)."""
        for _ in range(changes):
            self.mirror.apply({"type": "MODIFIED", "object": self.changed_pod()}, "Pod")
        for kind, obj in extra:
            self.mirror.apply({"type": "ADDED", "object": obj}, kind)
        body = self.mirror.take_delta(sequence, base, datetime.now(UTC), "bench")
        assert body is not None
        if self.encoding == compression.ZSTD:
            return compression.compress(body, compression.AGENT_LEVEL)
        return gzip.compress(body, SPOOL_GZIP_LEVEL)


def eligible_workload(name: str, namespace: str, nodes: list[str]) -> list[tuple[str, Json]]:
    """A Deployment of 3 replicas running wholly on on-demand `nodes`, not opted in: what spot adoption
    recommends moving (its ReplicaSet and pods included)."""
    uid = str(uuid.uuid4())
    rs_name = f"{name}-7c9f8d6b5"
    rs_uid = str(uuid.uuid4())
    labels = {"app": name}
    container = {
        "name": "app",
        "image": "registry.example/app:1",
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "generation": 1,
            "resourceVersion": "1",
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
        "status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3},
    }
    replicaset = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": rs_name,
            "namespace": namespace,
            "uid": rs_uid,
            "resourceVersion": "1",
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid, "controller": True}
            ],
        },
        "spec": {"replicas": 3, "selector": {"matchLabels": labels}},
        "status": {"replicas": 3, "readyReplicas": 3},
    }
    out: list[tuple[str, Json]] = [("Deployment", deployment), ("ReplicaSet", replicaset)]
    for i in range(3):
        out.append(
            (
                "Pod",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{rs_name}-p{i}",
                        "namespace": namespace,
                        "uid": str(uuid.uuid4()),
                        "resourceVersion": "1",
                        "labels": labels,
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "ReplicaSet",
                                "name": rs_name,
                                "uid": rs_uid,
                                "controller": True,
                            }
                        ],
                    },
                    "spec": {"nodeName": nodes[i % len(nodes)], "containers": [container]},
                    "status": {"phase": "Running"},
                },
            )
        )
    return out


# ---- a backend stack in child processes -----------------------------------------------------------------


@dataclass
class Credentials:
    cluster_id: str
    token: str


@dataclass
class Stack:
    name: str
    url: str
    db: str
    org_id: str
    api_key: str
    first: Credentials
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # The workers' `--metrics-port` URLs (scale only).
    worker_metrics: list[str] = field(default_factory=list)

    # The last CPU seconds seen of each NATS server process, and PostgreSQL's postmaster (`servers_cpu`).
    _nats_seen: dict[int, float] = field(default_factory=dict)
    _postmaster: int | None = None

    def cpu(self) -> dict[str, float]:
        """CPU seconds of each backend process so far, of the database's and the queue's servers where
        they run on this machine (`servers_cpu`), and of this client."""
        out = {name: cpu_seconds(p.pid) for name, p in self.processes.items()}
        out.update(self.servers_cpu())
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out["client"] = usage.ru_utime + usage.ru_stime
        return out

    def servers_cpu(self) -> dict[str, float]:
        """CPU seconds of the PostgreSQL server's processes and of the NATS server, where they run on
        this machine. PostgreSQL: the backends connected to the case's database now, plus what the
        backends that ended used in all (the postmaster's reaped children; the differences between
        two readings are then exact, whether a backend ran through, started, ended or both between
        them: a worker that closes pooled connections makes PostgreSQL start new ones, and their work
        counts). Both may include other users of the servers (other databases' backends that ended;
        NATS is the whole server)."""
        out = {}
        if self.db.startswith("postgresql"):
            backends = database_backends(self.db)
            with contextlib.suppress(OSError, IndexError, ValueError):
                live = 0.0
                for pid in backends:
                    with contextlib.suppress(OSError, IndexError, ValueError):
                        live += cpu_seconds(pid)
                if backends:
                    self._postmaster = self._postmaster or parent_pid(backends[0])
                if self._postmaster:
                    out["postgres"] = live + reaped_children_cpu_seconds(self._postmaster)
        if self.name == "scale":
            for pid in local_processes("nats-server"):
                with contextlib.suppress(OSError, IndexError, ValueError):
                    self._nats_seen[pid] = cpu_seconds(pid)
            if self._nats_seen:
                out["nats"] = sum(self._nats_seen.values())
        return out

    def user_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


def cli_json(*args: str, cwd: Path) -> Json:
    done = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"shipshape {' '.join(args[:2])} failed: {done.stderr.strip()}")
    loaded: Json = json.loads(done.stdout)
    return loaded


def _wait_ready(url: str, process: subprocess.Popen[bytes], logfile: Path, limit: float = 90.0) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the backend exited ({process.returncode}): {logfile.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the backend was not ready within {limit:g} s")


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    import psycopg

    name = f"shipshape_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{POSTGRES_ADMIN.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def nats_stream() -> Iterator[str]:
    stream = f"BENCH_{uuid.uuid4().hex[:12].upper()}"
    try:
        yield f"{NATS_SERVER}?stream={stream}"
    finally:

        async def delete() -> None:
            import nats

            connection = await nats.connect(NATS_SERVER, connect_timeout=2)
            try:
                await connection.jetstream().delete_stream(stream)
            finally:
                await connection.close()

        with contextlib.suppress(Exception):
            asyncio.run(delete())


def _stop(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    for process in processes.values():
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    for process in processes.values():
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def backend_stack(name: str, workdir: Path) -> Iterator[Stack]:
    """`name` (scale or embedded) started through the CLI in `workdir`, until the block ends."""
    with contextlib.ExitStack() as stack:
        if name == "scale":
            db = stack.enter_context(postgres_database())
            queue = stack.enter_context(nats_stream())
        else:
            db, queue = f"sqlite:///{workdir / 'backend.db'}", "memory://"
        org = cli_json("admin", "create-org", "bench", "--db", db, "--json", cwd=workdir)
        first = cli_json(
            "admin", "create-cluster", "--org", org["org_id"], "c000", "--db", db, "--json", cwd=workdir
        )
        port = free_port()
        processes: dict[str, subprocess.Popen[bytes]] = {}
        stack.callback(_stop, processes)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}

        def start(label: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
            logfile = workdir / f"{label}.log"
            handle = stack.enter_context(open(logfile, "wb"))
            process = subprocess.Popen(
                [*CLI, *args], cwd=workdir, stdout=handle, stderr=subprocess.STDOUT, env=env
            )
            processes[label] = process
            return process, logfile

        api, api_log = start("api", "backend", "--port", str(port), "--db", db, "--queue", queue)
        worker_metrics = []
        if name == "scale":
            for i in (1, 2):
                metrics_port = free_port()
                start(
                    f"worker-{i}", "worker", "--db", db, "--queue", queue, "--metrics-port", str(metrics_port)
                )
                worker_metrics.append(f"http://127.0.0.1:{metrics_port}/metrics")
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, api, api_log)
        yield Stack(
            name=name,
            url=url,
            db=db,
            org_id=org["org_id"],
            api_key=org["api_key"],
            first=Credentials(first["cluster_id"], first["agent_token"]),
            processes=processes,
            worker_metrics=worker_metrics,
        )
        for label, process in processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{label} exited during the case ({process.returncode})")


def http_client(url: str, connections: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        url,
        connector=aiohttp.TCPConnector(limit=connections),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
    )


async def clusters_of(stack: Stack, http: aiohttp.ClientSession, count: int) -> list[Credentials]:
    """The first cluster (made by `shipshape admin`) and `count - 1` more through the API."""
    out = [stack.first]
    for i in range(1, count):
        async with http.post(
            "/api/v1/clusters", json={"name": f"c{i:03d}"}, headers=stack.user_headers()
        ) as answer:
            body = await answer.json()
            if answer.status != 201:
                raise RuntimeError(f"cluster not created ({answer.status}): {body}")
        out.append(Credentials(body["cluster_id"], body["agent_token"]))
    return out


async def push(http: aiohttp.ClientSession, credentials: Credentials, body: bytes, key: str) -> int:
    headers = {
        "Authorization": f"Bearer {credentials.token}",
        "Content-Encoding": compression.encoding_of(body),
        "Content-Type": "application/json",
        "Idempotency-Key": key,
    }
    async with http.post("/api/v1/pushes", data=body, headers=headers) as answer:
        await answer.read()
        return answer.status


class PushLedger:
    """What the workers did with the pushes, read from the database (`pushes` table)."""

    def __init__(self, db: str) -> None:
        from shipshape.backend.store import engine as store_engine

        self.engine = store_engine.create(db)

    def outcomes(self) -> dict[str, int]:
        from sqlalchemy import text

        with self.engine.connect() as connection:
            rows = connection.execute(text("SELECT outcome, count(*) FROM pushes GROUP BY outcome")).all()
        return {str(outcome or "pending"): int(n) for outcome, n in rows}

    async def drained(self, total: int, limit: float) -> tuple[float | None, dict[str, int]]:
        """Wait until `total` pushes are processed: (monotonic time it was seen, outcomes)."""
        deadline = time.monotonic() + limit
        outcomes: dict[str, int] = {}
        while time.monotonic() < deadline:
            outcomes = await asyncio.to_thread(self.outcomes)
            if sum(n for k, n in outcomes.items() if k != "pending") >= total:
                return time.monotonic(), outcomes
            await asyncio.sleep(0.1)
        return None, outcomes

    def close(self) -> None:
        self.engine.dispose()


async def wait_applied(
    http: aiohttp.ClientSession,
    stack: Stack,
    clusters: list[Credentials],
    sequence: int,
    limit: float = 300.0,
) -> None:
    """Until every cluster's applied sequence reached `sequence` (read through the API)."""
    deadline = time.monotonic() + limit
    wanted = {c.cluster_id for c in clusters}
    while time.monotonic() < deadline:
        async with http.get("/api/v1/clusters", headers=stack.user_headers()) as answer:
            listed = await answer.json()
        done = {c["id"] for c in listed if (c.get("applied_sequence") or 0) >= sequence}
        if wanted <= done:
            return
        await asyncio.sleep(0.25)
    raise RuntimeError(f"the baseline snapshots were not applied within {limit:g} s")


async def closed_loops(
    chains: list[tuple[Credentials, list[bytes]]], http: aiohttp.ClientSession, prefix: str
) -> tuple[float, list[float], dict[str, int]]:
    """Each cluster sends its bodies in order, one at a time (as an agent drains its spool), all
    clusters at once: (elapsed seconds, request latencies, answers by status)."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}

    async def one(credentials: Credentials, bodies: list[bytes]) -> None:
        for i, body in enumerate(bodies):
            began = time.perf_counter()
            status = await push(http, credentials, body, f"{prefix}-{i}")
            latencies.append(time.perf_counter() - began)
            statuses[str(status)] = statuses.get(str(status), 0) + 1

    began = time.perf_counter()
    await asyncio.gather(*(one(c, b) for c, b in chains))
    return time.perf_counter() - began, latencies, statuses


def throughput(
    stack: Stack,
    *,
    what: str,
    accepted: int,
    elapsed: float,
    latencies: list[float],
    statuses: dict[str, int],
    drained_after: float | None,
    outcomes: dict[str, int],
    cpu_before: dict[str, float],
    cpu_accepted: dict[str, float],
    cpu_drained: dict[str, float],
    pushes: int,
) -> Json:
    api_cpu = cpu_accepted["api"] - cpu_before["api"]
    total_cpu = {k: round(cpu_drained[k] - cpu_before[k], 2) for k in cpu_before if k in cpu_drained}
    # The backend's side of the work, whatever process does it: the API, the workers, the database's
    # backends and the queue's server (not the client, which stands for the agents).
    stack_cpu = sum(v for k, v in total_cpu.items() if k != "client")
    return {
        "pushes": pushes,
        "accepted": accepted,
        "answers": statuses,
        "acceptSeconds": round(elapsed, 3),
        f"{what}AcceptedPerSecond": round(accepted / elapsed, 1),
        "requestMs": {
            "p50": round(percentile(latencies, 50) * 1000, 1),
            "p99": round(percentile(latencies, 99) * 1000, 1),
        },
        # From the first push sent until the workers had processed every one.
        "drainSeconds": None if drained_after is None else round(drained_after, 2),
        f"{what}AppliedPerSecond": None if drained_after is None else round(pushes / drained_after, 1),
        "outcomes": outcomes,
        # CPU per push hardly moves with the machine's load, unlike rates.
        "apiCpuMsPerPushWhileAccepting": round(api_cpu / max(1, accepted) * 1000, 2),
        "cpuSecondsUntilDrained": total_cpu,
        # The figure to compare across runs on a shared machine: it moves little with the load.
        "stackCpuMsPerPush": round(stack_cpu / max(1, pushes) * 1000, 2),
    }


# ---- snapshots --------------------------------------------------------------------------------------------


async def snapshots_case(stack: Stack, fixture: Fixture, sizes: Sizes) -> Json:
    bodies = SnapshotBodies(fixture.objects_json, fixture.encoding)
    per_cluster = max(1, sizes.snapshots // sizes.snapshot_clusters)
    ledger = PushLedger(stack.db)
    try:
        async with http_client(stack.url, sizes.snapshot_clusters + 2) as http:
            clusters = await clusters_of(stack, http, sizes.snapshot_clusters)
            chains = [(c, [bodies.body(seq) for seq in range(1, per_cluster + 1)]) for c in clusters]
            size = len(chains[0][1][0])
            log(
                f"{stack.name}: {per_cluster} snapshots x {len(clusters)} clusters "
                f"({size / MIB:.2f} MiB {fixture.encoding} each)"
            )
            cpu_before = stack.cpu()
            began = time.monotonic()
            elapsed, latencies, statuses = await closed_loops(chains, http, "snap")
            cpu_accepted = stack.cpu()
            total = per_cluster * len(clusters)
            seen, outcomes = await ledger.drained(total, sizes.drain_limit)
            cpu_drained = stack.cpu()
    finally:
        ledger.close()
    accepted = statuses.get("202", 0)
    result = throughput(
        stack,
        what="snapshots",
        accepted=accepted,
        elapsed=elapsed,
        latencies=latencies,
        statuses=statuses,
        drained_after=None if seen is None else seen - began,
        outcomes=outcomes,
        cpu_before=cpu_before,
        cpu_accepted=cpu_accepted,
        cpu_drained=cpu_drained,
        pushes=total,
    )
    result.update(
        clusters=len(clusters),
        encoding=fixture.encoding,
        bytesPerSnapshot=size,
        objectsPerSnapshot=sum(len(v) for v in fixture.objects.values()),
        target=f">= {TARGET_SNAPSHOTS_PER_SECOND:g} accepted/s",
        **{"pass": accepted == total and accepted / elapsed >= TARGET_SNAPSHOTS_PER_SECOND},
    )
    return result


# ---- deltas -----------------------------------------------------------------------------------------------


async def deltas_case(stack: Stack, fixture: Fixture, sizes: Sizes) -> Json:
    snapshot = SnapshotBodies(fixture.objects_json, fixture.encoding)
    writer = DeltaWriter(fixture)
    per_cluster = max(1, sizes.deltas // sizes.delta_clusters)
    ledger = PushLedger(stack.db)
    try:
        async with http_client(stack.url, sizes.delta_clusters + 2) as http:
            clusters = await clusters_of(stack, http, sizes.delta_clusters)
            log(f"{stack.name}: baseline snapshot of {len(clusters)} clusters")
            for c in clusters:
                status = await push(http, c, snapshot.body(1), "baseline")
                if status != 202:
                    raise RuntimeError(f"baseline snapshot answered {status}")
            await wait_applied(http, stack, clusters, 1)
            chains = [
                (
                    c,
                    [
                        writer.delta(seq, seq - 1, sizes.changes_per_delta)
                        for seq in range(2, per_cluster + 2)
                    ],
                )
                for c in clusters
            ]
            size = sum(len(b) for b in chains[0][1]) / per_cluster
            base = sum((await asyncio.to_thread(ledger.outcomes)).values())
            log(
                f"{stack.name}: {per_cluster} deltas x {len(clusters)} clusters "
                f"({size / 1024:.1f} KiB {fixture.encoding} each)"
            )
            cpu_before = stack.cpu()
            began = time.monotonic()
            elapsed, latencies, statuses = await closed_loops(chains, http, "delta")
            cpu_accepted = stack.cpu()
            total = per_cluster * len(clusters)
            seen, outcomes = await ledger.drained(base + total, sizes.drain_limit)
            cpu_drained = stack.cpu()
    finally:
        ledger.close()
    outcomes["applied"] = outcomes.get("applied", 0) - len(clusters)  # less the baselines
    accepted = statuses.get("202", 0)
    result = throughput(
        stack,
        what="deltas",
        accepted=accepted,
        elapsed=elapsed,
        latencies=latencies,
        statuses=statuses,
        drained_after=None if seen is None else seen - began,
        outcomes=outcomes,
        cpu_before=cpu_before,
        cpu_accepted=cpu_accepted,
        cpu_drained=cpu_drained,
        pushes=total,
    )
    result.update(
        clusters=len(clusters),
        changesPerDelta=sizes.changes_per_delta,
        encoding=fixture.encoding,
        bytesPerDelta=round(size),
        target=f">= {TARGET_DELTAS_PER_SECOND:g} accepted/s",
        **{"pass": accepted == total and accepted / elapsed >= TARGET_DELTAS_PER_SECOND},
    )
    return result


# ---- push -> recommendation latency -----------------------------------------------------------------------


async def latency_case(stack: Stack, fixture: Fixture, sizes: Sizes) -> Json:
    """Each cluster holds the fixture; every `latency_spacing` seconds (the agent's delta period) it
    pushes a delta of pod changes that also brings a new Deployment running wholly on on-demand nodes;
    a poller lists the cluster's recommendations every 0.1 s until that workload's appears. Meanwhile
    other clusters (holding the fixture too) push deltas at `latency_background_per_second`."""
    snapshot = SnapshotBodies(fixture.objects_json, fixture.encoding)
    writer = DeltaWriter(fixture)
    on_demand = fixture.on_demand_nodes()
    gap = sizes.latency_spacing / sizes.latency_clusters
    async with http_client(stack.url, 8) as http, http_client(stack.url, 16) as loader:
        everyone = await clusters_of(stack, http, sizes.latency_clusters + sizes.latency_background_clusters)
        clusters, others = everyone[: sizes.latency_clusters], everyone[sizes.latency_clusters :]
        for c in everyone:
            if await push(http, c, snapshot.body(1), "baseline") != 202:
                raise RuntimeError("baseline snapshot refused")
        await wait_applied(http, stack, everyone, 1)
        # The baseline's own analysis has run once its findings are listed.
        for c in clusters:
            await until_listed(http, stack, c, lambda names: bool(names), 120.0)
        log(
            f"{stack.name}: baselines applied and analysed; "
            f"{sizes.latency_trials} trials, one every {gap:.2f} s"
        )
        await asyncio.sleep(sizes.latency_spacing)
        sequences = {c.cluster_id: 1 for c in clusters}
        latencies: list[float] = []
        missed: list[str] = []

        async def trial(i: int) -> None:
            c = clusters[i % len(clusters)]
            name = f"lat-{i:03d}"
            base = sequences[c.cluster_id]
            sequence = base + 1
            sequences[c.cluster_id] = sequence
            body = writer.delta(
                sequence, base, sizes.changes_per_delta, eligible_workload(name, "shop", on_demand)
            )
            began = time.monotonic()
            status = await push(http, c, body, f"trial-{i}")
            if status != 202:
                missed.append(f"{name}: {status}")
                return
            if await until_listed(http, stack, c, lambda names: name in names, 60.0):
                latencies.append(time.monotonic() - began)
            else:
                missed.append(f"{name}: not listed within 60 s")

        stop = asyncio.Event()
        background_writer = DeltaWriter(fixture)
        background_answers: dict[str, int] = {}

        async def background(c: Credentials) -> None:
            # One cluster's share of the background rate, in order (an agent sends one push at a time).
            interval = len(others) / sizes.latency_background_per_second
            sequence, began = 1, time.monotonic()
            while not stop.is_set():
                body = background_writer.delta(sequence + 1, sequence, sizes.changes_per_delta)
                status = await push(loader, c, body, f"load-{sequence + 1}")
                background_answers[str(status)] = background_answers.get(str(status), 0) + 1
                sequence += 1
                await asyncio.sleep(max(0.0, began + (sequence - 1) * interval - time.monotonic()))

        pending: list[float] = []

        async def watch_queue() -> None:
            # The workers' own gauge of messages waiting in the stream (asked every 5 s by them).
            while not stop.is_set() and stack.worker_metrics:
                found = await worker_samples(stack.worker_metrics[:1])
                pending.append(found.get("shipshape_worker_queue_pending", 0.0))
                await asyncio.sleep(1.0)

        loads = [asyncio.create_task(background(c)) for c in others]
        loads.append(asyncio.create_task(watch_queue()))
        tasks = []
        start = time.monotonic()
        for i in range(sizes.latency_trials):
            await asyncio.sleep(max(0.0, start + i * gap - time.monotonic()))
            tasks.append(asyncio.create_task(trial(i)))
        await asyncio.gather(*tasks)
        stop.set()
        await asyncio.gather(*loads)
        loaded_for = time.monotonic() - start
        workers = await worker_samples(stack.worker_metrics)
    p99 = percentile(latencies, 99) if latencies else math.inf
    worker_figures = {}
    if stack.worker_metrics:
        worker_figures["workers"] = {
            "queuePendingMax": max(pending, default=0.0),
            "queueWaitSecondsMean": round(
                workers.get("shipshape_worker_queue_wait_seconds_sum", 0.0)
                / max(1.0, workers.get("shipshape_worker_queue_wait_seconds_count", 0.0)),
                3,
            ),
            "spotAnalyses": {
                result: workers.get(
                    f'shipshape_worker_analyses_total{{analysis="spot",result="{result}"}}', 0.0
                )
                for result in ("done", "skipped", "failed")
            },
        }
    return {
        **worker_figures,
        "clusters": len(clusters),
        "trials": sizes.latency_trials,
        "secondsBetweenPushesOfOneCluster": sizes.latency_spacing,
        "backgroundClusters": len(others),
        "backgroundDeltasPerSecond": round(sum(background_answers.values()) / loaded_for, 1),
        "backgroundAnswers": background_answers,
        "listed": len(latencies),
        "missed": missed,
        "latencySeconds": {
            "p50": round(percentile(latencies, 50), 3) if latencies else None,
            "p99": round(p99, 3) if latencies else None,
            "max": round(max(latencies), 3) if latencies else None,
        },
        "target": f"p99 <= {TARGET_LATENCY_P99_SECONDS:g} s",
        "pass": not missed and p99 <= TARGET_LATENCY_P99_SECONDS,
    }


ANALYSES = "shipshape_worker_analyses_total"


async def worker_samples(urls: Sequence[str]) -> dict[str, float]:
    """The workers' Prometheus samples summed over `urls`, keyed `name{label="value",...}`."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for url in urls:
        async with aiohttp.ClientSession() as scraper, scraper.get(url) as answer:
            text = await answer.text()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                key = f"{sample.name}{{{labels}}}" if labels else sample.name
                out[key] = out.get(key, 0.0) + sample.value
    return out


async def until_listed(
    http: aiohttp.ClientSession,
    stack: Stack,
    cluster: Credentials,
    found: Callable[[set[str]], bool],
    limit: float,
) -> bool:
    """Poll the cluster's open recommendations every 0.1 s until `found(names of their workloads)`."""
    deadline = time.monotonic() + limit
    path = f"/api/v1/clusters/{cluster.cluster_id}/recommendations"
    while time.monotonic() < deadline:
        async with http.get(path, params={"status": "open"}, headers=stack.user_headers()) as answer:
            if answer.status == 200:
                listed = await answer.json()
                if found(
                    {
                        r["recommendation"]["target"]["name"]
                        for r in listed
                        if r["recommendation"].get("target")
                    }
                ):
                    return True
            elif answer.status != 429:
                raise RuntimeError(f"recommendations answered {answer.status}: {await answer.text()}")
        await asyncio.sleep(0.1)
    return False


# ---- the agent on a 1,000-node cluster --------------------------------------------------------------------


def agent_scenario(nodes: int) -> Json:
    """`nodes` nodes up at start in two zones, half on demand and half spot. Node status is reported
    every 5 minutes when unchanged, as by the kubelet's nodeStatusReportFrequency default."""
    pools = []
    for zone in ("us-east-1a", "us-east-1b"):
        for name, capacity in (("od", "on-demand"), ("spot", "spot")):
            size = nodes // 4
            pools.append(
                {
                    "name": f"{name}-{zone[-1]}",
                    "instanceType": "m5.4xlarge",
                    "zone": zone,
                    "capacityType": capacity,
                    "cpu": "16",
                    "memory": "64Gi",
                    "initialSize": size,
                    "minSize": size,
                    "maxSize": size,
                }
            )
    return {
        "name": "agent-footprint",
        "seed": 7,
        "pools": pools,
        "autoscaler": {"enabled": False},
        "interruptions": {"enabled": False},
        "kubelet": {"preloadedImages": ["registry.example/app:1"], "nodeStatusReportSeconds": 300},
        # The ReplicaSet controller's client limit (20 writes/s upstream) would take 25 minutes to
        # create 30,000 pods; lifted, they are created in about a minute.
        "controllerManager": {"kubeApiQps": 0},
        "namespaces": ["bench"],
    }


async def get_json(http: aiohttp.ClientSession, path: str, **params: str) -> Json:
    async with http.get(path, params=params) as answer:
        answer.raise_for_status()
        loaded: Json = await answer.json(loads=orjson.loads)
        return loaded


async def populate(served: Served, nodes: int, per_node: int) -> float:
    """One Deployment of `per_node` replicas pinned to each node (nodeName in the template: the
    scheduler's search at 1,000 nodes is what bench/emulator.py measures, not this); returns the
    seconds until every pod ran."""
    began = time.monotonic()
    async with served.client(8) as http:
        deadline = time.monotonic() + 600
        while True:
            listed = await get_json(http, "/api/v1/nodes")
            ready = [
                n["metadata"]["name"]
                for n in listed["items"]
                if any(
                    c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", [])
                )
            ]
            if len(ready) >= nodes:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(ready)} of {nodes} nodes Ready after 600 s")
            await asyncio.sleep(2)
        log(
            f"agent: {nodes} nodes Ready after {time.monotonic() - began:.0f} s; creating {nodes} Deployments"
        )
        queue: asyncio.Queue[str] = asyncio.Queue()
        for name in sorted(ready):
            queue.put_nowait(name)

        async def creator() -> None:
            while not queue.empty():
                node = queue.get_nowait()
                manifest = {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {
                        "name": f"app-{node}",
                        "namespace": "bench",
                        "labels": {"app": f"app-{node}"},
                    },
                    "spec": {
                        "replicas": per_node,
                        "selector": {"matchLabels": {"app": f"app-{node}"}},
                        "template": {
                            "metadata": {"labels": {"app": f"app-{node}"}},
                            "spec": {
                                "nodeName": node,
                                "containers": [
                                    {
                                        "name": "app",
                                        "image": "registry.example/app:1",
                                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                                    }
                                ],
                            },
                        },
                    },
                }
                async with http.post("/apis/apps/v1/namespaces/bench/deployments", json=manifest) as answer:
                    if answer.status != 201:
                        raise RuntimeError(f"Deployment not created ({answer.status}): {await answer.text()}")

        await asyncio.gather(*(creator() for _ in range(4)))
        want = nodes * per_node
        last = 0.0
        while True:
            # Every pod created and none not running, as the API counts them (Ready can lag behind on a
            # loaded machine: a node whose heartbeat came late has its pods marked not ready, and the
            # agent mirrors them either way). A list with a selector has no remainingItemCount.
            pods = await count_of(served, "/api/v1/namespaces/bench/pods")
            waiting = await get_json(
                http, "/api/v1/namespaces/bench/pods", fieldSelector="status.phase!=Running", limit="1"
            )
            if pods >= want and not waiting["items"]:
                return time.monotonic() - began
            if time.monotonic() - last > 15:
                last = time.monotonic()
                log(
                    f"agent: {pods} of {want} pods created, not all running "
                    f"({time.monotonic() - began:.0f} s)"
                )
            if time.monotonic() - began > 1200:
                raise RuntimeError(f"{pods} of {want} pods created, not all running after 1200 s")
            await asyncio.sleep(3)


async def churn(served: Served, pods: list[tuple[str, str]], rate: float, seconds: float) -> int:
    """Patch `rate` pods a second (an annotation each: one MODIFIED event) for `seconds`."""
    sent = 0
    async with served.client(4) as http:
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            namespace, name = pods[sent % len(pods)]
            patch = {"metadata": {"annotations": {"bench.shipshape.dev/tick": str(sent)}}}
            async with http.patch(
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                data=orjson.dumps(patch),
                headers={"Content-Type": "application/merge-patch+json"},
            ) as answer:
                if answer.status != 200:
                    raise RuntimeError(f"pod patch answered {answer.status}: {await answer.text()}")
            sent += 1
            await asyncio.sleep(max(0.0, began + sent / rate - time.monotonic()))
    return sent


def agent_case(sizes: Sizes, workdir: Path) -> Json:
    nodes, per_node = sizes.agent_nodes, sizes.agent_pods_per_node
    with served_cluster(agent_scenario(nodes), workdir=workdir) as served:
        populated = asyncio.run(populate(served, nodes, per_node))
        log(
            f"agent: {nodes * per_node} pods running after {populated:.0f} s; "
            "starting the backend and the agent"
        )
        with contextlib.ExitStack() as stack:
            backend_dir = workdir / "backend"
            backend_dir.mkdir()
            backend = stack.enter_context(backend_stack("embedded", backend_dir))
            token_file = workdir / "agent-token"
            token_file.write_text(backend.first.token)
            with open(workdir / "agent.log", "wb") as agent_log:
                agent = subprocess.Popen(
                    [
                        *CLI,
                        "agent",
                        "--kubeconfig",
                        str(served.kubeconfig),
                        "--backend",
                        backend.url,
                        "--token-file",
                        str(token_file),
                        "--spool",
                        str(workdir / "spool"),
                        "--no-leader-election",  # one agent: no Lease (nor its namespace) needed
                    ],
                    cwd=workdir,
                    # As deploy/agent runs it: two malloc arenas, not one per thread.
                    env={**os.environ, "MALLOC_ARENA_MAX": "2"},
                    stdout=agent_log,
                    stderr=subprocess.STDOUT,
                )
                stack.callback(_stop, {"agent": agent})
                began = time.monotonic()
                stored = asyncio.run(until_stored(backend, nodes * per_node, 600.0, agent))
                synced = time.monotonic() - began
                rss_synced, peak_synced = memory_mib(agent.pid)
                cpu_synced = cpu_seconds(agent.pid)
                log(
                    f"agent: first snapshot stored after {synced:.0f} s "
                    f"(RSS {rss_synced:.0f} MiB, peak {peak_synced:.0f} MiB)"
                )
                pods = asyncio.run(pod_names(served))
                events = asyncio.run(count_of(served, "/api/v1/events"))
                cpu_before = cpu_seconds(agent.pid)
                churn_began = time.monotonic()
                changes = asyncio.run(
                    churn(served, pods, sizes.agent_changes_per_second, sizes.agent_seconds)
                )
                # Wait for the delta that carries the last changes (the agent pushes every 15 s).
                time.sleep(16)
                window = time.monotonic() - churn_began
                cpu_used = cpu_seconds(agent.pid) - cpu_before
                rss, peak = memory_mib(agent.pid)
                pushes = asyncio.run(agent_pushes(backend))
                if agent.poll() is not None:
                    raise RuntimeError(
                        f"the agent exited ({agent.returncode}): "
                        f"{(workdir / 'agent.log').read_text()[-2000:]}"
                    )
    percent = cpu_used / window * 100
    return {
        "nodes": nodes,
        "pods": nodes * per_node,
        "clusterReadySeconds": round(populated, 1),
        "firstSnapshotStoredSeconds": round(synced, 1),
        "storedPods": stored,
        # The rollout's Events (scheduled, pulled, created, started), which the agent mirrors too.
        "events": events,
        "cpuSecondsUntilFirstSnapshot": round(cpu_synced, 2),
        "podChanges": changes,
        "podChangesPerSecond": round(changes / sizes.agent_seconds, 2),
        "measuredSeconds": round(window, 1),
        "cpuPercentOfOneCore": round(percent, 2),
        "rssMiB": {"afterFirstSnapshot": round(rss_synced, 1), "end": round(rss, 1), "peak": round(peak, 1)},
        "pushesStored": pushes,
        "target": f"peak RSS < {TARGET_AGENT_RSS_MIB:g} MiB, "
        f"CPU < {TARGET_AGENT_CPU_PERCENT:g} % of one core",
        "pass": peak < TARGET_AGENT_RSS_MIB and percent < TARGET_AGENT_CPU_PERCENT,
    }


async def until_stored(stack: Stack, pods: int, limit: float, agent: subprocess.Popen[bytes]) -> int:
    """Until the backend holds the agent's first snapshot (the cluster's pod count): the count."""
    deadline = time.monotonic() + limit
    async with http_client(stack.url, 2) as http:
        while time.monotonic() < deadline:
            if agent.poll() is not None:
                raise RuntimeError(f"the agent exited ({agent.returncode})")
            async with http.get(
                f"/api/v1/clusters/{stack.first.cluster_id}", headers=stack.user_headers()
            ) as answer:
                body = await answer.json()
            if body.get("pod_count", 0) >= pods:
                return int(body["pod_count"])
            await asyncio.sleep(1)
    raise RuntimeError(f"the agent's snapshot was not stored within {limit:g} s")


async def count_of(served: Served, path: str, **params: str) -> int:
    """How many objects a list holds (its first item and `remainingItemCount`)."""
    async with served.client(1) as http:
        listed = await get_json(http, path, limit="1", **params)
    return len(listed["items"]) + int(listed["metadata"].get("remainingItemCount") or 0)


async def pod_names(served: Served) -> list[tuple[str, str]]:
    async with served.client(2) as http:
        listed = await get_json(http, "/api/v1/namespaces/bench/pods", limit="2000")
    return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in listed["items"]]


async def agent_pushes(stack: Stack) -> Json:
    """The backend's count of accepted pushes by schema (its Prometheus metrics)."""
    async with http_client(stack.url, 1) as http, http.get("/metrics") as answer:
        text = await answer.text()
    out: Json = {}
    for line in text.splitlines():
        if line.startswith("shipshape_backend_pushes_total{"):
            labels, value = line.rsplit(" ", 1)
            schema = labels.split('schema="', 1)[1].split('"', 1)[0].rsplit("/", 2)[-2]
            result = labels.split('result="', 1)[1].split('"', 1)[0]
            out[f"{schema}:{result}"] = int(float(value))
    return out


# ---- driver -----------------------------------------------------------------------------------------------


def run_case(name: str, stack_name: str | None, sizes: Sizes, fixture_path: Path, encoding: str) -> Json:
    with tempfile.TemporaryDirectory(prefix=f"bench-ingest-{name}-") as tmp:
        workdir = Path(tmp)
        if name == "agent":
            return agent_case(sizes, workdir)
        assert stack_name is not None
        fixture = Fixture.load(fixture_path, encoding)
        cases: dict[str, Callable[[Stack, Fixture, Sizes], Coroutine[Any, Any, Json]]] = {
            "snapshots": snapshots_case,
            "deltas": deltas_case,
            "latency": latency_case,
        }
        with backend_stack(stack_name, workdir) as stack:
            result = asyncio.run(cases[name](stack, fixture, sizes))
            result["backendPeakRssMiB"] = {
                label: round(memory_mib(p.pid)[1], 1) for label, p in stack.processes.items()
            }
            return result


def child(args: list[str], timeout: float) -> Json:
    done = subprocess.run(
        [sys.executable, __file__, *args],
        stdout=subprocess.PIPE,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}", "pass": False}
    loaded: Json = json.loads(done.stdout)
    return loaded


RATIO_KEYS = (
    "snapshotsAcceptedPerSecond",
    "snapshotsAppliedPerSecond",
    "deltasAcceptedPerSecond",
    "deltasAppliedPerSecond",
    "apiCpuMsPerPushWhileAccepting",
    "stackCpuMsPerPush",
)


def side_by_side(results: dict[str, Json]) -> Json:
    """scale / embedded for the figures both stacks report."""
    scale, embedded = results.get("scale", {}), results.get("embedded", {})
    ratios: Json = {}
    for key in RATIO_KEYS:
        a, b = scale.get(key), embedded.get(key)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
            ratios[key] = round(a / b, 2)
    a, b = (scale.get("latencySeconds") or {}).get("p99"), (embedded.get("latencySeconds") or {}).get("p99")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
        ratios["latencyP99"] = round(a / b, 2)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", action="append", choices=CASES, help="run only these cases (repeatable)")
    parser.add_argument(
        "--stack", action="append", choices=STACKS, help="run only on these stacks (repeatable)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer pushes and trials, a shorter agent run")
    parser.add_argument(
        "--encoding",
        choices=ENCODINGS,
        default=compression.ZSTD,
        help="how pushes are compressed: zstd as the agent sends them (default), gzip as older agents did",
    )
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fixture", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--build-fixture", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = QUICK if args.quick else Sizes()
    if args.build_fixture is not None:
        print(json.dumps(build_fixture(args.build_fixture)))
        return
    chosen = args.case or list(CASES)
    stacks = args.stack or list(STACKS)
    if args.in_process:
        (name,) = chosen
        began = time.perf_counter()
        result = run_case(name, stacks[0] if name in STACKED else None, sizes, args.fixture, args.encoding)
        result["caseWallSeconds"] = round(time.perf_counter() - began, 1)
        result["benchClientPeakRssMiB"] = round(max_rss_mib(), 1)
        print(json.dumps(result))
        return
    began = time.perf_counter()
    load_before = os.getloadavg()
    results: Json = {}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        fixture_path = Path(tmp) / "fixture.json"
        fixture: Json = {}
        if any(c in STACKED for c in chosen):
            log("building the 100-node / 3,000-pod fixture in the emulator ...")
            fixture = child(["--build-fixture", str(fixture_path)], 900)
            log(f"fixture: {json.dumps(fixture)}")
        for name in chosen:
            if name == "agent":
                log("agent ...")
                results[name] = child(
                    ["--in-process", "--case", name, *(["--quick"] if args.quick else [])], 2400
                )
                log(f"agent: {json.dumps(results[name])}")
                continue
            per_stack: Json = {}
            for stack in stacks:
                log(f"{name} on {stack} ...")
                load = os.getloadavg()[0]
                argv = ["--in-process", "--case", name, "--stack", stack, "--fixture", str(fixture_path)]
                argv += ["--encoding", args.encoding]
                per_stack[stack] = child([*argv, *(["--quick"] if args.quick else [])], 1200)
                per_stack[stack]["loadAverage1mBefore"] = round(load, 2)
                log(f"{name} on {stack}: {json.dumps(per_stack[stack])}")
            results[name] = {
                **per_stack,
                "scaleOverEmbedded": side_by_side(per_stack),
                "pass": all(r.get("pass") for r in per_stack.values()),
            }
    load_after = os.getloadavg()
    summary = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "loadAverage": {
                "before": [round(x, 2) for x in load_before],
                "after": [round(x, 2) for x in load_after],
            },
        },
        "quick": args.quick,
        "encoding": args.encoding,
        "fixture": fixture,
        "cases": results,
        "pass": all(r.get("pass") for r in results.values()),
        "wallSeconds": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
