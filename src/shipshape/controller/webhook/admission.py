"""AdmissionReview (admission.k8s.io/v1) handling for pod CREATE: decide, mutate, diff, answer.

Fail-open by design: an internal error admits the pod unmodified (and counts a metric); an invalid
policy admits the pod unmodified with a warning. Pod creation never fails because of placement.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from prometheus_client import Counter

from shipshape.controller.availability import availability_floor, disruption_allowance
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.packing import NodeRoom, pod_requests
from shipshape.controller.placement import (
    Decision,
    PlacementView,
    PodRequest,
    Pool,
    decide,
    statefulset_ordinal,
)
from shipshape.controller.policy import (
    CapacityType,
    ControllerConfig,
    PolicyProblem,
    WorkloadKind,
    resolve_policy,
)
from shipshape.controller.risk import RiskModel
from shipshape.controller.state import ClusterState, WorkloadRef
from shipshape.controller.state.views import Replica
from shipshape.controller.webhook.mutators import (
    CHAIN,
    DRY_RUN_CHAIN,
    MutationInput,
    copy_pod,
    diff,
)
from shipshape.kube.clock import Clock
from shipshape.kube.objects import controller_ref

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.webhook")
ADMISSION_API_VERSION = "admission.k8s.io/v1"
# Risk added to a pool with a node under a rebalance recommendation (one advisor band).
RECOMMENDATION_RISK = 1.0
WORKLOAD_RESOURCES = {"deployments": WorkloadKind.DEPLOYMENT, "statefulsets": WorkloadKind.STATEFULSET}


class BadReview(ValueError):
    """A request body that is not an admission.k8s.io/v1 AdmissionReview with a request."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one admission: a patch (possibly empty), the decision, warnings."""

    patch: list[Obj]
    decision: Decision | None = None
    warnings: tuple[str, ...] = ()
    skipped: str | None = None


def review_response(uid: str, outcome: Outcome) -> Obj:
    response: Obj = {"uid": uid, "allowed": True}
    if outcome.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(outcome.patch)).decode()
    if outcome.warnings:
        response["warnings"] = list(outcome.warnings)
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


