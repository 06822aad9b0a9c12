"""The DaemonSet controller: one pod per eligible node, pinned by node affinity, rolling updates.

A node is eligible as upstream's `NodeShouldRunDaemonPod` decides: the template's nodeName,
nodeSelector and required node affinity match, and its taints are tolerated once the daemon
tolerations are added (not-ready/unreachable NoExecute; disk/memory/pid-pressure and
unschedulable NoSchedule; network-unavailable with hostNetwork). Pods are created unscheduled
with a required `metadata.name` matchFields affinity for their node; the scheduler binds them.
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import KeysView, Mapping
from typing import Any

import orjson

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import PodOwnerController
from shipshape.emulator.controllers.claims import claim
from shipshape.emulator.controllers.deploymentutil import compute_hash
from shipshape.emulator.controllers.history import POD_REVISION_LABEL, template_patch
from shipshape.emulator.controllers.replicaset import selector_of
from shipshape.emulator.resources import CONTROLLERREVISIONS, DAEMONSETS, NODES, PODS
from shipshape.emulator.store import DELETED, Obj, Store, WatchEvent, clone
from shipshape.kube import errors
from shipshape.kube.intstr import IntOrStringError, scaled_value
from shipshape.kube.labels import Selector
from shipshape.kube.scheduling import node_affinity_matches, untolerated_taints

log = logging.getLogger(__name__)

BURST_REPLICAS = 250
TEMPLATE_GENERATION_LABEL = "pod-template-generation"
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"

Key = tuple[str, str]


def daemon_tolerations(spec: Mapping[str, Any]) -> list[Obj]:
    """The tolerations upstream adds to every daemon pod (`AddOrUpdateDaemonPodTolerations`)."""
    wanted = [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
    if spec.get("hostNetwork"):
        wanted.append(("node.kubernetes.io/network-unavailable", "NoSchedule"))
    return [{"key": key, "operator": "Exists", "effect": effect} for key, effect in wanted]


def with_daemon_tolerations(spec: Obj) -> Obj:
    tolerations: list[Obj] = list(spec.get("tolerations") or [])
    for toleration in daemon_tolerations(spec):
        same = [
            i
            for i, t in enumerate(tolerations)
            if (t.get("key"), t.get("operator", "Equal"), t.get("value", ""), t.get("effect"))
            == (toleration["key"], "Exists", "", toleration["effect"])
        ]
        if same:
            tolerations[same[0]] = toleration
        else:
            tolerations.append(toleration)
    spec["tolerations"] = tolerations
    return spec


def pinned_affinity(affinity: Obj | None, node: str) -> Obj:
    """Upstream `ReplaceDaemonSetPodNodeNameNodeAffinity`: one required term, metadata.name In [node]."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    out = clone(affinity) if affinity else {}
    node_affinity = out.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    required["nodeSelectorTerms"] = [term]
    return out


def target_node(pod: Mapping[str, Any]) -> str:
    """The node a daemon pod is for: spec.nodeName, else its single metadata.name affinity value."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            values = field.get("values") or []
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return ""


def daemon_pod(ds: Mapping[str, Any]) -> Obj:
    """The pod the eligibility checks look at: the template's spec with the daemon tolerations."""
    template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {"spec": with_daemon_tolerations(clone(dict(template_spec)))}


def should_run(ds: Mapping[str, Any], node: Mapping[str, Any], pod: Obj | None = None) -> tuple[bool, bool]:
    """(should run, should continue running) of the daemon on a node (upstream `NodeShouldRunDaemonPod`)."""
    pod = pod if pod is not None else daemon_pod(ds)
    node_name = str(podutil.meta(node).get("name", ""))
    wanted_node = pod["spec"].get("nodeName")
    if wanted_node and wanted_node != node_name:
        return False, False
    if not node_affinity_matches(pod, node):
        return False, False
    if untolerated_taints(pod, node, ("NoSchedule", "NoExecute")):
        return False, not untolerated_taints(pod, node, ("NoExecute",))
    return True, True


def node_fingerprint(node: Mapping[str, Any]) -> Any:
    """What of a node matters to daemon placement (heartbeats do not): labels, taints, conditions."""
    return (*_labels_and_spec_fingerprint(node), _conditions_fingerprint(node))


def _labels_and_spec_fingerprint(node: Mapping[str, Any]) -> tuple[bytes, bytes, bool]:
    return (
        orjson.dumps(podutil.meta(node).get("labels") or {}, option=orjson.OPT_SORT_KEYS),
        orjson.dumps((node.get("spec") or {}).get("taints") or []),
        bool((node.get("spec") or {}).get("unschedulable")),
    )


def _conditions_fingerprint(node: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted(
            (str(c.get("type")), str(c.get("status")))
            for c in (node.get("status") or {}).get("conditions") or []
        )
    )


