"""List + watch into the `ClusterCache`, one thread per kind, through the official client.

Each informer lists (paged) and replaces its kind in the cache, then watches from the list's
resourceVersion with bookmarks; a 410 Gone (the version is too old) relists, and an API server that
cannot be reached is retried with an exponential back-off (0.5 s doubling up to 30 s), so the
controller rides out an API server outage and catches up from where it stopped.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any

from kubernetes import client as k8s
from kubernetes.watch.watch import iter_resp_lines

from shipshape.controller.cache import ClusterCache
from shipshape.controller.growth import AUTOSCALER_STATUS
from shipshape.controller.kube_ops import REQUEST_TIMEOUT, call
from shipshape.controller.ops import OpsError

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller.informers")
PAGE_SIZE = 500
# Seconds one watch request lasts before the server closes it (the informer then re-watches).
WATCH_SECONDS = 60
BACKOFF_START, BACKOFF_MAX = 0.5, 30.0


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


# Seconds between lists of an optional kind the API server does not serve (or the controller may not
# read): a Karpenter NodePool CRD installed later is picked up within this time.
OPTIONAL_RETRY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Source:
    kind: str
    list_function: Callable[..., Any]
    # A kind the cluster may not have (a CRD) or the controller may not be allowed to read: a 404 or 403
    # counts as none of it (listed again every `OPTIONAL_RETRY_SECONDS`), not as a failure to sync.
    optional: bool = False


def sources(api_client: k8s.ApiClient) -> list[Source]:
    """What the cache holds (`cache.KINDS`), cluster-wide; cluster-autoscaler's status ConfigMap and
    Karpenter NodePools only where the cluster has them (`growth.py` reads them)."""
    core, apps, policy = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client), k8s.PolicyV1Api(api_client)
    custom = k8s.CustomObjectsApi(api_client)
    namespace, name = AUTOSCALER_STATUS
    return [
        Source(
            "ConfigMap",
            partial(core.list_namespaced_config_map, namespace, field_selector=f"metadata.name={name}"),
            optional=True,
        ),
        Source(
            "NodePool", partial(custom.list_cluster_custom_object, "karpenter.sh", "v1", "nodepools"), True
        ),
        Source("Namespace", core.list_namespace),
        Source("Node", core.list_node),
        Source("Deployment", apps.list_deployment_for_all_namespaces),
        Source("StatefulSet", apps.list_stateful_set_for_all_namespaces),
        Source("ReplicaSet", apps.list_replica_set_for_all_namespaces),
        Source("PodDisruptionBudget", policy.list_pod_disruption_budget_for_all_namespaces),
        Source("Pod", core.list_pod_for_all_namespaces),
    ]


class Informer:
    """Keeps one kind of the cache in step with the API server until `stop()`."""

    def __init__(
        self,
        source: Source,
        cache: ClusterCache,
        lock: AbstractContextManager[Any],
        stop: threading.Event,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self.source = source
        self.backoff_max = backoff_max
        self.cache = cache
        self.lock = lock
        self.stop = stop
        self.synced = threading.Event()
        self.relists = 0
        self._response: Any = None
        self.thread = threading.Thread(target=self._run, name=f"informer-{source.kind}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        """Break a watch that is waiting for events (called after `stop` is set)."""
        response = self._response
        if response is not None:
            try:
                # urllib3's shutdown() interrupts a read blocked in another thread; close() does not.
                shutdown = getattr(response, "shutdown", None)
                if shutdown is not None:
                    shutdown()
                response.close()
            except Exception:  # closing from another thread may race the reader; it stops either way
                LOG.debug("closing the %s watch", self.source.kind, exc_info=True)

    def _run(self) -> None:
        backoff = BACKOFF_START
        version: str | None = None
        while not self.stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    self.synced.set()
                version = self._watch(version)
                backoff = BACKOFF_START
            except Gone:
                LOG.info("%s watch expired; listing again", self.source.kind)
                version = None
            except OpsError as error:
                if self.stop.is_set():
                    break
                if self.source.optional and error.status in (403, 404):
                    LOG.debug("%s not served or not readable (%s); none for now", self.source.kind, error)
                    with self.lock:
                        self.cache.replace(self.source.kind, [])
                    self.synced.set()
                    version = None
                    self.stop.wait(OPTIONAL_RETRY_SECONDS)
                    continue
                LOG.warning("%s informer: %s; retrying in %.1fs", self.source.kind, error, backoff)
                self.stop.wait(backoff)
                backoff = min(self.backoff_max, backoff * 2)
            except (OSError, ValueError) as error:
                if self.stop.is_set():
                    break
                LOG.warning("%s informer: %s; retrying in %.1fs", self.source.kind, error, backoff)
                self.stop.wait(backoff)
                backoff = min(self.backoff_max, backoff * 2)
            except Exception as error:
                if self.stop.is_set():
                    break
                LOG.warning("%s watch broke: %s; retrying in %.1fs", self.source.kind, error, backoff)
                self.stop.wait(backoff)
                backoff = min(self.backoff_max, backoff * 2)

    def _list(self) -> str:
        items: list[Obj] = []
        token: str | None = None
        while True:
            extra: dict[str, Any] = {"limit": PAGE_SIZE}
            if token:
                extra["_continue"] = token
            body = call(self.source.list_function, **extra)
            items.extend(body.get("items") or [])
            metadata = body.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                break
        with self.lock:
            self.cache.replace(self.source.kind, items)
        self.relists += 1
        return str(metadata.get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        try:
            response = self.source.list_function(
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                _preload_content=False,
                _request_timeout=(REQUEST_TIMEOUT[0], WATCH_SECONDS + 30),
            )
        except k8s.ApiException as error:
            if error.status == 410:
                raise Gone() from error
            raise OpsError(
                f"watch of {self.source.kind}: {error.status} {error.reason}", status=error.status
            ) from error
        self._response = response
        try:
            for event in _events(response):
                if self.stop.is_set():
                    break
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise OpsError(
                        f"watch of {self.source.kind}: {obj.get('message')}", status=obj.get("code")
                    )
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    continue
                with self.lock:
                    self.cache.apply(event, kind=self.source.kind)
        finally:
            self._response = None
            response.release_conn()
        return version


def _events(response: Any) -> Iterator[Obj]:
    for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
        if not line.strip():
            continue
        event = json.loads(line)
        if isinstance(event, dict):
            yield event


class Informers:
    """Every kind the cache holds, watched together."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        cache: ClusterCache,
        lock: AbstractContextManager[Any],
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self.stop_event = threading.Event()
        self.informers = [
            Informer(source, cache, lock, self.stop_event, backoff_max) for source in sources(api_client)
        ]

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def wait_synced(self, timeout: float) -> bool:
        """Whether every kind was listed once within `timeout` real seconds."""
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            for informer in self.informers:
                while not informer.synced.wait(0.05):
                    if deadline.is_set() or self.stop_event.is_set():
                        return False
            return True
        finally:
            timer.cancel()

    def stop(self) -> None:
        self.stop_event.set()
        for informer in self.informers:
            informer.close()
        for informer in self.informers:
            informer.thread.join(5)
