"""An interruption handler like aws-node-termination-handler (IMDS mode): taint, cordon, drain.

On a spot interruption notice the node gets the `aws-node-termination-handler/spot-itn` taint,
is cordoned, and its pods (except DaemonSet and mirror pods) are evicted through the eviction
subresource, so PodDisruptionBudgets are honoured; an eviction refused with 429 is retried
every few seconds until the instance terminates.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from shipshape.emulator.cloud import nodes
from shipshape.emulator.resources import NODES, PDBS, PODS
from shipshape.emulator.store import Obj, Store
from shipshape.kube import errors, labels

if TYPE_CHECKING:
    from shipshape.emulator.cloud.model import CloudModel, Instance
    from shipshape.emulator.runtime import Cluster

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0
COMPONENT = "aws-node-termination-handler"

Done = Callable[[errors.ApiError | None], None]


def drainable(pod: Obj) -> bool:
    """What `kubectl drain --ignore-daemonsets` evicts: not DaemonSet, not mirror, not finished."""
    md = pod["metadata"]
    if md.get("deletionTimestamp"):
        return False
    if "kubernetes.io/config.mirror" in (md.get("annotations") or {}):
        return False
    if any(ref.get("kind") == "DaemonSet" for ref in md.get("ownerReferences") or []):
        return False
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def drive(coro: Coroutine[Any, Any, Any], done: Done, tasks: set[asyncio.Task[None]]) -> None:
    """Run an Api coroutine: on the running loop in server mode (the task kept in `tasks` until it
    ends), to its end in discrete-event mode."""
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None:
        try:
            coro.send(None)
        except StopIteration:
            done(None)
            return
        except errors.ApiError as exc:
            done(exc)
            return
        coro.close()
        log.warning("an eviction waited on I/O outside an event loop; it was abandoned")
        return

    async def runner() -> None:
        try:
            await coro
        except errors.ApiError as exc:
            done(exc)
        else:
            done(None)

    task = loop.create_task(runner())
    tasks.add(task)
    task.add_done_callback(tasks.discard)


def request_eviction(
    c: Cluster, namespace: str, name: str, done: Done, tasks: set[asyncio.Task[None]]
) -> None:
    """Evict a pod through the API's eviction subresource (PodDisruptionBudgets apply), or with the
    same PDB check on the store when no API serves evictions; `done` gets the outcome."""
    api = c.services.get("api")
    if api is not None and hasattr(api, "create_subresource"):
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        drive(api.create_subresource(PODS, namespace, name, "eviction", body), done, tasks)
    else:
        done(evict_in_store(c.store, namespace, name))


class InterruptionHandler:
    def __init__(self, cloud: CloudModel) -> None:
        self.cloud = cloud
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.cloud.on_notice.append(self._on_notice)

    def _on_notice(self, inst: Instance) -> None:
        if not inst.registered or inst.notice is None:
            return
        store = self.cloud.c.store
        event_id = "spot-itn-" + hashlib.sha256(f"{inst.id}:{inst.notice.issued}".encode()).hexdigest()[:32]
        taint = {"key": nodes.NTH_SPOT_TAINT, "value": event_id, "effect": "NoSchedule"}

        def cordon(node: Obj) -> None:
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != taint["key"]]
            node["spec"]["taints"] = [*taints, taint]
            node["spec"]["unschedulable"] = True

        if store.mutate(NODES, "", inst.node_name, cordon) is None:
            return
        for pod in store.pods_on_node(inst.node_name):
            if drainable(pod):
                self._evict(inst, pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _evict(self, inst: Instance, namespace: str, name: str) -> None:
        if not inst.active or inst.notice is None:
            return
        cloud = self.cloud
        pod = cloud.c.store.get(PODS, namespace, name)
        if pod is None or pod.get("spec", {}).get("nodeName") != inst.node_name or not drainable(pod):
            return

        def done(error: errors.ApiError | None) -> None:
            if error is not None and error.retryable:  # 429 (budget), 409 (PDB changed meanwhile), 503
                deadline = inst.notice.action_time if inst.notice else cloud.c.now()
                if cloud.c.now() + RETRY_SECONDS < deadline:
                    cloud.c.engine.call_later(RETRY_SECONDS, lambda: self._evict(inst, namespace, name))
            elif error is not None and not isinstance(error, errors.NotFound):
                log.warning(
                    "evicting %s/%s from %s failed: %s", namespace, name, inst.node_name, error.message
                )

        request_eviction(cloud.c, namespace, name, done, self._tasks)


def evict_in_store(store: Store, namespace: str, name: str) -> errors.ApiError | None:
    """The eviction subresource's PDB check, for an Api that does not serve evictions itself."""
    pod = store.get(PODS, namespace, name)
    if pod is None:
        return errors.NotFound.of("pods", name)
    pod_labels = pod["metadata"].get("labels") or {}
    budgets = [
        pdb
        for pdb in store.list(PDBS, namespace)
        if pdb.get("spec", {}).get("selector") is not None
        and labels.matches(pdb["spec"]["selector"], pod_labels)
    ]
    if len(budgets) > 1:
        return errors.InternalError(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        )
    for pdb in budgets:
        status = pdb.get("status") or {}
        if int(status.get("disruptionsAllowed", 0)) < 1:
            return errors.TooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.")

        def spend(obj: Obj) -> None:
            obj.setdefault("status", {})["disruptionsAllowed"] = (
                int(obj["status"].get("disruptionsAllowed", 0)) - 1
            )

        store.mutate(PDBS, namespace, pdb["metadata"]["name"], spend, subresource="status")
    try:
        store.delete(PODS, namespace, name)
    except errors.ApiError as exc:
        return exc
    return None
