"""The controller as a process: informers feeding the cache, the webhook (every replica), the loops
(leader only), a /metrics endpoint, and a graceful stop.

Threads: one informer per kind, the leader elector, the loops' scheduler, the webhook server (uvicorn
on its own event loop) and the metrics server. The cache is shared under one lock: informers hold it
to apply an event, the webhook to answer one review, the loops only while they read (never across an
API call).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from prometheus_client import CollectorRegistry, start_http_server

from shipshape.controller.cache import ClusterCache
from shipshape.controller.informers import Informers
from shipshape.controller.kube_ops import KubeOps
from shipshape.controller.leader import LeaseElector, LeaseSettings
from shipshape.controller.loops import LoopSettings, Reconciler, SharedState, all_reconcilers
from shipshape.controller.loops.interruptions import InterruptionResponder
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.notices import QueueNoticeSource
from shipshape.controller.ops import OpsError
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.risk import RiskModel, SpotAdvisor
from shipshape.controller.webhook.admission import PodPlacer
from shipshape.controller.webhook.registration import (
    KubernetesWebhookConfigurations,
    ServiceTarget,
    ensure_webhook_configuration,
    webhook_configuration,
)
from shipshape.controller.webhook.server import MUTATE_PATH, bind, create_app, https_server
from shipshape.kube.certs import (
    CertificateBundle,
    generate_certificates,
    service_dns_names,
    write_bundle,
)
from shipshape.kube.clock import Clock

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller")
# The loops' scheduler never sleeps less than this (real seconds), whatever the clock's speed.
MIN_REAL_WAIT = 0.02
TLS_SECRET = "shipshape-webhook-tls"


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    identity: str
    webhook_host: str = "127.0.0.1"
    webhook_port: int = 0
    # None: no separate metrics listener (the webhook's server also answers GET /metrics).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    register_webhook: bool = True
    # In a cluster: the Service in front of the webhook; the replicas share one certificate (a Secret).
    webhook_service: str | None = None
    webhook_timeout_seconds: int = 2
    sync_timeout_seconds: float = 60.0
    # Longest wait (real seconds) between two attempts to reach an API server that is down.
    informer_backoff_max_seconds: float = 30.0
    lease: LeaseSettings = field(default_factory=LeaseSettings)
    loops: LoopSettings = field(default_factory=LoopSettings)


class LockedPlacer(PodPlacer):
    """The placer answering under the cache lock (informer threads write the cache meanwhile)."""

    def __init__(self, lock: threading.RLock, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = lock

    def review(self, body: Mapping[str, Any]) -> Obj:
        with self._lock:
            return super().review(body)


class LoopScheduler:
    """Runs each loop at its interval on the injected clock: `observe` always, `reconcile` when leading."""

    def __init__(self, loops: list[Reconciler], clock: Clock, is_leader: Callable[[], bool]) -> None:
        self.loops = loops
        self.clock = clock
        self.is_leader = is_leader
        self.stop_event = threading.Event()
        self.rounds = 0
        self.thread = threading.Thread(target=self._run, name="loops", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        due = {loop.name: self.clock.now() for loop in self.loops}
        while not self.stop_event.is_set():
            now = self.clock.now()
            for loop in self.loops:
                if now < due[loop.name] or self.stop_event.is_set():
                    continue
                try:
                    loop.observe(now)
                    if self.is_leader():
                        loop.reconcile(now)
                except Exception:
                    LOG.exception("loop %s failed; it runs again at its next interval", loop.name)
                due[loop.name] = now + loop.interval
            self.rounds += 1
            wait = min(due.values()) - self.clock.now()
            self.stop_event.wait(max(MIN_REAL_WAIT, self.clock.real_seconds(max(0.0, wait))))

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)


class ControllerProcess:
    """Everything one controller replica runs; `start()` returns once it serves, `stop()` is graceful."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        config: ControllerConfig,
        settings: ProcessSettings,
        clock: Clock,
        advisor: SpotAdvisor | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.api_client = api_client
        self.config = config
        self.settings = settings
        self.clock = clock
        self.lock = threading.RLock()
        self.cache = ClusterCache(config)
        self.registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry)
        risk = RiskModel(
            advisor=advisor,
            cooldown_seconds=config.risk_cooldown_seconds,
            window_seconds=config.risk_window_seconds,
        )
        self.shared = SharedState.for_config(config, settings.loops, risk, instance=settings.identity)
        self.ops = KubeOps(api_client)
        self.placer = LockedPlacer(
            self.lock,
            self.cache,
            config,
            risk,
            clock,
            self.metrics,
            shortages=self.shared.shortages.shortages,
        )
        self.informers = Informers(api_client, self.cache, self.lock, settings.informer_backoff_max_seconds)
        self.elector = LeaseElector(
            api_client,
            settings.identity,
            clock,
            LeaseSettings(
                settings.lease.name,
                config.namespace,
                settings.lease.duration_seconds,
                settings.lease.retry_seconds,
            ),
        )
        self.loops = all_reconcilers(
            clock, self.cache, self.ops, config, self.metrics, self.shared, self.lock
        )
        # The AWS SDK is imported only when a queue is configured (it is slow to import).
        from shipshape.controller.queue_client import SqsQueue, queue_for

        self.queue: SqsQueue | None = (
            queue_for(
                config.notice_queue_url,
                region=config.notice_queue_region or config.region,
                visibility_seconds=config.notice_queue_visibility_seconds,
                wait_seconds=config.notice_queue_wait_seconds,
            )
            if config.notice_queue_url is not None
            else None
        )
        for loop in self.loops:
            if isinstance(loop, InterruptionResponder):
                self.placer.use_recommendations(loop.recommended)
                if self.queue is not None:
                    loop.use_notice_source(
                        QueueNoticeSource(
                            self.queue,
                            config.notice_lead_seconds,
                            config.notice_queue_visibility_seconds,
                            on_message=lambda kind: self.metrics.queue_messages.labels(kind=kind).inc(),
                        )
                    )
        self.scheduler = LoopScheduler(self.loops, clock, lambda: self.elector.is_leader)
        self._tmp = tempfile.TemporaryDirectory(prefix="shipshape-webhook-") if workdir is None else None
        self.workdir = workdir or Path(self._tmp.name if self._tmp else ".")
        self.webhook_port = 0
        self.metrics_port: int | None = None
        self._server: Any = None
        self._server_thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._metrics_server: Any = None
        self.stopped = threading.Event()

    # --- start ------------------------------------------------------------------------------------

    def start(self) -> None:
        self._ensure_namespace()
        self.informers.start()
        if not self.informers.wait_synced(self.settings.sync_timeout_seconds):
            self.informers.stop()
            raise RuntimeError("the controller's informers did not list every kind in time")
        ca_pem = self._start_webhook()
        if self.settings.register_webhook:
            self._register(ca_pem)
        if self.settings.metrics_port is not None:
            self._metrics_server, _ = start_http_server(
                self.settings.metrics_port, self.settings.metrics_host, registry=self.registry
            )
            self.metrics_port = int(self._metrics_server.server_port)
        self.elector.start()
        self.scheduler.start()
        LOG.info(
            "controller %s serving the webhook on %s:%d",
            self.settings.identity,
            self.settings.webhook_host,
            self.webhook_port,
        )

    def _ensure_namespace(self) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.config.namespace}}
        try:
            self.ops.apply(body)
        except OpsError as error:
            LOG.warning("cannot make sure namespace %s exists: %s", self.config.namespace, error)

    def _start_webhook(self) -> bytes:
        host = self.settings.webhook_host
        if self.settings.webhook_service is not None:
            bundle = self._shared_certificates(self.settings.webhook_service)
        else:
            ips = [host] if host.replace(".", "").isdigit() or ":" in host else []
            # Certificates are checked against wall-clock time, whatever clock the loops run on.
            bundle = generate_certificates(["localhost"], ips, now=time.time())
        _, cert, key = write_bundle(bundle, self.workdir)
        self._server = https_server(create_app(self.placer, self.metrics), cert, key)
        self._socket = bind(host, self.settings.webhook_port)
        self.webhook_port = int(self._socket.getsockname()[1])
        server, sock = self._server, self._socket
        self._server_thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])), name="webhook", daemon=True
        )
        self._server_thread.start()
        started = threading.Event()
        for _ in range(1000):
            if server.started or not self._server_thread.is_alive():
                break
            started.wait(0.01)
        if not server.started:
            raise RuntimeError("the webhook server did not start")
        return bundle.ca_pem

    def _shared_certificates(self, service: str) -> CertificateBundle:
        """The Secret holding the CA and serving certificate, created by the first replica to start."""
        namespace = self.config.namespace
        for _ in range(3):
            secret = self.ops.read_secret(namespace, TLS_SECRET)
            if secret is not None:
                data = secret.get("data") or {}
                return CertificateBundle(
                    ca_pem=base64.b64decode(data["ca.crt"]),
                    cert_pem=base64.b64decode(data["tls.crt"]),
                    key_pem=base64.b64decode(data["tls.key"]),
                )
            bundle = generate_certificates(service_dns_names(service, namespace), now=time.time())
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": {"name": TLS_SECRET, "namespace": namespace},
                "data": {
                    "ca.crt": base64.b64encode(bundle.ca_pem).decode(),
                    "tls.crt": base64.b64encode(bundle.cert_pem).decode(),
                    "tls.key": base64.b64encode(bundle.key_pem).decode(),
                },
            }
            if self.ops.create_secret(body):
                return bundle
        raise RuntimeError(f"cannot read or create Secret {namespace}/{TLS_SECRET}")

    def _register(self, ca_pem: bytes) -> None:
        if self.settings.webhook_service is not None:
            desired = webhook_configuration(
                ca_bundle=ca_pem,
                namespace=self.config.namespace,
                excluded_namespaces=self.config.excluded_namespaces,
                service=ServiceTarget(self.config.namespace, self.settings.webhook_service, 443),
                timeout_seconds=self.settings.webhook_timeout_seconds,
            )
            outcome = ensure_webhook_configuration(
                KubernetesWebhookConfigurations(k8s.AdmissionregistrationV1Api(self.api_client)), desired
            )
            LOG.info("webhook configuration %s", outcome)
            return
        url_host = (
            self.settings.webhook_host
            if ":" not in self.settings.webhook_host
            else f"[{self.settings.webhook_host}]"
        )
        desired = webhook_configuration(
            ca_bundle=ca_pem,
            namespace=self.config.namespace,
            excluded_namespaces=self.config.excluded_namespaces,
            url=f"https://{url_host}:{self.webhook_port}{MUTATE_PATH}",
            timeout_seconds=self.settings.webhook_timeout_seconds,
        )
        outcome = ensure_webhook_configuration(
            KubernetesWebhookConfigurations(k8s.AdmissionregistrationV1Api(self.api_client)), desired
        )
        LOG.info("webhook configuration %s", outcome)

    # --- stop -------------------------------------------------------------------------------------

    def stop(self, release_lease: bool = True) -> None:
        """Graceful: loops finish their round, the Lease is released, the webhook drains, watches end.

        `release_lease=False` leaves the Lease to expire, as a killed process would.
        """
        if self.stopped.is_set():
            return
        self.stopped.set()
        self.scheduler.stop()
        self.elector.stop(release=release_lease)
        if self._server is not None:
            self._server.should_exit = True
        if self._server_thread is not None:
            self._server_thread.join(10)
        if self._socket is not None:
            self._socket.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        self.informers.stop()
        self.ops.close()
        if self.queue is not None:
            self.queue.close()
        if self._tmp is not None:
            self._tmp.cleanup()
