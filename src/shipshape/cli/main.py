"""The `shipshape` command: one typer app, sub-commands registered explicitly here.

Adding a command: one line in `COMMANDS` below, `name: Lazy("module", "attribute", "one-line help")`.
The attribute is a `typer.Typer` (a group of sub-commands, like `emulator`) or a command function
(like `simulate`). Its module is imported only when that command runs or its own `--help` is
asked for, so `shipshape --help` and `shipshape --version` stay fast whatever the commands import
(the test in tests/unit/cli/test_fast_help.py fails when a heavy module leaks into them). Inside
command modules, keep heavy imports (matplotlib, numpy, kubernetes, the emulator) in the command
functions where that is easy: `shipshape <command> --help` then stays fast too.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from shipshape import __version__


@dataclass(frozen=True, slots=True)
class Lazy:
    module: str
    attribute: str
    help: str


COMMANDS: dict[str, Lazy] = {
    "emulator": Lazy(
        "shipshape.cli.emulator", "app", "An emulated Kubernetes cluster with spot instances, on this host."
    ),
    "startup": Lazy(
        "shipshape.cli.startup", "app", "Where pod and node start-up time goes: phases, percentiles, SLO."
    ),
    "node-collector": Lazy(
        "shipshape.nodecollector.cli", "node_collector", "A node's boot logs as its start-up timeline."
    ),
    "node-notices": Lazy(
        "shipshape.nodecollector.notices.cli",
        "node_notices",
        "Per node: the cloud's spot notices as taints, a condition and an Event on its Node.",
    ),
    "demo": Lazy(
        "shipshape.cli.demo", "demo", "The whole product on an emulated cluster, with a spot reclaim."
    ),
    "controller": Lazy(
        "shipshape.cli.controller", "app", "Run the placement controller, or uninstall what it left."
    ),
    "simulate": Lazy(
        "shipshape.cli.simulate", "simulate", "What-if: days of spot reclaims under a placement strategy."
    ),
    "agent": Lazy(
        "shipshape.cli.agent", "agent", "Run the per-cluster agent: snapshots and deltas to the backend."
    ),
    "backend": Lazy(
        "shipshape.cli.backend", "backend", "Serve the backend's API (and its workers in-process)."
    ),
    "worker": Lazy("shipshape.cli.backend", "worker", "Consume the backend's shared queue."),
    "admin": Lazy("shipshape.cli.backend", "admin", "Bootstrap tenants: organisations, API keys, clusters."),
    "gpu": Lazy("shipshape.cli.gpu", "app", "GPU placement: replay GPU cluster traces under policies."),
    "analyze": Lazy(
        "shipshape.cli.analyze", "analyze", "Right-sizing and QoS colocation from usage, priced per node."
    ),
    "batch-resources": Lazy(
        "shipshape.cli.batch_resources",
        "batch_resources",
        "Opt-in: publish nodes' reclaimable batch capacity as extended resources.",
    ),
}


def load_command(name: str, entry: Lazy) -> Any:
    """The click command of a registered entry (imports its module)."""
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    if isinstance(target, typer.Typer):
        group = typer.main.get_group(target)
        group.name = name
        return group
    single = typer.Typer()
    single.command(name, help=None)(target)
    command = typer.main.get_command(single)
    command.name = name
    return command


class LazyGroup(TyperGroup):
    """A group whose `COMMANDS` are imported on use; listing them in help imports nothing."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *(name for name in COMMANDS if name not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        known = super().get_command(ctx, cmd_name)
        if known is not None or cmd_name not in COMMANDS:
            return known
        entry = COMMANDS[cmd_name]
        if self._listing:  # a placeholder that only carries the help line
            return TyperCommand(cmd_name, help=entry.help)
        command = load_command(cmd_name, entry)
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="shipshape",
    help="Cheaper, faster-starting Kubernetes clusters without interruptions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"shipshape {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
    ),
) -> None:
    """Cheaper, faster-starting Kubernetes clusters without interruptions."""
    # The Kubernetes client retries through urllib3, which logs a warning per retry while the API
    # server is down; the commands say once that it is unreachable.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


@app.command()
def version() -> None:
    """Print Shipshape's version."""
    typer.echo(__version__)