class NodeFingerprints:
    """`node_fingerprint` of each node's latest version, worked out again only where it can differ.

    A status write shares the labels dict and the spec with the version before (stored objects are
    replaced, never changed), so while both are the same objects only the conditions are read again.
    The objects are kept, so their identities cannot be reused by others.
    """

    def __init__(self) -> None:
        # node name -> (labels object, spec object, fingerprint)
        self._by_node: dict[str, tuple[Any, Any, Any]] = {}

    def changed(self, node: Mapping[str, Any]) -> bool:
        """Record the node's fingerprint; whether it differs from the one recorded before (or is new)."""
        name = str(podutil.meta(node).get("name", ""))
        labels, spec = podutil.meta(node).get("labels"), node.get("spec")
        seen = self._by_node.get(name)
        if seen is not None and seen[0] is labels and seen[1] is spec:
            fingerprint = (*seen[2][:3], _conditions_fingerprint(node))
        else:
            fingerprint = node_fingerprint(node)
        self._by_node[name] = (labels, spec, fingerprint)
        return seen is None or seen[2] != fingerprint

    def forget(self, name: str) -> None:
        self._by_node.pop(name, None)

    def names(self) -> KeysView[str]:
        """The nodes recorded and not forgotten: every node the store holds, as its watch said."""
        return self._by_node.keys()


