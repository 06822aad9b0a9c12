"""`shipshape controller uninstall`: take away everything the controller left that changes behaviour.

`plan_uninstall` is pure: from what the cluster holds it lists the steps, in an order that stops new
decisions first — the webhook configuration, the guard PDBs, the spec.replicas a surge in flight had
raised (set back, with the surge note), the other notes on workloads, the headroom placeholders and
their PriorityClass, the `spot.shipshape.dev/*` taints on nodes, the pod-deletion-cost of the pods it
placed or managed, then its Lease and certificate Secret. `Uninstaller` reads the cluster and runs the
steps through the official client; every step tolerates the object being gone already, so running
it twice is safe (the second run finds nothing to do).

Left as they are, because they change nothing once the controller is gone or would restart pods: the
decision annotation on pods, the affinities and tolerations the webhook gave running pods (they go
with each pod's next restart), a rollout strategy set to maxSurge 1 / maxUnavailable 0 for a
single-replica restart, and Events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kubernetes import client as k8s

from shipshape.contracts.annotations import (
    DECISION,
    HEADROOM_LABEL,
    PREFIX,
    RESTART_NOTE,
    SURGE_NOTE,
    SurgeNote,
)
from shipshape.controller.guards import is_guard
from shipshape.controller.headroom import PRIORITY_CLASS
from shipshape.controller.kube_ops import MERGE_PATCH, call
from shipshape.controller.leader import LEASE_NAME, lease_step
from shipshape.controller.ops import OpsError
from shipshape.controller.policy import ControllerConfig, WorkloadKind, resolve_policy
from shipshape.controller.surge import DOOMED_COST
from shipshape.controller.webhook.registration import CONFIGURATION_NAME
from shipshape.kube.objects import controller_ref
from shipshape.kube.wellknown import POD_DELETION_COST

Obj = dict[str, Any]
TLS_SECRET = "shipshape-webhook-tls"
StepKind = Literal["delete", "patch", "taints"]


@dataclass(frozen=True, slots=True)
class Step:
    """One write: delete an object, merge-patch one, or set a node's taints."""

    kind: StepKind
    resource: str  # mutatingwebhookconfiguration, poddisruptionbudget, deployment, ...
    namespace: str
    name: str
    what: str  # for the output: what the step removes or restores
    body: Obj = field(default_factory=dict)

    @property
    def target(self) -> str:
        return (
            f"{self.resource}/{self.namespace}/{self.name}"
            if self.namespace
            else f"{self.resource}/{self.name}"
        )


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the plan reads: the controller-related objects of the cluster, as the API's JSON."""

    webhook_configurations: Sequence[Obj] = ()
    pdbs: Sequence[Obj] = ()
    deployments: Sequence[Obj] = ()
    statefulsets: Sequence[Obj] = ()
    replicasets: Sequence[Obj] = ()
    pods: Sequence[Obj] = ()
    nodes: Sequence[Obj] = ()
    namespaces: Sequence[Obj] = ()
    priority_classes: Sequence[Obj] = ()
    leases: Sequence[Obj] = ()
    secrets: Sequence[Obj] = ()


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("annotations") or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _ns_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    return str(_meta(obj).get("namespace") or ""), str(_meta(obj).get("name") or "")


def _owner(obj: Mapping[str, Any], kind: str) -> str | None:
    """The name of the object's controller when it is a `kind`."""
    controller = controller_ref(obj)
    return str(controller.get("name")) if controller is not None and controller.get("kind") == kind else None


