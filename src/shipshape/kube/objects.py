"""Typed readings of the Kubernetes bodies every part reads: metadata, owners, pods and nodes.

Bodies stay the API's JSON (`Mapping[str, Any]`); these functions are the one place that knows where
a field lives and what its absence means, so that the controller, the emulator's models, the
analyzers, the simulator, the backend and the CLI read a pod's phase, readiness or owning workload
the same way. Where Kubernetes has a rule (`IsPodReady`, `IsPodActive`, `GetControllerOf`,
`GetPodCondition`), the function follows it and names it.

Pure: no I/O, no client library (the analyzers import this module). No `from __future__ import
annotations` here: it would take the name of `annotations(obj)`.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NotRequired, TypedDict

from shipshape.kube import wellknown

Body = Mapping[str, Any]

TERMINAL_PHASES: Final = ("Succeeded", "Failed")


class OwnerReference(TypedDict):
    """`metav1.OwnerReference` as the API serves it."""

    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: NotRequired[bool]
    blockOwnerDeletion: NotRequired[bool]


class Condition(TypedDict):
    """A status condition (pods, nodes, workloads) as the API serves it."""

    type: str
    status: str
    reason: NotRequired[str]
    message: NotRequired[str]
    lastTransitionTime: NotRequired[str]
    lastProbeTime: NotRequired[str | None]
    lastHeartbeatTime: NotRequired[str]


class Taint(TypedDict):
    """A node taint (`v1.Taint`)."""

    key: str
    effect: str
    value: NotRequired[str]
    timeAdded: NotRequired[str]


# ---- metadata ---------------------------------------------------------------------------------
def metadata(obj: Body) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("metadata") or {}
    return found


def name(obj: Body) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def namespace(obj: Body) -> str:
    """The object's namespace; "" for a cluster-scoped object (or one whose namespace is not set)."""
    return str((obj.get("metadata") or {}).get("namespace") or "")


def key(obj: Body) -> tuple[str, str]:
    """(namespace, name)."""
    md = obj.get("metadata") or {}
    return str(md.get("namespace") or ""), str(md.get("name") or "")


def labels(obj: Body) -> Mapping[str, str]:
    found: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return found


def annotations(obj: Body) -> Mapping[str, str]:
    found: Mapping[str, str] = (obj.get("metadata") or {}).get("annotations") or {}
    return found


def is_deleting(obj: Body) -> bool:
    """The object has a deletionTimestamp: it is going (finalizers or a grace period hold it)."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


# ---- owners -----------------------------------------------------------------------------------
def owner_references(obj: Body) -> Sequence[OwnerReference]:
    found: Sequence[OwnerReference] = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return found


def controller_ref(obj: Body) -> OwnerReference | None:
    """The owner reference with `controller: true` (upstream `metav1.GetControllerOf`), or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            found: OwnerReference = ref
            return found
    return None


@dataclass(frozen=True, slots=True, order=True)
class WorkloadRef:
    """A workload by kind and name (its namespace is the pod's)."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


def deployment_of_replicaset(replicaset: str, template_hash: str | None) -> str | None:
    """The Deployment a ReplicaSet named `<deployment>-<pod-template-hash>` was made by, or None.

    The Deployment controller names its ReplicaSets so and labels their pods with the hash: a reader
    without the ReplicaSet objects (a pod alone, a snapshot without them) recovers the Deployment.
    """
    if template_hash and replicaset.endswith("-" + template_hash):
        return replicaset[: -len(template_hash) - 1]
    return None


# What a caller that holds the ReplicaSets knows: the controller of the ReplicaSet (namespace, name).
ReplicaSetOwner = Callable[[str, str], WorkloadRef | None]


def workload_of(pod: Body, replicaset_owner: ReplicaSetOwner | None = None) -> WorkloadRef | None:
    """The workload a pod belongs to, from its controller reference; None for a pod without one.

    A ReplicaSet's pod belongs to the ReplicaSet's controller: `replicaset_owner` answers it where the
    caller holds the ReplicaSets (None there: the ReplicaSet has no controller, the pod belongs to the
    ReplicaSet); without it, a ReplicaSet named `<deployment>-<pod-template-hash>` is that
    Deployment's (`deployment_of_replicaset`). Every other controller (StatefulSet, Job, DaemonSet,
    a custom resource) is the workload itself.
    """
    ref = controller_ref(pod)
    if ref is None:
        return None
    kind, owner = str(ref.get("kind") or ""), str(ref.get("name") or "")
    if kind == "ReplicaSet":
        if replicaset_owner is not None:
            return replicaset_owner(namespace(pod), owner) or WorkloadRef(kind, owner)
        deployment = deployment_of_replicaset(owner, labels(pod).get(wellknown.POD_TEMPLATE_HASH_LABEL))
        if deployment is not None:
            return WorkloadRef("Deployment", deployment)
    return WorkloadRef(kind, owner)


def controller_workload(obj: Body) -> WorkloadRef | None:
    """The object's controller as a `WorkloadRef` (a ReplicaSet's Deployment, a Job's CronJob)."""
    ref = controller_ref(obj)
    return None if ref is None else WorkloadRef(str(ref.get("kind") or ""), str(ref.get("name") or ""))


