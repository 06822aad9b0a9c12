"""A cluster-autoscaler-like loop over the cloud's pools.

Every scan (10 s, as cluster-autoscaler's default `--scan-interval`):
- scale-up: pods the scheduler marked unschedulable (PodScheduled=False, reason Unschedulable)
  for longer than `scaleUpAfter` that would not fit on nodes still booting are bin-packed onto
  template nodes of each pool that may grow (below maxSize, not in a capacity shortage); the pool
  that helps the most pods wins (ties: the cheapest scale-up). Pods get `TriggeredScaleUp` /
  `NotTriggerScaleUp` events with cluster-autoscaler's messages. Expendable pods (priority below
  `expendablePodsPriorityCutoff`) are not considered.
- scale-down (`scaledown.py` plans it, `drain.py` drains): a Ready node whose utilization is below
  the threshold and whose pods can all go elsewhere is *unneeded*; once unneeded for
  `scaleDownUnneeded` it is tainted `ToBeDeletedByClusterAutoscaler`, drained through the eviction
  API (empty nodes are not drained) and terminated, down to the pool's minSize; no scale-down within
  `scaleDownDelayAfterAdd` of a scale-up. The plan is kept from scan to scan and made again only when
  pods, nodes or PodDisruptionBudgets changed in a way that matters (at most every
  `PLAN_INTERVAL`, and always before a node is removed).
  With `scaleDownEmptyOnly` the older behaviour: only nodes running nothing but DaemonSet/mirror
  pods go, and not while a scale-up is still booting.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import yaml

from shipshape.emulator.admission.builtin import class_priority
from shipshape.emulator.cloud import fit, nodes, scaledown
from shipshape.emulator.cloud.drain import NodeDrain
from shipshape.emulator.cloud.scaledown import PodFacts, needs_other_pods, signature
from shipshape.emulator.resources import (
    CONFIGMAPS,
    JOBS,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    ResourceType,
)
from shipshape.emulator.store import Obj, WatchEvent
from shipshape.kube import scheduling
from shipshape.kube.clock import parse_time, rfc3339
from shipshape.kube.quantity import resource_amount

if TYPE_CHECKING:
    from shipshape.emulator.cloud.model import CloudModel, Instance, PoolState

log = logging.getLogger(__name__)

SCAN_INTERVAL = 10.0
NOT_TRIGGERED_EVENT_INTERVAL = 60.0  # at most one NotTriggerScaleUp event per pod per minute
RECENTLY_READY = 30.0  # a node Ready for less than this is still "upcoming" (the scheduler may lag)
PLAN_INTERVAL = 30.0  # the scale-down plan is made again at most this often (unless a removal needs it)
COMPONENT = "cluster-autoscaler"
STATUS_NAMESPACE, STATUS_CONFIGMAP = "kube-system", "cluster-autoscaler-status"
# libyaml's safe dumper where PyYAML was built with it (several times faster), else the pure one.
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

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
    template: bool = False  # a pool's template node (immutable): its filter verdicts are kept

    @property
    def key(self) -> str:
        return str(self.node["metadata"]["name"])


class Packer:
    """First-fit bin packing with the scheduler's filters, cached for pods of the same shape.

    The filters run once per (pod shape, node) on the node alone; what the pods already placed
    take is then plain resource arithmetic. Pods whose fit depends on other pods (inter-pod
    affinity, hard topology spread, host ports) get the full filter check against the placed pods.
    """

    def __init__(
        self,
        fits: FitFn,
        shape_of: Callable[[Obj], bytes] = signature,
        template_verdicts: dict[tuple[bytes, str], list[str]] | None = None,
    ) -> None:
        self.fits = fits
        self.shape_of = shape_of
        self._static: dict[tuple[bytes, str], list[str]] = {}
        self._template_static = template_verdicts if template_verdicts is not None else {}
        self._requests: dict[str, dict[str, int]] = {}
        self._allocatable: dict[str, dict[str, int]] = {}

    def requests(self, pod: Obj) -> dict[str, int]:
        uid = pod["metadata"].get("uid") or pod["metadata"]["name"]
        cached = self._requests.get(uid)
        if cached is None:
            cached = self._requests[uid] = scheduling.pod_requests(pod)
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
        cache = self._template_static if sim.template else self._static
        key = (self.shape_of(pod), sim.key)
        reasons = cache.get(key)
        if reasons is None:
            reasons = cache[key] = self.fits(pod, sim.node, [])
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
        if needs_other_pods(pod) and self.fits(pod, sim.node, sim.pods):
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


@dataclass(slots=True)
class NodeFacts:
    """What scale-down needs of a Node, and a key of what the scheduler's filters look at."""

    obj: Obj
    allocatable: dict[str, int]
    static_key: bytes
    ready: bool
    to_be_deleted: bool
    unschedulable: bool
    disabled: bool


