"""Approved instructions from the backend, executed in the cluster.

The agent long-polls the backend for its cluster's instructions, and for each one re-reads the live
target and refuses when it drifted since the recommendation (its generation or resourceVersion is not
the one the instruction names), then applies it as a patch that carries the read resourceVersion (a
change in between makes the API server answer 409: the agent reads and checks again, a few times, so
a status update is no obstacle and a spec change is refused as drift), and reports the outcome.
Only the kinds in `contracts.instructions` are understood; the backend cannot make the agent do
anything else. A `SetReplicas` is refused for a workload that a HorizontalPodAutoscaler scales (the
HPA would undo it). In dry-run mode the patch is sent with `dryRun=All`: validated by the API server,
admitted by webhooks, stored nowhere.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import httpx
from kubernetes import client as k8s
from pydantic import TypeAdapter, ValidationError

from shipshape.contracts.instructions import (
    InstructionEnvelope,
    InstructionOutcome,
    SetContainerRequests,
    SetReplicas,
    SetSpotPolicy,
    WorkloadRef,
)

LOG = logging.getLogger("shipshape.agent.instructions")
INSTRUCTIONS_PATH = "/api/v1/agent/instructions"
_ENVELOPES = TypeAdapter(list[dict[str, Any]])


class InstructionClient:
    """The backend's instruction endpoints, with the agent's token."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def poll(self, wait: float) -> list[InstructionEnvelope | str]:
        """Instructions waiting for this cluster (an id string for one the agent cannot read)."""
        response = self.client.get(INSTRUCTIONS_PATH, params={"wait": wait}, timeout=wait + 30)
        response.raise_for_status()
        out: list[InstructionEnvelope | str] = []
        for item in _ENVELOPES.validate_python(response.json()):
            try:
                out.append(InstructionEnvelope.model_validate(item))
            except ValidationError as error:
                LOG.error("instruction %s is not one this agent executes: %s", item.get("id"), error)
                out.append(str(item.get("id", "")))
        return out

    def report(self, instruction_id: str, outcome: InstructionOutcome) -> None:
        response = self.client.post(
            f"{INSTRUCTIONS_PATH}/{instruction_id}/outcome", json=outcome.model_dump(mode="json"), timeout=30
        )
        response.raise_for_status()


# What `_attempt` answers when the patch met a 409 (the object changed after it was read).
_CONFLICT = InstructionOutcome(status="refused", detail="changed while applying")


