"""`shipshape demo`: an emulated cluster served on this machine, the placement controller running
against it, and a narrated spot interruption.

The show runs on the same event loop as the emulator (API server, engine and models), so it reads
the cluster's store directly; everything it shows can also be seen with kubectl through the
kubeconfig it writes. The controller is the real one (`shipshape controller`): it talks to the served
API server over HTTPS from its own threads, on the emulator's clock. Acts: the nodes by pool, the
controller starting, the workloads coming up with the controller's placement decisions, a spot pool
reclaimed with a 2-minute notice and what the controller did about it (surges, restarts, the lowest
ready replicas against each budget), the cost beside the same nodes on demand, and (with the
backend) the right-sizing the backend recommends from the usage the agent collected, which the
newcomer approves in the dashboard and sees the agent apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table

from shipshape.agent.instructions import Executor, InstructionClient, InstructionLoop
from shipshape.agent.mirror import Mirror
from shipshape.agent.pusher import Pusher
from shipshape.agent.runner import Agent, AgentSettings
from shipshape.agent.runner import sources as agent_sources
from shipshape.agent.spool import Spool
from shipshape.agent.usage import MetricsApi, UsageLoop, UsageSettings, owners_from
from shipshape.backend.service import EmbeddedBackend
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import engine as store_engine
from shipshape.backend.store import repository as repo
from shipshape.cli import common
from shipshape.cli import emulator as emulator_cli
from shipshape.contracts.annotations import (
    EMULATOR_POOL_LABEL,
    EMULATOR_SPOT_INTERRUPTION_TAINT,
    DecisionRecord,
    RestartNote,
    SurgeNote,
)
from shipshape.controller.availability import pdb_floor
from shipshape.controller.leader import LeaseSettings
from shipshape.controller.loops import LoopSettings
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.process import ControllerProcess, ProcessSettings
from shipshape.emulator import assembly
from shipshape.emulator import scenario as scenario_mod
from shipshape.emulator.apiserver import runner
from shipshape.emulator.cloud.model import CloudModel
from shipshape.emulator.resources import DEPLOYMENTS, NODES, PDBS, PODS, STATEFULSETS
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.store import Obj
from shipshape.kube import errors, objects
from shipshape.kube import informers as kit
from shipshape.kube.client import KubeClientError, load_api_client
from shipshape.kube.clock import ScaledClock, parse_time
from shipshape.kube.labels import from_label_selector

log = logging.getLogger(__name__)

NOTICE_SECONDS = 120.0
DEFAULT_SCENARIO = Path("examples/scenarios/demo.yaml")
DEFAULT_WORKDIR = Path(".emulator/demo")  # a folder per run under it: <scenario>-<port>
# Emulated time begins this far in the past: at --speed 10 it stays behind the wall clock for 13 min.
DEFAULT_START = "2h"
POLL_SECONDS = 0.05


# ---- pure views of the cluster state ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolRow:
    pool: str
    capacity_type: str
    instance_type: str
    zone: str
    ready: int
    nodes: int
    price_per_hour: float


def pool_rows(pools: Iterable[dict[str, Any]], nodes: Iterable[Obj]) -> list[PoolRow]:
    """One row per pool of the cloud (`pools_view()`), with its Node objects counted (ready/all)."""
    counted: Counter[str] = Counter()
    ready: Counter[str] = Counter()
    for node in nodes:
        pool = (node["metadata"].get("labels") or {}).get(EMULATOR_POOL_LABEL)
        if pool is None:
            continue
        counted[pool] += 1
        ready[pool] += objects.node_ready(node)
    return [
        PoolRow(
            pool=p["name"],
            capacity_type=p["capacityType"],
            instance_type=p["instanceType"],
            zone=p["zone"],
            ready=ready[p["name"]],
            nodes=counted[p["name"]],
            price_per_hour=float(p["pricePerHour"]),
        )
        for p in sorted(pools, key=lambda p: (p["capacityType"], p["name"]))
    ]


def deployment_available(deployment: Obj) -> bool:
    """Rolled out and fully available, as `kubectl rollout status` and `kubectl wait` judge it."""
    spec, status = deployment.get("spec", {}), deployment.get("status", {})
    desired = int(spec.get("replicas", 1))
    generation = deployment["metadata"].get("generation", 0)
    return (
        status.get("observedGeneration", 0) >= generation
        and int(status.get("updatedReplicas", 0)) >= desired
        and int(status.get("availableReplicas", 0)) >= desired
        and int(status.get("replicas", 0)) == desired
    )


def statefulsets_ready(statefulsets: Iterable[Obj]) -> bool:
    """Every StatefulSet has all its replicas Ready (the reclaim waits for them as for Deployments)."""
    return all(
        int(s.get("status", {}).get("readyReplicas", 0)) >= int(s.get("spec", {}).get("replicas", 1))
        for s in statefulsets
    )


def rollout_progress(deployments: Iterable[Obj]) -> tuple[int, int, bool]:
    """(available replicas, desired replicas, every Deployment available) over `deployments`."""
    available = desired = 0
    every = True
    for deployment in deployments:
        want = int(deployment.get("spec", {}).get("replicas", 1))
        desired += want
        available += min(want, int(deployment.get("status", {}).get("availableReplicas", 0)))
        every = every and deployment_available(deployment)
    return available, desired, every


def owner_of(pod: Obj) -> str:
    """`Kind/name` of the workload a pod belongs to (a ReplicaSet's pods count for its Deployment)."""
    owner = objects.workload_of(pod)
    return str(owner) if owner is not None else f"Pod/{objects.name(pod)}"


def is_workload_pod(pod: Obj) -> bool:
    """A pod a drain moves: not a DaemonSet's, not finished, not already being deleted."""
    return objects.is_active(pod) and not objects.is_daemon_pod(pod)


def pods_per_pool(pods: Iterable[Obj], pool_of_node: dict[str, str]) -> Counter[str]:
    """Workload pods bound to each pool's nodes."""
    counts: Counter[str] = Counter()
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName")
        if node and node in pool_of_node and is_workload_pod(pod):
            counts[pool_of_node[node]] += 1
    return counts


def busiest_spot_pool(pools: Iterable[dict[str, Any]], per_pool: Counter[str]) -> str | None:
    """The spot pool whose loss moves the most workload pods (ties: the first by name)."""
    spot = sorted(p["name"] for p in pools if p["capacityType"] == "spot" and p["ready"] + p["booting"] > 0)
    if not spot:
        return None
    best: str = max(spot, key=lambda name: (per_pool[name], [-ord(ch) for ch in name]))
    return best


def on_demand_equivalent(cost: dict[str, Any], pools: Iterable[dict[str, Any]]) -> float:
    """What the same node-hours would have cost at on-demand prices."""
    od_price = {p["name"]: float(p.get("onDemandPricePerHour") or p["pricePerHour"]) for p in pools}
    return sum(float(entry["nodeHours"]) * od_price.get(name, 0.0) for name, entry in cost["byPool"].items())


def noticed_nodes(nodes: Iterable[Obj]) -> set[str]:
    """Nodes that carry the cloud's spot interruption taint (their instance has a notice)."""
    return {
        n["metadata"]["name"]
        for n in nodes
        if any(
            t.get("key") == EMULATOR_SPOT_INTERRUPTION_TAINT for t in n.get("spec", {}).get("taints") or []
        )
    }


def hourly_rates(pools: Iterable[dict[str, Any]]) -> tuple[float, float]:
    """(USD/hour of the running nodes, USD/hour of the same nodes at on-demand prices)."""
    now = on_demand = 0.0
    for pool in pools:
        running = int(pool.get("ready", 0)) + int(pool.get("booting", 0))
        price = float(pool["pricePerHour"])
        now += running * price
        on_demand += running * float(pool.get("onDemandPricePerHour") or price)
    return now, on_demand


def decision_of(pod: Obj) -> DecisionRecord | None:
    """The controller's placement decision recorded on a pod (`spot.shipshape.dev/decision`), if any."""
    return DecisionRecord.read(pod)


@dataclass(frozen=True, slots=True)
class PlacementRow:
    workload: str
    pods: int
    on_demand: int
    spot: int
    pools: tuple[str, ...]
    reasons: tuple[str, ...]


def placement_rows(pods: Iterable[Obj], capacity_of_node: dict[str, str]) -> list[PlacementRow]:
    """Per workload with controller decisions: where its pods run (by their node's capacity type) and
    the reasons the controller gave, most frequent first."""
    running: dict[str, Counter[str]] = {}
    pools: dict[str, set[str]] = {}
    reasons: dict[str, Counter[str]] = {}
    for pod in pods:
        decision = decision_of(pod)
        if decision is None or not is_workload_pod(pod):
            continue
        owner = owner_of(pod)
        running.setdefault(owner, Counter())
        reasons.setdefault(owner, Counter())[decision.reason] += 1
        capacity = capacity_of_node.get(pod.get("spec", {}).get("nodeName") or "")
        if capacity is not None:
            running[owner][capacity] += 1
        if decision.capacity_type == "spot" and decision.pool:
            pools.setdefault(owner, set()).add(decision.pool)
    return [
        PlacementRow(
            workload=owner,
            pods=sum(reasons[owner].values()),
            on_demand=running[owner]["on-demand"],
            spot=running[owner]["spot"],
            pools=tuple(sorted(pools.get(owner, ()))),
            reasons=tuple(reason for reason, _ in reasons[owner].most_common()),
        )
        for owner in sorted(running)
    ]


def ready_replicas(pods: Iterable[Obj]) -> Counter[str]:
    """Ready pods per workload (`Kind/name`), not counting pods being deleted."""
    counts: Counter[str] = Counter()
    for pod in pods:
        if not is_workload_pod(pod):
            continue
        if objects.pod_ready(pod):
            counts[owner_of(pod)] += 1
    return counts


def workload_floors(workloads: Iterable[Obj], pdbs: Iterable[Obj]) -> dict[str, tuple[int, int]]:
    """(spec.replicas, the strictest selecting PDB's desired healthy pods, else 1) per `Kind/name`."""
    budgets = list(pdbs)
    out: dict[str, tuple[int, int]] = {}
    for workload in workloads:
        meta, spec = workload["metadata"], workload.get("spec", {})
        replicas = int(spec.get("replicas", 1))
        labels = (spec.get("template", {}).get("metadata") or {}).get("labels") or {}
        floors = [
            pdb_floor(pdb, replicas)
            for pdb in budgets
            if pdb["metadata"].get("namespace") == meta.get("namespace")
            and from_label_selector(pdb.get("spec", {}).get("selector")).matches(labels)
        ]
        out[f"{workload['kind']}/{meta['name']}"] = (replicas, max([1, *floors]))
    return out


class LowestReady:
    """The fewest Ready replicas each workload had, following pod events (an independent check of the
    controller: it reads the emulator's own watch stream, not the controller's cache)."""

    def __init__(self, pods: Iterable[Obj], workloads: Iterable[str]) -> None:
        self.pods = {p["metadata"]["uid"]: p for p in pods}
        ready = ready_replicas(self.pods.values())
        self.lowest = {w: ready[w] for w in workloads}

    def observe(self, event_type: str, pod: Obj) -> None:
        if event_type == "DELETED":
            self.pods.pop(pod["metadata"]["uid"], None)
        else:
            self.pods[pod["metadata"]["uid"]] = pod
        owner = owner_of(pod)
        if owner in self.lowest:
            now = ready_replicas(p for p in self.pods.values() if owner_of(p) == owner)[owner]
            self.lowest[owner] = min(self.lowest[owner], now)


def controller_actions(workloads: Iterable[Obj], seen: set[tuple[str, str]]) -> list[str]:
    """One line per surge or surge restart the controller recorded on a Deployment since `seen`
    (which it updates): the notes it writes (`spot.shipshape.dev/surge`, `.../interruption-restart`)."""
    lines = []
    for workload in workloads:
        name = f"{workload['kind']}/{workload['metadata']['name']}"
        surge, restart = SurgeNote.read(workload), RestartNote.read(workload)
        if surge is not None and ("surge", name) not in seen:
            seen.add(("surge", name))
            lines.append(
                f"controller surged {name}: +{surge.surge} replica(s), so that the replacements are Ready "
                "before the noticed nodes go"
            )
        if restart is not None and ("restart:" + restart.dump(), name) not in seen:
            seen.add(("restart:" + restart.dump(), name))
            lines.append(
                f"controller restarted {name} with a surge: its new pod starts on a safe node before "
                "the old one goes"
            )
    return lines


def short_node(name: str) -> str:
    """`ip-10-0-1-5.ec2.internal` -> `ip-10-0-1-5` (enough to tell nodes apart on screen)."""
    return name.split(".", 1)[0]


# ---- the show ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShowSettings:
    notice_seconds: float = NOTICE_SECONDS
    # Limits in emulated seconds so that a broken cluster ends the show instead of hanging it.
    rollout_timeout: float = 900.0
    recovery_timeout: float = 1200.0
    # The backend right-sizes after `DEMO_MIN_HISTORY` of usage; it has this long to do it.
    rightsizing_timeout: float = 1800.0


class ShowFailed(Exception):
    """A step of the show did not complete in time."""


class NodeTicker:
    """Prints nodes that joined, got a spot interruption notice or went away since the last tick."""

    def __init__(self, show: Show) -> None:
        self.show = show
        self.known = show.pool_of_node()
        self.noticed = noticed_nodes(show.cluster.store.list(NODES))

    def tick(self) -> None:
        show = self.show
        current = show.pool_of_node()
        noticed = noticed_nodes(show.cluster.store.list(NODES))
        for name in sorted(set(current) - set(self.known)):
            show.console.print(f"{show.stamp()} node {short_node(name)} joined pool {current[name]}")
        for name in sorted(noticed - self.noticed):
            show.console.print(f"{show.stamp()} node {short_node(name)} got a spot interruption notice")
        for name in sorted(set(self.known) - set(current)):
            show.console.print(f"{show.stamp()} node {short_node(name)} terminated")
        self.known, self.noticed = current, noticed


class Show:
    """The scripted acts, reading the cluster's store and steering its cloud, on the emulator's loop."""

    def __init__(
        self,
        cluster: Cluster,
        console: Console,
        settings: ShowSettings,
        controller: ControllerProcess | None = None,
        board: Dashboard | None = None,
    ) -> None:
        self.cluster = cluster
        self.console = console
        self.settings = settings
        self.controller = controller
        self.board = board
        # The right-sizing recommendations shown, by id, as last reported.
        self.rightsizing: dict[str, dict[str, Any]] = {}
        self.started_at = cluster.now()
        # The controller's own objects (headroom placeholders) are not the scenario's workloads.
        self.controller_namespace = controller.config.namespace if controller is not None else None

    @property
    def cloud(self) -> CloudModel:
        cloud: CloudModel = self.cluster.services["cloud"]
        return cloud

    def elapsed(self) -> float:
        return self.cluster.now() - self.started_at

    def stamp(self) -> str:
        return f"[dim]t+{self.elapsed():.0f}s[/dim]".ljust(len("[dim]t+1000s[/dim]"))

    def pool_of_node(self) -> dict[str, str]:
        out = {}
        for node in self.cluster.store.list(NODES):
            pool = (node["metadata"].get("labels") or {}).get(EMULATOR_POOL_LABEL)
            if pool:
                out[node["metadata"]["name"]] = pool
        return out

    async def until(
        self, done: Callable[[], bool], limit: float, tick: Callable[[], None] | None = None
    ) -> None:
        """Poll `done` (and `tick`) until it holds; ShowFailed after `limit` emulated seconds."""
        deadline = self.cluster.now() + limit
        while not done():
            if tick is not None:
                tick()
            if self.cluster.now() > deadline:
                raise ShowFailed(f"not done after {limit:.0f} emulated seconds")
            await asyncio.sleep(POLL_SECONDS)
        if tick is not None:
            tick()

    def workloads(self) -> list[Obj]:
        """The scenario's Deployments (not the controller's placeholders)."""
        return [
            d
            for d in self.cluster.store.list(DEPLOYMENTS)
            if d["metadata"].get("namespace") != self.controller_namespace
        ]

    def capacity_of_node(self) -> dict[str, str]:
        kinds = {p["name"]: p["capacityType"] for p in self.cloud.pools_view()}
        return {name: kinds[pool] for name, pool in self.pool_of_node().items() if pool in kinds}

    async def run(self) -> None:
        await self.show_nodes()
        await self.start_controller()
        await self.roll_out()
        await self.interrupt()
        self.show_cost()
        await self.show_rightsizing()

    async def start_controller(self) -> None:
        """Start the placement controller (blocking calls to the served API: off the emulator's loop)."""
        controller = self.controller
        if controller is None:
            self.console.print(f"{self.stamp()} [yellow]no placement controller in this show[/yellow]")
            return
        self.console.print(f"{self.stamp()} starting the placement controller (shipshape controller)")
        try:
            await asyncio.to_thread(controller.start)
        except Exception as exc:  # its start failed: the show cannot show the product
            raise ShowFailed(f"the placement controller did not start: {exc}") from None
        await self.until(lambda: controller.elector.is_leader, self.settings.rollout_timeout)
        self.console.print(
            f"{self.stamp()} [green]placement controller running[/green]: webhook registered on port "
            f"{controller.webhook_port}, leader elected ({controller.settings.identity})",
            highlight=False,
        )

    async def show_nodes(self) -> None:
        store = self.cluster.store
        await self.until(
            lambda: bool(store.list(NODES)) and all(objects.node_ready(n) for n in store.list(NODES)),
            self.settings.rollout_timeout,
        )
        rows = pool_rows(self.cloud.pools_view(), store.list(NODES))
        table = Table(title="Nodes by pool", title_justify="left")
        for column in ("pool", "capacity", "instance type", "zone", "ready", "$/hour"):
            table.add_column(
                column,
                justify="right" if column in ("ready", "$/hour") else "left",
                no_wrap=column == "pool",  # pool names are what the user types next: never cut them
            )
        for row in rows:
            colour = "yellow" if row.capacity_type == "spot" else "cyan"
            table.add_row(
                row.pool,
                f"[{colour}]{row.capacity_type}[/{colour}]",
                row.instance_type,
                row.zone,
                f"{row.ready}/{row.nodes}",
                f"{row.price_per_hour:.4f}",
            )
        self.console.print(table)

    async def roll_out(self) -> None:
        self.console.print(f"{self.stamp()} applying the scenario's workloads")
        try:
            await assembly.apply_objects(self.cluster)
        except errors.ApiError as exc:
            raise ShowFailed(f"the scenario's objects cannot be created: {exc.message}") from None
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[when]}"),
            console=self.console,
        ) as progress:
            task = progress.add_task("replicas available", total=None, when="")

            def tick() -> None:
                available, desired, _ = rollout_progress(self.workloads())
                progress.update(
                    task, completed=available, total=desired or None, when=f"t+{self.elapsed():.0f}s"
                )

            await self.until(
                lambda: (
                    rollout_progress(self.workloads())[2]
                    and statefulsets_ready(self.cluster.store.list(STATEFULSETS))
                ),
                self.settings.rollout_timeout,
                tick,
            )
        names = ", ".join(d["metadata"]["name"] for d in self.workloads())
        self.console.print(f"{self.stamp()} [green]all Deployments available[/green] ({names})")
        self.show_placement("Workload pods by pool")
        self.show_decisions()

    def show_decisions(self) -> None:
        """What the controller decided for each opted-in workload's pods, and where they run."""
        rows = placement_rows(self.cluster.store.list(PODS), self.capacity_of_node())
        if not rows:
            self.console.print("no pod carries a placement decision (no workload is opted in)")
            return
        table = Table(title="Placement decided by the controller", title_justify="left")
        for column in ("workload", "pods", "on-demand", "spot", "spot pools", "reasons"):
            table.add_column(column, justify="right" if column in ("pods", "on-demand", "spot") else "left")
        for row in rows:
            table.add_row(
                row.workload,
                str(row.pods),
                str(row.on_demand),
                str(row.spot),
                ", ".join(row.pools) or "-",
                ", ".join(row.reasons),
            )
        self.console.print(table)

    def show_placement(self, title: str) -> None:
        counts = pods_per_pool(self.cluster.store.list(PODS), self.pool_of_node())
        table = Table(title=title, title_justify="left")
        table.add_column("pool")
        table.add_column("capacity")
        table.add_column("pods", justify="right")
        for pool in sorted(self.cloud.pools_view(), key=lambda p: (p["capacityType"], p["name"])):
            table.add_row(pool["name"], pool["capacityType"], str(counts[pool["name"]]))
        self.console.print(table)

    async def interrupt(self) -> None:
        store = self.cluster.store
        pools = self.cloud.pools_view()
        per_pool = pods_per_pool(store.list(PODS), self.pool_of_node())
        pool = busiest_spot_pool(pools, per_pool)
        if pool is None:
            self.console.print("no spot pool has nodes: skipping the interruption")
            return
        notice = self.settings.notice_seconds
        noticed = set(self.cloud.interrupt(pool=pool, notice=notice))
        moving = {
            p["metadata"]["uid"]
            for p in store.list(PODS)
            if p.get("spec", {}).get("nodeName") in noticed and is_workload_pod(p)
        }
        owners = sorted({owner_of(p) for p in store.list(PODS) if p["metadata"]["uid"] in moving})
        self.console.print(
            f"{self.stamp()} [bold red]spot interruption[/bold red]: pool {pool}, "
            f"{len(noticed)} node(s) ({', '.join(sorted(short_node(n) for n in noticed))}), "
            f"{notice / 60:g}-minute notice; {len(moving)} pod(s) to move",
            highlight=False,
        )
        notice_at = self.cluster.now()
        ticker = NodeTicker(self)
        reached: set[str] = set()
        floors = workload_floors([*self.workloads(), *store.list(STATEFULSETS)], store.list(PDBS))
        lowest = LowestReady(store.list(PODS), floors)
        unsubscribe = store.subscribe(lambda event: lowest.observe(event.type, event.object), kinds=[PODS])
        acted: set[tuple[str, str]] = set()

        def landed() -> bool:
            live = {p["metadata"]["uid"] for p in store.list(PODS) if is_workload_pod(p)}
            return (
                not (moving & live)
                and rollout_progress(self.workloads())[2]
                and all(self._owner_settled(owner) for owner in owners)
            )

        def terminated() -> bool:
            return not noticed & {n["metadata"]["name"] for n in store.list(NODES)}

        def milestones() -> None:
            ticker.tick()
            for line in controller_actions(self.workloads(), acted):
                self.console.print(f"{self.stamp()} {line}", highlight=False)
            if "landed" not in reached and landed():
                reached.add("landed")
                self._report_landed(notice_at, owners)
            if "terminated" not in reached and terminated():
                reached.add("terminated")
            if "terminated" in reached and "restored" not in reached and self._pool_restored(pool):
                reached.add("restored")
                fresh = ", ".join(sorted(short_node(n) for n, p in self.pool_of_node().items() if p == pool))
                self.console.print(
                    f"{self.stamp()} pool {pool} back to size: new node(s) {fresh or 'none'} Ready",
                    highlight=False,
                )

        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[left]}"),
            console=self.console,
            transient=True,
        ) as progress:
            task = progress.add_task("notice", total=notice, left="")

            def tick() -> None:
                gone = min(notice, self.cluster.now() - notice_at)
                progress.update(task, completed=gone, left=f"{max(0.0, notice - gone):.0f}s to termination")
                milestones()

            try:
                await self.until(lambda: len(reached) == 3, self.settings.recovery_timeout, tick)
            finally:
                unsubscribe()
        self.show_placement("Workload pods by pool after the interruption")
        self.show_availability(floors, lowest.lowest)

    def show_availability(self, floors: dict[str, tuple[int, int]], lowest: dict[str, int]) -> None:
        """The fewest Ready replicas of each workload during the reclaim, against its budget."""
        table = Table(title="Availability during the reclaim", title_justify="left")
        for column in ("workload", "replicas", "floor (PDB)", "lowest ready", ""):
            table.add_column(column, justify="left" if column in ("workload", "") else "right")
        below = 0
        for workload, (replicas, floor) in sorted(floors.items()):
            low = lowest.get(workload, 0)
            below += low < floor
            verdict = "[green]ok[/green]" if low >= floor else "[red]below its floor[/red]"
            table.add_row(workload, str(replicas), str(floor), str(low), verdict)
        self.console.print(table)
        if below == 0:
            self.console.print(
                f"{self.stamp()} [bold green]no outage[/bold green]: every workload kept at least its "
                "floor of Ready replicas through the reclaim",
                highlight=False,
            )
        else:
            self.console.print(
                f"{self.stamp()} [bold red]{below} workload(s) fell below their floor[/bold red]"
            )

    def _report_landed(self, notice_at: float, owners: list[str]) -> None:
        took = self.cluster.now() - notice_at
        replacements = self._replacements(notice_at, owners)
        where = Counter(pool for _, pool in replacements)
        summary = ", ".join(f"{count} on {pool}" for pool, count in sorted(where.items()))
        self.console.print(
            f"{self.stamp()} [bold green]replacements landed[/bold green]: {len(replacements)} pod(s) "
            f"running elsewhere ({summary or 'none needed'}), all Deployments available "
            f"{took:.0f}s after the notice",
            highlight=False,
        )

    async def follow(self) -> None:
        """After the show: report node changes (the scenario's own timeline goes on) and what becomes of
        the right-sizing recommendation (approved in the dashboard, applied by the agent) until stopped."""
        ticker = NodeTicker(self)
        checked = 0.0
        while True:
            ticker.tick()
            if self.rightsizing and time.monotonic() - checked >= 1.0:
                checked = time.monotonic()
                await self.follow_rightsizing()
            await asyncio.sleep(POLL_SECONDS * 5)

    async def _recommendations(self) -> list[dict[str, Any]]:
        """The demo cluster's recommendations, through the backend's API as the dashboard reads them."""
        board = self.board
        assert board is not None
        async with httpx.AsyncClient(base_url=board.url, timeout=10.0) as client:
            answer = await client.get(
                f"/api/v1/clusters/{board.cluster_id}/recommendations",
                headers={"Authorization": f"Bearer {board.api_key}"},
            )
        answer.raise_for_status()
        found: list[dict[str, Any]] = answer.json()
        return found

    async def show_rightsizing(self) -> None:
        """Wait for the backend's right-sizing recommendations (from the usage the agent collects) and
        show them with how to approve one."""
        if self.board is None:
            return
        self.console.print(
            f"{self.stamp()} the agent reads metrics.k8s.io every {DEMO_USAGE.interval:.0f} s; the backend "
            f"right-sizes a workload once it has {DEMO_MIN_HISTORY_HOURS * 60:.0f} minutes of its usage "
            "(a day outside the demo)",
            highlight=False,
        )
        deadline = self.cluster.now() + self.settings.rightsizing_timeout
        found: list[dict[str, Any]] = []
        with Progress(
            SpinnerColumn(), TextColumn("{task.description}"), console=self.console, transient=True
        ) as progress:
            task = progress.add_task("collecting usage", total=None)
            while not found:
                if self.cluster.now() > deadline:
                    raise ShowFailed(
                        f"no right-sizing recommendation after {self.settings.rightsizing_timeout:.0f} "
                        "emulated seconds"
                    )
                progress.update(task, description=f"collecting usage (t+{self.elapsed():.0f}s)")
                try:
                    found = rightsizing_of(await self._recommendations())
                except httpx.HTTPError as exc:
                    log.warning("the backend did not answer: %s", exc)
                if not found:
                    await asyncio.sleep(0.5)
        self.rightsizing = {r["id"]: r for r in found}
        table = Table(title=f"Right-sizing recommended at t+{self.elapsed():.0f}s", title_justify="left")
        for column in ("workload", "change", "USD/month", "confidence"):
            table.add_column(column, justify="right" if column in ("USD/month", "confidence") else "left")
        for rec in found:
            evidence = rec["recommendation"].get("evidence") or {}
            saving = rec.get("monthly_savings_usd")
            table.add_row(
                str(evidence.get("workload", "")),
                rec["title"].split(": ", 1)[-1],
                "-" if saving is None else f"{saving:.2f}",
                f"{rec['confidence']:.2f}",
            )
        self.console.print(table)
        self.console.print(
            "right-sizing: approve one in the dashboard; the agent re-reads the workload, refuses if it "
            "changed since the recommendation, else sets the requests and the workload rolls out",
            highlight=False,
        )

    async def follow_rightsizing(self) -> None:
        """Report the shown right-sizing recommendations' new statuses (approved, applied, failed)."""
        shown = self.rightsizing
        try:
            current = {r["id"]: r for r in await self._recommendations() if r["id"] in shown}
        except httpx.HTTPError:
            return
        for rec_id, rec in sorted(current.items()):
            if rec["status"] == shown[rec_id]["status"]:
                continue
            shown[rec_id] = rec
            target = rec["recommendation"].get("target") or {}
            workload = f"{target.get('kind')} {target.get('namespace')}/{target.get('name')}"
            if rec["status"] == "applied":
                self.console.print(
                    f"{self.stamp()} [green]right-sizing applied[/green] by the agent: {workload} now "
                    f"requests {workload_requests(self.cluster, target)}",
                    highlight=False,
                )
            else:
                detail = f" ({rec['detail']})" if rec.get("detail") else ""
                self.console.print(
                    f"{self.stamp()} right-sizing of {workload} {rec['status']}{detail}", highlight=False
                )

    def _pool_restored(self, pool: str) -> bool:
        """The cloud relaunched the pool's reclaimed instances and their nodes are Ready."""
        view = next(p for p in self.cloud.pools_view() if p["name"] == pool)
        nodes = [
            n
            for n in self.cluster.store.list(NODES)
            if (n["metadata"].get("labels") or {}).get(EMULATOR_POOL_LABEL) == pool
        ]
        return (
            int(view["booting"]) == 0
            and len(nodes) >= int(view["desired"])
            and all(objects.node_ready(n) for n in nodes)
        )

    def _owner_settled(self, owner: str) -> bool:
        """Every pod of `owner` is bound to a node and Running (nothing Pending)."""
        pods = [p for p in self.cluster.store.list(PODS) if is_workload_pod(p) and owner_of(p) == owner]
        return all(p.get("status", {}).get("phase") == "Running" for p in pods)

    def _replacements(self, since: float, owners: list[str]) -> list[tuple[str, str]]:
        """(pod, pool) of the running pods of `owners` created after `since`."""
        pools = self.pool_of_node()
        out = []
        for pod in self.cluster.store.list(PODS):
            if owner_of(pod) not in owners or not is_workload_pod(pod):
                continue
            if pod.get("status", {}).get("phase") != "Running":
                continue
            created = pod["metadata"].get("creationTimestamp", "")
            if created and _parse(created) >= int(since):
                node = pod["spec"].get("nodeName", "")
                out.append((pod["metadata"]["name"], pools.get(node, "?")))
        return out

    def show_cost(self) -> None:
        cost = self.cloud.cost()
        pools = self.cloud.pools_view()
        table = Table(title=f"Cost so far ({cost['seconds']:.0f} emulated seconds)", title_justify="left")
        for column in ("pool", "capacity", "node-hours", "USD"):
            table.add_column(column, justify="right" if column in ("node-hours", "USD") else "left")
        for name, entry in sorted(cost["byPool"].items()):
            table.add_row(name, entry["capacityType"], f"{entry['nodeHours']:.3f}", f"{entry['cost']:.4f}")
        table.add_row("total", "", f"{cost['nodeHours']:.3f}", f"{cost['total']:.4f}", style="bold")
        self.console.print(table)
        now_rate, on_demand_rate = hourly_rates(pools)
        if on_demand_rate > 0:
            self.console.print(
                f"right now: {now_rate:.4f} USD/hour for these nodes, {on_demand_rate:.4f} USD/hour for the "
                f"same nodes on demand ({1 - now_rate / on_demand_rate:.0%} less; "
                f"{(on_demand_rate - now_rate) * 730:.2f} USD a month)",
                highlight=False,
            )
        on_demand = on_demand_equivalent(cost, pools)
        if on_demand > 0:
            saved = 1 - cost["total"] / on_demand
            self.console.print(
                f"cost so far: {cost['total']:.4f} USD, {saved:.0%} less than the same nodes on demand "
                f"({on_demand:.4f} USD)",
                highlight=False,
            )


