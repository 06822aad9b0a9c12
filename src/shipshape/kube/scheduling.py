"""Pure scheduling helpers over Pod and Node bodies, with kube-scheduler's (v1.32) semantics.

Shared by the emulator's scheduler, the placement controller and the analyzers. Quantities are
Shipshape's units (cpu in millicores, everything else in base units). Nothing here reads a cluster:
callers pass the bodies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from shipshape.kube.labels import Requirement
from shipshape.kube.quantity import QuantityError, resource_amount

Body = Mapping[str, Any]

# What the scheduler assumes a container without a cpu/memory request uses, for scoring only
# (upstream DefaultMilliCPURequest / DefaultMemoryRequest).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
# kubelet's default maxPods, used when a node body reports no pods capacity at all.
DEFAULT_MAX_PODS = 110
# The effects the TaintToleration filter checks (upstream DoNotScheduleTaintsFilterFunc).
DO_NOT_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")


# ---- resources --------------------------------------------------------------------------
def _amounts(resources: Mapping[str, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in (resources or {}).items():
        try:
            out[name] = resource_amount(name, value)
        except QuantityError:
            continue  # validation rejects these; the scheduler ignores them rather than crash
    return out


def container_requests(container: Body) -> dict[str, int]:
    """A container's requests, with limits standing in for unset requests (API defaulting)."""
    resources = container.get("resources") or {}
    out = _amounts(resources.get("limits"))
    out.update(_amounts(resources.get("requests")))
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def _with_defaults(requests: dict[str, int], defaults: Mapping[str, int] | None) -> dict[str, int]:
    if not defaults:
        return requests
    out = dict(requests)
    for name, amount in defaults.items():
        if not out.get(name):
            out[name] = amount
    return out


def pod_requests(pod: Body, *, non_missing: Mapping[str, int] | None = None) -> dict[str, int]:
    """A pod's effective requests, as upstream's `PodRequests`.

    max(sum of containers + restartable (sidecar) init containers, each init container's need
    while it runs), plus `spec.overhead`. `non_missing` fills requests a container leaves unset
    (the scheduler's scoring uses 100m cpu / 200Mi memory).
    """
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        _add(total, _with_defaults(container_requests(container), non_missing))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        reqs = _with_defaults(container_requests(container), non_missing)
        if container.get("restartPolicy") == "Always":
            _add(total, reqs)
            _add(sidecars, reqs)
            running = dict(sidecars)
        else:
            running = dict(reqs)
            _add(running, sidecars)
        _max(init_peak, running)
    _max(total, init_peak)
    _add(total, _amounts(spec.get("overhead")))
    return total


def pod_non_zero_requests(pod: Body) -> tuple[int, int]:
    """(cpu millicores, memory bytes) the scoring plugins count for a pod."""
    reqs = pod_requests(pod, non_missing={"cpu": DEFAULT_MILLI_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST})
    return reqs.get("cpu", 0), reqs.get("memory", 0)


def node_allocatable(node: Body) -> dict[str, int]:
    """What the scheduler may hand out on a node: status.allocatable, else status.capacity."""
    status = node.get("status") or {}
    out = _amounts(status.get("capacity"))
    out.update(_amounts(status.get("allocatable")))
    if "pods" not in out:
        out["pods"] = DEFAULT_MAX_PODS
    return out


# ---- taints and tolerations -------------------------------------------------------------
def toleration_tolerates(toleration: Body, taint: Body) -> bool:
    """One toleration against one taint (upstream `Toleration.ToleratesTaint`)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def tolerates(tolerations: Iterable[Body] | None, taint: Body) -> bool:
    """Whether any of the tolerations tolerates the taint."""
    return any(toleration_tolerates(t, taint) for t in tolerations or ())


def untolerated_taints(pod: Body, node: Body, effects: Sequence[str] = DO_NOT_SCHEDULE_EFFECTS) -> list[Body]:
    """The node's taints with one of `effects` that none of the pod's tolerations tolerates, in node order."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return [
        taint
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") in effects and not tolerates(tolerations, taint)
    ]


def taint_text(taint: Body) -> str:
    """How the TaintToleration filter names a taint in its reason: `{key: value}`."""
    return f"{{{taint.get('key', '')}: {taint.get('value') or ''}}}"


# ---- node affinity ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """A compiled NodeSelectorTerm: label requirements AND `metadata.name` field requirements."""

    labels: tuple[Requirement, ...]
    names: tuple[Requirement, ...]
    valid: bool = True

    def matches(self, node_labels: Mapping[str, str], node_name: str) -> bool:
        if not self.valid or (not self.labels and not self.names):
            return False  # an empty or unparsable term matches no node, as upstream
        if not all(req.matches(node_labels) for req in self.labels):
            return False
        fields = {"metadata.name": node_name}
        return all(req.matches(fields) for req in self.names)


_LABEL_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}