class Executor:
    """Applies one instruction to the cluster through the official client."""

    def __init__(self, api_client: k8s.ApiClient, dry_run: bool = False) -> None:
        self.apps = k8s.AppsV1Api(api_client)
        self.autoscaling = k8s.AutoscalingV2Api(api_client)
        self.dry_run = dry_run

    # A 409 on the patch means the object changed between the read and the write: most often its
    # status (a controller at work), which is no drift. Read again and check again, as client-go's
    # RetryOnConflict does; a spec change shows up as a new generation and is refused then.
    CONFLICT_ATTEMPTS = 5

    def execute(self, envelope: InstructionEnvelope) -> InstructionOutcome:
        outcome = self._attempt(envelope)
        for _ in range(self.CONFLICT_ATTEMPTS - 1):
            if outcome is not _CONFLICT:
                break
            outcome = self._attempt(envelope)
        if outcome is _CONFLICT:
            target = envelope.instruction.target
            return InstructionOutcome(
                status="refused", detail=f"{target.text()} kept changing while applying"
            )
        return outcome

    def _attempt(self, envelope: InstructionEnvelope) -> InstructionOutcome:
        instruction = envelope.instruction
        target = instruction.target
        try:
            live = self._read(target)
        except k8s.ApiException as error:
            if error.status == 404:
                return InstructionOutcome(status="refused", detail=f"{target.text()} no longer exists")
            return InstructionOutcome(
                status="failed", detail=f"reading {target.text()}: {error.status} {error.reason}"
            )
        meta = live.get("metadata") or {}
        generation = meta.get("generation")
        if _already_applied(instruction, live):
            # Applied before (e.g. by this agent, whose report was lost): report it, change nothing.
            return InstructionOutcome(
                status="applied",
                detail=f"{target.text()} already as instructed",
                observed_generation=generation,
            )
        expected = instruction.precondition
        if expected.generation is not None and expected.generation != generation:
            return InstructionOutcome(
                status="refused",
                detail=f"{target.text()} drifted since the recommendation: generation {generation}, "
                f"the recommendation was made at {expected.generation}",
                observed_generation=generation,
            )
        if expected.resource_version is not None and expected.resource_version != meta.get("resourceVersion"):
            return InstructionOutcome(
                status="refused",
                detail=f"{target.text()} changed since the recommendation (resourceVersion)",
                observed_generation=generation,
            )
        if isinstance(instruction, SetSpotPolicy):
            patch: dict[str, Any] = {"metadata": {"annotations": dict(instruction.annotations)}}
            content_type = "application/merge-patch+json"
        elif isinstance(instruction, SetReplicas):
            try:
                scaler = self._autoscaler_of(target)
            except k8s.ApiException as error:
                return InstructionOutcome(
                    status="failed",
                    detail=f"reading the HorizontalPodAutoscalers of {target.namespace}: "
                    f"{error.status} {error.reason}",
                )
            if scaler is not None:
                return InstructionOutcome(
                    status="refused",
                    detail=f"{target.text()} is scaled by HorizontalPodAutoscaler {scaler}: change its "
                    "minReplicas instead",
                    observed_generation=generation,
                )
            patch = {"spec": {"replicas": instruction.replicas}}
            content_type = "application/merge-patch+json"
        else:
            problem = _missing_containers(instruction, live)
            if problem:
                return InstructionOutcome(status="refused", detail=problem, observed_generation=generation)
            patch = _requests_patch(instruction)
            content_type = "application/strategic-merge-patch+json"
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
        try:
            self._patch(target, patch, content_type)
        except k8s.ApiException as error:
            if error.status == 409:
                return _CONFLICT
            return InstructionOutcome(
                status="failed", detail=f"patch of {target.text()}: {error.status} {_reason(error)}"
            )
        verb = "would apply" if self.dry_run else "applied"
        return InstructionOutcome(
            status="dry-run" if self.dry_run else "applied",
            detail=f"{verb} {instruction.type} to {target.text()}",
            observed_generation=generation,
        )

    def _autoscaler_of(self, target: WorkloadRef) -> str | None:
        """The name of a HorizontalPodAutoscaler in the target's namespace that scales it, if any (none
        where the cluster does not serve autoscaling/v2: then no HPA can exist)."""
        try:
            response: Any = self.autoscaling.list_namespaced_horizontal_pod_autoscaler(
                target.namespace, _preload_content=False, _request_timeout=(5, 30)
            )
        except k8s.ApiException as error:
            if error.status == 404:
                return None
            raise
        for hpa in json.loads(response.data).get("items") or []:
            ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("kind") == target.kind and ref.get("name") == target.name:
                return str((hpa.get("metadata") or {}).get("name", ""))
        return None

    def _read(self, target: WorkloadRef) -> dict[str, Any]:
        read: Any = (
            self.apps.read_namespaced_deployment
            if target.kind == "Deployment"
            else self.apps.read_namespaced_stateful_set
        )
        response = read(target.name, target.namespace, _preload_content=False, _request_timeout=(5, 30))
        body: dict[str, Any] = json.loads(response.data)
        return body

    def _patch(self, target: WorkloadRef, patch: dict[str, Any], content_type: str) -> None:
        send: Any = (
            self.apps.patch_namespaced_deployment
            if target.kind == "Deployment"
            else self.apps.patch_namespaced_stateful_set
        )
        send(
            target.name,
            target.namespace,
            patch,
            dry_run="All" if self.dry_run else None,
            _content_type=content_type,
            _preload_content=False,
            _request_timeout=(5, 30),
        )


