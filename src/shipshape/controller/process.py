"""The controller as a process: informers feeding the cache, the webhook (every replica), the loops
(leader only), a /metrics endpoint, and a graceful stop.

The webhook serves from a process of its own (`webhook.child`, started and restarted by this one):
a planning pass computes on this interpreter, and a review answered here would wait for it at every
step. This process's informers feed the loops' replica of the state (`state.views`) and, through a
`Relay` over a pipe, the webhook process's replica; what the loops learn that the placer reads (pool
risk, shortages, rebalance recommendations) follows when it changes. `ProcessSettings.webhook_process
= False` serves the webhook from a thread of this process instead, reading its own replica.

Threads here: one informer per kind, the leader elector, the loops' scheduler, the webhook's
supervisor and feed (or, in-process, the webhook server on its own event loop) and the metrics
server.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from prometheus_client import CollectorRegistry, Counter, start_http_server

from shipshape.controller import informers
from shipshape.controller.acting import ActingOps
from shipshape.controller.batch_capacity import NodeResources
from shipshape.controller.kube_ops import KubeOps
from shipshape.controller.leader import LeaseElector, LeaseSettings
from shipshape.controller.loops import LoopSettings, SharedState, all_reconcilers, lanes
from shipshape.controller.loops.guards import remove_guards
from shipshape.controller.loops.scheduler import Lane, LoopScheduler, LoopThread
from shipshape.controller.metrics import ControllerMetrics
from shipshape.controller.notices import QueueNoticeSource
from shipshape.controller.ops import OpsError
from shipshape.controller.policy import ControllerConfig
from shipshape.controller.risk import RiskModel, SpotAdvisor
from shipshape.controller.state import ClusterState
from shipshape.controller.state.views import Fanout, Relay, Replica
from shipshape.controller.webhook.admission import ReplicaPlacer
from shipshape.controller.webhook.child import ChildSpec, ProcessMetrics, SharedReads, WebhookChild
from shipshape.controller.webhook.messages import MetricFamily
from shipshape.controller.webhook.owner import WebhookOwner
from shipshape.controller.webhook.registration import (
    CONTROLLER_LABEL,
    CONTROLLER_NAME,
    KubernetesWebhookConfigurations,
    ServiceTarget,
    webhook_configuration,
)
from shipshape.controller.webhook.server import MUTATE_PATH, HttpsServer, bind, create_app, https_server
from shipshape.kube.certs import (
    CertificateBundle,
    certificate_expires,
    first_certificate,
    generate_certificates,
    service_dns_names,
    write_bundle,
)
from shipshape.kube.clock import Clock
from shipshape.threads import lower_priority

Obj = dict[str, Any]
LOG = logging.getLogger("shipshape.controller")
TLS_SECRET = "shipshape-webhook-tls"
# The leader replaces the shared serving certificate when it has less than this left (365-day certificates).
ROTATE_BEFORE_SECONDS = 30 * 86400.0


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
    # How often (emulated seconds) the leader compares the webhook configuration with what it serves.
    webhook_resync_seconds: float = 30.0
    # How often (emulated seconds) every replica reads the shared certificate Secret (rotation).
    certificate_check_seconds: float = 60.0
    sync_timeout_seconds: float = 60.0
    # Longest wait (real seconds) between two attempts to reach an API server that is down.
    informer_backoff_max_seconds: float = 30.0
    # How long a thread computing (a planning pass) keeps the interpreter before one waiting for it
    # (the webhook's, back from the network) gets it (`sys.setswitchinterval`; Python's default 5 ms
    # would come on top of every admission made during a pass). None: leave the interpreter's.
    switch_interval_seconds: float | None = 0.001
    # True: the webhook serves from a process of its own (`webhook.child`), so that no planning pass
    # holds its interpreter; False: from a thread of this process (one interpreter for everything).
    webhook_process: bool = True
    # The nice value of the loops' thread (Linux: per thread), so that a planning pass gives way to
    # the webhook process and the informers when the CPUs are busy. None: left as it is.
    loops_nice: int | None = 10
    # The entry point's logging set-up, run first in the webhook process (a spawned process has none).
    log_setup: Callable[[], None] | None = None
    lease: LeaseSettings = field(default_factory=LeaseSettings)
    loops: LoopSettings = field(default_factory=LoopSettings)


def _node_resources(api_client: k8s.ApiClient) -> NodeResources:
    """Metrics and node writes for the batch resources loop (imported only when it is on: the
    colocation model needs numpy)."""
    from shipshape.controller.batch_resources import KubeNodeResources

    return KubeNodeResources(api_client)


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
        self.advisor = advisor
        # The loops' replica of the state (`state.views`), and the webhook's: a relay to the webhook
        # process, or a replica here. `lock`/`cache` are the loops' replica and its state, for what
        # the process reads itself.
        self.loop_state = Replica(ClusterState(config))
        self.lock = self.loop_state
        self.cache = self.loop_state.state
        self.relay: Relay | None = Relay() if settings.webhook_process else None
        self.webhook_state: Replica | None = (
            None if settings.webhook_process else Replica(ClusterState(config))
        )
        # This process's metrics; `registry` is what /metrics serves: with the webhook process's
        # merged in when there is one (each counts what it does).
        self.own_registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.own_registry)
        self.webhook_restarts = Counter(
            "shipshape_webhook_process_restarts",
            "Webhook processes started again after one exited.",
            registry=self.own_registry,
        )
        self.webhook_child: WebhookChild | None = None
        if settings.webhook_process:
            self.registry = CollectorRegistry(auto_describe=False)
            self.registry.register(ProcessMetrics(self.own_registry, self._webhook_samples))
        else:
            self.registry = self.own_registry
        risk = RiskModel(
            advisor=advisor,
            cooldown_seconds=config.risk_cooldown_seconds,
            window_seconds=config.risk_window_seconds,
        )
        self.shared = SharedState.for_config(config, settings.loops, risk, instance=settings.identity)
        self.kube_ops = KubeOps(api_client)
        # Every write of the loops goes through here: logged, and not sent in recommend-only mode.
        self.ops = ActingOps(self.kube_ops, self.metrics, dry_run=config.dry_run, clock=clock)
        self.placer: ReplicaPlacer | None = (
            ReplicaPlacer(
                self.webhook_state,
                config,
                risk,
                clock,
                self.metrics,
                shortages=self.shared.shortages.shortages,
                recommendations=self.shared.notices.recommendations,
            )
            if self.webhook_state is not None
            else None
        )
        webhook_reader = self.relay if self.relay is not None else self.webhook_state
        assert webhook_reader is not None
        self.informers = informers.informers(
            api_client, Fanout(webhook_reader, self.loop_state), settings.informer_backoff_max_seconds
        )
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
            on_start_leading=self._started_leading,
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
        self.loops = all_reconcilers(
            clock,
            self.loop_state,
            self.ops,
            config,
            self.metrics,
            self.shared,
            queue=QueueNoticeSource(
                self.queue,
                config.notice_lead_seconds,
                config.notice_queue_visibility_seconds,
                on_message=lambda kind: self.metrics.queue_messages.labels(kind=kind).inc(),
            )
            if self.queue is not None
            else None,
            node_resources=_node_resources(api_client) if settings.loops.batch_resources.enabled else None,
        )
        self.webhook_owner = WebhookOwner(
            clock,
            KubernetesWebhookConfigurations(k8s.AdmissionregistrationV1Api(api_client)),
            self._desired_configuration,
            settings.webhook_resync_seconds,
            certificates=self._follow_certificates if settings.webhook_service is not None else None,
            certificate_check_seconds=settings.certificate_check_seconds,
        )
        scheduled = lanes(self.loops)
        if settings.register_webhook:
            scheduled.append(Lane.polling(self.webhook_owner))
        self.scheduler = LoopThread(LoopScheduler(scheduled, is_leader=lambda: self.elector.is_leader), clock)
        self._tmp = tempfile.TemporaryDirectory(prefix="shipshape-webhook-") if workdir is None else None
        self.workdir = workdir or Path(self._tmp.name if self._tmp else ".")
        self.webhook_port = 0
        self.metrics_port: int | None = None
        self._server: HttpsServer | None = None
        self._server_thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._metrics_server: Any = None
        self._bundle: CertificateBundle | None = None
        self.stopped = threading.Event()

    # --- start ------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.settings.switch_interval_seconds is not None:
            sys.setswitchinterval(self.settings.switch_interval_seconds)
        self._ensure_namespace()
        self.informers.start()
        if not self.informers.wait_synced(self.settings.sync_timeout_seconds):
            self.informers.stop()
            raise RuntimeError("the controller's informers did not list every kind in time")
        self._remove_expired_guards()
        self._start_webhook()
        if self.settings.metrics_port is not None:
            self._metrics_server, _ = start_http_server(
                self.settings.metrics_port, self.settings.metrics_host, registry=self.registry
            )
            self.metrics_port = int(self._metrics_server.server_port)
        # One election step before returning, so that a lone replica has registered its webhook when
        # `start()` returns; from then on the elector's thread and the scheduler take over.
        try:
            if self.elector.try_once() and self.settings.register_webhook:
                self.webhook_owner.ensure()
        except Exception as error:  # the elector and the owner's next rounds try again
            LOG.warning("first leader election step failed, retrying: %s", error)
        self.elector.start()
        self.scheduler.start()
        if self.settings.loops_nice is not None:
            lower_priority(self.scheduler.thread, self.settings.loops_nice)
        LOG.info(
            "controller %s serving the webhook on %s:%d%s",
            self.settings.identity,
            self.settings.webhook_host,
            self.webhook_port,
            " (recommend-only: nothing is changed)" if self.config.dry_run else "",
        )

    def _started_leading(self) -> None:
        """The Lease came to this replica: it points the webhook configuration at itself now."""
        self.webhook_owner.request()

    def _remove_expired_guards(self) -> None:
        """Guard PDBs whose deadline passed (their controller is gone) hold up drains: any replica
        removes them at start, leader or not (the leader re-creates the ones still needed)."""
        if self.config.dry_run:
            return
        with self.lock:
            pdbs = list(self.cache.objects("PodDisruptionBudget"))
        removed = remove_guards(self.ops, pdbs, expired_at=self.clock.now())
        if removed:
            LOG.info("removed %d expired guard PodDisruptionBudget(s)", removed)

    def _ensure_namespace(self) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.config.namespace}}
        try:
            self.kube_ops.apply(body)  # the Lease lives there, in recommend-only mode too
        except OpsError as error:
            LOG.warning("cannot make sure namespace %s exists: %s", self.config.namespace, error)

    def _start_webhook(self) -> None:
        host = self.settings.webhook_host
        if self.settings.webhook_service is not None:
            bundle = self._shared_certificates(self.settings.webhook_service)
        else:
            ips = [host] if host.replace(".", "").isdigit() or ":" in host else []
            # Certificates are checked against wall-clock time, whatever clock the loops run on.
            bundle = generate_certificates(["localhost"], ips, now=time.time())
        self._bundle = bundle
        _, cert, key = write_bundle(bundle, self.workdir)
        self._socket = bind(host, self.settings.webhook_port)
        self.webhook_port = int(self._socket.getsockname()[1])
        if self.relay is not None:
            self._start_webhook_process(self.relay, cert, key)
            return
        assert self.placer is not None
        self._server = https_server(create_app(self.placer, self.metrics), cert, key)
        server, sock = self._server, self._socket
        self._server_thread = threading.Thread(
            target=lambda: asyncio.run(server.serve([sock])), name="webhook", daemon=True
        )
        self._server_thread.start()
        started = threading.Event()
        for _ in range(1000):
            if server.started or not self._server_thread.is_alive():
                break
            started.wait(0.01)
        if not server.started:
            raise RuntimeError("the webhook server did not start")

    def _start_webhook_process(self, relay: Relay, cert: Path, key: Path) -> None:
        assert self._socket is not None
        spec = ChildSpec(
            config=self.config,
            clock=self.clock,
            cert_file=str(cert),
            key_file=str(key),
            advisor=self.advisor,
            switch_interval_seconds=self.settings.switch_interval_seconds,
            log_setup=self.settings.log_setup,
        )
        reads = SharedReads(
            notices=self.shared.risk.notices,
            shortages=self.shared.shortages.shortages,
            recommendations=self.shared.notices.recommendations,
        )
        self.webhook_child = WebhookChild(
            spec, self._socket, relay, reads, self.own_registry.collect, on_restart=self.webhook_restarts.inc
        )
        self.webhook_child.start(self.settings.sync_timeout_seconds)

    def _webhook_samples(self) -> tuple[MetricFamily, ...]:
        child = self.webhook_child
        return child.samples() if child is not None else ()

    @property
    def webhook_serving(self) -> bool:
        """Whether the webhook accepts reviews now (its process is up, or its thread serves)."""
        if self.webhook_child is not None:
            return self.webhook_child.serving.is_set()
        return bool(self._server is not None and self._server.started and not self.stopped.is_set())

    def _read_shared(self) -> tuple[CertificateBundle, str] | None:
        secret = self.kube_ops.read_secret(self.config.namespace, TLS_SECRET)
        if secret is None:
            return None
        data = secret.get("data") or {}
        bundle = CertificateBundle(
            ca_pem=base64.b64decode(data["ca.crt"]),
            cert_pem=base64.b64decode(data["tls.crt"]),
            key_pem=base64.b64decode(data["tls.key"]),
        )
        return bundle, str((secret.get("metadata") or {}).get("resourceVersion") or "")

    def _secret_body(self, bundle: CertificateBundle, resource_version: str | None = None) -> Obj:
        metadata: Obj = {
            "name": TLS_SECRET,
            "namespace": self.config.namespace,
            "labels": {CONTROLLER_LABEL: CONTROLLER_NAME},
        }
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": metadata,
            "data": {
                "ca.crt": base64.b64encode(bundle.ca_pem).decode(),
                "tls.crt": base64.b64encode(bundle.cert_pem).decode(),
                "tls.key": base64.b64encode(bundle.key_pem).decode(),
            },
        }

    def _shared_certificates(self, service: str) -> CertificateBundle:
        """The Secret holding the CA and serving certificate. Created only when absent (a create, which
        one replica wins, never an overwrite), so replicas starting together end up serving one
        certificate; from then on only the leader replaces it (`_follow_certificates`)."""
        namespace = self.config.namespace
        for _ in range(3):
            shared = self._read_shared()
            if shared is not None:
                return shared[0]
            bundle = generate_certificates(service_dns_names(service, namespace), now=time.time())
            if self.kube_ops.create_secret(self._secret_body(bundle)):
                LOG.info("created the webhook certificate Secret %s/%s", namespace, TLS_SECRET)
                return bundle
        raise RuntimeError(f"cannot read or create Secret {namespace}/{TLS_SECRET}")

    def _follow_certificates(self, now: float) -> None:
        """Every replica: serve the Secret's certificate when it changed. The leader: replace it when it
        is close to expiry; `ca.crt` keeps the old CA too, so that replicas not reloaded yet are still
        trusted (the configuration's caBundle is `ca.crt`)."""
        try:
            shared = self._read_shared()
            if shared is None:
                return
            bundle, version = shared
            service = self.settings.webhook_service
            if (
                self.elector.is_leader
                and service is not None
                and certificate_expires(bundle.cert_pem) - time.time() < ROTATE_BEFORE_SECONDS
            ):
                fresh = generate_certificates(
                    service_dns_names(service, self.config.namespace), now=time.time()
                )
                fresh = CertificateBundle(
                    fresh.ca_pem + first_certificate(bundle.ca_pem), fresh.cert_pem, fresh.key_pem
                )
                self.kube_ops.replace_secret(self._secret_body(fresh, version))
                LOG.info("rotated the webhook serving certificate", extra={"action": "rotate-certificate"})
                bundle = fresh
                self.webhook_owner.request()
        except OpsError as error:
            LOG.warning("cannot follow the webhook certificate Secret: %s", error)
            return
        if self._bundle is not None and bundle.cert_pem == self._bundle.cert_pem:
            if bundle.ca_pem != self._bundle.ca_pem:
                self._bundle = bundle
            return
        self._bundle = bundle
        _, cert, key = write_bundle(bundle, self.workdir)
        if self.webhook_child is not None:
            self.webhook_child.serve_certificate(cert, key)
        if self._server is not None:
            self._server.ssl.load_cert_chain(str(cert), str(key))  # new connections get the new certificate
        LOG.info("serving the webhook certificate from Secret %s", TLS_SECRET)

    def _desired_configuration(self) -> Obj:
        """The webhook configuration pointing at this replica (its URL, or the Service) and its CA."""
        assert self._bundle is not None, "the webhook serves before it is registered"
        namespaces = self.config.webhook_namespace_selector
        pods = self.config.webhook_object_selector
        namespace_selector = namespaces.body() if namespaces is not None else None
        object_selector = pods.body() if pods is not None else None
        if self.settings.webhook_service is not None:
            return webhook_configuration(
                ca_bundle=self._bundle.ca_pem,
                namespace=self.config.namespace,
                excluded_namespaces=self.config.excluded_namespaces,
                service=ServiceTarget(self.config.namespace, self.settings.webhook_service, 443),
                timeout_seconds=self.settings.webhook_timeout_seconds,
                namespace_selector=namespace_selector,
                object_selector=object_selector,
            )
        url_host = (
            self.settings.webhook_host
            if ":" not in self.settings.webhook_host
            else f"[{self.settings.webhook_host}]"
        )
        return webhook_configuration(
            ca_bundle=self._bundle.ca_pem,
            namespace=self.config.namespace,
            excluded_namespaces=self.config.excluded_namespaces,
            url=f"https://{url_host}:{self.webhook_port}{MUTATE_PATH}",
            timeout_seconds=self.settings.webhook_timeout_seconds,
            namespace_selector=namespace_selector,
            object_selector=object_selector,
        )

    # --- stop -------------------------------------------------------------------------------------

    def _remove_own_guards(self) -> None:
        """A leader stopping gracefully removes the guard PDBs it keeps: nobody would restart a guarded
        pod while no controller runs, so a guard would only hold up drains; the next leader re-creates
        the ones still needed within a round."""
        with self.lock:
            pdbs = list(self.cache.objects("PodDisruptionBudget"))
        removed = remove_guards(self.ops, pdbs, owner=self.settings.identity)
        if removed:
            LOG.info("removed %d guard PodDisruptionBudget(s) on shutdown", removed)

    def stop(self, release_lease: bool = True) -> None:
        """Graceful: loops finish their round, the Lease is released, the webhook drains, watches end.

        `release_lease=False` leaves the Lease to expire, as a killed process would.
        """
        if self.stopped.is_set():
            return
        self.stopped.set()
        self.scheduler.stop()
        if release_lease and self.elector.is_leader and not self.config.dry_run:
            self._remove_own_guards()
        self.elector.stop(release=release_lease)
        if self.webhook_child is not None:
            self.webhook_child.stop()
        if self._server is not None:
            self._server.exit()
        if self._server_thread is not None:
            self._server_thread.join(10)
        if self._socket is not None:
            self._socket.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        self.informers.stop()
        self.kube_ops.close()
        if self.queue is not None:
            self.queue.close()
        if self._tmp is not None:
            self._tmp.cleanup()
