"""`shipshape batch-resources`: the opt-in publisher of reclaimable batch capacity as node extended
resources, on its own (the controller runs the same decisions as its loop `loops.batch_resources`;
see `shipshape.controller.batch_capacity`)."""

from __future__ import annotations

import time
from pathlib import Path

import typer


def batch_resources(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig", help="Kubeconfig of the cluster."),
    context: str | None = typer.Option(None, "--context", help="Kubeconfig context."),
    interval: str = typer.Option("60s", "--interval", help="Time between rounds."),
    once: bool = typer.Option(False, "--once", help="One round, then exit."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Decide and print; write nothing."),
    cpu_threshold: float = typer.Option(60.0, "--cpu-threshold", help="cpuReclaimThresholdPercent."),
    memory_threshold: float = typer.Option(65.0, "--memory-threshold", help="memoryReclaimThresholdPercent."),
) -> None:
    """Publish shipshape.dev/batch-cpu and batch-memory on every node (Koordinator's model)."""
    from rich.console import Console

    from shipshape.analyzers.efficiency import qos
    from shipshape.controller.batch_resources import BatchResourcePublisher, NodeOutcome
    from shipshape.controller.ops import OpsError
    from shipshape.kube import client
    from shipshape.kube.clock import RealClock
    from shipshape.kube.duration import DurationError, parse_duration

    console = Console()
    try:
        seconds = parse_duration(interval)
        settings = qos.ColocationSettings(
            cpu_reclaim_threshold_percent=cpu_threshold, memory_reclaim_threshold_percent=memory_threshold
        )
    except (DurationError, ValueError) as error:
        console.print(f"[red]error:[/red] {error}", highlight=False)
        raise typer.Exit(2) from error

    def show(outcome: NodeOutcome) -> None:
        values = ", ".join(f"{k}={v}" for k, v in outcome.decision.values.items())
        console.print(
            f"{outcome.node}: {outcome.decision.action} {values} ({outcome.decision.reason})", highlight=False
        )

    try:
        api = client.load_api_client(kubeconfig, context)
        publisher = BatchResourcePublisher(api, RealClock(), settings, dry_run=dry_run, on_outcome=show)
        while True:
            publisher.reconcile()
            if once:
                return
            time.sleep(seconds)
    except (client.KubeClientError, OpsError) as error:
        console.print(f"[red]error:[/red] {error}", highlight=False)
        raise typer.Exit(2) from error
