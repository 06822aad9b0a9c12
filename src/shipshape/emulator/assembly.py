"""Assemble an emulated cluster from a scenario: every model registered here, explicitly, in order."""

from __future__ import annotations

import logging
from typing import Any

from shipshape.emulator import controllers
from shipshape.emulator.api import Api
from shipshape.emulator.cloud.model import CloudModel
from shipshape.emulator.kubelet.model import KubeletModel
from shipshape.emulator.resources import NAMESPACES, RESOURCES, ResourceType
from shipshape.emulator.runtime import Cluster, Model
from shipshape.emulator.scenario import Scenario
from shipshape.emulator.scheduler.model import SchedulerModel
from shipshape.emulator.usage import UsageModel
from shipshape.kube import errors
from shipshape.kube.clock import Clock

log = logging.getLogger(__name__)

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def build(scenario: Scenario | None, clock: Clock, *, models: bool = True) -> Cluster:
    """A cluster with its API semantics, its models and the scenario's namespaces.

    `models=False` gives a bare API server over a store (no scheduler, kubelets or cloud), for
    tests of the API layer alone. The scenario's manifests are created by `apply_objects`.
    """
    cluster = Cluster(clock, scenario)
    Api(cluster)
    for name in SYSTEM_NAMESPACES + tuple(scenario.namespaces if scenario else ()):
        if cluster.store.get(NAMESPACES, "", name) is None:
            namespace = {
                "metadata": {"name": name},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            cluster.store.create(NAMESPACES, namespace)
    if models:
        for model in model_set():
            cluster.add(model)
    return cluster


def model_set() -> list[Model]:
    """Every model of the emulated cluster, in start order: control plane, then nodes, then cloud.

    The cloud comes last so that the nodes it creates at start are seen by models already watching.
    """
    return [
        *controllers.all_controllers(),
        SchedulerModel(),
        KubeletModel(),
        UsageModel(),
        CloudModel(),
    ]


async def apply_objects(cluster: Cluster) -> None:
    """Create the scenario's manifests through the API (admission, defaulting, validation)."""
    api: Api = cluster.services["api"]
    for manifest in cluster.scenario.objects if cluster.scenario else []:
        rt = _resource_for(manifest)
        namespace = manifest.get("metadata", {}).get("namespace", "default") if rt.namespaced else ""
        if rt.namespaced and cluster.store.get(NAMESPACES, "", namespace) is None:
            await api.create(NAMESPACES, "", {"metadata": {"name": namespace}})
        try:
            await api.create(rt, namespace, dict(manifest))
        except errors.AlreadyExists:
            log.info("scenario object %s/%s already exists", rt.kind, manifest["metadata"].get("name"))


def _resource_for(manifest: dict[str, Any]) -> ResourceType:
    api_version, kind = manifest.get("apiVersion", ""), manifest.get("kind", "")
    for rt in RESOURCES:
        if rt.api_version == api_version and rt.kind == kind and rt.group != "metrics.k8s.io":
            return rt
    raise errors.BadRequest(f"no kind {kind!r} is registered for version {api_version!r}")
