"""The `shipshape` command: one typer app, sub-commands registered explicitly here."""

from __future__ import annotations

import typer

from shipshape import __version__

app = typer.Typer(
    name="shipshape",
    help="Cheaper, faster-starting Kubernetes clusters without interruptions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.command()
def version() -> None:
    """Print Shipshape's version."""
    typer.echo(__version__)


def _register() -> None:
    from shipshape.cli import emulator as emulator_cli

    app.add_typer(emulator_cli.app, name="emulator")
    from shipshape.cli import startup as startup_cli

    app.add_typer(startup_cli.app, name="startup")
    from shipshape.nodecollector import cli as node_collector_cli

    app.command("node-collector")(node_collector_cli.node_collector)
    from shipshape.cli import demo as demo_cli

    app.command("demo")(demo_cli.demo)
    from shipshape.cli import controller as controller_cli

    app.add_typer(controller_cli.app, name="controller")
    from shipshape.cli import simulate as simulate_cli

    app.command("simulate")(simulate_cli.simulate)
    from shipshape.cli import agent as agent_cli

    app.command("agent")(agent_cli.agent)
    from shipshape.cli import backend as backend_cli

    app.command("backend")(backend_cli.backend)
    app.command("worker")(backend_cli.worker)
    app.add_typer(backend_cli.admin, name="admin")
    from shipshape.cli import analyze as analyze_cli

    app.command("analyze")(analyze_cli.analyze)
    from shipshape.cli import batch_resources as batch_resources_cli

    app.command("batch-resources")(batch_resources_cli.batch_resources)
    from shipshape.cli import gpu as gpu_cli

    app.add_typer(gpu_cli.app, name="gpu")


_register()
