"""A served emulated cluster with every model running on an accelerated clock, and ways to drive it.

The scenario is small and seeded: two spot pools in two zones and an on-demand pool in a third,
random spot reclaims and the autoscaler off, so that what a test sees depends only on what it
does. `Kubectl` runs the real kubectl against it; `ServedCluster.wait` polls with a deadline in
emulated seconds (converted to real time by the clock's speed, plus slack for a loaded machine).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config, watch

from shipshape.emulator import assembly
from shipshape.emulator.resources import NODES, PODS, ResourceType
from shipshape.emulator.scenario import Scenario, parse
from shipshape.emulator.store import Obj
from shipshape.kube.clock import ScaledClock
from tests.emulator_fixtures import ServedEmulator, running

T = TypeVar("T")

SPEED = 40.0
# Real seconds added to every wait: the machine is shared, the loop may stall for a while.
SLACK_SECONDS = 8.0

SPOT_A = "spot-a"
SPOT_B = "spot-b"
ON_DEMAND = "od-c"


def scenario_doc(**sections: Any) -> dict[str, Any]:
    """The test cluster: 2 + 2 spot nodes (m5.large) and 2 on-demand nodes (m5.xlarge)."""
    spot = {
        "instanceType": "m5.large",
        "capacityType": "spot",
        "cpu": "2",
        "memory": "8Gi",
        "initialSize": 2,
        "maxSize": 4,
        "interruptionRate": 0,
    }
    doc: dict[str, Any] = {
        "name": "acceptance",
        "seed": 11,
        "pools": [
            {**spot, "name": SPOT_A, "zone": "us-east-1a"},
            {**spot, "name": SPOT_B, "zone": "us-east-1b"},
            {
                "name": ON_DEMAND,
                "instanceType": "m5.xlarge",
                "zone": "us-east-1c",
                "capacityType": "on-demand",
                "cpu": "4",
                "memory": "16Gi",
                "initialSize": 2,
                "maxSize": 4,
            },
        ],
        "autoscaler": {"enabled": False},
        "interruptions": {"rateMultiplier": 0},
        "kubelet": {"preloadedImages": ["nginx:1.27", "nginx:1.28", "busybox:1.36"]},
        "usage": [{"pattern": "steady", "cpu": 0.5, "memory": 0.5}],
    }
    doc.update(sections)
    return doc


def scenario(**sections: Any) -> Scenario:
    return parse(scenario_doc(**sections), "acceptance scenario")


class Kubectl:
    """The real kubectl against the served cluster; `ok=True` asserts a zero exit status."""

    def __init__(self, kubeconfig: Path, cache: Path) -> None:
        self.base = ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache)]

    def command(self, *args: str) -> list[str]:
        return [*self.base, *args]

    def __call__(
        self, *args: str, stdin: str | None = None, ok: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(*args), input=stdin, capture_output=True, text=True, timeout=timeout
        )
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done


@dataclass
class ServedCluster:
    """The served emulator, the real clients pointed at it, and reads of its state on its loop."""

    served: ServedEmulator
    clock: ScaledClock
    kubectl: Kubectl
    # The official client's models are only partly typed (Optional everywhere): used as Any here.
    api_client: Any

    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.api_client)

    @property
    def apps(self) -> Any:
        return client.AppsV1Api(self.api_client)

    def now(self) -> float:
        """Emulated time (POSIX seconds)."""
        return self.clock.now()

    def call(self, fn: Callable[[], T]) -> T:
        return self.served.call(fn)

    def objects(self, rt: ResourceType, namespace: str | None = None) -> list[Obj]:
        store = self.served.cluster.store
        return self.call(lambda: store.list(rt, namespace))

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        store = self.served.cluster.store
        return self.call(lambda: store.get(rt, namespace, name))

    def nodes_of(self, pool: str) -> list[str]:
        return sorted(
            n["metadata"]["name"]
            for n in self.objects(NODES)
            if n["metadata"]["labels"].get("emulator.shipshape.dev/pool") == pool
        )

    def pods(self, namespace: str = "default", **labels: str) -> list[Obj]:
        return [
            p
            for p in self.objects(PODS, namespace)
            if all(p["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
        ]

    def wait(
        self, what: str, check: Callable[[], T | None], emulated_seconds: float, slack: float = SLACK_SECONDS
    ) -> T:
        """Poll `check` until it returns something truthy, for `emulated_seconds` of emulated time
        (plus `slack` real seconds)."""
        deadline = time.monotonic() + self.clock.real_seconds(emulated_seconds) + slack
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {emulated_seconds:g}s emulated: {what}")
            time.sleep(0.05)


def ready_pods(pods: list[Obj]) -> list[Obj]:
    """Pods that are Running with condition Ready=True and not being deleted."""
    return [p for p in pods if is_ready(p)]


def is_ready(pod: Obj) -> bool:
    if pod["metadata"].get("deletionTimestamp") or pod.get("status", {}).get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions") or []
    )


@contextlib.contextmanager
def serve_cluster(workdir: Path, sc: Scenario | None = None, speed: float = SPEED) -> Iterator[ServedCluster]:
    """Serve the test scenario (or `sc`) with all models at `speed`x until the block exits."""
    clock = ScaledClock(speed)
    cluster = assembly.build(sc or scenario(), clock)
    with running(cluster, workdir) as served:
        kube_config: Any = config
        api_client = kube_config.new_client_from_config(config_file=str(served.kubeconfig))
        try:
            sc_cluster = ServedCluster(
                served, clock, Kubectl(served.kubeconfig, workdir / "kube-cache"), api_client
            )
            sc_cluster.wait("every initial node Ready", lambda: _all_nodes_ready(sc_cluster, 6), 60)
            yield sc_cluster
        finally:
            api_client.close()


def _all_nodes_ready(cluster: ServedCluster, count: int) -> bool:
    nodes = cluster.objects(NODES)
    ready = [
        n
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])
    ]
    return len(ready) >= count


class Watch:
    """A python-client watch in a background thread, from a list's resourceVersion, keeping every
    event in order with the emulated time it arrived. A broken stream fails the test at `stop()`.
    """

    def __init__(
        self, cluster: ServedCluster, list_call: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        # The list as the server sent it (the client's models would rewrite timestamps).
        listed: Obj = json.loads(list_call(*args, _preload_content=False, **kwargs).data)
        self.initial: list[Obj] = listed["items"]
        self.events: list[tuple[str, Obj, float]] = []
        self.error: BaseException | None = None
        self._stopping = False
        kube_watch: Any = watch  # the client's watch module has no type hints
        self._watch = kube_watch.Watch()
        stream = self._watch.stream(
            list_call,
            *args,
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_seconds=300,
            **kwargs,
        )
        self._thread = threading.Thread(target=self._run, args=(cluster, stream), name="watch", daemon=True)
        self._thread.start()

    def _run(self, cluster: ServedCluster, stream: Iterator[dict[str, Any]]) -> None:
        try:
            for event in stream:
                if event["type"] == "ERROR":
                    raise AssertionError(f"the watch answered an error: {event['raw_object']}")
                self.events.append((event["type"], event["raw_object"], cluster.now()))
        except Exception as exc:  # reported by stop(), on the test's thread
            if not self._stopping:
                self.error = exc

    def stop(self) -> None:
        self._stopping = True
        self._watch.stop()
        self._thread.join(10)
        if self.error is not None:
            raise AssertionError(f"the watch broke off: {self.error!r}") from self.error


class PodWatch(Watch):
    """A watch on pods; `states()` replays it: the pods (by name) as it showed them after each event."""

    def __init__(self, cluster: ServedCluster, namespace: str, label_selector: str) -> None:
        super().__init__(cluster, cluster.core.list_namespaced_pod, namespace, label_selector=label_selector)

    def states(self) -> Iterator[dict[str, Obj]]:
        pods = {p["metadata"]["name"]: p for p in self.initial}
        yield dict(pods)
        for kind, obj, _ in list(self.events):
            if kind == "BOOKMARK":
                continue
            name = obj["metadata"]["name"]
            if kind == "DELETED":
                pods.pop(name, None)
            else:
                pods[name] = obj
            yield dict(pods)
