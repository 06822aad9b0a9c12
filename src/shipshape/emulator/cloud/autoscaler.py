"""A cluster-autoscaler-like loop over the cloud's pools.

Every scan (10 s, as cluster-autoscaler's default `--scan-interval`):
- scale-up: pods the scheduler marked unschedulable (PodScheduled=False, reason Unschedulable)
  for longer than `scaleUpAfter` that would not fit on nodes still booting are bin-packed onto
  template nodes of each pool that may grow (below maxSize, not in a capacity shortage); the pool
  that helps the most pods wins (ties: the cheapest scale-up). Pods get `TriggeredScaleUp` /
  `NotTriggerScaleUp` events with cluster-autoscaler's messages.
- scale-down: a Ready node running nothing but DaemonSet/mirror pods for longer than
  `scaleDownUnneeded` is tainted `ToBeDeletedByClusterAutoscaler`, gets a `ScaleDown` event and
  is terminated, down to the pool's minSize. No scale-down while a scale-up is still booting.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from shipshape.emulator.cloud import fit, nodes
from shipshape.emulator.resources import CONFIGMAPS, NODES, PODS
from shipshape.emulator.store import Obj, WatchEvent
from shipshape.kube.clock import parse_time
from shipshape.kube.quantity import resource_amount

if TYPE_CHECKING:
    from shipshape.emulator.cloud.model import CloudModel, Instance, PoolState

log = logging.getLogger(__name__)

SCAN_INTERVAL = 10.0
NOT_TRIGGERED_EVENT_INTERVAL = 60.0  # at most one NotTriggerScaleUp event per pod per minute
RECENTLY_READY = 30.0  # a node Ready for less than this is still "upcoming" (the scheduler may lag)
COMPONENT = "cluster-autoscaler"
STATUS_NAMESPACE, STATUS_CONFIGMAP = "kube-system", "cluster-autoscaler-status"

FitFn = Callable[[Obj, Obj, list[Obj]], list[str]]


def unschedulable_since(pod: Obj) -> float | None:
    """When the scheduler marked a pending pod unschedulable, or None if it has not."""
    if pod.get("spec", {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return None
    if pod.get("status", {}).get("phase", "Pending") != "Pending":
        return None
    for cond in pod.get("status", {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            stamp = cond.get("lastTransitionTime")
            return parse_time(stamp) if stamp else 0.0
    return None


@dataclass(slots=True)
class SimNode:
    """A node in the scale-up simulation: a (template) Node object and the pods placed on it."""

    node: Obj
    pods: list[Obj] = field(default_factory=list)
    used: Counter[str] = field(default_factory=Counter)

    @property
    def key(self) -> str:
        return str(self.node["metadata"]["name"])


def _needs_other_pods(pod: Obj) -> bool:
    """Whether the pod's fit depends on the pods already on a node beyond their resources."""
    spec = pod.get("spec", {})
    affinity = spec.get("affinity") or {}
    if affinity.get("podAffinity") or affinity.get("podAntiAffinity"):
        return True
    if any(
        c.get("whenUnsatisfiable") == "DoNotSchedule" for c in spec.get("topologySpreadConstraints") or []
    ):
        return True
    return any(port.get("hostPort") for c in spec.get("containers") or [] for port in c.get("ports") or [])


def _signature(pod: Obj) -> bytes:
    """What a node's filters look at, for pods that do not depend on other pods."""
    spec = pod.get("spec", {})
    shape = {
        "requests": [(c.get("resources") or {}).get("requests") for c in spec.get("containers") or []],
        "init": [(c.get("resources") or {}).get("requests") for c in spec.get("initContainers") or []],
        "overhead": spec.get("overhead"),
        "nodeSelector": spec.get("nodeSelector"),
        "affinity": spec.get("affinity"),
        "tolerations": spec.get("tolerations"),
    }
    return orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)


