"""The controller process run in this test process against a served emulator on an accelerated clock.

`controller(cluster)` starts a `ControllerProcess` with the emulator's clock (so its deadlines and
Lease times are emulated time) and its own API client; `AvailabilityWatcher` is the independent
check: it follows the emulator's watch stream (Deployments, pods, PDBs) in the emulator's own loop
and records every moment a managed Deployment had zero ready replicas or fewer than its PDB allows.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import config as kube_config

from shipshape.controller.leader import LeaseSettings
from shipshape.controller.loops import LoopSettings
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.process import ControllerProcess, ProcessSettings
from shipshape.controller.surge import RESTARTED_AT
from shipshape.emulator.resources import DEPLOYMENTS, PDBS, PODS, STATEFULSETS
from shipshape.emulator.store import WatchEvent
from shipshape.kube.labels import from_label_selector
from tests.integration.emulator.served_cluster import ServedCluster
from tests.manifests import deployment

Obj = dict[str, Any]


@dataclass
class DeploymentHistory:
    """Every distinct (replicas, restartedAt) a Deployment went through, from the emulator's watch stream."""

    cluster: ServedCluster
    namespace: str
    states: dict[str, list[tuple[int, str | None]]] = field(default_factory=dict)
    # Restarts (a new restartedAt) made while the previous rollout was still under way.
    restarts_mid_rollout: list[tuple[str, str | None]] = field(default_factory=list)
    _rolled_out: dict[str, bool] = field(default_factory=dict)
    _unsubscribe: Callable[[], None] | None = None

    def start(self) -> None:
        store = self.cluster.served.cluster.store

        def begin() -> None:
            for dep in store.list(DEPLOYMENTS, self.namespace):
                self._record(dep)
            self._unsubscribe = store.subscribe(self._on_event)

        self.cluster.call(begin)

    def _on_event(self, event: WatchEvent) -> None:
        if (
            event.resource.kind == DEPLOYMENTS.kind
            and event.object["metadata"].get("namespace") == self.namespace
        ):
            self._record(event.object)

    def _record(self, dep: Obj) -> None:
        template = dep["spec"]["template"].get("metadata") or {}
        state = (int(dep["spec"].get("replicas", 1)), (template.get("annotations") or {}).get(RESTARTED_AT))
        name = dep["metadata"]["name"]
        history = self.states.setdefault(name, [])
        if history and history[-1][1] != state[1] and not self._rolled_out.get(name, True):
            self.restarts_mid_rollout.append((name, state[1]))
        if not history or history[-1] != state:
            history.append(state)
        status = dep.get("status") or {}
        replicas = int(dep["spec"].get("replicas", 1))
        self._rolled_out[name] = (
            status.get("observedGeneration") == dep["metadata"].get("generation")
            and status.get("updatedReplicas", 0) == replicas
            and status.get("replicas", 0) == replicas
        )

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self.cluster.call(self._unsubscribe)


def managed_deployment(name: str, replicas: int, annotations: dict[str, str] | None = None) -> str:
    """A Deployment opted in to the controller (plus `annotations`) as YAML for `kubectl apply`: small
    nginx pods (50m, 64Mi) that terminate within 2 s, labelled `app: <name>`."""
    annotated = {"annotations": {"spot.shipshape.dev/enabled": "true", **(annotations or {})}}
    body = deployment(name, replicas, cpu="50m", memory="64Mi", grace_seconds=2, metadata=annotated)
    return yaml.safe_dump(body, sort_keys=False)


@contextlib.contextmanager
def controller(
    cluster: ServedCluster,
    workdir: Path,
    identity: str = "controller-0",
    config: ControllerConfig | None = None,
    loops: LoopSettings | None = None,
    release_lease: bool = True,
    kubeconfig: Path | None = None,
    webhook_process: bool = True,
) -> Iterator[ControllerProcess]:
    loader: Any = kube_config
    api_client = loader.new_client_from_config(config_file=str(kubeconfig or cluster.served.kubeconfig))
    settings = ProcessSettings(
        identity=identity,
        lease=LeaseSettings(duration_seconds=15, retry_seconds=2.0),
        loops=loops or LoopSettings(headroom_enabled=False),
        # At 40x, the default 30 s back-off would be 20 emulated minutes of a stale cache.
        informer_backoff_max_seconds=1.0,
        # The API server admits a pod unplaced when the webhook does not answer in time (failure
        # policy Ignore); the tests assert that every pod was placed, and the test run shares two
        # cores with another worker and the served emulator: a slow answer must not pass for none.
        webhook_timeout_seconds=10,
        webhook_process=webhook_process,
    )
    process = ControllerProcess(
        api_client, config or ControllerConfig(), settings, cluster.clock, workdir=workdir
    )
    process.start()
    try:
        yield process
    finally:
        process.stop(release_lease=release_lease)
        api_client.close()