def _already_applied(
    instruction: SetSpotPolicy | SetContainerRequests | SetReplicas, live: dict[str, Any]
) -> bool:
    if isinstance(instruction, SetSpotPolicy):
        annotations = live.get("metadata", {}).get("annotations") or {}
        return all(annotations.get(key) == value for key, value in instruction.annotations.items())
    if isinstance(instruction, SetReplicas):
        # An unset spec.replicas is 1 (the API server's default).
        return int((live.get("spec") or {}).get("replicas", 1)) == instruction.replicas
    containers = {
        c.get("name"): c.get("resources") or {}
        for c in live.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    }
    for name, wanted in instruction.containers.items():
        have = containers.get(name)
        if have is None:
            return False
        if any((have.get("requests") or {}).get(k) != v for k, v in wanted.requests.items()):
            return False
        if any((have.get("limits") or {}).get(k) != v for k, v in wanted.limits.items()):
            return False
    return True


def _missing_containers(instruction: SetContainerRequests, live: dict[str, Any]) -> str | None:
    containers = {
        c.get("name")
        for c in live.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    }
    missing = sorted(set(instruction.containers) - containers)
    if missing:
        return f"{instruction.target.text()} has no container {', '.join(missing)}"
    return None


def _requests_patch(instruction: SetContainerRequests) -> dict[str, Any]:
    containers = []
    for name, resources in instruction.containers.items():
        wanted: dict[str, Any] = {"requests": dict(resources.requests)}
        if resources.limits:
            wanted["limits"] = dict(resources.limits)
        containers.append({"name": name, "resources": wanted})
    return {"spec": {"template": {"spec": {"containers": containers}}}}


def _reason(error: k8s.ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message", error.reason))
    except (TypeError, ValueError):
        return str(error.reason)


class InstructionLoop:
    """Long-polls the backend, executes, reports; a thread until `stop`.

    With leader election, `is_leader` says whether this replica may act: a follower does not poll,
    and a leader that lost the Lease during a poll executes nothing more (what it was handed stays
    leased to it on the backend, then goes to the new leader)."""

    def __init__(
        self,
        client: InstructionClient,
        executor: Executor,
        wait: float = 20.0,
        is_leader: Callable[[], bool] | None = None,
        idle: float = 1.0,
    ) -> None:
        self.client = client
        self.executor = executor
        self.wait = wait
        self.is_leader = is_leader or (lambda: True)
        self.idle = idle  # real seconds between two looks at the Lease while following
        self.stop_event = threading.Event()
        self.outcomes: list[tuple[str, InstructionOutcome]] = []
        # Held while one instruction is executed and reported (a stop waits for that, not for a poll).
        self._busy = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="agent-instructions", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """No more instructions: returns once the one in hand, if any, is executed and reported. A long
        poll under way is not waited for: what it hands over is left to be leased again."""
        self.stop_event.set()
        with self._busy:
            pass

    def run_once(self, wait: float) -> int:
        handled = 0
        for envelope in self.client.poll(wait):
            instruction_id = envelope if isinstance(envelope, str) else envelope.id
            with self._busy:
                if self.stop_event.is_set():
                    break
                if not self.is_leader():
                    LOG.warning("instruction %s not executed: this replica no longer leads", instruction_id)
                    break
                if isinstance(envelope, str):
                    outcome = InstructionOutcome(
                        status="refused", detail="not an instruction kind this agent executes"
                    )
                else:
                    outcome = self.executor.execute(envelope)
                LOG.info("instruction %s: %s (%s)", instruction_id, outcome.status, outcome.detail)
                self.client.report(instruction_id, outcome)
                self.outcomes.append((instruction_id, outcome))
                handled += 1
        return handled

    def _run(self) -> None:
        backoff = 1.0
        while not self.stop_event.is_set():
            if not self.is_leader():
                self.stop_event.wait(self.idle)
                continue
            try:
                self.run_once(self.wait)
                backoff = 1.0
            except (httpx.HTTPError, ValidationError, RuntimeError) as error:
                if self.stop_event.is_set():
                    break  # stopping: the client may have been closed under a long poll
                if isinstance(error, RuntimeError):
                    raise
                LOG.warning("instructions: %s; retrying in %.0fs", error, backoff)
                self.stop_event.wait(backoff)
                backoff = min(60.0, backoff * 2)