def node_facts(node: Obj, previous: NodeFacts | None = None) -> NodeFacts:
    """The node's facts; `previous`, those of an older version of the node, lends what the new
    version shares with it (stored objects are replaced, never changed: a status report keeps the
    labels, the spec, the annotations and the allocatable objects), so only readiness is read again."""
    md, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    raw = status.get("allocatable") or {}
    if previous is not None:
        old = previous.obj
        old_md = old["metadata"]
        if (
            old_md.get("labels") is md.get("labels")
            and old_md.get("annotations") is md.get("annotations")
            and old.get("spec") is node.get("spec")
            and (old.get("status") or {}).get("allocatable") is status.get("allocatable")
        ):
            return NodeFacts(
                obj=node,
                allocatable=previous.allocatable,
                static_key=previous.static_key,
                ready=_ready(status),
                to_be_deleted=previous.to_be_deleted,
                unschedulable=previous.unschedulable,
                disabled=previous.disabled,
            )
    allocatable = {name: resource_amount(name, value) for name, value in raw.items()}
    taints = spec.get("taints") or []
    ready = _ready(status)
    annotations = md.get("annotations") or {}
    static = (md.get("labels"), taints, spec.get("unschedulable"), raw)
    return NodeFacts(
        obj=node,
        allocatable=allocatable,
        static_key=orjson.dumps(static, option=orjson.OPT_SORT_KEYS),
        ready=ready,
        to_be_deleted=any(t.get("key") == nodes.TO_BE_DELETED_TAINT for t in taints),
        unschedulable=bool(spec.get("unschedulable")),
        disabled=annotations.get(scaledown.SCALE_DOWN_DISABLED) == "true",
    )