class Packer:
    """First-fit bin packing with the scheduler's filters, cached for pods of the same shape.

    The filters run once per (pod shape, node) on the node alone; what the pods already placed
    take is then plain resource arithmetic. Pods whose fit depends on other pods (inter-pod
    affinity, hard topology spread, host ports) get the full filter check against the placed pods.
    """

    def __init__(self, fits: FitFn) -> None:
        self.fits = fits
        self._static: dict[tuple[bytes, str], list[str]] = {}
        self._requests: dict[str, dict[str, int]] = {}
        self._allocatable: dict[str, dict[str, int]] = {}

    def requests(self, pod: Obj) -> dict[str, int]:
        uid = pod["metadata"].get("uid") or pod["metadata"]["name"]
        cached = self._requests.get(uid)
        if cached is None:
            cached = self._requests[uid] = fit.pod_requests(pod)
        return cached

    def allocatable(self, sim: SimNode) -> dict[str, int]:
        cached = self._allocatable.get(sim.key)
        if cached is None:
            raw = sim.node.get("status", {}).get("allocatable") or {}
            cached = self._allocatable[sim.key] = {
                name: resource_amount(name, value) for name, value in raw.items()
            }
        return cached

    def static_reasons(self, pod: Obj, sim: SimNode) -> list[str]:
        """Why the pod cannot run on the node even when it is empty (cached per pod shape)."""
        key = (_signature(pod), sim.key)
        reasons = self._static.get(key)
        if reasons is None:
            reasons = self._static[key] = self.fits(pod, sim.node, [])
        return reasons

    def add_existing(self, sim: SimNode) -> SimNode:
        for pod in sim.pods:
            if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                sim.used.update(self.requests(pod))
                sim.used["pods"] += 1
        return sim

    def try_place(self, pod: Obj, sim: SimNode) -> bool:
        if self.static_reasons(pod, sim):
            return False
        allocatable = self.allocatable(sim)
        requests = self.requests(pod)
        if sim.used["pods"] + 1 > allocatable.get("pods", 110):
            return False
        for name, amount in requests.items():
            if amount and sim.used[name] + amount > allocatable.get(name, 0):
                return False
        if _needs_other_pods(pod) and self.fits(pod, sim.node, sim.pods):
            return False
        sim.pods.append(pod)
        sim.used.update(requests)
        sim.used["pods"] += 1
        return True

    def pack(self, pods: list[Obj], bins: list[SimNode]) -> list[Obj]:
        """First-fit of pods onto simulated nodes; returns the pods that fit nowhere."""
        left = []
        for pod in pods:
            if not any(self.try_place(pod, sim) for sim in bins):
                left.append(pod)
        return left


@dataclass(slots=True)
class ScaleUpOption:
    pool: PoolState
    pods: list[Obj]
    new_nodes: int

    def cost_per_hour(self) -> float:
        return self.new_nodes * self.pool.price_per_hour


def _pod_key(pod: Obj) -> tuple[str, str]:
    return (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])