def is_ready(pod: Obj) -> bool:
    if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Running":
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass
class Breach:
    at: float
    deployment: str
    ready: int
    floor: int


@dataclass
class AvailabilityWatcher:
    """Ready replicas per watched Deployment or StatefulSet after every event of the emulator's watch
    stream; the floor is the PDB's (minAvailable, or replicas - maxUnavailable), at least one."""

    cluster: ServedCluster
    namespace: str
    names: tuple[str, ...]
    pods: dict[str, Obj] = field(default_factory=dict)
    breaches: list[Breach] = field(default_factory=list)
    lowest: dict[str, int] = field(default_factory=dict)
    _deployments: dict[str, Obj] = field(default_factory=dict)
    _pdbs: dict[str, Obj] = field(default_factory=dict)
    _unsubscribe: Callable[[], None] | None = None

    def start(self) -> None:
        store = self.cluster.served.cluster.store

        def begin() -> None:
            for pod in store.list(PODS, self.namespace):
                self.pods[pod["metadata"]["name"]] = pod
            for rt in (DEPLOYMENTS, STATEFULSETS):
                for dep in store.list(rt, self.namespace):
                    self._deployments[dep["metadata"]["name"]] = dep
            for pdb in store.list(PDBS, self.namespace):
                self._pdbs[pdb["metadata"]["name"]] = pdb
            self._unsubscribe = store.subscribe(self._on_event)
            self._check()

        self.cluster.call(begin)

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        if obj.get("metadata", {}).get("namespace") != self.namespace:
            return
        table = {
            PODS.kind: self.pods,
            DEPLOYMENTS.kind: self._deployments,
            STATEFULSETS.kind: self._deployments,
            PDBS.kind: self._pdbs,
        }.get(event.resource.kind)
        if table is None:
            return
        if event.type == "DELETED":
            table.pop(obj["metadata"]["name"], None)
        else:
            table[obj["metadata"]["name"]] = obj
        if event.resource.kind == PODS.kind:
            self._check()

    def floor(self, name: str) -> int:
        dep = self._deployments.get(name)
        if dep is None:
            return 0
        labels = dep["spec"]["template"]["metadata"].get("labels", {})
        floors = [1]
        for pdb in self._pdbs.values():
            if from_label_selector(pdb["spec"].get("selector") or {}).matches(labels):
                expected = int(dep["spec"].get("replicas", 1))
                minimum = pdb["spec"].get("minAvailable")
                maximum = pdb["spec"].get("maxUnavailable")
                if isinstance(minimum, int):
                    floors.append(minimum)
                elif isinstance(minimum, str) and minimum.endswith("%"):
                    floors.append(math.ceil(int(minimum[:-1]) * expected / 100))
                elif isinstance(maximum, int):
                    floors.append(expected - maximum)
                elif isinstance(maximum, str) and maximum.endswith("%"):
                    floors.append(expected - math.ceil(int(maximum[:-1]) * expected / 100))
        return max(floors)

    def ready(self, name: str) -> int:
        dep = self._deployments.get(name)
        if dep is None:
            return 0
        selector = from_label_selector(dep["spec"]["selector"])
        return sum(
            1
            for pod in self.pods.values()
            if selector.matches(pod["metadata"].get("labels", {})) and is_ready(pod)
        )

    def _check(self) -> None:
        now = self.cluster.clock.now()
        for name in self.names:
            ready, floor = self.ready(name), self.floor(name)
            self.lowest[name] = min(self.lowest.get(name, ready), ready)
            if ready < floor:
                self.breaches.append(Breach(now, name, ready, floor))

    def stop(self) -> None:
        unsubscribe = self._unsubscribe
        if unsubscribe is not None:
            self.cluster.call(unsubscribe)


class ApiOutage:
    """A TCP proxy in front of the emulator's API server that can go down: connections are cut and new
    ones refused, as when an API server is unavailable. `kubeconfig` points the controller at it."""

    def __init__(self, cluster: ServedCluster, workdir: Path) -> None:
        upstream = urlsplit(cluster.served.url)
        self.upstream = (upstream.hostname or "127.0.0.1", upstream.port or 443)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._up = threading.Event()
        self._up.set()
        self._stop = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        document = yaml.safe_load(cluster.served.kubeconfig.read_text())
        for entry in document["clusters"]:
            entry["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = workdir / "kubeconfig-via-proxy"
        workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.write_text(yaml.safe_dump(document))
        threading.Thread(target=self._accept, name="api-proxy", daemon=True).start()

    def _accept(self) -> None:
        self.listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._up.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, server}
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        self._up.clear()
        with self._lock:
            cut, self._sockets = self._sockets, set()
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def up(self) -> None:
        self._up.set()

    def close(self) -> None:
        self._stop.set()
        self.down()
        self.listener.close()
