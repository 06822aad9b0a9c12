"""`shipshape controller`: run the placement controller against a cluster.

Out of a cluster (`--kubeconfig`), the webhook listens on loopback and is registered with a `url`
clientConfig; in a cluster (`--webhook-service`), it listens on every address and is registered
through the Service. Settings load once here: the config file (YAML: `ControllerConfig` fields, plus
an optional `loops:` section of `LoopSettings`), then the flags.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from shipshape.controller.loops import LoopSettings
from shipshape.controller.policy import ConfigError, ControllerConfig
from shipshape.controller.process import ControllerProcess, ProcessSettings
from shipshape.controller.risk import SpotAdvisor, load_spot_advisor
from shipshape.kube.client import KubeClientError, load_api_client
from shipshape.kube.clock import RealClock

log = logging.getLogger(__name__)


def load_settings(path: Path | None) -> tuple[ControllerConfig, LoopSettings]:
    """The controller's configuration file (or the defaults), with readable errors."""
    if path is None:
        return ControllerConfig(), LoopSettings()
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    loops = data.pop("loops", None) or {}
    try:
        loop_settings = LoopSettings.model_validate(loops)
    except ValidationError as error:
        problems = "; ".join(
            f"loops.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise ConfigError(f"invalid controller configuration: {problems}") from error
    return ControllerConfig.from_mapping(data), loop_settings


def controller(
    kubeconfig: Annotated[
        Path | None, typer.Option(help="kubeconfig of the cluster (default: in-cluster, then ~/.kube/config)")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML file of settings (ControllerConfig, loops:)")
    ] = None,
    webhook_port: Annotated[int, typer.Option(help="port of the webhook (0: any free port)")] = 0,
    metrics_port: Annotated[int | None, typer.Option(help="port of a separate /metrics listener")] = None,
    webhook_service: Annotated[
        str | None,
        typer.Option(help="in a cluster: the Service in front of the webhook (register through it)"),
    ] = None,
    spot_advisor: Annotated[
        Path | None, typer.Option(help="spot advisor feed (spot-advisor-data.json) for pool risk")
    ] = None,
    identity: Annotated[str | None, typer.Option(help="this replica's name in the leader Lease")] = None,
    notice_queue_url: Annotated[
        str | None,
        typer.Option(
            help="SQS queue URL of EventBridge interruption events, read with the AWS SDK's default "
            "credentials (replaces the config file's notice_queue_url)"
        ),
    ] = None,
) -> None:
    """Run the placement controller: webhook, informers, leader-elected loops, metrics."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        controller_config, loop_settings = load_settings(config)
        if notice_queue_url is not None:
            controller_config = ControllerConfig.from_mapping(
                {**controller_config.model_dump(), "notice_queue_url": notice_queue_url}
            )
        advisor: SpotAdvisor | None = load_spot_advisor(spot_advisor) if spot_advisor else None
        api_client = load_api_client(kubeconfig)
    except (ConfigError, KubeClientError, OSError, ValueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    in_cluster = webhook_service is not None
    settings = ProcessSettings(
        identity=identity or f"{socket.gethostname()}-{os.getpid()}",
        webhook_host="0.0.0.0" if in_cluster else "127.0.0.1",
        webhook_port=webhook_port or (8443 if in_cluster else 0),
        metrics_port=metrics_port,
        metrics_host="0.0.0.0" if in_cluster else "127.0.0.1",
        webhook_service=webhook_service,
        loops=loop_settings,
    )
    process = ControllerProcess(api_client, controller_config, settings, RealClock(), advisor)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        process.start()
    except Exception as error:
        typer.echo(f"error: the controller could not start: {error}", err=True)
        process.stop()
        raise typer.Exit(1) from error
    typer.echo(
        f"shipshape controller {settings.identity}: webhook on port {process.webhook_port}"
        + (f", metrics on port {process.metrics_port}" if process.metrics_port else "")
        + (
            f", notices also from {controller_config.notice_queue_url}"
            if controller_config.notice_queue_url
            else ""
        )
    )
    stop.wait()
    typer.echo("stopping: releasing the leader lease and draining the webhook")
    process.stop()