def _size_by_resources(pods: list[Obj], template: SimNode, packer: Packer) -> int:
    """Lower bound of nodes for the pods by each resource (the estimator's limit on big batches)."""
    alloc = packer.allocatable(template)
    need: Counter[str] = Counter()
    for pod in pods:
        need.update(packer.requests(pod))
    need["pods"] = len(pods)
    bound = 1
    for name, amount in need.items():
        capacity = alloc.get(name, 0)
        if capacity > 0:
            bound = max(bound, -(-amount // capacity))
    return bound


class ClusterAutoscaler:
    def __init__(self, cloud: CloudModel) -> None:
        self.cloud = cloud
        self._empty_since: dict[str, float] = {}
        self._last_not_triggered: dict[tuple[str, str], float] = {}
        self._templates: dict[str, Obj] = {}
        self._unschedulable: dict[tuple[str, str], Obj] = {}
        self._failure_reported: dict[str, float] = {}  # pool -> end of the shortage reported
        self._blocking: dict[str, set[tuple[str, str]]] = {}  # node -> pods that keep it
        self._blocking_node: dict[tuple[str, str], str] = {}

    def start(self) -> None:
        store = self.cloud.c.store
        for pod in store.iter(PODS):
            self._index(pod, deleted=False)
        store.subscribe(self._on_change, kinds=(PODS,))
        self.cloud.c.engine.call_later(SCAN_INTERVAL, self._scan)

    # ---- indexes kept from the watch, so a scan does not walk every pod -------------------------
    def _on_change(self, event: WatchEvent) -> None:
        if event.resource is PODS:
            self._index(event.object, deleted=event.type == "DELETED")

    def _index(self, pod: Obj, *, deleted: bool) -> None:
        key = _pod_key(pod)
        if not deleted and unschedulable_since(pod) is not None:
            self._unschedulable[key] = pod
        else:
            self._unschedulable.pop(key, None)
            self._last_not_triggered.pop(key, None)
        old_node = self._blocking_node.pop(key, None)
        if old_node is not None:
            blocking = self._blocking.get(old_node)
            if blocking is not None:
                blocking.discard(key)
                if not blocking:
                    del self._blocking[old_node]
        node = pod.get("spec", {}).get("nodeName")
        if not deleted and node and _blocks_scale_down(pod):
            self._blocking.setdefault(node, set()).add(key)
            self._blocking_node[key] = node

    # ---- helpers ---------------------------------------------------------------------------
    def _fits(self) -> FitFn:
        scheduler = self.cloud.c.services.get("scheduler")
        candidate = getattr(scheduler, "fits", None)
        if callable(candidate):
            return candidate  # type: ignore[no-any-return]
        return fit.fits

    def template(self, pool: PoolState) -> Obj:
        cached = self._templates.get(pool.name)
        if cached is None:
            cached = nodes.template_node(pool.spec, self.cloud.region, self.cloud.kubelet_version)
            self._templates[pool.name] = cached
        return cached

    # ---- the loop --------------------------------------------------------------------------
    def _scan(self) -> None:
        try:
            self.run_once()
        finally:
            self.cloud.c.engine.call_later(SCAN_INTERVAL, self._scan)

    def run_once(self) -> None:
        scaled_up = self.scale_up()
        if not scaled_up and not self._booting():
            self.scale_down()

    def _booting(self) -> bool:
        return any(not i.ready and i.notice is None for i in self.cloud.active_instances())

    def scale_up(self) -> bool:
        cloud = self.cloud
        now = cloud.c.now()
        after = cloud.autoscaler_settings.scale_up_after
        pending = []
        for pod in self._unschedulable.values():
            since = unschedulable_since(pod)
            if since is not None and now - since >= after:
                pending.append(pod)
        if not pending:
            return False
        pending.sort(key=_pod_key)
        packer = Packer(self._fits())
        remaining = packer.pack(pending, [packer.add_existing(sim) for sim in self._upcoming()])
        if not remaining:
            return False
        options: list[ScaleUpOption] = []
        reasons: dict[tuple[str, str], Counter[str]] = {_pod_key(p): Counter() for p in remaining}
        for state in cloud.pools.values():
            headroom = state.spec.max_size - state.desired
            if cloud.in_shortage(state.name):
                for pod in remaining:
                    reasons[_pod_key(pod)]["in backoff after failed scale-up"] += 1
                self._capacity_failure(state, remaining, packer)
                continue
            if headroom <= 0:
                for pod in remaining:
                    reasons[_pod_key(pod)]["max node group size reached"] += 1
                continue
            template = SimNode(self.template(state))
            helped = []
            for pod in remaining:
                why = packer.static_reasons(pod, template)
                if why:
                    for reason in why:
                        reasons[_pod_key(pod)][reason] += 1
                else:
                    helped.append(pod)
            if not helped:
                continue
            first = min(headroom, _size_by_resources(helped, template, packer))
            bins = [SimNode(template.node) for _ in range(first)]
            left = packer.pack(helped, bins)
            while left and len(bins) < headroom:
                bins.append(SimNode(template.node))
                left = packer.pack(left, bins[-1:])
            placed = [p for sim in bins for p in sim.pods]
            used = sum(1 for sim in bins if sim.pods)
            if placed:
                options.append(ScaleUpOption(state, placed, used))
        helped_any = {_pod_key(p) for option in options for p in option.pods}
        self._not_triggered(remaining, reasons, exclude=helped_any)
        if not options:
            return False
        best = min(options, key=lambda o: (-len(o.pods), o.cost_per_hour(), o.pool.name))
        state = best.pool
        before = state.desired
        cloud.set_desired(state.name, before + best.new_nodes)
        info = f"[{{{state.name} {before}->{state.desired} (max: {state.spec.max_size})}}]"
        log.info("scale-up: setting group %s size to %d", state.name, state.desired)
        self._status_event(
            "ScaledUpGroup",
            f"Scale-up: setting group {state.name} size to {state.desired} instead of {before} "
            f"(max: {state.spec.max_size})",
        )
        for pod in best.pods:
            cloud.c.recorder.record(
                pod, "TriggeredScaleUp", f"pod triggered scale-up: {info}", component=COMPONENT
            )
            self._last_not_triggered.pop(_pod_key(pod), None)
        return True

    def _capacity_failure(self, state: PoolState, pods: list[Obj], packer: Packer) -> None:
        """A pool in shortage that pending pods would fit: the scale-up the cloud could not serve.

        Reported once per shortage, as cluster-autoscaler reports a failed scale-up and backs off.
        """
        until = state.shortage_until
        if self._failure_reported.get(state.name) == until:
            return
        template = SimNode(self.template(state))
        if not any(not packer.static_reasons(pod, template) for pod in pods):
            return
        self._failure_reported[state.name] = until
        spec = state.spec
        self._status_event(
            "FailedToScaleUpGroup",
            f"Scale-up failed for group {spec.name}: InsufficientInstanceCapacity: We currently do not have "
            f"sufficient {spec.instance_type} capacity in the Availability Zone you requested ({spec.zone}).",
            type="Warning",
        )

    def _status_event(self, reason: str, message: str, *, type: str = "Normal") -> None:
        """An Event on the kube-system/cluster-autoscaler-status ConfigMap, where the autoscaler logs."""
        store = self.cloud.c.store
        status = store.get(CONFIGMAPS, STATUS_NAMESPACE, STATUS_CONFIGMAP)
        if status is None:
            body = {
                "metadata": {"name": STATUS_CONFIGMAP, "namespace": STATUS_NAMESPACE},
                "data": {"status": "Cluster-autoscaler status (emulated): see the Events of this ConfigMap."},
            }
            status = store.create(CONFIGMAPS, body)
        self.cloud.c.recorder.record(status, reason, message, type=type, component=COMPONENT)

    def _upcoming(self) -> list[SimNode]:
        """Nodes still booting (or just Ready) with the pods already on them."""
        cloud = self.cloud
        now = cloud.c.now()
        out = []
        for inst in cloud.active_instances():
            if inst.notice is not None or (inst.ready and inst.timeline.ready < now - RECENTLY_READY):
                continue
            node = cloud.c.store.get(NODES, "", inst.node_name) if inst.registered else None
            if node is None or not inst.ready:
                node = self.template(cloud.pools[inst.pool])
            out.append(SimNode(node, list(cloud.c.store.pods_on_node(inst.node_name))))
        return out

    def _not_triggered(
        self, pods: list[Obj], reasons: dict[tuple[str, str], Counter[str]], exclude: set[tuple[str, str]]
    ) -> None:
        now = self.cloud.c.now()
        for pod in pods:
            key = _pod_key(pod)
            if key in exclude or not reasons.get(key):
                continue
            last = self._last_not_triggered.get(key)
            if last is not None and now - last < NOT_TRIGGERED_EVENT_INTERVAL:
                continue
            self._last_not_triggered[key] = now
            summary = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons[key].items()))
            self.cloud.c.recorder.record(
                pod,
                "NotTriggerScaleUp",
                f"pod didn't trigger scale-up: {summary}",
                component=COMPONENT,
            )

    def scale_down(self) -> list[str]:
        cloud = self.cloud
        now = cloud.c.now()
        unneeded_for = cloud.autoscaler_settings.scale_down_unneeded
        seen: set[str] = set()
        removed: list[str] = []
        for inst in sorted(cloud.active_instances(), key=lambda i: i.node_name):
            if not inst.ready or inst.notice is not None:
                continue
            name = inst.node_name
            if not self._empty(inst):
                continue
            seen.add(name)
            since = self._empty_since.setdefault(name, now)
            state = cloud.pools[inst.pool]
            if now - since < unneeded_for or state.desired <= state.spec.min_size:
                continue
            self._remove(inst)
            removed.append(name)
        for name in list(self._empty_since):
            if name not in seen:
                del self._empty_since[name]
        return removed

    def _empty(self, inst: Instance) -> bool:
        if inst.node_name in self._blocking:
            return False
        return self.cloud.c.store.get(NODES, "", inst.node_name) is not None

    def _remove(self, inst: Instance) -> None:
        cloud = self.cloud
        taint = {"key": nodes.TO_BE_DELETED_TAINT, "value": str(int(cloud.c.now())), "effect": "NoSchedule"}

        def mark(node: Obj) -> None:
            node["spec"]["taints"] = [*(node["spec"].get("taints") or []), taint]

        node = cloud.c.store.mutate(NODES, "", inst.node_name, mark)
        if node is not None:
            cloud.c.recorder.record(
                node, "ScaleDown", "marked the node as toBeDeleted/unschedulable", component=COMPONENT
            )
        log.info("scale-down: removing empty node %s", inst.node_name)
        self._status_event("ScaleDownEmpty", f"Scale-down: removing empty node {inst.node_name}")
        self._empty_since.pop(inst.node_name, None)
        cloud.remove_node(inst.node_name, "scale-down")


def _blocks_scale_down(pod: Obj) -> bool:
    md = pod["metadata"]
    if md.get("deletionTimestamp") or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if "kubernetes.io/config.mirror" in (md.get("annotations") or {}):
        return False
    return not any(ref.get("kind") == "DaemonSet" for ref in md.get("ownerReferences") or [])