def plan_uninstall(view: ClusterView, config: ControllerConfig) -> list[Step]:
    steps: list[Step] = []
    for hook in view.webhook_configurations:
        if _meta(hook).get("name") == CONFIGURATION_NAME:
            steps.append(
                Step("delete", "mutatingwebhookconfiguration", "", CONFIGURATION_NAME, "placement webhook")
            )
    for pdb in view.pdbs:
        if is_guard(pdb):
            steps.append(Step("delete", "poddisruptionbudget", *_ns_name(pdb), "single-replica guard"))
    steps += _workload_steps(view)
    for dep in view.deployments:
        namespace, name = _ns_name(dep)
        if namespace == config.namespace and _labels(dep).get(HEADROOM_LABEL) == "true":
            steps.append(Step("delete", "deployment", namespace, name, "headroom placeholder"))
    for priority_class in view.priority_classes:
        if _meta(priority_class).get("name") == PRIORITY_CLASS:
            steps.append(Step("delete", "priorityclass", "", PRIORITY_CLASS, "headroom priority class"))
    for node in view.nodes:
        taints = (node.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if not str(t.get("key") or "").startswith(PREFIX)]
        if len(kept) != len(taints):
            removed = sorted({str(t.get("key")) for t in taints} - {str(t.get("key")) for t in kept})
            body = {
                "metadata": {"resourceVersion": _meta(node).get("resourceVersion")},
                "spec": {"taints": kept},
            }
            steps.append(Step("taints", "node", "", _ns_name(node)[1], "taint " + ", ".join(removed), body))
    steps += _deletion_cost_steps(view, config)
    for lease in view.leases:
        namespace, name = _ns_name(lease)
        if namespace == config.namespace and name == LEASE_NAME:
            steps.append(Step("delete", "lease", namespace, name, "leader lease"))
    for secret in view.secrets:
        namespace, name = _ns_name(secret)
        if namespace == config.namespace and name == TLS_SECRET:
            steps.append(Step("delete", "secret", namespace, name, "webhook certificate"))
    return steps


def _workload_steps(view: ClusterView) -> list[Step]:
    """Surge and restart notes removed; a surge in flight gives its replicas back in the same patch."""
    steps: list[Step] = []
    for resource, objects in (("deployment", view.deployments), ("statefulset", view.statefulsets)):
        for obj in objects:
            notes = [note for note in (SURGE_NOTE, RESTART_NOTE) if note in _annotations(obj)]
            if not notes:
                continue
            patch: Obj = {"metadata": {"annotations": dict.fromkeys(notes)}}
            what = "note " + ", ".join(notes)
            surge = SurgeNote.read(obj)
            if resource == "deployment" and surge is not None and surge.active and surge.surge > 0:
                replicas = int((obj.get("spec") or {}).get("replicas", 1))
                declared = max(0, replicas - surge.surge)
                patch["spec"] = {"replicas": declared}
                what += f"; replicas {replicas} -> {declared} (surge in flight)"
            steps.append(Step("patch", resource, *_ns_name(obj), what, patch))
    return steps


def _deletion_cost_steps(view: ClusterView, config: ControllerConfig) -> list[Step]:
    """pod-deletion-cost of pods the webhook placed, of the doomed pods of a surge, and of the pods of
    managed Deployments (where the deletion-cost keeper writes it)."""
    namespace_labels = {_ns_name(ns)[1]: dict(_labels(ns)) for ns in view.namespaces}
    managed: set[tuple[str, str]] = set()
    for dep in view.deployments:
        namespace, name = _ns_name(dep)
        if namespace == config.namespace:
            continue
        result = resolve_policy(
            WorkloadKind.DEPLOYMENT, _annotations(dep), namespace_labels.get(namespace, {}), config
        )
        if result.managed:
            managed.add((namespace, name))
    deployment_of = {
        _ns_name(rs): (_ns_name(rs)[0], owner)
        for rs in view.replicasets
        if (owner := _owner(rs, "Deployment")) is not None
    }
    steps: list[Step] = []
    for pod in view.pods:
        annotations = _annotations(pod)
        if POD_DELETION_COST not in annotations:
            continue
        namespace, _ = _ns_name(pod)
        replicaset = _owner(pod, "ReplicaSet")
        workload = deployment_of.get((namespace, replicaset)) if replicaset is not None else None
        if DECISION in annotations or annotations[POD_DELETION_COST] == DOOMED_COST or workload in managed:
            body = {"metadata": {"annotations": {POD_DELETION_COST: None}}}
            steps.append(Step("patch", "pod", *_ns_name(pod), "annotation " + POD_DELETION_COST, body))
    return steps