class PodPlacer:
    """Answers AdmissionReviews for pod creation from the cache, with no API round trip."""

    def __init__(
        self,
        cache: ClusterState,
        config: ControllerConfig,
        risk: RiskModel,
        clock: Clock,
        metrics: ControllerMetrics,
        shortages: Callable[[float], Iterable[Pool]] | None = None,
        recommendations: Callable[[], Mapping[str, Pool | None]] | None = None,
    ) -> None:
        self.cache = cache
        self.config = config
        self.risk = risk
        self.clock = clock
        self.metrics = metrics
        self._shortages = shortages
        self._recommendations = recommendations
        self._counters: dict[tuple[Counter, tuple[str, ...]], Counter] = {}

    def awaiting_owner(self, body: object) -> bool:
        """Whether the review is a pod whose controller (ReplicaSet or StatefulSet), or the ReplicaSet's
        Deployment, the state does not hold yet. The API server admits a ReplicaSet's first pods
        moments after creating it, and an informer event can arrive after them: the server then
        waits briefly (`OWNER_WAIT_SECONDS`) rather than admit the pod unplaced."""
        request = body.get("request") if isinstance(body, Mapping) else None
        if not isinstance(request, Mapping) or request.get("operation") != "CREATE":
            return False
        resource = request.get("resource")
        pod = request.get("object")
        if not isinstance(resource, Mapping) or resource.get("resource") != "pods":
            return False
        if not isinstance(pod, dict):
            return False
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") not in ("ReplicaSet", "StatefulSet"):
            return False
        namespace = str(request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "")
        owner = self._held(str(ref["kind"]), namespace, str(ref.get("name")))
        if owner is None:
            return True
        # A ReplicaSet's Deployment comes through another informer: it may follow the ReplicaSet.
        deployment = controller_ref(owner) if ref.get("kind") == "ReplicaSet" else None
        if deployment is None or deployment.get("kind") != "Deployment":
            return False
        return self._held("Deployment", namespace, str(deployment.get("name"))) is None

    def _held(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self.cache.get(kind, namespace, name)

    def review(self, body: Mapping[str, Any]) -> Obj:
        """Answer one AdmissionReview; raises `BadReview` only for a body that is not one."""
        request = body.get("request") if isinstance(body, Mapping) else None
        if (
            not isinstance(body, Mapping)
            or body.get("apiVersion") != ADMISSION_API_VERSION
            or body.get("kind") != "AdmissionReview"
            or not isinstance(request, Mapping)
            or not isinstance(request.get("uid"), str)
        ):
            raise BadReview("expected an admission.k8s.io/v1 AdmissionReview with a request.uid")
        uid = request["uid"]
        try:
            outcome = self.admit(request)
        except Exception:
            LOG.exception("placement failed; admitting the pod unmodified", extra={"uid": uid})
            self.metrics.webhook_errors.labels(stage="decide").inc()
            outcome = Outcome(patch=[], skipped="error")
        return review_response(uid, outcome)

    def admit(self, request: Mapping[str, Any]) -> Outcome:
        """The decision and patch for one admission request (see module docstring for failure rules)."""
        resource = request.get("resource") or {}
        if resource.get("group") == "apps" and resource.get("resource") in WORKLOAD_RESOURCES:
            return self._workload_warnings(request)
        if (
            request.get("operation") != "CREATE"
            or resource.get("resource") != "pods"
            or resource.get("group", "") != ""
            or request.get("subResource")
        ):
            return self._skip("not-pod-create")
        namespace = str(request.get("namespace") or "")
        if namespace == self.config.namespace or namespace in self.config.excluded_namespaces:
            return self._skip("excluded-namespace")
        pod = request.get("object")
        if not isinstance(pod, dict):
            return self._skip("no-object")
        if (pod.get("spec") or {}).get("nodeName"):
            return self._skip("already-bound")
        workload = self.cache.workload_of(pod, namespace)
        if workload is None:
            return self._skip("no-workload")
        policy_result = self.cache.policy_of(workload.kind, workload.obj, self.config)
        if not policy_result.managed:
            return self._skip("not-managed")
        if policy_result.problems or policy_result.policy is None:
            for problem in policy_result.problems:
                self.metrics.invalid_policies.labels(annotation=problem.annotation).inc()
            warnings = self._policy_warnings(workload.kind, workload.name, policy_result.problems)
            return Outcome(patch=[], warnings=warnings, skipped="invalid-policy")
        if self.cache.pins_capacity(pod):
            return self._skip("capacity-pinned")
        now = self.clock.now()
        ordinal, allowance, loss_allowance = None, None, None
        if workload.kind is WorkloadKind.STATEFULSET:
            ordinal, allowance = statefulset_ordinal(pod), self.allowance(workload)
        else:
            loss_allowance = self.allowance(workload)
        counts = self.cache.group_counts(workload.group, now)
        shortages = self._shortages(now) if self._shortages is not None else ()
        view = self.cache.placement_view(now, self.risk, shortages)
        view = self._with_avoided(view)
        requests = pod_requests(pod)
        pod_request = PodRequest(
            policy_result.policy, workload.replicas, ordinal, allowance, loss_allowance, requests
        )
        decision = decide(pod_request, counts, view)
        patch = self._mutate(pod, requests, workload, decision, str(request["uid"]))
        if patch is None:
            return Outcome(patch=[], decision=decision, skipped="error")
        metadata = pod.get("metadata") or {}
        if LOG.isEnabledFor(logging.INFO):
            self._log_decision(namespace, workload, metadata, decision)
        if not request.get("dryRun"):
            self.cache.assume(str(request["uid"]), workload.group, decision.capacity_type, decision.pool, now)
        self._counter(self.metrics.decisions, decision.capacity_type.value, decision.reason.value).inc()
        return Outcome(patch=patch, decision=decision)

    def _log_decision(
        self, namespace: str, workload: WorkloadRef, metadata: Mapping[str, Any], decision: Decision
    ) -> None:
        LOG.info(
            "placement decision",
            extra={
                "workload": f"{namespace}/{workload.name}",
                "kind": workload.kind.value,
                "pod": str(metadata.get("name") or f"{metadata.get('generateName') or ''}*"),
                "capacity_type": decision.capacity_type.value,
                "pool": str(decision.pool) if decision.pool is not None else "",
                "reason": decision.reason.value,
                "dry_run": self.config.dry_run,
            },
        )

    def _counter(self, metric: Counter, *labels: str) -> Counter:
        """`metric.labels(*labels)`, kept (every admission counts one or two)."""
        key = (metric, labels)
        child = self._counters.get(key)
        if child is None:
            child = self._counters[key] = metric.labels(*labels)
        return child

    def _workload_warnings(self, request: Mapping[str, Any]) -> Outcome:
        """A Deployment or StatefulSet written: admitted unchanged, with its policy's problems as
        warnings, which `kubectl apply` prints to the one who wrote the annotations (never a denial)."""
        if request.get("operation") not in ("CREATE", "UPDATE") or request.get("subResource"):
            return self._skip("not-workload-write")
        namespace = str(request.get("namespace") or "")
        obj = request.get("object")
        if namespace == self.config.namespace or namespace in self.config.excluded_namespaces:
            return self._skip("excluded-namespace")
        if not isinstance(obj, Mapping):
            return self._skip("no-object")
        kind = WORKLOAD_RESOURCES[str((request.get("resource") or {}).get("resource"))]
        metadata = obj.get("metadata") or {}
        result = resolve_policy(
            kind, metadata.get("annotations") or {}, self.cache.namespace_labels(namespace), self.config
        )
        if not result.managed or not result.problems:
            return self._skip("workload-valid" if result.managed else "not-managed")
        name = str(metadata.get("name") or metadata.get("generateName") or "")
        for problem in result.problems:
            self.metrics.invalid_policies.labels(annotation=problem.annotation).inc()
        LOG.warning(
            "invalid spot policy",
            extra={
                "workload": f"{namespace}/{name}",
                "kind": kind.value,
                "problems": "; ".join(str(p) for p in result.problems),
            },
        )
        return Outcome(patch=[], warnings=self._policy_warnings(kind, name, result.problems))

    @staticmethod
    def _policy_warnings(kind: WorkloadKind, name: str, problems: Sequence[PolicyProblem]) -> tuple[str, ...]:
        return tuple(
            f"shipshape: {kind.value} {name}: {problem}; placement left unchanged" for problem in problems
        )

    def allowance(self, workload: WorkloadRef) -> int:
        """A workload's disruption allowance: replicas minus the PDB's (or rolling update's) floor."""
        labels = ((workload.obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        pdbs = self.cache.pdbs_matching(workload.namespace, labels)
        return disruption_allowance(workload.replicas, availability_floor(workload, pdbs))

    def _with_avoided(self, view: PlacementView) -> PlacementView:
        """Nodes with a rebalance recommendation from the metadata endpoint take no new pods, and their
        pools count one band riskier (a recommendation is an elevated risk, not a notice)."""
        recommended = self._recommendations() if self._recommendations is not None else {}
        if not recommended:
            return view
        risk = dict(view.pool_risk)
        for pool in {pool for pool in recommended.values() if pool is not None and pool in risk}:
            risk[pool] += RECOMMENDATION_RISK
        return dataclasses.replace(
            view, pool_risk=risk, avoided_nodes=view.avoided_nodes | frozenset(recommended)
        )

    def _mutate(
        self, pod: Obj, requests: tuple[int, int], workload: WorkloadRef, decision: Decision, decision_id: str
    ) -> list[Obj] | None:
        tolerations = self.cache.spot_tolerations()
        dry_run = self.config.dry_run
        packed = () if dry_run else self._packing(pod, requests, decision, tolerations)
        data = MutationInput(
            decision=decision,
            decision_id=decision_id,
            selector=(workload.obj.get("spec") or {}).get("selector"),
            spot_tolerations=tolerations,
            packing_hosts=tuple(room.host for room in packed),
            packing_node=packed[0].name if packed else "",
            dry_run=dry_run,
            capacity_terms=self.cache.capacity_terms(decision.capacity_type),
        )
        mutated = copy_pod(pod)
        for name, mutator in DRY_RUN_CHAIN if dry_run else CHAIN:
            try:
                mutator(data, mutated)
            except Exception:
                LOG.exception("mutator %s failed; admitting the pod unmodified", name)
                self.metrics.webhook_errors.labels(stage=name).inc()
                return None
        return diff(pod, mutated)

    def _packing(
        self, pod: Obj, requests: tuple[int, int], decision: Decision, tolerations: Sequence[Obj]
    ) -> tuple[NodeRoom, ...]:
        """The fullest nodes the pod fits on, for the capacity types `config.packing` covers."""
        capacity = decision.capacity_type
        if not self.config.packing.covers(capacity):
            return ()
        if capacity is CapacityType.SPOT and decision.pool is None:
            return ()
        fullest = self.cache.fullest_rooms(
            pod,
            requests,
            capacity,
            decision.pool,
            tolerations if capacity is CapacityType.SPOT else (),
            decision.avoided_nodes,
        )
        self._counter(self.metrics.packed, capacity.value, "true" if fullest else "false").inc()
        return fullest

    def _skip(self, cause: str) -> Outcome:
        self._counter(self.metrics.skipped, cause).inc()
        return Outcome(patch=[], skipped=cause)


class ReplicaPlacer(PodPlacer):
    """The placer of a controller process: it answers from the webhook's own replica of the state
    (`state.views`), caught up at each review, so that it never waits behind a planning pass."""

    def __init__(self, replica: Replica, *args: Any, **kwargs: Any) -> None:
        super().__init__(replica.state, *args, **kwargs)
        self._replica = replica

    def _held(self, kind: str, namespace: str, name: str) -> Obj | None:
        with self._replica.view():
            return super()._held(kind, namespace, name)

    def review(self, body: Mapping[str, Any]) -> Obj:
        with self._replica.view():
            return super().review(body)
