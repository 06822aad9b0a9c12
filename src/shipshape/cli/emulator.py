"""`shipshape emulator ...`: run the cluster emulator and steer it."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="A Kubernetes-compatible cluster with spot instances, on this machine.", no_args_is_help=True
)


def _register_cloud_commands() -> None:
    from shipshape.cli import emulator_cloud

    emulator_cloud.register(app)


_register_cloud_commands()
