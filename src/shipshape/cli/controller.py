"""`shipshape controller`: run the placement controller against a cluster.

Out of a cluster (`--kubeconfig`), the webhook listens on loopback and is registered with a `url`
clientConfig; in a cluster (`--webhook-service`), it listens on every address and is registered
through the Service. Settings load once here: the config file (YAML: `ControllerConfig` fields, plus
an optional `loops:` section of `LoopSettings`), then the flags.

`shipshape controller uninstall` removes what the controller left that changes behaviour
(`controller/uninstall.py`).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
import yaml
from pydantic import ValidationError

from shipshape.cli import common
from shipshape.controller.loops import LoopSettings
from shipshape.controller.policy import ConfigError, ControllerConfig
from shipshape.controller.process import ControllerProcess, ProcessSettings
from shipshape.controller.risk import SpotAdvisor, load_spot_advisor
from shipshape.kube.client import KubeClientError, load_api_client, server_version
from shipshape.kube.clock import RealClock

log = logging.getLogger(__name__)
app = typer.Typer(
    help="Run the placement controller, or uninstall what it left in a cluster.",
    invoke_without_command=True,
    pretty_exceptions_enable=False,
)


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


@app.callback()
def controller(
    ctx: typer.Context,
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
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="recommend only: decide, log, count and post Events (pods get a dry-run decision "
            "annotation); patch, evict, delete or taint nothing (config: dry_run)",
        ),
    ] = False,
    rebalance_evictions: Annotated[
        bool | None,
        typer.Option(
            "--rebalance-evictions/--no-rebalance-evictions",
            help="whether the rebalancer may move pods (config: rebalance_evictions; default on)",
        ),
    ] = None,
    webhook_process: Annotated[
        bool,
        typer.Option(
            "--webhook-process/--webhook-in-process",
            help="serve the webhook from a process of its own, so that the loops' planning never delays "
            "an admission (default), or from a thread of the controller's process",
        ),
    ] = True,
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"], typer.Option(help="least severe level logged")
    ] = "info",
    log_format: Annotated[
        Literal["text", "json"], typer.Option(help="one line per record: text (key=value) or json")
    ] = "text",
) -> None:
    """Run the placement controller: webhook, informers, leader-elected loops, metrics."""
    if ctx.invoked_subcommand is not None:
        return
    from shipshape.cli import logs

    logs.configure(log_level, log_format)
    try:
        controller_config, loop_settings = load_settings(config)
        updates: dict[str, Any] = {}
        if notice_queue_url is not None:
            updates["notice_queue_url"] = notice_queue_url
        if dry_run:
            updates["dry_run"] = True
        if rebalance_evictions is not None:
            updates["rebalance_evictions"] = rebalance_evictions
        if updates:
            # Validated like the file (a queue URL that is not one is a clear error).
            controller_config = ControllerConfig.from_mapping({**controller_config.model_dump(), **updates})
        advisor: SpotAdvisor | None = load_spot_advisor(spot_advisor) if spot_advisor else None
        api_client = load_api_client(kubeconfig)
    except (ConfigError, KubeClientError, OSError, ValueError) as error:
        raise common.fail(error) from error
    try:
        server_version(api_client)
    except KubeClientError as error:
        if error.status is None:  # unreachable; an answer, even 401/403, is for the informers to report
            raise common.fail(error, common.FAILED) from error
    in_cluster = webhook_service is not None
    settings = ProcessSettings(
        identity=identity or f"{socket.gethostname()}-{os.getpid()}",
        webhook_host="0.0.0.0" if in_cluster else "127.0.0.1",
        webhook_port=webhook_port or (8443 if in_cluster else 0),
        metrics_port=metrics_port,
        metrics_host="0.0.0.0" if in_cluster else "127.0.0.1",
        webhook_service=webhook_service,
        loops=loop_settings,
        webhook_process=webhook_process,
        log_setup=functools.partial(logs.configure, log_level, log_format),
    )
    process = ControllerProcess(api_client, controller_config, settings, RealClock(), advisor)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        process.start()
    except Exception as error:
        process.stop()
        raise common.fail(f"the controller could not start: {error}", common.FAILED) from error
    typer.echo(
        f"shipshape controller {settings.identity}: webhook on port {process.webhook_port}"
        + (f", metrics on port {process.metrics_port}" if process.metrics_port else "")
        + (
            f", notices also from {controller_config.notice_queue_url}"
            if controller_config.notice_queue_url
            else ""
        )
        + (", recommend-only (dry run)" if controller_config.dry_run else "")
    )
    stop.wait()
    typer.echo("stopping: releasing the leader lease and draining the webhook")
    process.stop()


@app.command()
def uninstall(
    kubeconfig: Annotated[
        Path | None, typer.Option(help="kubeconfig of the cluster (default: in-cluster, then ~/.kube/config)")
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="the controller's namespace")] = None,
    config: Annotated[
        Path | None, typer.Option(help="the controller's YAML settings (for its namespace and opt-in rules)")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print what would be removed, change nothing")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="go on although a controller replica still holds the Lease")
    ] = False,
) -> None:
    """Remove everything the controller left that changes behaviour: the webhook configuration, guard
    PDBs, headroom placeholders and PriorityClass, its node taints, surge/restart notes (giving back
    replicas a surge in flight had added), pod-deletion-cost it wrote, its Lease and certificate Secret.
    Safe to run twice."""
    import time

    from shipshape.controller import uninstall as removal
    from shipshape.controller.ops import OpsError

    try:
        controller_config, _ = load_settings(config)
        if namespace is not None:
            controller_config = controller_config.model_copy(update={"namespace": namespace})
        api_client = load_api_client(kubeconfig)
    except (ConfigError, KubeClientError, OSError, ValueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    uninstaller = removal.Uninstaller(api_client, controller_config)
    try:
        view = uninstaller.read()
        holder = removal.lease_holder(view, controller_config, time.time())
        if holder is not None and not force and not dry_run:
            typer.echo(
                f"error: controller {holder} still holds the Lease in {controller_config.namespace} and "
                "would put things back: stop the controller first (or pass --force)",
                err=True,
            )
            raise typer.Exit(1)
        done = 0
        for _ in range(3):  # a node changed meanwhile (409) is planned again from a fresh read
            steps = removal.plan_uninstall(view, controller_config)
            if not steps or dry_run:
                break
            conflicts = 0
            for step in steps:
                try:
                    gone = not uninstaller.run(step)
                except OpsError as error:
                    if error.status != 409:
                        raise
                    conflicts += 1
                    continue
                typer.echo(removal.describe(step) + (" (already gone)" if gone else ""))
                done += 1
            if not conflicts:
                steps = []
                break
            view = uninstaller.read()
    except OpsError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    finally:
        api_client.close()  # type: ignore[no-untyped-call]
    if dry_run:
        for step in steps:
            typer.echo("would " + removal.describe(step))
        typer.echo(f"{len(steps)} change(s) to make" if steps else "nothing to remove")
        return
    if steps:
        typer.echo("error: some nodes kept changing; run uninstall again", err=True)
        raise typer.Exit(1)
    typer.echo(f"removed: {done} change(s)" if done else "nothing to remove")
