"""`shipshape simulate`: what-if runs of a scenario under placement strategies, in emulated time.

The emulator and the simulator are imported inside the command (so that the CLI's help is fast).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from shipshape.cli import common, output

STRATEGY_NAMES = "on-demand, spot-naive, capacity-type, shipshape"  # as in simulate.strategies.STRATEGIES


def _fail(console: Console | None, message: str) -> typer.Exit:
    return common.fail(message)


def _seconds(console: Console | None, flag: str, text: str) -> float:
    from shipshape.kube.duration import parse_duration

    try:
        value = parse_duration(text)
    except ValueError as error:
        raise _fail(console, f"{flag}: {error}") from error
    if value <= 0:
        raise _fail(console, f"{flag}: must be positive, got {text!r}")
    return value


def simulate(
    scenario: Path = typer.Option(..., "--scenario", help="Scenario YAML file."),
    duration: str = typer.Option("7d", "--duration", help="Emulated time to run, e.g. 6h, 7d."),
    strategy: str = typer.Option("shipshape", "--strategy", help=f"Placement strategy: {STRATEGY_NAMES}."),
    seed: int | None = typer.Option(None, "--seed", help="Random seed (default: the scenario's)."),
    json_output: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    chart: Path | None = typer.Option(None, "--chart", help="Write a chart (.png or .svg)."),
    compare_all: bool = typer.Option(False, "--compare", help="Run every strategy with the same seed."),
    warmup: str = typer.Option("10m", "--warmup", help="Start-up time not counted in availability."),
    controller_config: Path | None = typer.Option(
        None,
        "--controller-config",
        help="Config file of the placement controller (as for `shipshape controller --config`).",
    ),
) -> None:
    """Simulate a scenario for days of spot interruptions: cost, savings, availability, churn."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from shipshape.cli.controller import load_settings
    from shipshape.controller.policy import ConfigError
    from shipshape.emulator import scenario as scenario_file
    from shipshape.kube import errors
    from shipshape.kube.duration import parse_duration
    from shipshape.simulate import findings, report
    from shipshape.simulate.run import SimulationSettings, StrategyResult, compare
    from shipshape.simulate.steering import StrategyError
    from shipshape.simulate.strategies import STRATEGIES, Shipshape, Strategy, strategy_named

    console = Console(stderr=json_output)
    seconds = _seconds(console, "--duration", duration)
    try:
        warmup_seconds = parse_duration(warmup)
    except ValueError as error:
        raise _fail(console, f"--warmup: {error}") from error
    common.check_output_file(chart, "--chart", report.SUFFIXES)
    try:
        chosen: list[Strategy] = list(STRATEGIES.values()) if compare_all else [strategy_named(strategy)]
        loaded = scenario_file.load(scenario)
        if controller_config is not None:
            config, loops = load_settings(controller_config)
            if loops.batch_resources.enabled:
                raise ConfigError(
                    f"{controller_config}: loops.batch_resources.enabled: batch resources are not "
                    "simulated (the simulation has no metrics.k8s.io); leave it off here"
                )
            chosen = [
                Shipshape(config=config, loops=loops) if isinstance(s, Shipshape) else s for s in chosen
            ]
    except (StrategyError, scenario_file.ScenarioError, ConfigError) as error:
        raise common.fail(error, listing=True) from error
    settings = SimulationSettings(duration=seconds, seed=seed, warmup=min(warmup_seconds, seconds))
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}% of emulated time"),
        TimeElapsedColumn(),
        console=console,
        transient=json_output,
    ) as progress:
        tasks = {s.name: progress.add_task(f"{s.name:<14}", total=seconds) for s in chosen}

        def advance(name: str, done: float, total: float) -> None:
            progress.update(tasks[name], completed=done)

        try:
            results: list[StrategyResult] = compare(loaded, chosen, settings, advance)
        except StrategyError as error:
            progress.live.transient = True  # the error line alone, no half-done bars
            raise _fail(console, str(error)) from error
        except errors.ApiError as error:  # a manifest of the scenario that the API refuses
            progress.live.transient = True
            raise _fail(
                console, f"{scenario}: the scenario's objects cannot be created: {error.message}"
            ) from error
    if chart is not None:
        report.write_chart(results, chart)
    found = findings.findings(loaded, results)
    if json_output:
        typer.echo(json.dumps(report.report_json(results, loaded.name, found), indent=2))
        return
    output.print_unclipped(console, report.summary_table(results))
    output.print_unclipped(console, report.workload_table(results))
    for finding in found:
        console.print(f"finding ({finding.code}): {finding.message}", highlight=False)
    if chart is not None:
        console.print(f"chart written to {chart}")