def _parse(timestamp: str) -> int:
    return int(parse_time(timestamp))


def rightsizing_of(recommendations: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The right-sizing recommendations that carry an instruction and are open (or already approved or
    applied), the largest saving first."""
    found = [
        r
        for r in recommendations
        if r.get("kind") == "right-sizing"
        and r.get("status") in ("open", "approved", "applied")
        and (r.get("recommendation") or {}).get("instruction")
    ]
    return sorted(found, key=lambda r: (-(r.get("monthly_savings_usd") or 0.0), r.get("title", "")))


def workload_requests(cluster: Cluster, target: dict[str, Any]) -> str:
    """The requests of a workload's containers as they are now in the cluster's store."""
    resource = DEPLOYMENTS if target.get("kind") == "Deployment" else STATEFULSETS
    obj = cluster.store.get(resource, str(target.get("namespace", "")), str(target.get("name", "")))
    if obj is None:
        return "(the workload is gone)"
    containers = obj["spec"]["template"]["spec"].get("containers") or []
    return "; ".join(
        f"{c['name']}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(((c.get("resources") or {}).get("requests") or {}).items()))
        for c in containers
    )


# ---- the command ------------------------------------------------------------------------------------


def _default_scenario() -> Path:
    if DEFAULT_SCENARIO.exists():
        return DEFAULT_SCENARIO
    # Run from elsewhere than the repository root: the example next to the source tree.
    return Path(__file__).resolve().parents[3] / DEFAULT_SCENARIO


async def _serve_and_show(
    cluster: Cluster,
    console: Console,
    *,
    port: int,
    workdir: Path,
    exit_after_show: bool,
    settings: ShowSettings,
    with_controller: bool = True,
    with_dashboard: bool = True,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    kubeconfig = workdir / "kubeconfig"
    async with runner.serve(cluster, port=port, kubeconfig=kubeconfig, workdir=workdir) as served:
        speed = getattr(cluster.clock, "speed", 1.0)
        console.print(f"ready: API server at {served.url} (emulated time x{speed:g})", highlight=False)
        console.print("Point kubectl at it:", highlight=False)
        console.print(f"  export KUBECONFIG={kubeconfig}", highlight=False, soft_wrap=True)
        console.print("  kubectl get nodes -L node.kubernetes.io/capacity,topology.kubernetes.io/zone")
        board: Dashboard | None = None
        try:
            process = placement_controller(cluster, kubeconfig, workdir) if with_controller else None
            if with_dashboard:
                board = await asyncio.to_thread(start_dashboard, cluster, kubeconfig, workdir)
                console.print(
                    f"dashboard: {board.url}/dashboard/  (log in with the API key {board.api_key})",
                    highlight=False,
                    soft_wrap=True,
                )
        except ShowFailed as failure:
            console.print(f"[red]the show stopped: {failure}[/red]", highlight=False)
            return 1
        try:
            return await _show(cluster, console, settings, process, stop, exit_after_show, board)
        finally:
            if board is not None:
                await asyncio.to_thread(board.stop)
            if process is not None:
                # Graceful: the Lease is released and the webhook drains while the API server still serves.
                await asyncio.to_thread(process.stop)


@dataclass
class Dashboard:
    """The other half of the product beside the cluster: the backend (API, workers, dashboard) and
    the cluster's agent pushing to it and executing approved instructions."""

    backend: EmbeddedBackend
    agent: Agent
    instructions: InstructionLoop
    url: str
    api_key: str
    cluster_id: str

    def stop(self) -> None:
        self.instructions.stop()
        self.agent.stop()
        self.backend.stop()


# The agent's usage collection and the backend's usage settings, shortened for the demo only: a show
# of minutes, not the day of usage (`usage_min_history_hours`, 24 h) or the 5-minute buckets and
# 15-minute analysis interval that the defaults use. Reads every 15 emulated seconds into 1-minute
# buckets, stored on 1-minute slots (the bucket must divide the slot); a workload is right-sized
# once it has 5 minutes of usage, over a window of an hour (so the confidence stays low, as it
# should with so little data), and the analysis runs at most every 2 s of wall time (the emulated
# clock runs 10 to 100 times faster). Everything else is the backend's defaults.
DEMO_USAGE = UsageSettings(interval=15.0, bucket_seconds=60, grace=10.0, unavailable_retry=15.0)
DEMO_MIN_HISTORY_HOURS = 5 / 60


def demo_backend_settings(db: str, port: int) -> BackendSettings:
    return BackendSettings(
        db=db,
        port=port,
        analysis_seconds=5,
        usage_step_seconds=DEMO_USAGE.bucket_seconds,
        usage_window_hours=1.0,
        usage_retention_hours=2.0,
        usage_min_history_hours=DEMO_MIN_HISTORY_HOURS,
        usage_analysis_seconds=2.0,
    )


def start_dashboard(cluster: Cluster, kubeconfig: Path, workdir: Path) -> Dashboard:
    """A fresh backend database in the workdir with one organisation and this cluster, the backend on a
    free loopback port, and the agent (blocking: call off the emulator's loop)."""
    for leftover in workdir.glob("backend.db*"):
        leftover.unlink()
    db = f"sqlite:///{workdir / 'backend.db'}"
    try:
        engine = store_engine.create(db)
        store_engine.migrate(engine)
        with store_engine.sessions(engine).begin() as session:
            org, api_key = repo.create_organization(session, "demo", datetime.now(UTC))
            demo_cluster, token = repo.create_cluster(session, org.id, "demo", datetime.now(UTC))
            cluster_id = demo_cluster.id
        engine.dispose()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        backend = EmbeddedBackend(demo_backend_settings(db, port))
        url = backend.start()
        api_client = load_api_client(kubeconfig)
    except (store_engine.StoreError, RuntimeError, OSError, KubeClientError) as exc:
        raise ShowFailed(f"the backend did not start: {exc}") from None
    mirror = Mirror()
    pusher = Pusher(url, token)
    usage = UsageLoop(
        MetricsApi(api_client),
        owners_from(mirror.get),
        pusher,
        Spool(workdir / "agent-spool" / "usage", DEMO_USAGE.spool_max_bytes),
        cluster.clock,
        DEMO_USAGE,
    )
    agent = Agent(
        kit.Informers(agent_sources(api_client), mirror, backoff_max=1.0),
        mirror,
        pusher,
        Spool(workdir / "agent-spool"),
        cluster.clock,
        AgentSettings(snapshot_interval=600, delta_interval=15),
        usage=usage,
    )
    try:
        agent.start()
    except RuntimeError as exc:
        backend.stop()
        raise ShowFailed(f"the agent did not start: {exc}") from None
    instructions = InstructionLoop(InstructionClient(pusher.client), Executor(api_client), wait=10)
    instructions.start()
    return Dashboard(backend, agent, instructions, url, api_key, cluster_id)


def placement_controller(cluster: Cluster, kubeconfig: Path, workdir: Path) -> ControllerProcess:
    """The real placement controller, as `shipshape controller --kubeconfig` runs it, on the cluster's
    clock (its deadlines and Lease times are emulated time)."""
    try:
        api_client = load_api_client(kubeconfig)
    except KubeClientError as exc:
        raise ShowFailed(f"the placement controller cannot read {kubeconfig}: {exc}") from None
    settings = ProcessSettings(
        identity="demo-controller",
        lease=LeaseSettings(duration_seconds=15, retry_seconds=2.0),
        loops=LoopSettings(),
        # The emulated clock runs fast: a long back-off would be minutes of stale cache.
        informer_backoff_max_seconds=1.0,
    )
    (workdir / "controller").mkdir(parents=True, exist_ok=True)
    return ControllerProcess(
        api_client, ControllerConfig(), settings, cluster.clock, workdir=workdir / "controller"
    )


async def _show(
    cluster: Cluster,
    console: Console,
    settings: ShowSettings,
    process: ControllerProcess | None,
    stop: asyncio.Event,
    exit_after_show: bool,
    board: Dashboard | None = None,
) -> int:
    show = Show(cluster, console, settings, process, board)
    show_task = asyncio.create_task(show.run())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({show_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if not show_task.done():
        show_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await show_task
        console.print("stopped")
        return 0
    failure = show_task.exception()
    if failure is not None:
        stopper.cancel()
        if isinstance(failure, ShowFailed):
            console.print(f"[red]the show stopped: {failure}[/red]", highlight=False)
            return 1
        raise failure
    console.print("show over")
    if not exit_after_show:
        console.print(
            "serving until Ctrl-C; node changes from the scenario's timeline follow", highlight=False
        )
        follower = asyncio.create_task(show.follow())
        await stopper
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
    else:
        stopper.cancel()
    console.print("stopped")
    return 0


def demo(
    scenario: Path | None = typer.Option(
        None, "--scenario", "-s", help="Scenario YAML (default: examples/scenarios/demo.yaml)."
    ),
    speed: float = typer.Option(10.0, min=0.1, help="Emulated seconds per real second."),
    port: int | None = typer.Option(
        None, help="HTTPS port of the API server (default: a free one, printed; 0 also picks one)."
    ),
    workdir: Path | None = typer.Option(
        None,
        help="Where the kubeconfig and certificates go (default: .emulator/demo/<scenario>-<port>, "
        "a folder per run).",
    ),
    exit_after_show: bool = typer.Option(False, "--exit-after-show", help="Stop once the show is over."),
    with_controller: bool = typer.Option(
        True,
        "--controller/--no-controller",
        help="Run the placement controller against the cluster (--no-controller: the emulator alone).",
    ),
    with_dashboard: bool = typer.Option(
        True,
        "--dashboard/--no-dashboard",
        help="Run the backend (dashboard) and the cluster's agent beside the cluster.",
    ),
    start: str = typer.Option(
        DEFAULT_START,
        "--start",
        help="When emulated time begins: an RFC 3339 time, or a duration before now; in the past, a "
        "faster clock stays behind the wall clock (and kubectl's ages valid) for duration/(speed-1).",
    ),
) -> None:
    """Serve an emulated cluster, run the placement controller on it and narrate a spot interruption:
    the controller's decisions, its surge before the nodes go, availability and cost."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = Console(highlight=False)
    path = scenario or _default_scenario()
    try:
        loaded = scenario_mod.load(path)
    except scenario_mod.ScenarioError as exc:
        raise common.fail(exc, listing=True) from None
    console.print(f"[bold]Shipshape demo[/bold]: scenario {loaded.name!r} ({path})")
    now = time.time()
    begins = emulator_cli.emulated_start(start, now)
    note = emulator_cli.clock_note(begins, now, speed, start_given=True)
    if note is not None:
        console.print(note, highlight=False)
    cluster = assembly.build(loaded, ScaledClock(speed, start=begins))
    port = common.serving_port(port)
    workdir = (workdir or emulator_cli.run_folder(DEFAULT_WORKDIR, loaded.name, port)).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        code = runner.run_loop(
            _serve_and_show(
                cluster,
                console,
                port=port,
                workdir=workdir,
                exit_after_show=exit_after_show,
                settings=ShowSettings(),
                with_controller=with_controller,
                with_dashboard=with_dashboard,
            )
        )
    except OSError as exc:  # the port was taken between the check and the bind
        raise common.fail(f"cannot serve on port {port}: {common.os_reason(exc)}", common.FAILED) from None
    raise typer.Exit(code)
