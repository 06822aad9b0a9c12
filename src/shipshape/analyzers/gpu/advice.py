"""GPU advice: what to change, why, the instruction that does it, and the money it saves per day.

Kinds of advice (`KINDS`):

- `binpack`: in a pool, GPU nodes that are partly used hold together at least one node's worth
  of free GPUs: new pods should prefer the fullest node (the controller's `packing: all`, or a
  MostAllocated / fgd scoring), and consolidating frees whole nodes (saving their price).
- `spread`: an inference workload with several replicas has them all on one node: one node loss
  takes it down; a topology spread constraint on the hostname fixes it.
- `model-constraint`: a pending pod accepts only some GPU models while GPUs of other models are
  free.
- `share`: a pod holds a whole GPU but its activity stays low (p95 under `share_below`): a share
  of a GPU (time-slicing, MIG, gpu-milli) would do.
- `inference-on-spot`: an inference workload with two replicas or more runs on on-demand GPUs.
- `training-on-spot`: a training pod that declares checkpointing runs on on-demand GPUs.
- `training-needs-checkpointing`: a training pod on spot GPUs does not declare checkpointing: an
  interruption loses its work.
- `scale-down`: pods of a workload hold GPUs and stay idle (see `idle`): scale it down. For a
  Deployment or StatefulSet whose current state is known (`Workload`: replicas, generation) and that
  no HPA scales, the advice carries the `SetReplicas` instruction (`contracts.instructions`) that the
  agent executes: the workload's replicas less the idle pods, with its generation as the
  precondition.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shipshape.analyzers.gpu.fleet import (
    CHECKPOINTING_ANNOTATION,
    ON_DEMAND,
    SPOT,
    GpuNode,
    GpuPod,
    NodeAllocation,
    Workload,
)
from shipshape.analyzers.gpu.idle import PodUsage
from shipshape.contracts.annotations import ENABLED
from shipshape.contracts.instructions import Precondition, SetReplicas, WorkloadRef

KINDS = (
    "binpack",
    "spread",
    "model-constraint",
    "share",
    "inference-on-spot",
    "training-on-spot",
    "training-needs-checkpointing",
    "scale-down",
)
SCALABLE = ("Deployment", "StatefulSet")


@dataclass(frozen=True)
class AdviceSettings:
    share_below: float = 0.3  # p95 activity under which a whole GPU is a sharing candidate
    share_step: float = 0.125  # shares are offered in steps of an eighth of a GPU
    share_headroom: float = 1.25  # the share offered covers the p95 activity with this margin


@dataclass(frozen=True)
class Advice:
    kind: str
    target: str  # a workload (kind/namespace/name), a pod (namespace/name) or a pool
    message: str
    instruction: str  # what a person does, in words or a command
    savings_per_day: float | None = None
    # The instruction the agent can execute once approved (`scale-down` of a known workload).
    apply: SetReplicas | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "message": self.message,
            "instruction": self.instruction,
            "savings_per_day": None if self.savings_per_day is None else round(self.savings_per_day, 4),
            "apply": None if self.apply is None else self.apply.model_dump(mode="json"),
        }


def advise(
    allocations: Mapping[str, NodeAllocation],
    pods: Sequence[GpuPod],
    usages: Sequence[PodUsage] = (),
    settings: AdviceSettings | None = None,
    workloads: Mapping[tuple[str, str, str], Workload] | None = None,
) -> list[Advice]:
    """All advice, the largest savings first (advice without a price last). `workloads` (by kind,
    namespace, name) lets scale-down advice carry the instruction that applies it."""
    settings = settings or AdviceSettings()
    nodes = {name: a.node for name, a in allocations.items()}
    found = [
        *_binpack(allocations),
        *_spread(pods),
        *_model_constraints(allocations, pods),
        *_share(usages, settings),
        *_spot(pods, nodes),
        *_scale_down(pods, usages, workloads or {}),
    ]
    return sorted(
        found, key=lambda a: (a.savings_per_day is None, -(a.savings_per_day or 0.0), a.kind, a.target)
    )


def _workload(pod: GpuPod) -> str:
    if pod.owner is None:
        return f"pod/{pod.key}"
    return f"{pod.owner.kind.lower()}/{pod.namespace}/{pod.owner.name}"


def _binpack(allocations: Mapping[str, NodeAllocation]) -> list[Advice]:
    pools: dict[str, list[NodeAllocation]] = defaultdict(list)
    for alloc in allocations.values():
        if alloc.node.gpus:
            pools[alloc.node.pool].append(alloc)
    advice = []
    for pool, members in sorted(pools.items()):
        partial = [a for a in members if a.devices_in_use > 0 and a.free_devices > 0]
        per_node = max(a.node.gpus for a in members)
        free = sum(a.free_devices for a in partial)
        freeable = free // per_node if len(partial) >= 2 else 0
        if freeable < 1:
            continue
        prices = [a.node.price_per_hour for a in partial if a.node.price_per_hour is not None]
        savings = freeable * 24.0 * (sum(prices) / len(prices)) if prices else None
        advice.append(
            Advice(
                kind="binpack",
                target=f"pool/{pool}",
                message=(
                    f"{len(partial)} partly used nodes in pool {pool} have {free} free GPUs between them, "
                    f"{freeable} node(s) worth: pack GPU pods onto the fullest nodes"
                ),
                instruction=(
                    "set `packing: all` in the controller's config "
                    "(new pods prefer the fullest nodes that fit), "
                    f"then let the autoscaler remove the {freeable} node(s) that empty"
                ),
                savings_per_day=savings,
            )
        )
    return advice


def _spread(pods: Sequence[GpuPod]) -> list[Advice]:
    replicas: dict[str, list[GpuPod]] = defaultdict(list)
    for pod in pods:
        if pod.owner is not None and pod.role == "inference" and pod.node is not None:
            replicas[_workload(pod)].append(pod)
    advice = []
    for target, members in sorted(replicas.items()):
        hosts = {p.node for p in members}
        if len(members) >= 2 and len(hosts) == 1:
            owner = members[0].owner
            assert owner is not None
            advice.append(
                Advice(
                    kind="spread",
                    target=target,
                    message=(
                        f"all {len(members)} replicas run on node {hosts.pop()}: losing it stops the service"
                    ),
                    instruction=(
                        f"add to {owner.kind.lower()}/{owner.name} -n {members[0].namespace}: "
                        "topologySpreadConstraints [{maxSkew: 1, topologyKey: kubernetes.io/hostname, "
                        "whenUnsatisfiable: ScheduleAnyway}]"
                    ),
                )
            )
    return advice


def _model_constraints(allocations: Mapping[str, NodeAllocation], pods: Sequence[GpuPod]) -> list[Advice]:
    free_by_model: dict[str, int] = defaultdict(int)
    for alloc in allocations.values():
        free_by_model[alloc.node.gpu_model] += alloc.free_devices
    advice = []
    for pod in pods:
        if pod.node is not None or not pod.gpu_models:
            continue
        need = math.ceil(pod.gpus)
        accepted_free = sum(free_by_model[m] for m in pod.gpu_models)
        others = sorted(m for m, free in free_by_model.items() if m not in pod.gpu_models and free >= need)
        if accepted_free >= need or not others:
            continue
        advice.append(
            Advice(
                kind="model-constraint",
                target=f"pod/{pod.key}",
                message=(
                    f"pending: accepts only {', '.join(pod.gpu_models)} (no {need} GPU(s) free there) "
                    f"while {', '.join(f'{m} ({free_by_model[m]} free)' for m in others)} have room"
                ),
                instruction=(
                    f"widen the GPU model node affinity of {_workload(pod)} to include {', '.join(others)} "
                    "if the model runs there"
                ),
            )
        )
    return advice


def _share(usages: Sequence[PodUsage], settings: AdviceSettings) -> list[Advice]:
    advice = []
    for usage in usages:
        pod = usage.pod
        if pod.gpus != 1 or usage.p95 is None or usage.idle or usage.p95 >= settings.share_below:
            continue
        step = settings.share_step
        share = min(1.0, max(step, math.ceil(usage.p95 * settings.share_headroom / step - 1e-9) * step))
        price = usage.node.price_per_gpu_hour if usage.node is not None else None
        advice.append(
            Advice(
                kind="share",
                target=f"pod/{pod.key}",
                message=f"holds a whole GPU with p95 activity {usage.p95:.0%} (mean {usage.mean or 0:.0%})",
                instruction=(
                    f"give {_workload(pod)} a {share:g} share of a GPU (time-slicing, MIG or gpu-milli) "
                    "instead of a whole one"
                ),
                savings_per_day=None if price is None else (1.0 - share) * price * 24.0,
            )
        )
    return advice


def _spot_price_per_gpu(nodes: Mapping[str, GpuNode], model: str) -> float | None:
    prices = [
        n.price_per_gpu_hour
        for n in nodes.values()
        if n.capacity_type == SPOT and n.gpu_model == model and n.price_per_gpu_hour is not None
    ]
    return min(prices) if prices else None


def _spot(pods: Sequence[GpuPod], nodes: Mapping[str, GpuNode]) -> list[Advice]:
    advice: list[Advice] = []
    inference: dict[str, list[GpuPod]] = defaultdict(list)
    for pod in pods:
        node = nodes.get(pod.node) if pod.node is not None else None
        if node is None:
            continue
        if pod.role == "inference" and pod.owner is not None and node.capacity_type == ON_DEMAND:
            inference[_workload(pod)].append(pod)
        elif pod.role == "training" and node.capacity_type == ON_DEMAND and pod.checkpointing:
            advice.append(_to_spot("training-on-spot", pod, [pod], nodes, "declares checkpointing"))
        elif pod.role == "training" and node.capacity_type == SPOT and not pod.checkpointing:
            advice.append(
                Advice(
                    kind="training-needs-checkpointing",
                    target=f"pod/{pod.key}",
                    message=(
                        f"trains on spot node {node.name} without declaring checkpointing: "
                        "an interruption loses its work"
                    ),
                    instruction=(
                        f"run {_workload(pod)} on on-demand GPUs, or annotate it "
                        f"{CHECKPOINTING_ANNOTATION}=true once it checkpoints"
                    ),
                )
            )
    for members in inference.values():
        replicas = max(members[0].replicas or 0, len(members))
        if replicas >= 2:
            advice.append(_to_spot("inference-on-spot", members[0], members, nodes, f"{replicas} replicas"))
    return advice


def _to_spot(
    kind: str, pod: GpuPod, members: Sequence[GpuPod], nodes: Mapping[str, GpuNode], why: str
) -> Advice:
    savings = 0.0
    priced = True
    for member in members:
        node = nodes[member.node or ""]
        spot = _spot_price_per_gpu(nodes, node.gpu_model)
        here = node.price_per_gpu_hour
        if spot is None or here is None:
            priced = False
            break
        savings += max(here - spot, 0.0) * member.gpus * 24.0
    owner = pod.owner
    if owner is not None and owner.kind in SCALABLE:
        instruction = (
            f"kubectl annotate {owner.kind.lower()}/{owner.name} -n {pod.namespace} {ENABLED}=true "
            "(the controller keeps the on-demand base and spreads the rest over spot pools)"
        )
    else:
        instruction = f"give {_workload(pod)} a toleration and node affinity for spot GPU nodes"
    gpus = sum(m.gpus for m in members)
    return Advice(
        kind=kind,
        target=_workload(pod),
        message=f"{why}, {gpus:g} GPU(s) on on-demand nodes: spot capacity fits it",
        instruction=instruction,
        savings_per_day=savings if priced else None,
    )


def _scale_down(
    pods: Sequence[GpuPod], usages: Sequence[PodUsage], workloads: Mapping[tuple[str, str, str], Workload]
) -> list[Advice]:
    idle: dict[str, list[PodUsage]] = defaultdict(list)
    for usage in usages:
        if usage.idle:
            idle[_workload(usage.pod)].append(usage)
    running: dict[str, int] = defaultdict(int)
    for pod in pods:
        if pod.node is not None:
            running[_workload(pod)] += 1
    advice = []
    for target, members in sorted(idle.items()):
        pod = members[0].pod
        owner = pod.owner
        waste = [u.wasted_per_day for u in members]
        savings = None if any(w is None for w in waste) else sum(w or 0.0 for w in waste)
        gpus = sum(u.pod.gpus for u in members)
        apply = None
        if owner is not None and owner.kind in SCALABLE:
            known = workloads.get((owner.kind, pod.namespace, owner.name))
            replicas = known.replicas if known is not None else max(pod.replicas or 0, running[target])
            keep = max(replicas - len(members), 0)
            instruction = (
                f"kubectl scale {owner.kind.lower()}/{owner.name} -n {pod.namespace} --replicas={keep}"
            )
            if known is not None and known.autoscaled_by is not None:
                instruction = (
                    f"lower the minReplicas of HorizontalPodAutoscaler {known.autoscaled_by} -n "
                    f"{pod.namespace} (it scales {owner.kind.lower()}/{owner.name}) to {keep}"
                )
            elif known is not None:
                apply = set_replicas(known, keep)
        elif owner is not None:
            workload = f"{owner.kind.lower()}/{owner.name} -n {pod.namespace}"
            instruction = f"check {workload}: it holds GPUs without using them"
        else:
            instruction = f"kubectl delete pod {pod.name} -n {pod.namespace} (a bare pod holding idle GPUs)"
        advice.append(
            Advice(
                kind="scale-down",
                target=target,
                message=f"{len(members)} pod(s) hold {gpus:g} GPU(s) idle over the window",
                instruction=instruction,
                savings_per_day=savings,
                apply=apply,
            )
        )
    return advice


def set_replicas(workload: Workload, replicas: int) -> SetReplicas | None:
    """The instruction that sets the workload's replicas, computed from its current state (None
    without a generation or resourceVersion to hold the agent to)."""
    if workload.generation is not None:
        precondition = Precondition(generation=workload.generation)
    elif workload.resource_version:
        precondition = Precondition(resource_version=workload.resource_version)
    else:
        return None
    target = WorkloadRef(kind=workload.kind, namespace=workload.namespace, name=workload.name)  # type: ignore[arg-type]
    return SetReplicas(target=target, precondition=precondition, replicas=replicas)