def _ready(status: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


_CONTROLLERS: dict[str, ResourceType] = {"ReplicaSet": REPLICASETS, "StatefulSet": STATEFULSETS, "Job": JOBS}


class ClusterAutoscaler:
    def __init__(self, cloud: CloudModel) -> None:
        self.cloud = cloud
        self._empty_since: dict[str, float] = {}
        self._last_not_triggered: dict[tuple[str, str], float] = {}
        self._templates: dict[str, Obj] = {}
        self._template_verdicts: dict[tuple[bytes, str], list[str]] = {}  # (pod shape, template) -> why not
        self._unschedulable: dict[tuple[str, str], Obj] = {}
        self._failure_reported: dict[str, float] = {}  # pool -> end of the shortage reported
        # Indexes kept from the watch: bound pods per node, their requests summed, pending pods.
        self._pods: dict[tuple[str, str], PodFacts] = {}
        self._pending: dict[tuple[str, str], PodFacts] = {}
        self._on_node: dict[str, dict[tuple[str, str], PodFacts]] = {}
        self._used: dict[str, scaledown.Used] = {}
        self._workload_pods: Counter[str] = Counter()  # pods that keep a node in empty-only mode
        self._nodes: dict[str, NodeFacts] = {}
        self._static: dict[str, dict[bytes, bool]] = {}  # node -> pod shape -> passes the filters
        self._view_cache: dict[str, tuple[NodeFacts, scaledown.NodeView]] = {}
        self._table = scaledown.NodeTable()  # what the last plan read of every node
        # The views of the last walk, kept while the cloud's version and `_views_changes` (node
        # events, notices, drains begun or ended) stay the same.
        self._views_changes = 0
        self._views_kept: tuple[tuple[int, int], list[scaledown.NodeView]] | None = None
        self._pdb_allowed: dict[tuple[str, str], int] = {}
        # Scale-down state.
        self._dirty = True
        self._last_plan = float("-inf")
        self.plan = scaledown.Plan()
        self._unneeded_since: dict[str, float] = {}
        self._last_scale_up = float("-inf")
        self._last_failure = float("-inf")
        self._drains: dict[str, NodeDrain] = {}
        self.plans_made = 0
        self._status_written: dict[str, Any] | None = None
        self._status_kept: tuple[Any, dict[str, Any]] | None = None

    def start(self) -> None:
        store = self.cloud.c.store
        for node in store.iter(NODES):
            self._index_node(node, deleted=False)
        for pod in store.iter(PODS):
            self._index(pod, deleted=False)
        store.subscribe(self._on_change, kinds=(PODS, NODES, PDBS))
        self.cloud.on_notice.append(self._on_notice)
        self.cloud.c.engine.call_later(SCAN_INTERVAL, self._scan)

    # ---- indexes kept from the watch, so a scan does not walk every pod -------------------------
    def _on_change(self, event: WatchEvent) -> None:
        deleted = event.type == "DELETED"
        if event.resource is PODS:
            self._index(event.object, deleted=deleted)
        elif event.resource is NODES:
            self._index_node(event.object, deleted=deleted)
        elif event.resource is PDBS:
            md = event.object["metadata"]
            key = (md.get("namespace", ""), md["name"])
            allowed = (
                -1 if deleted else int((event.object.get("status") or {}).get("disruptionsAllowed") or 0)
            )
            if self._pdb_allowed.get(key) != allowed:
                self._pdb_allowed[key] = allowed
                self._dirty = True

    def _on_notice(self, inst: Instance) -> None:
        self._views_changes += 1  # (a registered node is also tainted: a node event follows)

    def _index_node(self, node: Obj, *, deleted: bool) -> None:
        self._views_changes += 1
        name = node["metadata"]["name"]
        old = self._nodes.pop(name, None)
        if deleted:
            self._static.pop(name, None)
            self._view_cache.pop(name, None)
            if not self._on_node.get(name):
                self._on_node.pop(name, None)
                self._used.pop(name, None)
            self._dirty = True
            return
        new = self._nodes[name] = node_facts(node, old)
        if old is None or old.static_key != new.static_key:
            self._static.pop(name, None)
            self._dirty = True
        elif (old.ready, old.disabled) != (new.ready, new.disabled):
            self._dirty = True

    def _index(self, pod: Obj, *, deleted: bool) -> None:
        key = _pod_key(pod)
        if not deleted and unschedulable_since(pod) is not None and not self._expendable(pod):
            self._unschedulable[key] = pod
        else:
            self._unschedulable.pop(key, None)
            self._last_not_triggered.pop(key, None)
        old = self._pods.pop(key, None) or self._pending.pop(key, None)
        if deleted:
            if old is not None:
                if old.node:
                    self._unplace(old)
                self._dirty = True
            return
        uid = pod["metadata"].get("uid") or pod["metadata"]["name"]
        requests = old.requests if old is not None and old.uid == uid else scheduling.pod_requests(pod)
        new = scaledown.pod_facts(pod, requests, old)
        new.expendable = self.priority(new) < self.cloud.autoscaler_settings.expendable_pods_priority_cutoff
        if old is not None and old.node and old.relevance() == new.relevance():
            # A status change (phase, readiness): the same place, the same sums.
            self._pods[key] = self._on_node[new.node][key] = new
            return
        if old is not None and old.node:
            self._unplace(old)
        if new.node:
            self._pods[key] = new
            self._place(new)
        elif not (new.finished or new.terminating):
            self._pending[key] = new
        elif old is None:
            return
        if old is None or old.relevance() != new.relevance():
            self._dirty = True

    def _place(self, facts: PodFacts) -> None:
        self._on_node.setdefault(facts.node, {})[facts.key] = facts
        if facts.counted:
            used = self._used.get(facts.node)
            if used is None:
                used = self._used[facts.node] = scaledown.Used()
            used.add(facts.requests)
        if not (facts.mirror or facts.daemon or facts.finished or facts.terminating):
            self._workload_pods[facts.node] += 1

    def _unplace(self, facts: PodFacts) -> None:
        # The per-node dicts of a known node stay (node views hold them); a gone node's go when empty.
        known = facts.node in self._nodes
        on_node = self._on_node.get(facts.node)
        if on_node is not None:
            on_node.pop(facts.key, None)
            if not on_node and not known:
                del self._on_node[facts.node]
        if facts.counted:
            used = self._used.get(facts.node)
            if used is not None:
                used.remove(facts.requests)
                if used["pods"] <= 0 and not known:
                    del self._used[facts.node]
        if not (facts.mirror or facts.daemon or facts.finished or facts.terminating):
            self._workload_pods[facts.node] -= 1
            if self._workload_pods[facts.node] <= 0:
                del self._workload_pods[facts.node]

    def _shape_of(self, pod: Obj) -> bytes:
        """The pod's filter signature, kept with the pending pod's facts so it is computed once."""
        facts = self._pending.get(_pod_key(pod))
        if facts is not None and facts.obj is pod:
            return facts.shape
        return signature(pod)

    def priority(self, facts: PodFacts) -> int:
        """The pod's priority: spec.priority as admission set it, else its PriorityClass's value."""
        if facts.priority is not None:
            return facts.priority
        return class_priority(self.cloud.c.store, facts.priority_class)

    def _expendable(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        given = spec.get("priority")
        value = (
            given
            if isinstance(given, int)
            else class_priority(self.cloud.c.store, spec.get("priorityClassName"))
        )
        return value < self.cloud.autoscaler_settings.expendable_pods_priority_cutoff

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
        try:
            self._run_once()
        finally:
            self.write_status()

    def _run_once(self) -> None:
        scaled_up = self.scale_up()
        if scaled_up:
            self._last_scale_up = self.cloud.c.now()
        if self.cloud.autoscaler_settings.scale_down_empty_only:
            if not scaled_up and not self._booting():
                self.scale_down_empty()
            return
        self.update_unneeded()
        if not scaled_up and not self._in_cooldown():
            self.scale_down()

    def status(self) -> dict[str, Any]:
        """cluster-autoscaler's status document (the YAML `status` of its ConfigMap, 1.30 and later):
        per node group (one per pool) its node counts, target and size bounds, and a scale-up
        `Backoff` while a scale-up failed for lack of capacity (the shortage it reported).

        The document is kept while the cloud model's pools and instances have not changed
        (`CloudModel.version`) and no pool's backoff began or ended: the scan asks every 10 seconds,
        and counting every live instance each time was a tenth of a quiet day's run. Callers must
        not change it."""
        cloud = self.cloud
        now = cloud.c.now()
        backoffs = tuple(
            state.shortage_until > now and self._failure_reported.get(state.name) == state.shortage_until
            for state in cloud.pools.values()
        )
        key = (cloud.version, len(cloud.pools), backoffs)
        kept = self._status_kept
        if kept is not None and kept[0] == key:
            return kept[1]
        doc = self._status(backoffs)
        self._status_kept = (key, doc)
        return doc

    def _status(self, backoffs: tuple[bool, ...]) -> dict[str, Any]:
        """The status document worked out from the pools and their live instances."""
        cloud = self.cloud
        groups: list[dict[str, Any]] = []
        total = ready = 0
        for state, backoff in zip(cloud.pools.values(), backoffs, strict=True):
            active = cloud.active_instances(state.name)
            up = sum(1 for inst in active if inst.ready)
            total, ready = total + len(active), ready + up
            scale_up: dict[str, Any] = {"status": "Backoff" if backoff else "NoActivity"}
            if backoff:
                scale_up["backoffInfo"] = {
                    "errorCode": "InsufficientInstanceCapacity",
                    "errorMessage": f"not enough {state.spec.instance_type} capacity in {state.spec.zone}",
                }
            groups.append(
                {
                    "name": state.name,
                    "health": {
                        "status": "Healthy",
                        "nodeCounts": {"registered": {"total": len(active), "ready": up}},
                        "cloudProviderTarget": state.desired,
                        "minSize": state.spec.min_size,
                        "maxSize": state.spec.max_size,
                    },
                    "scaleUp": scale_up,
                }
            )
        return {
            "autoscalerStatus": "Running",
            "clusterWide": {
                "health": {
                    "status": "Healthy",
                    "nodeCounts": {"registered": {"total": total, "ready": ready}},
                },
            },
            "nodeGroups": groups,
        }

    def write_status(self) -> None:
        """Write the status into kube-system/cluster-autoscaler-status when it changed (with the time it
        changed; cluster-autoscaler rewrites it every loop, which a reader cannot tell apart)."""
        doc = self.status()
        if doc is self._status_written or doc == self._status_written:
            return
        self._status_written = doc
        text = yaml.dump({"time": rfc3339(self.cloud.c.now()), **doc}, Dumper=_DUMPER, sort_keys=False)
        store = self.cloud.c.store

        def put(obj: Obj) -> None:
            obj.setdefault("data", {})["status"] = text

        if store.mutate(CONFIGMAPS, STATUS_NAMESPACE, STATUS_CONFIGMAP, put) is None:
            store.create(
                CONFIGMAPS,
                {
                    "metadata": {"name": STATUS_CONFIGMAP, "namespace": STATUS_NAMESPACE},
                    "data": {"status": text},
                },
            )

    def _booting(self) -> bool:
        return any(not i.ready and i.notice is None for i in self.cloud.active_instances())

    def _in_cooldown(self) -> bool:
        settings = self.cloud.autoscaler_settings
        now = self.cloud.c.now()
        return (
            now - self._last_scale_up < settings.scale_down_delay_after_add
            or now - self._last_failure < settings.scale_down_delay_after_failure
        )

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
        packer = Packer(self._fits(), self._shape_of, self._template_verdicts)
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
            template = SimNode(self.template(state), template=True)
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
            bins = [SimNode(template.node, template=True) for _ in range(first)]
            left = packer.pack(helped, bins)
            while left and len(bins) < headroom:
                bins.append(SimNode(template.node, template=True))
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
        template = SimNode(self.template(state), template=True)
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
            self.write_status()
            status = store.get(CONFIGMAPS, STATUS_NAMESPACE, STATUS_CONFIGMAP)
            assert status is not None
        self.cloud.c.recorder.record(status, reason, message, type=type, component=COMPONENT)

    def _upcoming(self) -> list[SimNode]:
        """Nodes still booting (or just Ready) with the pods already on them."""
        cloud = self.cloud
        settled = cloud.c.now() - RECENTLY_READY
        out = []
        for inst in cloud.active_instances():
            if inst.notice is not None or (inst.ready and inst.timeline.ready < settled):
                continue
            node = cloud.c.store.get(NODES, "", inst.node_name) if inst.registered else None
            template = node is None or not inst.ready
            if template:
                node = self.template(cloud.pools[inst.pool])
            assert node is not None
            out.append(SimNode(node, list(cloud.c.store.pods_on_node(inst.node_name)), template=template))
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

    # ---- scale-down -------------------------------------------------------------------------
    def _views(self) -> list[scaledown.NodeView]:
        """Nodes scale-down may remove or move pods to: Ready, not being deleted, no notice, not cordoned.

        The list is kept while nothing it reads changed: the cloud model's instances (its `version`:
        launches, readiness, terminations), notices, node events and drains. Callers must not
        change it."""
        key = (self.cloud.version, self._views_changes)
        kept = self._views_kept
        if kept is not None and kept[0] == key:
            return kept[1]
        views = self._walk_views()
        self._views_kept = (key, views)
        return views

    def _walk_views(self) -> list[scaledown.NodeView]:
        """The views worked out from every live instance."""
        cloud = self.cloud
        out = []
        for inst in cloud.active_instances():
            name = inst.node_name
            if not inst.ready or inst.notice is not None or name in self._drains:
                continue
            facts = self._nodes.get(name)
            if facts is None or not facts.ready or facts.to_be_deleted or facts.unschedulable:
                continue
            cached = self._view_cache.get(name)
            if cached is not None and cached[0] is facts:
                out.append(cached[1])  # its used sums and pods are the live ones
                continue
            spec = cloud.pools[inst.pool].spec
            view = scaledown.NodeView(
                name=name,
                pool=inst.pool,
                obj=facts.obj,
                allocatable=facts.allocatable,
                used=self._used.setdefault(name, scaledown.Used()),
                pods=self._on_node.setdefault(name, {}).values(),
                gpu_resource=spec.gpu_resource if spec.gpus else None,
                disabled=facts.disabled,
            )
            self._view_cache[name] = (facts, view)
            out.append(view)
        return out

    def _static_ok(self, pod: PodFacts, view: scaledown.NodeView) -> bool:
        per_node = self._static.setdefault(view.name, {})
        ok = per_node.get(pod.shape)
        if ok is None:
            ok = per_node[pod.shape] = not self._fits()(pod.unbound, view.obj, [])
        return ok

    def _fits_with_pods(self, pod: PodFacts, view: scaledown.NodeView, others: list[Obj]) -> bool:
        return not self._fits()(pod.unbound, view.obj, others)

    def _controller_exists(self, pod: PodFacts) -> bool:
        rt = _CONTROLLERS.get(pod.controller_kind or "")
        if rt is None:
            return True
        return self.cloud.c.store.get(rt, pod.namespace, pod.controller_name) is not None

    def update_unneeded(self, *, force: bool = False) -> scaledown.Plan:
        """Make the scale-down plan again if something it depends on changed (and it is time to)."""
        now = self.cloud.c.now()
        if not self._dirty or (not force and now - self._last_plan < PLAN_INTERVAL):
            return self.plan
        settings = self.cloud.autoscaler_settings
        rules = scaledown.Rules(
            threshold=settings.scale_down_utilization_threshold,
            gpu_threshold=settings.scale_down_gpu_utilization_threshold,
            cutoff=settings.expendable_pods_priority_cutoff,
            non_empty_candidates=settings.scale_down_non_empty_candidates_count,
        )
        self._dirty = False
        self._last_plan = now
        self.plans_made += 1
        self.plan = scaledown.plan(
            self._views(),
            # Pending pods the scheduler has not (yet) found unschedulable will take room soon;
            # those it has fit nowhere, and placing them would only cost time.
            [facts for key, facts in self._pending.items() if key not in self._unschedulable],
            rules=rules,
            budgets=scaledown.Budgets(self.cloud.c.store.iter(PDBS)),
            static_ok=self._static_ok,
            fits_with_pods=self._fits_with_pods,
            priority_of=self.priority,
            controller_exists=self._controller_exists,
            previously_unneeded=self._unneeded_since,
            pool_room=self._pool_room(),
            table=self._table,
        )
        since = {name: self._unneeded_since.get(name, now) for name in self.plan.unneeded}
        self._unneeded_since = since
        return self.plan

    def _pool_room(self) -> dict[str, int]:
        """How many nodes each pool may still lose: its desired size above minSize, less drains under way."""
        room = {name: state.desired - state.spec.min_size for name, state in self.cloud.pools.items()}
        for drain in self._drains.values():
            room[drain.inst.pool] = room.get(drain.inst.pool, 0) - 1
        return room

    def unneeded_for(self, node: str) -> float | None:
        """How long the node has been unneeded (None: it is not)."""
        since = self._unneeded_since.get(node)
        return None if since is None else self.cloud.c.now() - since

    def _ripe(self) -> list[scaledown.Unneeded]:
        now = self.cloud.c.now()
        wait = self.cloud.autoscaler_settings.scale_down_unneeded
        return [
            u
            for name, u in self.plan.unneeded.items()
            if now - self._unneeded_since[name] >= wait and name not in self._drains
        ]

    def _actionable(self) -> list[scaledown.Unneeded]:
        """Nodes unneeded for long enough that may go now (parallelism, drains and minSize allowing)."""
        settings = self.cloud.autoscaler_settings
        room = settings.max_scale_down_parallelism - len(self._drains)
        drains = settings.max_drain_parallelism - len(self._drains)
        pool_room = self._pool_room()
        out: list[scaledown.Unneeded] = []
        for unneeded in sorted(self._ripe(), key=lambda u: not u.empty):
            if room <= 0:
                break
            inst = self.cloud.instance_for(unneeded.node)
            if inst is None or not inst.active or inst.notice is not None or pool_room.get(inst.pool, 0) <= 0:
                continue
            if not unneeded.empty:
                if drains <= 0:
                    continue
                drains -= 1
            pool_room[inst.pool] -= 1
            room -= 1
            out.append(unneeded)
        return out

    def scale_down(self) -> list[str]:
        """Remove the nodes unneeded for long enough: empty ones at once, others drained one at a time."""
        if not self._actionable():
            return []
        if self._dirty:
            self.update_unneeded(force=True)
        started: list[str] = []
        for unneeded in self._actionable():
            inst = self.cloud.instance_for(unneeded.node)
            assert inst is not None
            if unneeded.empty:
                self._remove_empty(inst)
            else:
                self._start_drain(inst, unneeded)
            started.append(unneeded.node)
            self._unneeded_since.pop(unneeded.node, None)
            self.plan.unneeded.pop(unneeded.node, None)
        if started:
            self._dirty = True
        return started

    def _mark(self, inst: Instance) -> None:
        cloud = self.cloud
        taint = {"key": nodes.TO_BE_DELETED_TAINT, "value": str(int(cloud.c.now())), "effect": "NoSchedule"}

        def mark(node: Obj) -> None:
            node["spec"]["taints"] = [*(node["spec"].get("taints") or []), taint]

        node = cloud.c.store.mutate(NODES, "", inst.node_name, mark)
        if node is not None:
            cloud.c.recorder.record(
                node, "ScaleDown", "marked the node as toBeDeleted/unschedulable", component=COMPONENT
            )

    def _remove_empty(self, inst: Instance) -> None:
        self._mark(inst)
        name = inst.node_name
        log.info("scale-down: removing empty node %s", name)
        self._status_event("ScaleDownEmpty", f"Scale-down: removing empty node {name}")
        self._empty_since.pop(name, None)
        self.cloud.remove_node(name, "scale-down")
        self._status_event("ScaleDownEmpty", f"Scale-down: empty node {name} removed")

    def _start_drain(self, inst: Instance, unneeded: scaledown.Unneeded) -> None:
        self._mark(inst)
        name = inst.node_name
        moving = ",".join(f"{p.namespace}/{p.name}" for p in unneeded.to_move)
        log.info(
            "scale-down: removing node %s, utilization: %s, pods to reschedule: %s",
            name,
            unneeded.utilization,
            moving,
        )
        self._status_event(
            "ScaleDown",
            f"Scale-down: removing node {name}, utilization: {unneeded.utilization}, "
            f"pods to reschedule: {moving}",
        )
        drain = NodeDrain(self.cloud, inst, self._drained)
        self._drains[name] = drain
        self._views_changes += 1
        drain.start()

    def _drained(self, drain: NodeDrain, ok: bool, why: str) -> None:
        cloud = self.cloud
        name = drain.node
        self._drains.pop(name, None)
        self._views_changes += 1
        self._dirty = True
        if not drain.inst.active:  # reclaimed meanwhile: nothing left to remove, nothing failed
            return
        if ok:
            cloud.remove_node(name, "scale-down")
            self._status_event("ScaleDown", f"Scale-down: node {name} removed with drain")
            return
        self._last_failure = cloud.c.now()
        log.warning("scale-down of node %s failed: %s", name, why)

        def unmark(node: Obj) -> None:
            node["spec"]["taints"] = [
                t for t in node["spec"].get("taints") or [] if t.get("key") != nodes.TO_BE_DELETED_TAINT
            ]

        node = cloud.c.store.mutate(NODES, "", name, unmark)
        if node is not None:
            cloud.c.recorder.record(
                node,
                "ScaleDownFailed",
                "failed to drain the node, aborting ScaleDown",
                type="Warning",
                component=COMPONENT,
            )

    # ---- the older behaviour: empty nodes only ---------------------------------------------------
    def scale_down_empty(self) -> list[str]:
        cloud = self.cloud
        now = cloud.c.now()
        unneeded_for = cloud.autoscaler_settings.scale_down_unneeded
        seen: set[str] = set()
        removed: list[str] = []
        for inst in sorted(cloud.active_instances(), key=lambda i: i.node_name):
            if not inst.ready or inst.notice is not None:
                continue
            name = inst.node_name
            if name in self._workload_pods or name not in self._nodes:
                continue
            seen.add(name)
            since = self._empty_since.setdefault(name, now)
            state = cloud.pools[inst.pool]
            if now - since < unneeded_for or state.desired <= state.spec.min_size:
                continue
            self._remove_empty(inst)
            removed.append(name)
        for name in list(self._empty_since):
            if name not in seen:
                del self._empty_since[name]
        return removed
