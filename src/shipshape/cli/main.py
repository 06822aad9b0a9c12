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
    from shipshape.nodecollector.notices import cli as node_notices_cli

    app.command("node-notices")(node_notices_cli.node_notices)
    from shipshape.cli import demo as demo_cli

    app.command("demo")(demo_cli.demo)
    from shipshape.cli import controller as controller_cli

    app.command("controller")(controller_cli.controller)
    from shipshape.cli import simulate as simulate_cli

    app.command("simulate")(simulate_cli.simulate)


_register()