class _NodeList:
    """The store's nodes (by name), listed at the first call: a sync from its kept walks needs none."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._nodes: list[Obj] | None = None

    def __call__(self) -> list[Obj]:
        if self._nodes is None:
            self._nodes = self._store.list(NODES)
        return self._nodes


# What scanning a DaemonSet's pods asks of one pod version: (pod, controlled by the set and matched
# by its selector, left out as finished and terminating, the node it is for).
DaemonPodFacts = tuple[Obj, bool, bool, str]


def daemon_pod_facts(pod: Obj, owner_uid: str, selector: Selector) -> DaemonPodFacts:
    ref = podutil.controller_ref(pod)
    return (
        pod,
        ref is not None
        and ref.get("uid") == owner_uid
        and selector.matches((pod.get("metadata") or {}).get("labels")),
        podutil.phase(pod) in podutil.TERMINAL_PHASES and podutil.is_terminating(pod),
        target_node(pod),
    )


class DaemonPodFactsCache:
    """Each DaemonSet's `DaemonPodFacts` of its candidate pods, kept from one scan to the next.

    A scan reads every pod of the set (one per node) while few changed since the scan before.
    Stored objects are replaced, never changed, so a pod version's facts stay true while the set's
    spec (its selector) is the same object; entries are keyed by the pod object's id and keep the
    object, so an id cannot be reused while its entry lives.
    """

    def __init__(self) -> None:
        # DaemonSet uid -> (its spec object, id(pod) -> facts of the candidates of its last scan)
        self._by_set: dict[str, tuple[Obj, dict[int, DaemonPodFacts]]] = {}

    def forget(self, uid: str) -> None:
        self._by_set.pop(uid, None)

    def facts(self, ds: Obj, selector: Selector, candidates: list[Obj]) -> list[DaemonPodFacts]:
        uid, spec = ds["metadata"]["uid"], ds["spec"]
        kept = self._by_set.get(uid)
        before = kept[1] if kept is not None and kept[0] is spec else {}
        out: list[DaemonPodFacts] = []
        for pod in candidates:
            known = before.get(id(pod))
            out.append(
                known if known is not None and known[0] is pod else daemon_pod_facts(pod, uid, selector)
            )
        self._by_set[uid] = (spec, {id(f[0]): f for f in out})
        return out


def same_pods(a: list[Obj] | None, b: list[Obj] | None) -> bool:
    """Whether two lists hold the same pod objects (versions), in the same order."""
    if a is None or b is None:
        return a is b
    if len(a) != len(b):
        return False
    if len(a) == 1:
        return a[0] is b[0]
    return all(map(operator.is_, a, b))


# What a node's row keeps: the status counts it adds (desired, current, misscheduled, ready,
# available, updated).
StatusCounts = tuple[int, int, int, int, int, int]


class NodeRow:
    """What the last syncs worked out for one node of one DaemonSet, and from what.

    `pods` is the set's pods for the node (the objects: stored versions are replaced, never
    changed) and `run_keep` its `should_run` answer (None: not asked), given for the node's
    `labels` and `node_spec` objects (all it reads of the node but the name); `manage` (what
    `_manage` decides for the node), `status` (its status counts) and `has_old` (a live pod not of
    the current revision) hold while the pods and the answer are the same.
    """

    __slots__ = ("has_old", "labels", "manage", "node_spec", "pods", "run_keep", "status")

    def __init__(self, pods: list[Obj] | None, run_keep: tuple[bool, bool] | None) -> None:
        self.pods = pods
        self.run_keep = run_keep
        self.labels: Any = None
        self.node_spec: Any = None
        self.manage: tuple[list[str], list[str]] | None = None
        self.status: StatusCounts | None = None
        self.has_old: bool | None = None


class NodeRows:
    """Each DaemonSet's `NodeRow`s, for one spec object, revision hash and template generation.

    A sync walks every node three times (what to create and delete, the rolling update, the
    status) while between two syncs only a few nodes or their daemon pods change. A row is worked
    out again only when its pods or its answer differ; another spec, hash or generation starts the
    set's rows over.
    """

    def __init__(self) -> None:
        # DaemonSet uid -> ((spec object, hash, generation), node name -> row)
        self._by_set: dict[str, tuple[tuple[Any, str, Any], dict[str, NodeRow]]] = {}

    def of(self, ds: Obj, hash_value: str) -> dict[str, NodeRow]:
        """The set's rows for its current spec, hash and generation (new, empty ones otherwise)."""
        uid = ds["metadata"]["uid"]
        generation = (ds["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION)
        kept = self._by_set.get(uid)
        if kept is not None:
            (spec, hash_kept, generation_kept), rows = kept
            if spec is ds["spec"] and hash_kept == hash_value and generation_kept == generation:
                return rows
        rows = {}
        self._by_set[uid] = ((ds["spec"], hash_value, generation), rows)
        return rows

    def forget(self, uid: str) -> None:
        self._by_set.pop(uid, None)

    def forget_node(self, name: str) -> None:
        for _, rows in self._by_set.values():
            rows.pop(name, None)


class NodeWalk:
    """What the walks of one DaemonSet's `_manage` and `_update_status` over every node found, kept
    with the set's rows (`NodeRows`: a new spec, hash or generation starts a new walk): the nodes
    with pods to create or delete, the nodes whose answer is not kept (it recorded an Event or
    read the clock), and each node's status counts with their sums.

    Between walks the controller marks the nodes whose row may differ: a node event, an event of a
    pod of the set for that node, and every node at an event of a pod no controller owns (the set
    may claim or have released it). A walk works out again the marked nodes and the ones whose
    answer is not kept, in node order, and takes every other node's answer as it was: their node
    and their pods are the same objects, so their rows would give it again.
    """

    __slots__ = ("actions", "manage_marked", "rows", "status", "status_marked", "totals", "volatile")

    def __init__(self, rows: dict[str, NodeRow]) -> None:
        self.rows = rows
        # None: every node (no walk yet, or a pod no controller owns changed).
        self.manage_marked: set[str] | None = None
        self.status_marked: set[str] | None = None
        self.actions: dict[str, tuple[list[str], list[str]]] = {}
        self.volatile: set[str] = set()
        self.status: dict[str, StatusCounts] = {}
        self.totals: list[int] = [0] * 6

    def mark(self, node: str) -> None:
        if self.manage_marked is not None:
            self.manage_marked.add(node)
        if self.status_marked is not None:
            self.status_marked.add(node)

    def mark_all(self) -> None:
        self.manage_marked = self.status_marked = None


def row_for(
    rows: dict[str, NodeRow], name: str, pods: list[Obj] | None, run_keep: tuple[bool, bool] | None
) -> NodeRow:
    """The node's row, emptied of whatever no longer holds for these pods and this answer."""
    row = rows.get(name)
    if row is None or not same_pods(row.pods, pods):
        row = rows[name] = NodeRow(pods, run_keep)
    elif run_keep is not None and row.run_keep != run_keep:
        row.run_keep = run_keep
        row.manage = row.status = None
    return row


def _by_creation_and_phase(a: Obj, b: Obj) -> int:
    """Scheduled pods first, then oldest first, then by name (upstream `podByCreationTimestampAndPhase`)."""
    bound_a, bound_b = bool(a["spec"].get("nodeName")), bool(b["spec"].get("nodeName"))
    if bound_a != bound_b:
        return -1 if bound_a else 1
    ka = (podutil.creation_time(a), a["metadata"]["name"])
    kb = (podutil.creation_time(b), b["metadata"]["name"])
    return -1 if ka < kb else (1 if ka > kb else 0)


class DaemonSetController(PodOwnerController):
    name = "daemonset-controller"
    service_account = "daemon-set-controller"
    watches = (DAEMONSETS, PODS, NODES, CONTROLLERREVISIONS)
    # Whether syncs reuse the node rows of the syncs before (`NodeRows`); off, every node is worked
    # out anew in each of a sync's walks (what the rows are tested against).
    reuse_rows = True

    def __init__(self) -> None:
        super().__init__()
        self._node_fingerprints = NodeFingerprints()
        # Per DaemonSet uid: (spec object, daemon pod, node name -> (node labels object, node spec
        # object, should_run)).
        self._answers: dict[str, tuple[Any, Obj, dict[str, tuple[Any, Any, tuple[bool, bool]]]]] = {}
        self._kept_node_to_pods: tuple[tuple[str, int], dict[str, list[Obj]]] | None = None
        self._pod_facts = DaemonPodFactsCache()
        self._rows = NodeRows()
        self._walks: dict[str, NodeWalk] = {}  # per DaemonSet uid

    # ---- events -> keys ---------------------------------------------------------------------
    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        ns, name = podutil.key_of(obj)
        self._orphans.observe(event)
        if event.resource is DAEMONSETS:
            if event.type == DELETED:
                self.expectations.forget((ns, name))
                self._answers.pop(str(podutil.meta(obj).get("uid", "")), None)
                self._pod_facts.forget(str(podutil.meta(obj).get("uid", "")))
                self._rows.forget(str(podutil.meta(obj).get("uid", "")))
                self._walks.pop(str(podutil.meta(obj).get("uid", "")), None)
            return [(ns, name)]
        if event.resource is PODS:
            self._mark_walks(obj)
        if event.resource is NODES:
            for walk in self._walks.values():
                walk.mark(name)
            # Upstream ignores node updates that change nothing placement depends on (heartbeats).
            if event.type == DELETED:
                self._node_fingerprints.forget(name)
                for _, _, by_node in self._answers.values():
                    by_node.pop(name, None)
                self._rows.forget_node(name)
            elif not self._node_fingerprints.changed(obj):
                return []
            return [podutil.key_of(ds) for ds in self.store.list(DAEMONSETS)]
        ref = podutil.controller_ref(obj)
        if ref is not None:
            if ref.get("kind") != "DaemonSet":
                return []
            key = (ns, str(ref["name"]))
            if event.resource is PODS:
                if event.type == DELETED or podutil.is_terminating(obj):
                    self.expectations.deletion_observed(key, f"{ns}/{name}")
                elif event.type == "ADDED":
                    self.expectations.creation_observed(key)
            return [key]
        if event.type == DELETED or event.resource is not PODS:
            return []
        labels = podutil.meta(obj).get("labels")
        return [
            podutil.key_of(ds)
            for ds in self.store.list(DAEMONSETS, ns)
            if (sel := selector_of(ds)) is not None and not sel.empty and sel.matches(labels)
        ]

    def _mark_walks(self, pod: Obj) -> None:
        """Mark the node a pod event may change a walk's answer for (`NodeWalk`)."""
        if not self._walks:
            return
        ref = podutil.controller_ref(pod)
        if ref is None:
            for each in self._walks.values():
                each.mark_all()
            return
        if ref.get("kind") != "DaemonSet":
            return
        walk = self._walks.get(str(ref.get("uid", "")))
        if walk is not None:
            node = target_node(pod)
            if node:
                walk.mark(node)
            else:
                walk.mark_all()

    def _walk(self, ds: Obj, rows: dict[str, NodeRow]) -> NodeWalk:
        uid = str(ds["metadata"]["uid"])
        walk = self._walks.get(uid)
        if walk is None or walk.rows is not rows:
            walk = self._walks[uid] = NodeWalk(rows)
        return walk

    # ---- sync -------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> None:
        ns, name = key
        ds = self.store.get(DAEMONSETS, ns, name)
        if ds is None:
            self.expectations.forget(key)
            return
        selector = selector_of(ds)
        if selector is None or selector.empty:
            self.event(
                ds,
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.",
                type="Warning",
            )
            return
        if podutil.is_terminating(ds):
            return
        nodes = _NodeList(self.store)
        current, old = self._construct_history(ds)
        if current is None:
            return
        hash_value = str(current["metadata"]["labels"][POD_REVISION_LABEL])
        if not self.expectations.satisfied(key):
            self._update_status(ds, nodes, hash_value, observe=False)
            return
        self._manage(ds, nodes, hash_value, key)
        if self.expectations.satisfied(key):
            strategy = (ds["spec"].get("updateStrategy") or {}).get("type", "RollingUpdate")
            if strategy == "RollingUpdate":
                self._rolling_update(ds, nodes, hash_value, key)
        self._cleanup_history(ds, old)
        self._update_status(ds, nodes, hash_value, observe=True)

    def _daemon_pods(self, ds: Obj) -> list[Obj]:
        selector = selector_of(ds)
        assert selector is not None
        return claim(self.store, PODS, ds, self._orphans.candidates(self.store, ds), selector)

    def _node_to_pods(self, ds: Obj) -> dict[str, list[Obj]]:
        """The DaemonSet's pods by node. A sync asks three times; while the store has not changed
        (same resourceVersion, no write made while claiming) the last answer is reused.

        Callers may add nodes to the dict they get (a copy) but never change its lists, which are
        shared with the kept answer."""
        uid, version = ds["metadata"]["uid"], self.store.resource_version
        kept = self._kept_node_to_pods
        if kept is not None and kept[0] == (uid, version):
            return dict(kept[1])
        out = self._scan_node_to_pods(ds)
        if self.store.resource_version == version:
            self._kept_node_to_pods = ((uid, version), out)
        return dict(out)

    def _scan_node_to_pods(self, ds: Obj) -> dict[str, list[Obj]]:
        """`_daemon_pods` by target node, leaving out finished terminating ones.

        With the kept facts, a pod the set controls and selects is claimed without a write; the
        others go through `claim` one at a time, in the same order (what `_daemon_pods` does)."""
        selector = selector_of(ds)
        assert selector is not None
        candidates = self._orphans.candidates(self.store, ds)
        uid = ds["metadata"]["uid"]
        out: dict[str, list[Obj]] = {}
        for facts in self._pod_facts.facts(ds, selector, candidates):
            if facts[1]:
                claimed = [facts]
            else:
                claimed = [
                    daemon_pod_facts(pod, uid, selector)
                    for pod in claim(self.store, PODS, ds, [facts[0]], selector)
                ]
            for pod, _, skip, node in claimed:
                if not skip and node:
                    out.setdefault(node, []).append(pod)
        return out

    # ---- history ------------------------------------------------------------------------------
    def _construct_history(self, ds: Obj) -> tuple[Obj | None, list[Obj]]:
        ns = ds["metadata"].get("namespace", "")
        patch = template_patch(ds)
        revisions = [r for r in self.store.list(CONTROLLERREVISIONS, ns) if podutil.is_controlled_by(r, ds)]
        matching = [r for r in revisions if r.get("data") == patch]
        old = [r for r in revisions if r.get("data") != patch]
        next_number = max((int(r.get("revision") or 0) for r in old), default=0) + 1
        if not matching:
            return self._snapshot(ds, patch, next_number), old
        current = sorted(matching, key=lambda r: int(r.get("revision") or 0))[-1]
        for duplicate in matching:
            if duplicate is not current:
                self._delete_revision(duplicate)
        if int(current.get("revision") or 0) < next_number:

            def bump(new: Obj) -> None:
                new["revision"] = next_number

            current = self.store.mutate(CONTROLLERREVISIONS, ns, current["metadata"]["name"], bump) or current
        return current, old

    def _snapshot(self, ds: Obj, patch: Obj, number: int) -> Obj | None:
        ns = ds["metadata"].get("namespace", "")
        collision = (ds.get("status") or {}).get("collisionCount")
        hash_value = compute_hash((ds["spec"].get("template") or {}), collision)
        labels = dict(((ds["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {})
        labels[POD_REVISION_LABEL] = hash_value
        revision: Obj = {
            "metadata": {
                "name": f"{ds['metadata']['name']}-{hash_value}",
                "namespace": ns,
                "labels": labels,
                "ownerReferences": [podutil.new_controller_ref(ds)],
            },
            "data": patch,
            "revision": number,
        }
        if ds["metadata"].get("annotations"):
            revision["metadata"]["annotations"] = dict(ds["metadata"]["annotations"])
        try:
            return self.store.create(CONTROLLERREVISIONS, revision)
        except errors.AlreadyExists:
            existing = self.store.get(CONTROLLERREVISIONS, ns, revision["metadata"]["name"])
            if (
                existing is not None
                and podutil.is_controlled_by(existing, ds)
                and existing.get("data") == patch
            ):
                return existing
            status = dict(ds.get("status") or {})
            status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
            self.write_status(DAEMONSETS, ds, status)
            return None

    def _delete_revision(self, revision: Obj) -> None:
        ns, name = podutil.key_of(revision)
        try:
            self.store.delete(CONTROLLERREVISIONS, ns, name)
        except errors.NotFound:
            return

    def _cleanup_history(self, ds: Obj, old: list[Obj]) -> None:
        limit = int(ds["spec"].get("revisionHistoryLimit", 10))
        to_kill = len(old) - limit
        if to_kill <= 0:
            return
        live = {
            str((p["metadata"].get("labels") or {}).get(POD_REVISION_LABEL, ""))
            for p in self._daemon_pods(ds)
        }
        for revision in sorted(old, key=lambda r: int(r.get("revision") or 0)):
            if to_kill <= 0:
                break
            if str((revision["metadata"].get("labels") or {}).get(POD_REVISION_LABEL, "")) in live:
                continue
            self._delete_revision(revision)
            to_kill -= 1

    def _should_run(self, ds: Obj, node: Obj) -> tuple[bool, bool]:
        """`should_run` with the daemon pod built once per DaemonSet spec (all it reads of the set;
        a status write shares the spec with the version before), and each node's answer remembered
        for that spec while the node's labels and spec (all it reads of the node but the name) stay
        the same objects: stored objects are replaced, never changed, and a status write shares
        both with the version before."""
        uid, spec = ds["metadata"]["uid"], ds["spec"]
        entry = self._answers.get(uid)
        if entry is None or entry[0] is not spec:
            entry = self._answers[uid] = (spec, daemon_pod(ds), {})
        _, pod, by_node = entry
        md = podutil.meta(node)
        name, labels, spec = str(md.get("name", "")), md.get("labels"), node.get("spec")
        seen = by_node.get(name)
        if seen is not None and seen[0] is labels and seen[1] is spec:
            return seen[2]
        answer = should_run(ds, node, pod)
        by_node[name] = (labels, spec, answer)
        return answer

    def _row(self, rows: dict[str, NodeRow], ds: Obj, node: Obj, pods: list[Obj] | None) -> NodeRow:
        """The node's row for these pods, with its `should_run` answer (`row_for` and `_should_run`
        in one look while the node's labels, spec and pods are the objects the row was made for)."""
        md = node["metadata"]
        labels, spec = md.get("labels"), node.get("spec")
        row = rows.get(md["name"])
        if row is not None and row.labels is labels and row.node_spec is spec and row.run_keep is not None:
            kept = row.pods
            if kept is pods or (
                kept is not None
                and pods is not None
                and len(kept) == len(pods)
                and (kept[0] is pods[0] if len(pods) == 1 else same_pods(kept, pods))
            ):
                return row
        row = row_for(rows, md["name"], pods, self._should_run(ds, node))
        row.labels, row.node_spec = labels, spec
        return row

    # ---- manage -------------------------------------------------------------------------------
    def _manage(self, ds: Obj, nodes: _NodeList, hash_value: str, key: Key) -> None:
        node_to_pods = self._node_to_pods(ds)
        rows = self._rows.of(ds, hash_value) if self.reuse_rows else None
        if rows is not None:
            walk = self._walk(ds, rows)
            if walk.manage_marked is not None:
                self._manage_marked(ds, walk, node_to_pods, hash_value, key)
                return
            walk.actions.clear()
            walk.volatile.clear()
        needing: list[str] = []
        to_delete: list[str] = []
        with_pods = 0  # nodes of `nodes` that node_to_pods has pods for
        for node in nodes():
            name = node["metadata"]["name"]
            pods = node_to_pods.get(name)
            if pods is not None:
                with_pods += 1
            if rows is None:
                run_keep = self._should_run(ds, node)
                need, delete, _ = self._pods_should_be_on_node(ds, name, pods, run_keep, hash_value)
            else:
                need, delete = self._row_manage(rows, walk, ds, node, pods, hash_value)
            if need:
                needing += need
            if delete:
                to_delete += delete
        if rows is not None:
            walk.manage_marked = set()
        if with_pods < len(node_to_pods):  # pods for nodes that are gone
            known = {n["metadata"]["name"] for n in nodes()}
            for node_name, pods in node_to_pods.items():
                if node_name not in known:
                    to_delete += [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
        self._sync_nodes(ds, to_delete, needing, hash_value, key)

    def _row_manage(
        self,
        rows: dict[str, NodeRow],
        walk: NodeWalk,
        ds: Obj,
        node: Obj,
        pods: list[Obj] | None,
        hash_value: str,
    ) -> tuple[list[str], list[str]]:
        """What `_manage` decides for one node from its row, recorded in the walk."""
        name = node["metadata"]["name"]
        row = self._row(rows, ds, node, pods)
        if row.manage is None:
            assert row.run_keep is not None
            need, delete, reusable = self._pods_should_be_on_node(ds, name, pods, row.run_keep, hash_value)
            if reusable:
                row.manage = (need, delete)
            else:
                walk.volatile.add(name)
        else:
            need, delete = row.manage
        if need or delete:
            walk.actions[name] = (need, delete)
        return need, delete

    def _manage_marked(
        self, ds: Obj, walk: NodeWalk, node_to_pods: dict[str, list[Obj]], hash_value: str, key: Key
    ) -> None:
        """`_manage` from the walk before: the marked nodes and those whose answer is not kept are
        worked out again, in node order (the store lists nodes by name), the rest stand."""
        assert walk.manage_marked is not None
        again = sorted(walk.manage_marked | walk.volatile)
        walk.manage_marked = set()
        for name in again:
            walk.actions.pop(name, None)
            walk.volatile.discard(name)
            node = self.store.get(NODES, "", name)
            if node is not None:
                self._row_manage(walk.rows, walk, ds, node, node_to_pods.get(name), hash_value)
        needing: list[str] = []
        to_delete: list[str] = []
        for name in sorted(walk.actions):
            need, delete = walk.actions[name]
            needing += need
            to_delete += delete
        gone = node_to_pods.keys() - self._node_fingerprints.names()
        if gone:  # pods for nodes that are gone
            for node_name, pods in node_to_pods.items():
                if node_name in gone:
                    to_delete += [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
        self._sync_nodes(ds, to_delete, needing, hash_value, key)

    def _pods_should_be_on_node(
        self,
        ds: Obj,
        node_name: str,
        pods: list[Obj] | None,
        run_keep: tuple[bool, bool],
        hash_value: str,
    ) -> tuple[list[str], list[str], bool]:
        """(nodes needing a pod, pods to delete, whether the answer may be reused for the same pods
        and answer: it recorded no Event and did not read the clock)."""
        run, keep = run_keep
        needing: list[str] = []
        to_delete: list[str] = []
        reusable = True
        if run and pods is None:
            needing.append(node_name)
        elif keep:
            running: list[Obj] = []
            for pod in pods or []:
                if podutil.is_terminating(pod):
                    continue
                phase = podutil.phase(pod)
                if phase == "Failed":
                    reusable = False
                    message = (
                        f"Found failed daemon pod {pod['metadata']['namespace']}/{pod['metadata']['name']} "
                        f"on node {node_name}, will try to kill it"
                    )
                    self.event(ds, "FailedDaemonPod", message, type="Warning")
                    to_delete.append(pod["metadata"]["name"])
                elif phase == "Succeeded":
                    to_delete.append(pod["metadata"]["name"])
                else:
                    running.append(pod)
            if len(running) > 1:  # (nearly every node runs exactly one daemon pod)
                running.sort(key=functools.cmp_to_key(_by_creation_and_phase))
            if self._max_surge_configured(ds) == 0:
                to_delete += [p["metadata"]["name"] for p in running[1:]]
            else:
                newest: Obj | None = None
                oldest_old: Obj | None = None
                for pod in running:
                    if (pod["metadata"].get("labels") or {}).get(POD_REVISION_LABEL) == hash_value:
                        if newest is None:
                            newest = pod
                            continue
                    elif oldest_old is None:
                        oldest_old = pod
                        continue
                    to_delete.append(pod["metadata"]["name"])
                if newest is not None and oldest_old is not None:
                    reusable = False
                    min_ready = int(ds["spec"].get("minReadySeconds") or 0)
                    if not podutil.is_ready(oldest_old) or podutil.is_available(
                        newest, min_ready, self.now()
                    ):
                        to_delete.append(oldest_old["metadata"]["name"])
        elif pods is not None:
            to_delete += [p["metadata"]["name"] for p in pods if not podutil.is_terminating(p)]
        return needing, to_delete, reusable

    def _sync_nodes(
        self, ds: Obj, to_delete: list[str], needing: list[str], hash_value: str, key: Key
    ) -> None:
        ns, ds_name = key
        needing = needing[:BURST_REPLICAS]
        to_delete = to_delete[:BURST_REPLICAS]
        if to_delete:
            self.expectations.expect_deletions(key, {f"{ns}/{p}" for p in to_delete})
        template = self._pod_template(ds, hash_value)
        # The bodies share the template's spec but for the affinity: the API server copies a body
        # before changing it, and the template is this sync's own copy.
        spec = template.get("spec") or {}
        bare = {**template, "spec": {}}
        bodies = []
        for node_name in needing:
            body = podutil.pod_from_template(bare, ds, f"{ds_name}-")
            body["spec"] = {**spec, "affinity": pinned_affinity(spec.get("affinity"), node_name)}
            bodies.append(body)
        failure = self.create_pods(ds, key, bodies, self.expectations) if bodies else None
        for pod_name in to_delete:
            try:
                self.store.delete(PODS, ns, pod_name)
            except errors.NotFound:
                self.expectations.deletion_observed(key, f"{ns}/{pod_name}")
                continue
            except errors.ApiError as exc:
                self.expectations.deletion_observed(key, f"{ns}/{pod_name}")
                self.event(ds, "FailedDelete", f"Error deleting: {exc.message}", type="Warning")
                continue
            self.event(ds, "SuccessfulDelete", f"Deleted pod: {pod_name}")
        if failure is not None:
            self.retry_later(key)

    def _pod_template(self, ds: Obj, hash_value: str) -> Obj:
        template = clone(ds["spec"].get("template") or {})
        template["spec"] = with_daemon_tolerations(template.get("spec") or {})
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        generation = (ds["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION)
        if generation is not None:
            labels[TEMPLATE_GENERATION_LABEL] = str(generation)
        labels[POD_REVISION_LABEL] = hash_value
        return template

    # ---- rolling update -----------------------------------------------------------------------
    def _max_surge_configured(self, ds: Obj) -> int:
        rolling = (ds["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {}
        try:
            return scaled_value(rolling.get("maxSurge", 0), 1, round_up=True)
        except IntOrStringError:
            return 0

    def _is_updated(self, ds: Obj, pod: Obj, hash_value: str) -> bool:
        labels = pod["metadata"].get("labels") or {}
        generation = (ds["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION)
        if generation is not None and labels.get(TEMPLATE_GENERATION_LABEL) == str(generation):
            return True
        return bool(hash_value) and labels.get(POD_REVISION_LABEL) == hash_value

    def _updated_and_old(
        self, ds: Obj, pods: list[Obj], hash_value: str
    ) -> tuple[Obj | None, Obj | None, bool]:
        new_pod: Obj | None = None
        old_pod: Obj | None = None
        for pod in pods:
            if podutil.is_terminating(pod):
                continue
            if self._is_updated(ds, pod, hash_value):
                if new_pod is not None:
                    return None, None, False
                new_pod = pod
            else:
                if old_pod is not None:
                    return None, None, False
                old_pod = pod
        return new_pod, old_pod, True

    def _has_old_pods(self, ds: Obj, node_to_pods: dict[str, list[Obj]], hash_value: str) -> bool:
        """Whether a live pod of the set is not of the current revision; without one a rolling
        update has nothing to replace."""
        rows = self._rows.of(ds, hash_value)
        for name, pods in node_to_pods.items():
            row = row_for(rows, name, pods, None)
            if row.has_old is None:
                row.has_old = any(
                    not podutil.is_terminating(p) and not self._is_updated(ds, p, hash_value) for p in pods
                )
            if row.has_old:
                return True
        return False

    def _rolling_update(self, ds: Obj, node_list: _NodeList, hash_value: str, key: Key) -> None:
        node_to_pods = self._node_to_pods(ds)
        if self.reuse_rows and not self._has_old_pods(ds, node_to_pods, hash_value):
            return  # every choice below starts from an old pod
        nodes = node_list()
        by_name = {n["metadata"]["name"]: n for n in nodes}
        desired = 0
        for node in nodes:
            if self._should_run(ds, node)[0]:
                desired += 1
                node_to_pods.setdefault(node["metadata"]["name"], [])
        rolling = (ds["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {}
        try:
            max_unavailable = scaled_value(rolling.get("maxUnavailable", 1), desired, round_up=True)
            max_surge = scaled_value(rolling.get("maxSurge", 0), desired, round_up=True)
        except IntOrStringError:
            return
        if desired > 0 and max_unavailable == 0 and max_surge == 0:
            max_unavailable = 1
        now = self.now()
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        if max_surge == 0:
            unavailable = 0
            replacements: list[str] = []
            candidates: list[str] = []
            for node_name in sorted(node_to_pods):
                new_pod, old_pod, ok = self._updated_and_old(ds, node_to_pods[node_name], hash_value)
                if not ok or (old_pod is None) == (new_pod is None):
                    unavailable += 1
                elif new_pod is not None:
                    if not podutil.is_available(new_pod, min_ready, now):
                        unavailable += 1
                elif old_pod is not None:
                    if not podutil.is_available(old_pod, min_ready, now):
                        replacements.append(old_pod["metadata"]["name"])
                        unavailable += 1
                    elif unavailable < max_unavailable:
                        candidates.append(old_pod["metadata"]["name"])
            remaining = min(max(0, max_unavailable - unavailable), len(candidates))
            self._sync_nodes(ds, replacements + candidates[:remaining], [], hash_value, key)
            return
        to_delete: list[str] = []
        should_not_run: list[str] = []
        candidate_nodes: list[str] = []
        allowed_nodes: list[str] = []
        surge = available = 0
        for node_name in sorted(node_to_pods):
            new_pod, old_pod, ok = self._updated_and_old(ds, node_to_pods[node_name], hash_value)
            if not ok:
                surge += 1
                continue
            counted = old_pod if old_pod is not None else new_pod
            if counted is not None and podutil.is_available(counted, min_ready, now):
                available += 1
            target = by_name.get(node_name)
            runs = target is not None and self._should_run(ds, target)[0]
            if old_pod is None:
                continue
            if new_pod is None:
                if not podutil.is_available(old_pod, min_ready, now):
                    if not runs:
                        to_delete.append(old_pod["metadata"]["name"])
                        continue
                    allowed_nodes.append(node_name)
                else:
                    if not runs:
                        should_not_run.append(old_pod["metadata"]["name"])
                        continue
                    if surge >= max_surge:
                        continue
                    candidate_nodes.append(node_name)
            elif not podutil.is_available(new_pod, min_ready, now):
                surge += 1
            else:
                to_delete.append(old_pod["metadata"]["name"])
        deletable = min(available - desired, len(should_not_run))
        if deletable > 0:
            to_delete += should_not_run[:deletable]
        remaining = min(max(0, max_surge - surge), len(candidate_nodes))
        self._sync_nodes(ds, to_delete, allowed_nodes + candidate_nodes[:remaining], hash_value, key)

    # ---- status -------------------------------------------------------------------------------
    def _status_counts(
        self, ds: Obj, run: bool, pods: list[Obj] | None, hash_value: str, min_ready: int, now: float
    ) -> StatusCounts:
        """What one node adds to (desired, current, misscheduled, ready, available, updated)."""
        if not run:
            return (0, 0, 1 if pods else 0, 0, 0, 0)
        if not pods:
            return (1, 0, 0, 0, 0, 0)
        pod = pods[0] if len(pods) == 1 else sorted(pods, key=functools.cmp_to_key(_by_creation_and_phase))[0]
        ready = podutil.is_ready(pod)
        available = ready and podutil.is_available(pod, min_ready, now)
        return (1, 1, 0, int(ready), int(available), int(self._is_updated(ds, pod, hash_value)))

    def _row_status(
        self, rows: dict[str, NodeRow], ds: Obj, node: Obj, pods: list[Obj] | None, hash_value: str
    ) -> StatusCounts:
        """One node's status counts from its row (without minReadySeconds: they do not read the clock)."""
        row = self._row(rows, ds, node, pods)
        if row.status is None:
            assert row.run_keep is not None
            row.status = self._status_counts(ds, row.run_keep[0], pods, hash_value, 0, self.now())
        return row.status

    def _update_status(self, ds: Obj, node_list: _NodeList, hash_value: str, *, observe: bool) -> None:
        ds = self.store.get(DAEMONSETS, *podutil.key_of(ds)) or ds
        node_to_pods = self._node_to_pods(ds)
        now = self.now()
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        # With minReadySeconds, availability reads the clock: nothing is kept then.
        rows = self._rows.of(ds, hash_value) if self.reuse_rows and min_ready <= 0 else None
        walk = self._walk(ds, rows) if rows is not None else None
        if walk is not None and walk.status_marked is not None:
            # From the walk before: the marked nodes' counts are worked out again, the rest stand.
            marked, walk.status_marked = walk.status_marked, set()
            totals = walk.totals
            for name in marked:
                old_counts = walk.status.pop(name, None)
                if old_counts is not None:
                    for i, n in enumerate(old_counts):
                        totals[i] -= n
                node = self.store.get(NODES, "", name)
                if node is None:
                    continue
                counts = self._row_status(walk.rows, ds, node, node_to_pods.get(name), hash_value)
                walk.status[name] = counts
                for i, n in enumerate(counts):
                    totals[i] += n
            desired, current, misscheduled, ready, available, updated = totals
        else:
            per_node: list[StatusCounts] = []
            nodes = node_list()
            for node in nodes:
                pods = node_to_pods.get(node["metadata"]["name"])
                if rows is None:
                    run = self._should_run(ds, node)[0]
                    per_node.append(self._status_counts(ds, run, pods, hash_value, min_ready, now))
                    continue
                per_node.append(self._row_status(rows, ds, node, pods, hash_value))
            desired, current, misscheduled, ready, available, updated = (
                (sum(column) for column in zip(*per_node, strict=True)) if per_node else (0,) * 6
            )
            if walk is not None:
                walk.status = {n["metadata"]["name"]: c for n, c in zip(nodes, per_node, strict=True)}
                walk.totals = [desired, current, misscheduled, ready, available, updated]
                walk.status_marked = set()
        if rows is not None and len(rows) > self.store.count(NODES) + len(node_to_pods):
            live = {n["metadata"]["name"] for n in self.store.list(NODES)} | node_to_pods.keys()
            for name in [name for name in rows if name not in live]:
                del rows[name]
        old = ds.get("status") or {}
        status: Obj = {
            "currentNumberScheduled": current,
            "numberMisscheduled": misscheduled,
            "desiredNumberScheduled": desired,
            "numberReady": ready,
            "observedGeneration": ds["metadata"].get("generation", 1)
            if observe
            else old.get("observedGeneration", 0),
            "updatedNumberScheduled": updated,
            "numberAvailable": available,
            "numberUnavailable": desired - available,
        }
        if old.get("collisionCount") is not None:
            status["collisionCount"] = old["collisionCount"]
        if old.get("conditions"):
            status["conditions"] = old["conditions"]
        status = podutil.omit_zero(
            status, "observedGeneration", "updatedNumberScheduled", "numberAvailable", "numberUnavailable"
        )
        self.write_status(DAEMONSETS, ds, status)
        if min_ready > 0 and ready != available:
            wait = podutil.available_in([p for ps in node_to_pods.values() for p in ps], min_ready, now)
            if wait is not None:
                self.enqueue(podutil.key_of(ds), after=wait)