def lease_holder(view: ClusterView, config: ControllerConfig, now: float) -> str | None:
    """The controller replica holding the Lease now (it would put back what uninstall removes)."""
    for lease in view.leases:
        if _ns_name(lease) != (config.namespace, LEASE_NAME):
            continue
        holder = (lease.get("spec") or {}).get("holderIdentity")
        if holder and lease_step(lease, "", now).value == "follow":
            return str(holder)
    return None


class Uninstaller:
    """Reads the cluster and runs the plan through the official client."""

    def __init__(self, api_client: k8s.ApiClient, config: ControllerConfig) -> None:
        self.config = config
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.policy = k8s.PolicyV1Api(api_client)
        self.scheduling = k8s.SchedulingV1Api(api_client)
        self.admission = k8s.AdmissionregistrationV1Api(api_client)
        self.coordination = k8s.CoordinationV1Api(api_client)

    def read(self) -> ClusterView:
        ns = self.config.namespace

        def items(function: Any, *args: Any, **kwargs: Any) -> list[Obj]:
            try:
                return list(call(function, *args, **kwargs).get("items") or [])
            except OpsError as error:
                if error.status == 404:  # the controller's namespace is already gone
                    return []
                raise

        return ClusterView(
            webhook_configurations=items(self.admission.list_mutating_webhook_configuration),
            pdbs=items(self.policy.list_pod_disruption_budget_for_all_namespaces),
            deployments=items(self.apps.list_deployment_for_all_namespaces),
            statefulsets=items(self.apps.list_stateful_set_for_all_namespaces),
            replicasets=items(self.apps.list_replica_set_for_all_namespaces),
            pods=items(self.core.list_pod_for_all_namespaces),
            nodes=items(self.core.list_node),
            namespaces=items(self.core.list_namespace),
            priority_classes=items(self.scheduling.list_priority_class),
            leases=items(self.coordination.list_namespaced_lease, ns),
            secrets=items(self.core.list_namespaced_secret, ns, field_selector=f"metadata.name={TLS_SECRET}"),
        )

    def run(self, step: Step) -> bool:
        """Make one step; False when its object was already gone."""
        try:
            if step.kind == "delete":
                self._delete(step)
            elif step.kind == "taints":
                call(self.core.patch_node, step.name, step.body, _content_type=MERGE_PATCH)
            else:
                self._patch(step)
        except OpsError as error:
            if error.status == 404:
                return False
            raise
        return True

    def _delete(self, step: Step) -> None:
        functions: dict[str, tuple[Any, tuple[str, ...]]] = {
            "mutatingwebhookconfiguration": (
                self.admission.delete_mutating_webhook_configuration,
                (step.name,),
            ),
            "poddisruptionbudget": (
                self.policy.delete_namespaced_pod_disruption_budget,
                (step.name, step.namespace),
            ),
            "deployment": (self.apps.delete_namespaced_deployment, (step.name, step.namespace)),
            "priorityclass": (self.scheduling.delete_priority_class, (step.name,)),
            "lease": (self.coordination.delete_namespaced_lease, (step.name, step.namespace)),
            "secret": (self.core.delete_namespaced_secret, (step.name, step.namespace)),
        }
        function, args = functions[step.resource]
        call(function, *args)

    def _patch(self, step: Step) -> None:
        functions: dict[str, Any] = {
            "deployment": self.apps.patch_namespaced_deployment,
            "statefulset": self.apps.patch_namespaced_stateful_set,
            "pod": self.core.patch_namespaced_pod,
        }
        call(functions[step.resource], step.name, step.namespace, step.body, _content_type=MERGE_PATCH)


def describe(step: Step) -> str:
    verb = {"delete": "delete", "patch": "remove", "taints": "remove"}[step.kind]
    if step.kind == "delete":
        return f"{verb} {step.target} ({step.what})"
    return f"{verb} {step.what} on {step.target}"
