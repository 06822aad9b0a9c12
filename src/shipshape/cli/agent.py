"""`shipshape agent`: follow a cluster and push its state to the backend.

Two replicas are safe: they elect a leader on the Lease `shipshape-agent` in `--lease-namespace` (by
default the namespace the pod runs in, else `shipshape-system`); only the holder pushes and executes
instructions, the other keeps its informers in step to take over at once. `--no-leader-election` for
a single process (a laptop, the demo). The token is read from a file and never logged.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated, Literal

import typer

from shipshape.agent.instructions import Executor, InstructionClient, InstructionLoop
from shipshape.agent.mirror import Mirror
from shipshape.agent.pusher import Pusher
from shipshape.agent.runner import Agent, AgentSettings, LeaseUnavailable, sources
from shipshape.agent.spool import Spool
from shipshape.agent.usage import GpuReader, MetricsApi, UsageLoop, UsageSettings, owners_from
from shipshape.cli import common
from shipshape.kube import informers as kit
from shipshape.kube import leader
from shipshape.kube.client import KubeClientError, load_api_client, server_version
from shipshape.kube.clock import RealClock
from shipshape.kube.duration import parse_duration

LEASE_NAME = "shipshape-agent"


def agent(
    backend: Annotated[str, typer.Option("--backend", help="the backend's URL (https://… in production)")],
    token_file: Annotated[Path, typer.Option("--token-file", help="file holding this cluster's agent token")],
    kubeconfig: Annotated[
        Path | None, typer.Option(help="kubeconfig of the cluster (default: in-cluster, then ~/.kube/config)")
    ] = None,
    spool: Annotated[Path, typer.Option(help="folder of the on-disk spool")] = Path(".shipshape/agent-spool"),
    snapshot_every: Annotated[str, typer.Option(help="full snapshot period")] = "10m",
    delta_every: Annotated[str, typer.Option(help="period of the batched deltas")] = "15s",
    spool_max: Annotated[int, typer.Option(help="spool bound in MiB (then folded into one snapshot)")] = 256,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="execute instructions as server-side dry runs only (nothing changes)"),
    ] = False,
    instructions: Annotated[
        bool,
        typer.Option(
            "--instructions/--no-instructions", help="execute approved instructions from the backend"
        ),
    ] = True,
    leader_election: Annotated[
        bool,
        typer.Option(
            "--leader-election/--no-leader-election",
            help=f"elect one pushing replica on the Lease {LEASE_NAME} (off: a single process)",
        ),
    ] = True,
    lease_namespace: Annotated[
        str | None,
        typer.Option(help="namespace of the Lease (default: the pod's namespace, else shipshape-system)"),
    ] = None,
    identity: Annotated[
        str | None, typer.Option(help="this replica's name in the Lease (default: host name and pid)")
    ] = None,
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"], typer.Option(help="least severe level logged")
    ] = "info",
    log_format: Annotated[
        Literal["text", "json"], typer.Option(help="one line per record: text (key=value) or json")
    ] = "text",
    usage: Annotated[
        bool, typer.Option("--usage/--no-usage", help="read metrics.k8s.io and push usage per bucket")
    ] = True,
    usage_every: Annotated[str, typer.Option(help="period of the metrics.k8s.io reads")] = "30s",
    usage_bucket: Annotated[
        str, typer.Option(help="usage bucket (must divide the backend's usage step, 5m by default)")
    ] = "5m",
    usage_spool_max: Annotated[int, typer.Option(help="usage spool bound in MiB (oldest dropped)")] = 64,
    prometheus: Annotated[
        str | None,
        typer.Option(
            help="the cluster's Prometheus (dcgm-exporter's series): GPU activity per pod in the usage"
        ),
    ] = None,
    prometheus_cluster: Annotated[
        str | None,
        typer.Option(help="value of the cluster label in a central Prometheus holding several clusters"),
    ] = None,
    prometheus_timeout: Annotated[
        str, typer.Option(help="bound on one Prometheus query (a usage bucket never waits longer)")
    ] = "10s",
) -> None:
    """Watch the cluster (read-only) and push snapshots and deltas to the backend, spooling on disk
    while it is unreachable; with two replicas, the Lease holder pushes."""
    from shipshape.cli import logs

    logs.configure(log_level, log_format)
    try:
        token = token_file.read_text(encoding="utf-8").strip()
        if not token:
            raise ValueError(f"{token_file} is empty")
        settings = AgentSettings(
            snapshot_interval=parse_duration(snapshot_every),
            delta_interval=parse_duration(delta_every),
            spool_max_bytes=spool_max * 1024 * 1024,
        )
        bucket = parse_duration(usage_bucket)
        if bucket != int(bucket):
            raise ValueError(f"--usage-bucket must be a whole number of seconds, not {usage_bucket}")
        usage_settings = UsageSettings(
            interval=parse_duration(usage_every),
            bucket_seconds=int(bucket),
            spool_max_bytes=usage_spool_max * 1024 * 1024,
        )
        gpu: GpuReader | None = None
        if prometheus is not None:
            from shipshape.sources.prometheus import PrometheusSettings, PrometheusSource

            if not usage:
                raise ValueError("--prometheus adds GPU activity to the usage: it needs --usage")
            if not prometheus.startswith(("http://", "https://")):
                raise ValueError(f"--prometheus must be an http(s):// URL, not {prometheus}")
            gpu = PrometheusSource(
                PrometheusSettings(
                    prometheus, cluster=prometheus_cluster, timeout_seconds=parse_duration(prometheus_timeout)
                )
            )
        api_client = load_api_client(kubeconfig)
    except (OSError, UnicodeDecodeError, ValueError, KubeClientError) as error:
        raise common.fail(error) from None
    try:
        server_version(api_client)
    except KubeClientError as error:
        if error.status is None:  # unreachable at start: one line, not a warning per informer retry
            raise common.fail(error, common.FAILED) from None
    clock = RealClock()
    lease = leader.LeaseSettings(LEASE_NAME, lease_namespace or leader.default_namespace())
    name = identity or leader.default_identity()
    elector = leader.LeaseElector(api_client, name, clock, lease) if leader_election else None
    mirror = Mirror()
    pusher = Pusher(backend, token)
    collector = (
        UsageLoop(
            MetricsApi(api_client),
            owners_from(mirror.get),
            pusher,
            Spool(spool / "usage", usage_settings.spool_max_bytes),
            clock,
            usage_settings,
            is_leader=lambda: runner.leading,
            gpu=gpu,
        )
        if usage
        else None
    )
    runner = Agent(
        kit.Informers(sources(api_client), mirror),
        mirror,
        pusher,
        Spool(spool, settings.spool_max_bytes),
        clock,
        settings,
        elector=elector,
        usage=collector,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        runner.start()
    except LeaseUnavailable as error:
        raise common.fail(
            f"{error} (create the namespace, choose another with --lease-namespace, or run a single "
            "agent with --no-leader-election)",
            common.FAILED,
        ) from None
    except RuntimeError as error:
        raise common.fail(error, common.FAILED) from None
    executor = InstructionLoop(
        InstructionClient(pusher.client),
        Executor(api_client, dry_run=dry_run),
        is_leader=lambda: runner.leading,
    )
    if instructions:
        executor.start()
    typer.echo(
        f"shipshape agent {name}: following the cluster, pushing to {backend} (spool {spool})"
        + (
            f"; leader election on Lease {lease.namespace}/{lease.name}"
            if leader_election
            else "; no leader election"
        )
        + ("; executing approved instructions" + (" as dry runs" if dry_run else "") if instructions else "")
        + (f"; usage every {usage_every} in buckets of {usage_bucket}" if usage else "")
        + (f"; GPU activity from {prometheus}" if gpu is not None else "")
    )
    stop.wait()
    # The instruction in hand, if any, finishes; then the last push, and the Lease is given up (the
    # other replica takes over now).
    executor.stop()
    runner.stop()