def compile_term(term: Body) -> NodeSelectorTerm:
    labels: list[Requirement] = []
    names: list[Requirement] = []
    valid = True
    for expr in term.get("matchExpressions") or []:
        op = expr.get("operator")
        values = tuple(str(v) for v in expr.get("values") or ())
        if op not in _LABEL_OPERATORS or (op in ("Gt", "Lt") and len(values) != 1):
            valid = False
            continue
        labels.append(Requirement(str(expr.get("key", "")), op, values))
    for expr in term.get("matchFields") or []:
        op = expr.get("operator")
        values = tuple(str(v) for v in expr.get("values") or ())
        if expr.get("key") != "metadata.name" or op not in ("In", "NotIn") or len(values) != 1:
            valid = False
            continue
        names.append(Requirement("metadata.name", op, values))
    return NodeSelectorTerm(tuple(labels), tuple(names), valid)


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """What the NodeAffinity filter checks: `spec.nodeSelector` and the required terms (ORed)."""

    node_selector: tuple[tuple[str, str], ...]
    terms: tuple[NodeSelectorTerm, ...] | None  # None: no required node affinity

    @classmethod
    def of(cls, pod: Body) -> RequiredNodeAffinity:
        spec = pod.get("spec") or {}
        node_selector, affinity = spec.get("nodeSelector"), spec.get("affinity")
        # Pods of one workload carry the same fields: compiled once per distinct text. repr of
        # JSON data (dicts, lists, strings, numbers) is exact, so equal text is an equal value.
        node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else affinity
        return compiled_once(_COMPILED, repr((node_selector, node_affinity)), cls._compile, spec)

    @classmethod
    def _compile(cls, spec: Body) -> RequiredNodeAffinity:
        selector = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or None
        terms = None
        if required is not None:
            terms = tuple(compile_term(t) for t in required.get("nodeSelectorTerms") or [])
        return cls(selector, terms)

    @property
    def empty(self) -> bool:
        return not self.node_selector and self.terms is None

    def matches(self, node_labels: Mapping[str, str], node_name: str) -> bool:
        for key, value in self.node_selector:
            if node_labels.get(key) != value:
                return False
        if self.terms is None:
            return True
        return any(term.matches(node_labels, node_name) for term in self.terms)


_COMPILED: dict[str, RequiredNodeAffinity] = {}

T = TypeVar("T")
MEMO_LIMIT = 4096


def compiled_once(memo: dict[str, T], text: str, compile_body: Callable[[Body], T], body: Body) -> T:
    """What `compile_body(body)` gives, kept in `memo` under `text` (the body's text): worked out once
    per distinct text, the memo starting over once it holds `MEMO_LIMIT` entries. The answers are
    shared: callers only read them."""
    compiled = memo.get(text)
    if compiled is None:
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        compiled = memo[text] = compile_body(body)
    return compiled


def _node_labels(node: Body) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _node_name(node: Body) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def node_selector_matches(pod: Body, node: Body) -> bool:
    """Whether the node carries every label of the pod's `spec.nodeSelector`."""
    labels = _node_labels(node)
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def node_affinity_matches(pod: Body, node: Body) -> bool:
    """The NodeAffinity filter: nodeSelector and required node affinity terms (incl. matchFields)."""
    return RequiredNodeAffinity.of(pod).matches(_node_labels(node), _node_name(node))


def preferred_terms(pod: Body) -> list[tuple[int, NodeSelectorTerm]]:
    """The pod's preferred node affinity terms with a non-zero weight, compiled."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    out = []
    for item in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        weight = int(item.get("weight") or 0)
        if weight:
            out.append((weight, compile_term(item.get("preference") or {})))
    return out


def preferred_affinity_score(pod: Body, node: Body) -> int:
    """Sum of the weights of the pod's preferred node affinity terms the node matches (raw score)."""
    labels, name = _node_labels(node), _node_name(node)
    return sum(weight for weight, term in preferred_terms(pod) if term.matches(labels, name))


# ---- misc -------------------------------------------------------------------------------
def qos_class(pod: Body) -> str:
    """Guaranteed, Burstable or BestEffort, as upstream's `GetPodQOS` (requests default to limits)."""
    spec = pod.get("spec") or {}
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        container_limits = {
            k: v for k, v in _amounts(resources.get("limits")).items() if k in ("cpu", "memory")
        }
        container_reqs = {k: v for k, v in container_requests(container).items() if k in ("cpu", "memory")}
        _add(requests, {k: v for k, v in container_reqs.items() if v})
        _add(limits, {k: v for k, v in container_limits.items() if v})
        if not {"cpu", "memory"} <= {k for k, v in container_limits.items() if v}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(limits.get(k) == v for k, v in requests.items()) and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


def pod_priority(pod: Body) -> int:
    """`spec.priority` (set by admission from the PriorityClass), 0 when absent."""
    value = (pod.get("spec") or {}).get("priority")
    return int(value) if isinstance(value, int) else 0


__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "DO_NOT_SCHEDULE_EFFECTS",
    "NodeSelectorTerm",
    "RequiredNodeAffinity",
    "compile_term",
    "container_requests",
    "node_affinity_matches",
    "node_allocatable",
    "node_selector_matches",
    "pod_non_zero_requests",
    "pod_priority",
    "pod_requests",
    "preferred_affinity_score",
    "preferred_terms",
    "qos_class",
    "taint_text",
    "tolerates",
    "toleration_tolerates",
    "untolerated_taints",
]
