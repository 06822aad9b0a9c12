"""The cloud: node pools of instances that boot, cost money, and get spot interruption notices.

`CloudModel` owns instances. An instance is launched into a pool, boots along a drawn timeline
(`boot.py`), registers its Node (NotReady, not-ready taint), becomes Ready, and is billed per
second until it terminates. Spot instances are reclaimed by a per-node Poisson process or on
demand (`interrupt`), with a notice (taint, Event, metadata endpoint) before the instance
terminates and its Node is deleted. Pools keep their desired size like an auto scaling group:
an interrupted instance is replaced unless the pool is in a capacity shortage.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipshape.emulator.cloud import autoscaler, boot, handler, http, nodes
from shipshape.emulator.cloud.errors import CloudError, UnknownTarget
from shipshape.emulator.engine import Timer
from shipshape.emulator.resources import NODES
from shipshape.emulator.runtime import Cluster
from shipshape.emulator.scenario import Autoscaler, Interruptions, NodeBoot, Pool, Scenario, TimelineEvent
from shipshape.emulator.store import Obj
from shipshape.kube import errors
from shipshape.kube.clock import parse_time, rfc1123, rfc3339
from shipshape.pricing import catalog

log = logging.getLogger(__name__)

COMPONENT = "shipshape-cloud"
PENDING, RUNNING, TERMINATED = "pending", "running", "terminated"


@dataclass(slots=True)
class Notice:
    issued: float
    action_time: float


@dataclass(slots=True)
class Instance:
    id: str
    pool: str
    node_name: str
    ip: str
    launched: float
    timeline: boot.BootTimeline
    billed_from: float
    state: str = PENDING
    registered: bool = False
    ready: bool = False
    terminated_at: float | None = None
    notice: Notice | None = None
    rebalance_at: float | None = None
    # Azure: the notice's scheduled event was approved (StartRequests).
    event_approved: bool = False
    termination_reason: str = ""
    timers: list[Timer] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.state in (PENDING, RUNNING)

    def cancel_timers(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()


@dataclass(slots=True)
class PoolState:
    spec: Pool
    price_per_hour: float
    on_demand_price: float | None
    price_source: str
    hazard_per_hour: float
    band: int | None
    desired: int
    shortage_until: float = 0.0
    launched_total: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def spot(self) -> bool:
        return self.spec.capacity_type == "spot"


def _pool_state(pool: Pool, scenario: Scenario | None, cat: catalog.Catalog) -> PoolState:
    region = scenario.region if scenario else "us-east-1"
    band_region = scenario.interruptions.region if scenario else region
    on_demand = cat.on_demand_price(pool.instance_type, region)
    if pool.price_per_hour is not None:
        price, source = pool.price_per_hour, "scenario"
    elif pool.capacity_type == "on-demand" and on_demand is not None:
        price, source = on_demand, f"catalog (on-demand estimate, prices of {cat.on_demand_as_of})"
    elif pool.capacity_type == "spot" and on_demand is not None:
        advice = cat.spot_advice(pool.instance_type, region)
        if advice is None:
            raise CloudError(
                f"pool {pool.name}: the spot advisor has no savings figure for {pool.instance_type} in "
                f"{region}; set pricePerHour in the scenario"
            )
        price = round(on_demand * (1 - advice.savings_percent / 100), 5)
        source = f"catalog (on-demand estimate x (1 - {advice.savings_percent}% advisor savings))"
    else:
        raise CloudError(
            f"pool {pool.name}: no price for instance type {pool.instance_type!r} in the catalog; "
            "set pricePerHour in the scenario"
        )
    band: int | None = None
    hazard = 0.0
    if pool.capacity_type == "spot":
        if pool.interruption_rate is not None:
            hazard = pool.interruption_rate
        else:
            band = cat.interruption_band(pool.instance_type, band_region)
            hazard = catalog.band_hazard_per_hour(band)
    return PoolState(
        spec=pool,
        price_per_hour=price,
        on_demand_price=on_demand,
        price_source=source,
        hazard_per_hour=hazard,
        band=band,
        desired=pool.initial_size,
    )


def pool_price(pool: Pool, scenario: Scenario, cat: catalog.Catalog | None = None) -> float:
    """What one node of the pool costs per hour, as the cloud model bills it."""
    return _pool_state(pool, scenario, cat or catalog.default_catalog()).price_per_hour


def _seeded(seed: int, *parts: str) -> random.Random:
    digest = hashlib.sha256(":".join((str(seed), *parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class CloudModel:
    """Pools, instances, boot, cost, spot interruptions and shortages (service "cloud")."""

    name = "cloud"

    def __init__(self, *, cat: catalog.Catalog | None = None) -> None:
        self._catalog = cat
        self.cluster: Cluster | None = None
        self.pools: dict[str, PoolState] = {}
        self.instances: dict[str, Instance] = {}  # by instance id, every instance ever launched
        # The pending and running ones per pool, in launch order (`instances` keeps the terminated
        # ones too, for the bill; scans of the live ones must not grow with the run's churn).
        self._active: dict[str, dict[str, Instance]] = {}
        self._active_all: dict[str, Instance] = {}
        self._by_node: dict[str, Instance] = {}
        # Nodes whose metadata endpoint has a notice or a rebalance recommendation to give.
        self._speaking: set[str] = set()
        self._ips: set[str] = set()  # addresses of running instances
        # Moves with every change of a pool's live instances, their readiness, its desired size or
        # its shortage: what the autoscaler's status document reads (`ClusterAutoscaler.status`).
        self.version = 0
        self._retired_ips: set[str] = set()  # addresses of terminated ones
        self.started_at = 0.0
        self.seed = 1
        self.region = "us-east-1"
        self.cloud = "aws"  # whose instance metadata the nodes serve: aws, gcp or azure
        self.kubelet_version = "v1.32.0"
        self.boot_settings = NodeBoot()
        self.interruption_settings = Interruptions()
        self.autoscaler_settings = Autoscaler()
        self._rng = random.Random(1)
        self._zones: list[str] = []
        self.on_notice: list[Callable[[Instance], None]] = []  # e.g. the interruption handler

    # ---- wiring -------------------------------------------------------------------------------
    @property
    def c(self) -> Cluster:
        assert self.cluster is not None, "cloud model used before start()"
        return self.cluster

    def start(self, cluster: Cluster) -> None:
        self.cluster = cluster
        scenario = cluster.scenario
        cat = self._catalog or catalog.default_catalog()
        self.started_at = cluster.now()
        if scenario is not None:
            self.seed = scenario.seed
            self.region = scenario.region
            self.cloud = scenario.cloud
            self.kubelet_version = scenario.kubernetes_version
            self.boot_settings = scenario.node_boot
            self.interruption_settings = scenario.interruptions
            self.autoscaler_settings = scenario.autoscaler
            for pool in scenario.pools:
                self.pools[pool.name] = _pool_state(pool, scenario, cat)
        self._rng = _seeded(self.seed, "cloud")
        self._zones = sorted({p.spec.zone for p in self.pools.values()})
        cluster.services["cloud"] = self
        cluster.services["metadata_app"] = http.metadata_app(cluster)
        routes = cluster.services.setdefault("http_routes", [])
        routes.extend(http.control_routes(cluster))
        for state in self.pools.values():
            for _ in range(state.desired):
                self._launch(state, initial=True)
        if self.interruption_settings.handler:
            handler.InterruptionHandler(self).start()
        if self.autoscaler_settings.enabled:
            autoscaler.ClusterAutoscaler(self).start()
        if scenario is not None:
            for event in scenario.timeline:
                cluster.engine.call_at(self.started_at + event.at, functools.partial(self._fire, event))
        # The HTTP layer may publish the metadata URL after the models started: annotate then.
        cluster.engine.call_soon(self._annotate_metadata_url)

    # ---- queries (the "cloud" service) ---------------------------------------------------------
    def pool_of(self, node: str) -> str | None:
        inst = self._by_node.get(node)
        return inst.pool if inst else None

    def instance_for(self, node: str) -> Instance | None:
        return self._by_node.get(node)

    def active_instances(self, pool: str | None = None) -> list[Instance]:
        """Pending and running instances (of one pool, or all), in launch order."""
        if pool is not None:
            return list(self._active.get(pool, {}).values())
        return list(self._active_all.values())

    def instance_action(self, node: str) -> dict[str, str] | None:
        """The body of /latest/meta-data/spot/instance-action, or None (404) without a notice."""
        inst = self._by_node.get(node)
        if inst is None or inst.notice is None:
            return None
        return {"action": "terminate", "time": rfc3339(inst.notice.action_time)}

    def metadata_speakers(self) -> frozenset[str]:
        """The nodes of live instances whose metadata endpoint answers `instance_action` or
        `rebalance_recommendation` with something (every other live node answers None to both)."""
        return frozenset(self._speaking)

    def rebalance_recommendation(self, node: str) -> dict[str, str] | None:
        inst = self._by_node.get(node)
        if inst is None or inst.rebalance_at is None:
            return None
        return {"noticeTime": rfc3339(inst.rebalance_at)}

    def gce_metadata(self, node: str, key: str) -> str | None:
        """Compute Engine metadata values (`instance/preempted`, `instance/maintenance-event`, ...)."""
        inst = self._by_node.get(node)
        if inst is None or inst.state == TERMINATED:
            return None
        pool = self.pools[inst.pool].spec
        values = {
            "instance/preempted": "TRUE" if inst.notice is not None else "FALSE",
            "instance/maintenance-event": "NONE",
            "instance/id": str(int(inst.id[2:], 16)),
            "instance/name": inst.node_name,
            "instance/hostname": f"{inst.node_name}.c.{nodes.GCP_PROJECT}.internal",
            "instance/machine-type": f"projects/{nodes.GCP_PROJECT}/machineTypes/{pool.instance_type}",
            "instance/zone": f"projects/{nodes.GCP_PROJECT}/zones/{pool.zone}",
            "instance/scheduling/preemptible": "TRUE" if pool.capacity_type == "spot" else "FALSE",
        }
        return values.get(key)

    def azure_vm_name(self, node: str) -> str | None:
        """The scale-set VM's name, as `Resources` of its scheduled events name it."""
        inst = self._by_node.get(node)
        if inst is None or inst.state == TERMINATED:
            return None
        return f"{inst.pool}-vmss_{inst.id[2:10]}"

    def scheduled_events(self, node: str) -> dict[str, Any] | None:
        """The Azure Scheduled Events document of the node's VM: a `Preempt` event from its notice on
        (`Scheduled` with `NotBefore` at the eviction; `Started` with a blank `NotBefore` once approved)."""
        inst = self._by_node.get(node)
        name = self.azure_vm_name(node)
        if inst is None or name is None:
            return None
        if inst.notice is None:
            return {"DocumentIncarnation": 1, "Events": []}
        event = {
            "EventId": self.preempt_event_id(inst),
            "EventStatus": "Started" if inst.event_approved else "Scheduled",
            "EventType": "Preempt",
            "ResourceType": "VirtualMachine",
            "Resources": [name],
            "NotBefore": "" if inst.event_approved else rfc1123(inst.notice.action_time),
            "Description": "",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        }
        return {"DocumentIncarnation": 3 if inst.event_approved else 2, "Events": [event]}

    @staticmethod
    def preempt_event_id(inst: Instance) -> str:
        assert inst.notice is not None
        digest = hashlib.sha256(f"preempt:{inst.id}:{inst.notice.issued}".encode()).hexdigest()
        return str(uuid.UUID(digest[:32])).upper()

    def approve_events(self, event_ids: list[str]) -> list[str]:
        """StartRequests: approve scheduled events by id (any VM may approve any event; unknown ids
        raise). The eviction stays at its time: a Spot VM is evicted at `NotBefore` at the latest."""
        by_id = {
            self.preempt_event_id(inst): inst for inst in self.active_instances() if inst.notice is not None
        }
        unknown = [e for e in event_ids if e.upper() not in by_id]
        if unknown:
            raise UnknownTarget(f"no scheduled event {', '.join(unknown)}")
        for event_id in event_ids:
            by_id[event_id.upper()].event_approved = True
        return [by_id[e.upper()].node_name for e in event_ids]

    def instance_metadata(self, node: str, key: str) -> str | None:
        """Plain IMDS values: instance-id, instance-type, local-ipv4, hostname, placement/..."""
        inst = self._by_node.get(node)
        if inst is None or inst.state == TERMINATED:
            return None
        pool = self.pools[inst.pool].spec
        values = {
            "instance-id": inst.id,
            "instance-type": pool.instance_type,
            "local-ipv4": inst.ip,
            "local-hostname": inst.node_name,
            "hostname": inst.node_name,
            "instance-life-cycle": "spot" if pool.capacity_type == "spot" else "on-demand",
            "placement/availability-zone": pool.zone,
            "placement/region": self.region,
        }
        return values.get(key)

    def metadata_listing(self, node: str) -> list[str]:
        """What `GET /latest/meta-data/` lists for the instance (directories end with "/")."""
        inst = self._by_node.get(node)
        if inst is None:
            return []
        keys = {
            "hostname",
            "instance-id",
            "instance-life-cycle",
            "instance-type",
            "local-hostname",
            "local-ipv4",
        }
        keys.add("placement/")
        if inst.notice is not None:
            keys.add("spot/")
        if inst.rebalance_at is not None:
            keys.add("events/")
        return sorted(keys)

    def boot_timeline(self, node: str) -> dict[str, float] | None:
        inst = self._by_node.get(node)
        return inst.timeline.as_dict() if inst else None

    def boot_log(self, node: str) -> str | None:
        """/var/log/messages of the node's boot (as far as it has got), None for unknown nodes."""
        inst = self._by_node.get(node)
        if inst is None:
            return None
        return boot.render_messages(
            self._log_identity(inst), inst.timeline, until=self.c.now(), pod_starts=self._pod_starts(inst)
        )

    def _pod_starts(self, inst: Instance) -> tuple[boot.PodStart, ...]:
        """Pods the kubelet started on the node (from their container statuses), for the log."""
        out = []
        for pod in self.c.store.pods_on_node(inst.node_name):
            started: list[tuple[float, str]] = []
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                stamp = ((status.get("state") or {}).get("running") or {}).get("startedAt")
                if stamp:
                    cid = str(status.get("containerID") or "").split("://", 1)[-1]
                    seed = f"{pod['metadata'].get('uid')}:{status.get('name')}"
                    cid = cid or hashlib.sha256(seed.encode()).hexdigest()
                    started.append((parse_time(stamp), cid))
            if not started:
                continue
            when, cid = min(started)
            md = pod["metadata"]
            if when >= inst.timeline.ready:
                out.append(boot.PodStart(when, md["namespace"], md["name"], md.get("uid", ""), cid))
        return tuple(sorted(out, key=lambda p: p.started))

    def cni_log(self, node: str) -> str | None:
        inst = self._by_node.get(node)
        if inst is None or not inst.ready:
            return None
        return boot.render_cni_log(inst.timeline)

    def cost(self) -> dict[str, Any]:
        """Spend so far (USD), per pool and per capacity type, with node-hours."""
        now = self.c.now()
        by_pool: dict[str, dict[str, Any]] = {}
        by_type: dict[str, dict[str, float]] = {}
        for name, state in self.pools.items():
            by_pool[name] = {
                "capacityType": state.spec.capacity_type,
                "instanceType": state.spec.instance_type,
                "zone": state.spec.zone,
                "pricePerHour": state.price_per_hour,
                "nodeHours": 0.0,
                "cost": 0.0,
            }
        for inst in self.instances.values():
            end = inst.terminated_at if inst.terminated_at is not None else now
            seconds = max(0.0, end - inst.billed_from)
            entry = by_pool[inst.pool]
            entry["nodeHours"] += seconds / 3600
            entry["cost"] += seconds / 3600 * self.pools[inst.pool].price_per_hour
        for entry in by_pool.values():
            bucket = by_type.setdefault(entry["capacityType"], {"nodeHours": 0.0, "cost": 0.0})
            bucket["nodeHours"] += entry["nodeHours"]
            bucket["cost"] += entry["cost"]
        for entry in [*by_pool.values(), *by_type.values()]:
            entry["nodeHours"] = round(entry["nodeHours"], 6)
            entry["cost"] = round(entry["cost"], 6)
        return {
            "currency": "USD",
            "since": rfc3339(self.started_at),
            "until": rfc3339(now),
            "seconds": round(now - self.started_at, 3),
            "total": round(sum(e["cost"] for e in by_pool.values()), 6),
            "nodeHours": round(sum(e["nodeHours"] for e in by_pool.values()), 6),
            "byPool": by_pool,
            "byCapacityType": by_type,
        }

    def pools_view(self) -> list[dict[str, Any]]:
        now = self.c.now()
        out = []
        for state in self.pools.values():
            active = self.active_instances(state.name)
            spec = state.spec
            out.append(
                {
                    "name": spec.name,
                    "instanceType": spec.instance_type,
                    "zone": spec.zone,
                    "capacityType": spec.capacity_type,
                    "pricePerHour": state.price_per_hour,
                    "onDemandPricePerHour": state.on_demand_price,
                    "priceSource": state.price_source,
                    "interruptionBand": catalog.BAND_LABELS[state.band] if state.band is not None else None,
                    "interruptionsPerNodeHour": state.hazard_per_hour
                    * self.interruption_settings.rate_multiplier
                    if state.spot
                    else 0.0,
                    "minSize": spec.min_size,
                    "maxSize": spec.max_size,
                    "desired": state.desired,
                    "ready": sum(1 for i in active if i.ready),
                    "booting": sum(1 for i in active if not i.ready),
                    "shortageUntil": rfc3339(state.shortage_until) if state.shortage_until > now else None,
                }
            )
        return out

    def in_shortage(self, pool: str) -> bool:
        return self.pools[pool].shortage_until > self.c.now()

    # ---- commands --------------------------------------------------------------------------------
    def interrupt(
        self,
        *,
        node: str | None = None,
        pool: str | None = None,
        zone: str | None = None,
        notice: float | None = None,
    ) -> list[str]:
        """Send spot interruption notices; returns the nodes newly noticed (repeats are ignored)."""
        seconds = self.interruption_settings.notice if notice is None else float(notice)
        if not math.isfinite(seconds) or seconds < 0:
            raise CloudError(f"notice must be a non-negative number of seconds, got {notice!r}")
        chosen = self._select(node=node, pool=pool, zone=zone, spot_only=True)
        now = self.c.now()  # one request, one instant: the instances it reaches share one notice time
        return [i.node_name for i in chosen if self._notify(i, seconds, now)]

    def rebalance(
        self, *, node: str | None = None, pool: str | None = None, zone: str | None = None
    ) -> list[str]:
        """EC2 rebalance recommendations (elevated interruption risk) for the chosen spot instances."""
        now = self.c.now()
        out = []
        for inst in self._select(node=node, pool=pool, zone=zone, spot_only=False):
            if self.pools[inst.pool].spot and inst.rebalance_at is None:
                inst.rebalance_at = now
                self._speaking.add(inst.node_name)
                out.append(inst.node_name)
        return out

    def set_unreachable(
        self,
        *,
        node: str | None = None,
        pool: str | None = None,
        zone: str | None = None,
        unreachable: bool = True,
    ) -> list[str]:
        """Cut (or restore) the network of running instances: their kubelets stop reporting.

        The Node gets (or loses) the annotation `emulator.shipshape.dev/unreachable: "true"`; the
        kubelet model stops heartbeating and the node lifecycle controller does the rest.
        """
        chosen = self._select(node=node, pool=pool, zone=zone, spot_only=False)
        changed = []
        for inst in chosen:
            if not inst.registered:
                continue

            def mark(obj: Obj) -> None:
                annotations = obj["metadata"].setdefault("annotations", {})
                if unreachable:
                    annotations[nodes.UNREACHABLE_ANNOTATION] = "true"
                else:
                    annotations.pop(nodes.UNREACHABLE_ANNOTATION, None)

            before = self.c.store.get(NODES, "", inst.node_name)
            after = self.c.store.mutate(NODES, "", inst.node_name, mark)
            if after is not None and after is not before:
                changed.append(inst.node_name)
        return changed

    def _select(
        self, *, node: str | None, pool: str | None, zone: str | None, spot_only: bool
    ) -> list[Instance]:
        """The running instances one of node/pool/zone names (exactly one must be given)."""
        targets = [t for t in (node, pool, zone) if t]
        if len(targets) != 1:
            raise CloudError("give exactly one of node, pool or zone")
        if node:
            inst = self._by_node.get(node) or self._by_ordinal(node)
            if inst is None or not inst.active:
                raise UnknownTarget(f"node {node!r} is not a running instance of this cloud")
            if spot_only and not self.pools[inst.pool].spot:
                raise CloudError(
                    f"node {node!r} is an on-demand instance: only spot instances get interruption notices"
                )
            return [inst]
        if pool:
            if pool not in self.pools:
                raise UnknownTarget(f"unknown pool {pool!r} (pools: {', '.join(sorted(self.pools))})")
            if spot_only and not self.pools[pool].spot:
                raise CloudError(f"pool {pool!r} is on-demand: only spot instances get interruption notices")
            return self.active_instances(pool)
        if zone not in self._zones:
            raise UnknownTarget(f"unknown zone {zone!r} (zones: {', '.join(self._zones)})")
        return [
            i
            for i in self.active_instances()
            if self.pools[i.pool].spec.zone == zone and (self.pools[i.pool].spot or not spot_only)
        ]

    def _by_ordinal(self, name: str) -> Instance | None:
        """`<pool>-<n>`: the pool's n-th running instance in launch order (node names are drawn at
        random, so a scenario's timeline names nodes this way)."""
        pool, _, index = name.rpartition("-")
        if pool not in self.pools or not index.isdigit():
            return None
        running = self.active_instances(pool)  # instances are kept in launch order
        return running[int(index)] if int(index) < len(running) else None

    def shortage(self, pool: str, seconds: float) -> float:
        """No new instances in `pool` for `seconds`; returns when the shortage ends."""
        if pool not in self.pools:
            raise UnknownTarget(f"unknown pool {pool!r} (pools: {', '.join(sorted(self.pools))})")
        if not math.isfinite(seconds) or seconds <= 0:
            raise CloudError(f"a shortage needs a positive duration, got {seconds!r}")
        state = self.pools[pool]
        until = max(state.shortage_until, self.c.now() + seconds)
        state.shortage_until = until
        self.version += 1
        log.info("pool %s: insufficient capacity until %s", pool, rfc3339(until))
        self.c.engine.call_at(until, lambda: self.reconcile_pool(pool))
        return until

    def set_desired(self, pool: str, desired: int) -> None:
        """Resize a pool (what an autoscaler does); launching honours shortages."""
        state = self.pools[pool]
        state.desired = max(state.spec.min_size, min(state.spec.max_size, desired))
        self.version += 1
        self.reconcile_pool(pool)

    def remove_node(self, node: str, reason: str) -> None:
        """Scale-in of one instance: the pool's desired size drops by one and it terminates."""
        inst = self._by_node[node]
        state = self.pools[inst.pool]
        state.desired = max(0, state.desired - 1)
        self.version += 1
        self._terminate(inst, reason)

    def reconcile_pool(self, pool: str) -> None:
        state = self.pools[pool]
        if self.in_shortage(pool):
            return
        missing = state.desired - len(self.active_instances(pool))
        for _ in range(max(0, missing)):
            self._launch(state)

    # ---- lifecycle -------------------------------------------------------------------------------
    def _launch(self, state: PoolState, *, initial: bool = False) -> Instance:
        now = self.c.now()
        instance_id = "i-" + "".join(self._rng.choice("0123456789abcdef") for _ in range(17))
        ip = self._allocate_ip(state.spec.zone)
        suffix = "ec2.internal" if self.region == "us-east-1" else f"{self.region}.compute.internal"
        node_name = f"ip-{ip.replace('.', '-')}.{suffix}"
        rng = _seeded(self.seed, "boot", instance_id)
        if initial:
            # Booted before the cluster started: the whole timeline lies in the past.
            provisional = boot.draw_timeline(self.boot_settings, 0.0, rng)
            launched = now - provisional.ready - 60.0 - rng.uniform(0, 600)
            timeline = boot.BootTimeline(launched, tuple(t + launched for t in provisional.times))
        else:
            timeline = boot.draw_timeline(self.boot_settings, now, rng)
            launched = now
        inst = Instance(
            id=instance_id,
            pool=state.name,
            node_name=node_name,
            ip=ip,
            launched=launched,
            timeline=timeline,
            billed_from=max(launched, self.started_at),
        )
        state.launched_total += 1
        self.instances[instance_id] = inst
        self._active.setdefault(state.name, {})[instance_id] = inst
        self._active_all[instance_id] = inst
        self.version += 1
        self._by_node[node_name] = inst
        engine = self.c.engine
        if initial:
            inst.state = RUNNING
            self._register(inst, ready=True)
        else:
            inst.timers.append(engine.call_at(timeline.at("vmInitialized"), lambda: self._running(inst)))
            inst.timers.append(engine.call_at(timeline.registered, lambda: self._register(inst, ready=False)))
            inst.timers.append(engine.call_at(timeline.ready, lambda: self._mark_ready(inst)))
        self._schedule_reclaim(inst)
        return inst

    def _allocate_ip(self, zone: str) -> str:
        """A free address in the zone's /19; addresses of terminated instances are reused last,
        so a replacement does not come back under its predecessor's node name."""
        zone_index = self._zones.index(zone) if zone in self._zones else 0
        for _ in range(1_000):
            ip = f"10.0.{zone_index * 32 + self._rng.randrange(32)}.{self._rng.randrange(1, 255)}"
            if ip not in self._ips and ip not in self._retired_ips:
                self._ips.add(ip)
                return ip
        prefix = {f"10.0.{zone_index * 32 + i}." for i in range(32)}
        for ip in sorted(self._retired_ips):
            if ip.rsplit(".", 1)[0] + "." in prefix:
                self._retired_ips.discard(ip)
                self._ips.add(ip)
                return ip
        raise CloudError(f"zone {zone}: no free addresses left in its subnet")

    def _running(self, inst: Instance) -> None:
        if inst.state == PENDING:
            inst.state = RUNNING

    def _node_spec(self, inst: Instance) -> nodes.NodeSpec:
        return nodes.NodeSpec(
            name=inst.node_name,
            instance_id=inst.id,
            ip=inst.ip,
            pool=self.pools[inst.pool].spec,
            region=self.region,
            kubelet_version=self.kubelet_version,
            launched=inst.launched,
            metadata_url=self.c.services.get("metadata_url"),
            cloud=self.cloud,
        )

    def _register(self, inst: Instance, *, ready: bool) -> None:
        if not inst.active:
            return
        now = self.c.now()
        since = inst.timeline.ready if ready else now
        created_at = min(now, inst.timeline.registered)  # initial nodes registered before the start
        body = nodes.build_node(
            self._node_spec(inst), ready=ready, since=since, heartbeat=now, registered=created_at
        )
        try:
            self.c.store.create(NODES, body, created_at=created_at)
        except errors.AlreadyExists:
            log.warning("node %s already exists; instance %s registers with it", inst.node_name, inst.id)
        inst.registered = True
        inst.ready = ready
        self.version += 1
        if ready:
            self._write_boot_logs(inst)
        if inst.notice is not None:
            self._apply_notice(inst)

    def _mark_ready(self, inst: Instance) -> None:
        if not inst.active or not inst.registered:
            return
        now = self.c.now()

        def set_ready(node: Obj) -> None:
            conditions = [c for c in node["status"].get("conditions", []) if c.get("type") != "Ready"]
            ready = nodes.ready_conditions(now, now)[-1]
            node["status"]["conditions"] = [*conditions, ready]

        def drop_taint(node: Obj) -> None:
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != nodes.NOT_READY_TAINT]
            if taints:
                node["spec"]["taints"] = taints
            else:
                node["spec"].pop("taints", None)

        store = self.c.store
        store.mutate(NODES, "", inst.node_name, set_ready, subresource="status")
        store.mutate(NODES, "", inst.node_name, drop_taint)
        inst.ready = True
        self.version += 1
        self._write_boot_logs(inst)

    def _schedule_reclaim(self, inst: Instance) -> None:
        state = self.pools[inst.pool]
        rate = state.hazard_per_hour * self.interruption_settings.rate_multiplier
        if not state.spot or rate <= 0 or not self.interruption_settings.enabled:
            return
        rng = _seeded(self.seed, "reclaim", inst.id)
        at = max(inst.launched, self.started_at) + rng.expovariate(rate) * 3600.0
        inst.timers.append(self.c.engine.call_at(at, lambda: self._reclaim(inst)))

    def _reclaim(self, inst: Instance) -> None:
        if inst.active:
            self._notify(inst, self.interruption_settings.notice, self.c.now())

    def _notify(self, inst: Instance, seconds: float, now: float) -> bool:
        if inst.notice is not None or not inst.active:
            return False
        inst.notice = Notice(issued=now, action_time=now + seconds)
        self._speaking.add(inst.node_name)
        if inst.rebalance_at is None:
            inst.rebalance_at = now  # EC2 sends a rebalance recommendation no later than the notice
        inst.timers.append(
            self.c.engine.call_at(inst.notice.action_time, lambda: self._terminate(inst, "spot-interruption"))
        )
        log.info(
            "spot interruption notice for %s (%s), terminating at %s",
            inst.node_name,
            inst.id,
            rfc3339(now + seconds),
        )
        if inst.registered:
            self._apply_notice(inst)
        for callback in list(self.on_notice):
            callback(inst)
        return True

    def _apply_notice(self, inst: Instance) -> None:
        assert inst.notice is not None
        taint = {"key": nodes.SPOT_INTERRUPTION_TAINT, "value": "terminate", "effect": "NoSchedule"}

        def add_taint(node: Obj) -> None:
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != taint["key"]]
            node["spec"]["taints"] = [*taints, taint]

        if self.interruption_settings.node_taint:
            updated = self.c.store.mutate(NODES, "", inst.node_name, add_taint)
        else:
            updated = self.c.store.get(NODES, "", inst.node_name)
        if updated is None:
            return
        pool = self.pools[inst.pool].spec
        self.c.recorder.record(
            updated,
            "SpotInterruption",
            f"Spot instance {inst.id} ({pool.instance_type}, {pool.zone}) received an interruption notice: "
            f"it will be terminated at {rfc3339(inst.notice.action_time)}",
            type="Warning",
            component=COMPONENT,
            host=inst.node_name,
        )

    def _terminate(self, inst: Instance, reason: str) -> None:
        if inst.state == TERMINATED:
            return
        inst.cancel_timers()
        inst.state = TERMINATED
        self._active.get(inst.pool, {}).pop(inst.id, None)
        self._active_all.pop(inst.id, None)
        self.version += 1
        inst.terminated_at = self.c.now()
        inst.termination_reason = reason
        self._ips.discard(inst.ip)
        self._retired_ips.add(inst.ip)
        self._speaking.discard(inst.node_name)
        if inst.registered:
            with contextlib.suppress(errors.NotFound):
                self.c.store.delete(NODES, "", inst.node_name)
        self.reconcile_pool(inst.pool)

    # ---- timeline ---------------------------------------------------------------------------------
    def _fire(self, event: TimelineEvent) -> None:
        try:
            if event.action == "interrupt":
                self.interrupt(node=event.node, pool=event.pool, zone=event.zone, notice=event.notice)
            elif event.action == "shortage" and event.pool and event.duration is not None:
                self.shortage(event.pool, event.duration)
            elif event.action == "rebalance":
                self.rebalance(node=event.node, pool=event.pool, zone=event.zone)
        except CloudError as exc:
            log.warning("timeline event at %ss (%s) skipped: %s", event.at, event.action, exc)

    # ---- metadata URL and logs -------------------------------------------------------------------
    def _annotate_metadata_url(self) -> None:
        base = self.c.services.get("metadata_url")
        if not base:
            return
        for inst in self.active_instances():
            if not inst.registered:
                continue
            url = f"{str(base).rstrip('/')}/{inst.node_name}"

            def annotate(node: Obj, url: str = url) -> None:
                node["metadata"].setdefault("annotations", {})[nodes.METADATA_URL_ANNOTATION] = url

            current = self.c.store.get(NODES, "", inst.node_name)
            if (
                current
                and (current["metadata"].get("annotations") or {}).get(nodes.METADATA_URL_ANNOTATION) != url
            ):
                self.c.store.mutate(NODES, "", inst.node_name, annotate)

    def _log_identity(self, inst: Instance) -> boot.LogIdentity:
        return boot.LogIdentity(
            node_name=inst.node_name, region=self.region, kubelet_version=self.kubelet_version
        )

    def _write_boot_logs(self, inst: Instance) -> None:
        directory = self.boot_settings.log_dir
        if not directory:
            return
        root = Path(directory) / inst.node_name / "var" / "log"
        cni_dir = root / "pods" / f"kube-system_aws-node-{inst.id[2:7]}" / "aws-node"
        try:
            cni_dir.mkdir(parents=True, exist_ok=True)
            (root / "messages").write_text(boot.render_messages(self._log_identity(inst), inst.timeline))
            (cni_dir / "0.log").write_text(boot.render_cni_log(inst.timeline))
        except OSError as exc:
            log.warning("cannot write boot logs of %s under %s: %s", inst.node_name, directory, exc)