def is_daemon_pod(pod: Body) -> bool:
    """A DaemonSet's pod (its controller is a DaemonSet), which drains leave in place."""
    ref = controller_ref(pod)
    return ref is not None and ref.get("kind") == "DaemonSet"


# ---- conditions -------------------------------------------------------------------------------
def condition(obj: Body, type_: str) -> Condition | None:
    """The status condition of `type_` (upstream `GetPodCondition`: the first one of that type)."""
    for each in (obj.get("status") or {}).get("conditions") or ():
        if each.get("type") == type_:
            found: Condition = each
            return found
    return None


def condition_status(obj: Body, type_: str) -> str | None:
    """The status ("True", "False", "Unknown") of the condition of `type_`, None without one."""
    for each in (obj.get("status") or {}).get("conditions") or ():
        if each.get("type") == type_:
            return str(each.get("status"))
    return None


def condition_true(obj: Body, type_: str) -> bool:
    found = condition(obj, type_)
    return found is not None and found.get("status") == "True"


# ---- pods -------------------------------------------------------------------------------------
def pod_phase(pod: Body) -> str:
    """`status.phase`; "Pending" until the kubelet reports one."""
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_finished(pod: Body) -> bool:
    """Succeeded or Failed: the pod's containers will not run again."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def is_active(pod: Body) -> bool:
    """Counted by its controller: not finished and not being deleted (upstream `IsPodActive`)."""
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return False
    return not (pod.get("metadata") or {}).get("deletionTimestamp")


def pod_ready(pod: Body) -> bool:
    """The pod's Ready condition is True (upstream `IsPodReady`)."""
    for found in (pod.get("status") or {}).get("conditions") or ():
        if found.get("type") == "Ready":
            return bool(found.get("status") == "True")
    return False


def pod_node(pod: Body) -> str | None:
    """The node the pod is bound to (`spec.nodeName`), None while it is unscheduled."""
    return (pod.get("spec") or {}).get("nodeName") or None


# ---- nodes ------------------------------------------------------------------------------------
def node_ready(node: Body) -> bool:
    """The node's Ready condition is True."""
    for found in (node.get("status") or {}).get("conditions") or ():
        if found.get("type") == "Ready":
            return bool(found.get("status") == "True")
    return False


def node_taints(node: Body) -> Sequence[Taint]:
    found: Sequence[Taint] = (node.get("spec") or {}).get("taints") or ()
    return found


def has_taint(node: Body, taint_key: str) -> bool:
    return any(taint.get("key") == taint_key for taint in (node.get("spec") or {}).get("taints") or ())


def node_unschedulable(node: Body) -> bool:
    """Cordoned (`spec.unschedulable`)."""
    return bool((node.get("spec") or {}).get("unschedulable"))


__all__ = [
    "TERMINAL_PHASES",
    "Body",
    "Condition",
    "OwnerReference",
    "ReplicaSetOwner",
    "Taint",
    "WorkloadRef",
    "annotations",
    "condition",
    "condition_status",
    "condition_true",
    "controller_ref",
    "controller_workload",
    "deployment_of_replicaset",
    "has_taint",
    "is_active",
    "is_daemon_pod",
    "is_deleting",
    "is_finished",
    "key",
    "labels",
    "metadata",
    "name",
    "namespace",
    "node_ready",
    "node_taints",
    "node_unschedulable",
    "owner_references",
    "pod_node",
    "pod_phase",
    "pod_ready",
    "workload_of",
]


def object_list(document: Mapping[str, Any], key: str) -> list[Body]:
    """The objects under `document[key]`: a JSON list, or a Kubernetes List (`{"items": [...]}`); a
    missing key is an empty list. Raises ValueError naming the key (and the position) when it is
    not a list of objects with metadata, as files users hand over (`kubectl get -o json`) may be."""
    value = document.get(key, [])
    if isinstance(value, Mapping):
        value = value.get("items", [])
    if not isinstance(value, list):
        raise ValueError(f"snapshot.{key} must be a list of objects")
    for position, item in enumerate(value):
        if not isinstance(item, Mapping) or not isinstance(item.get("metadata"), Mapping):
            raise ValueError(f"snapshot.{key}[{position}] is not a Kubernetes object (no metadata)")
    return value
